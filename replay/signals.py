"""What replay tells apps built on it, without importing them.

- `job_finished(sender=ReplayJob, job_id=int, status=str)`: sent after the commit that ended a
  job (every run done, failed or cancelled, or the job cancelled). Receivers must be quick and
  safe to call twice: queue a task, do not work inline.
"""

from django.dispatch import Signal

job_finished = Signal()
