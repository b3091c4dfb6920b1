"""What bounding the nesting of request bodies (core.jsonbody) costs next to parsing them: the scan
of the bytes (the standard parser's path) and the walk of msgspec's parsed value (the usual path).

    DATABASE_URL=postgresql://x@127.0.0.1:9/x REDIS_URL=redis://127.0.0.1:9/0 \
        .venv/bin/python bench/json_depth.py

(a few seconds, one JSON line per body; nothing connects to the database or Redis, the URLs only
keep the settings from starting the embedded servers).

The bodies are the ingest benchmark's batch of 100 realistic snapshots (bench/ingest_rate.py,
3.3 MB of JSON), as generated (no backslash in it), the same with a newline escape and an
escaped quote in many messages, and with an escape in every word of those messages (as prompts
of code and JSON tool output have).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import msgspec  # noqa: E402
from ingest_rate import make_batches  # noqa: E402

from core.jsonbody import check_depth, loads, value_depth  # noqa: E402


def median_ms(fn: Callable[[bytes], Any], body: bytes, runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn(body)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def main() -> None:
    plain = json.dumps({"snapshots": make_batches(1, 1)[0]}).encode()
    escaped = plain.replace(b"ro ", b"ro\\n").replace(b"mi ", b'mi \\"')
    dense = re.sub(rb"(?<=[a-z]) (?=[a-z])", rb"\\n", plain).replace(b"ka", b'\\"ka')
    decoder = msgspec.json.Decoder()
    for name, body in (("as generated", plain), ("with escapes", escaped), ("an escape a word", dense)):
        value = decoder.decode(body)
        print(json.dumps({  # noqa: T201
            "body": name, "mb": round(len(body) / 2**20, 2), "backslashes": body.count(b"\\"),
            "check_depth_ms": median_ms(check_depth, body), "json_loads_ms": median_ms(json.loads, body),
            "msgspec_ms": median_ms(decoder.decode, body),
            "value_depth_ms": median_ms(lambda _b, v=value: value_depth(v, 512), body),
            "loads_ms": median_ms(loads, body),
        }))


if __name__ == "__main__":
    main()
