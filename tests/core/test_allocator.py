"""A web process keeps the memory of one request body for the next (core.allocator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A web process (config.wsgi, which config.asgi imports too) inflates twenty gzip bodies of
# 3.6 MB, as the ingest endpoint does, and prints the page faults they took.
_INFLATE_BODIES = """
import gzip, json, resource
import config.wsgi  # noqa: F401
from ingest.api import BadRequest, _gunzip

body = gzip.compress(json.dumps([{"k": "x" * 100, "n": i} for i in range(30000)]).encode())
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    out = _gunzip(body, 16 << 20, BadRequest)
    assert len(out) > 3_000_000
    del out
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def _faults(**env: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _INFLATE_BODIES], cwd=ROOT, env={**os.environ, **env},
        capture_output=True, text=True, timeout=120, check=True,
    )
    return int(done.stdout.split()[-1])


def test_a_web_process_inflates_body_after_body_in_the_memory_of_the_first() -> None:
    kept = _faults()
    # As glibc's malloc comes: each body in pages the kernel finds and zeroes again (18,000 faults
    # on the machine this was written on, 900 a body).
    as_it_comes = _faults(CTXOBS_WEB_MALLOC_TUNE="0")
    assert kept < 500, kept
    assert as_it_comes > 20 * kept + 5_000, (kept, as_it_comes)
