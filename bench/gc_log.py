"""The cyclic garbage collector's work in each web server process, collection by collection.

As a gunicorn configuration file (bench/ingest_rate.py passes GUNICORN_CMD_ARGS on to its server):

    GUNICORN_CMD_ARGS="--config bench/gc_log.py" BENCH_GC_DIR=/tmp/gc python bench/ingest_rate.py ...

each worker appends one line per collection to BENCH_GC_DIR/<pid>.txt: the generation, the
milliseconds it took and the objects it freed; a full collection (generation 2) adds the number of
objects the collector tracks and the most common of their types. Then

    python bench/gc_log.py BENCH_GC_DIR

prints, per worker, the collections of each generation, their total and largest milliseconds, and
the census of each full collection.
"""

from __future__ import annotations

import collections
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

_DIR = Path(os.environ.get("BENCH_GC_DIR", "/tmp/ctxobs-gc"))


def post_fork(server: Any, worker: Any) -> None:
    """gunicorn's hook, in each worker after its fork: time every collection."""
    _DIR.mkdir(parents=True, exist_ok=True)
    out = _DIR / f"{os.getpid()}.txt"
    started: list[float] = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - started[0]) * 1000
        census = ""
        if info["generation"] == 2:
            objects = gc.get_objects()
            common = collections.Counter(type(o).__name__ for o in objects).most_common(6)
            census = f" tracked={len(objects)} " + ",".join(f"{name}:{n}" for name, n in common)
        with out.open("a") as f:
            f.write(f"{info['generation']} {ms:.3f} {info['collected']}{census}\n")

    gc.callbacks.append(timed)


def main(directory: str) -> None:
    for path in sorted(Path(directory).glob("*.txt")):
        ms: dict[int, list[float]] = collections.defaultdict(list)
        censuses = []
        for line in path.read_text().splitlines():
            gen, took, _, *census = line.split(" ", 3)
            ms[int(gen)].append(float(took))
            if census:
                censuses.append(f"{float(took):.1f} ms {census[0]}")
        per_gen = [f"gen{g}: {len(v)} collections, {sum(v):.1f} ms (largest {max(v):.1f})"
                   for g, v in sorted(ms.items())]
        print(path.stem, "  ".join(per_gen))
        for c in censuses:
            print("   full:", c)


if __name__ == "__main__":
    main(sys.argv[1])
