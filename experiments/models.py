"""Context experiments: evaluation sets (frozen, versioned items that pin saved contexts, with
checks), strategies (versioned lists of operations applied to every item) and experiments (a
set version x a strategy x an endpoint x samples, run as one replay job), with every check's
result per answer.

An item's context is a replay.ReplayContext: a frozen copy of the turn that retention never
removes, so a set replays the same way however old its turns are.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import EscapedTextField, Project
from ctxobs import wire
from replay.models import ModelEndpoint, ReplayContext, ReplayJob

# Documented limits (README, docs/experiments.md).
MAX_ITEMS_PER_SET = wire.MAX_ITEMS_PER_SET
MAX_CHECKS_PER_ITEM = 50
MAX_SAMPLES = 10


class EvalSet(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="eval_sets")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_eval_set_name")]

    def __str__(self) -> str:
        return self.name


class EvalSetVersion(models.Model):
    """One frozen state of a set: its items and set-level checks. Adding or removing items makes
    a new version; a version an experiment ran on is never changed."""

    eval_set = models.ForeignKey(EvalSet, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    checks = models.JSONField(default=list, blank=True)  # set-level: applied to every item
    note = models.CharField(max_length=300, blank=True, default="")
    n_items = models.IntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["eval_set", "-number"]
        constraints = [models.UniqueConstraint(fields=["eval_set", "number"], name="uniq_eval_set_version")]

    def __str__(self) -> str:
        return f"{self.eval_set.name} v{self.number}"


class EvalItem(models.Model):
    """A saved context in one version of a set, with its own checks and the checks ctxobs
    suggested for it that nobody confirmed yet."""

    version = models.ForeignKey(EvalSetVersion, on_delete=models.CASCADE, related_name="items")
    position = models.IntegerField()
    context = models.ForeignKey(ReplayContext, on_delete=models.PROTECT, related_name="+")
    snapshot_uuid = models.UUIDField(null=True, blank=True)
    session_id = models.CharField(max_length=256, blank=True, default="")
    turn = models.IntegerField(null=True, blank=True)
    agent = models.CharField(max_length=256, blank=True, default="")
    source = models.CharField(
        max_length=20, blank=True, default=""
    )  # timeline | filter | alert | api | jsonl
    checks = models.JSONField(default=list, blank=True)
    suggestions = models.JSONField(default=list, blank=True)  # [{"check", "source", "why"}]

    class Meta:
        ordering = ["version", "position"]
        constraints = [
            models.UniqueConstraint(fields=["version", "position"], name="uniq_eval_item_position")
        ]

    def __str__(self) -> str:
        return f"item {self.position} of {self.version}"


class Strategy(models.Model):
    """A named version of the context assembly: operations applied to every item of a set."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="strategies")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_strategy_name")]

    def __str__(self) -> str:
        return self.name


class StrategyVersion(models.Model):
    strategy = models.ForeignKey(Strategy, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    operations = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["strategy", "-number"]
        constraints = [models.UniqueConstraint(fields=["strategy", "number"], name="uniq_strategy_version")]

    def __str__(self) -> str:
        return f"{self.strategy.name} v{self.number}"


class Sweep(models.Model):
    """One strategy parameter over several values: one experiment per value, on one set version."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sweeps")
    strategy = models.ForeignKey(Strategy, on_delete=models.CASCADE, related_name="sweeps")
    parameter = models.CharField(max_length=200)  # "<operation index>.<field>", e.g. "0.ratio"
    values = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"sweep {self.pk} of {self.strategy.name}.{self.parameter}"


class Experiment(models.Model):
    class Status(models.TextChoices):
        PREPARING = "preparing", "preparing (summaries)"
        RUNNING = "running", "running"
        DONE = "done", "done"
        PARTIAL = "partial", "partial (some runs failed)"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    set_version = models.ForeignKey(EvalSetVersion, on_delete=models.PROTECT, related_name="experiments")
    # None: the control, "as saved".
    strategy_version = models.ForeignKey(
        StrategyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="experiments"
    )
    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.PROTECT, related_name="+")
    samples = models.PositiveSmallIntegerField(default=3)
    params = models.JSONField(default=dict, blank=True)
    # The strategy's operations as this experiment applies them (a sweep's value set in).
    operations = models.JSONField(default=list, blank=True)
    job = models.ForeignKey(ReplayJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    sweep = models.ForeignKey(
        Sweep, null=True, blank=True, on_delete=models.SET_NULL, related_name="experiments"
    )
    sweep_value = models.JSONField(null=True, blank=True)
    title = models.CharField(max_length=300, blank=True, default="")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RUNNING)
    reason = models.CharField(max_length=500, blank=True, default="")
    n_items = models.IntegerField(default=0)
    n_not_applicable = models.IntegerField(default=0)
    n_failed_items = models.IntegerField(default=0)
    summary = models.JSONField(null=True, blank=True)  # experiments.metrics.summarize, once evaluated
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="experiment_recent_idx")]

    def __str__(self) -> str:
        return self.title or f"experiment {self.pk}"

    @property
    def finished(self) -> bool:
        return self.status in EXPERIMENT_FINISHED

    @property
    def strategy_label(self) -> str:
        return str(self.strategy_version) if self.strategy_version_id else "as saved"


EXPERIMENT_FINISHED = (
    Experiment.Status.DONE,
    Experiment.Status.PARTIAL,
    Experiment.Status.FAILED,
    Experiment.Status.CANCELLED,
)


class ExperimentItem(models.Model):
    """What the strategy did to one item: the operations as applied (a summary computed), the
    tokens before and after, or why it does not apply; and the replay variants of both arms."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="items")
    item = models.ForeignKey(EvalItem, on_delete=models.CASCADE, related_name="+")
    applicable = models.BooleanField(default=True)
    reason = models.CharField(max_length=500, blank=True, default="")  # not applicable, or failed
    failed = models.BooleanField(default=False)
    operations = models.JSONField(default=list, blank=True)
    tokens_before = models.IntegerField(default=0)
    tokens_after = models.IntegerField(default=0)
    removed = models.JSONField(default=list, blank=True)
    control_variant_id = models.BigIntegerField(null=True, blank=True)
    strategy_variant_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["experiment", "item__position"]
        constraints = [models.UniqueConstraint(fields=["experiment", "item"], name="uniq_experiment_item")]

    def __str__(self) -> str:
        return f"{self.experiment} item {self.item_id}"


class CheckResult(models.Model):
    """One check on one answer: passed, failed or not applicable (None), with its evidence."""

    class Arm(models.TextChoices):
        CONTROL = "control", "as saved"
        STRATEGY = "strategy", "strategy"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="check_results")
    item = models.ForeignKey(EvalItem, on_delete=models.CASCADE, related_name="+")
    arm = models.CharField(max_length=10, choices=Arm.choices)
    sample = models.PositiveSmallIntegerField()
    run_id = models.BigIntegerField()
    check_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=24)
    passed = models.BooleanField(null=True)
    evidence = EscapedTextField(blank=True, default="")

    class Meta:
        ordering = ["experiment", "item", "arm", "sample", "check_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "item", "arm", "sample", "check_id"], name="uniq_check_result"
            )
        ]

    def __str__(self) -> str:
        return f"{self.check_id}: {self.passed}"


class SummaryCache(models.Model):
    """A model-made summary for a `summarize` operation, by (content hash, operation, endpoint,
    model): a rerun pays nothing twice."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    content_hash = models.CharField(max_length=64)
    # The operation as the strategy version states it (budget, prompt...): a strategy version and
    # a sweep's value each name one, and a changed prompt is a new summary.
    operation_hash = models.CharField(max_length=64)
    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    summary = EscapedTextField()
    prompt_tokens = models.IntegerField(null=True, blank=True)
    completion_tokens = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash", "operation_hash", "endpoint", "model"],
                name="uniq_summary_cache",
            )
        ]

    def __str__(self) -> str:
        return f"summary {self.content_hash[:12]}"


class Comparison(models.Model):
    """Experiment B against experiment A (experiments.metrics.compare), kept once computed: both
    summaries are final, and a bootstrap over 500 items is worth computing once. Removed when
    either experiment is evaluated again."""

    a = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+")
    b = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+")
    result = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["a", "b"], name="uniq_experiment_comparison")]

    def __str__(self) -> str:
        return f"#{self.b_id} against #{self.a_id}"
