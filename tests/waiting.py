"""Waiting on an observable condition instead of sleeping a fixed time."""

from __future__ import annotations

import time
from typing import Any


def wait_until(fn: Any, timeout: float = 30.0, what: str = "condition", interval: float = 0.1) -> Any:
    """FN's first truthy result, polled every INTERVAL seconds; AssertionError after TIMEOUT."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
