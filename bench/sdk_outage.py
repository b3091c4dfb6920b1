"""The SDK's default settings through a server outage, and at exit.

    .venv/bin/python bench/sdk_outage.py outage [--spool-path DIR]   # ~70 s; one JSON line
    .venv/bin/python bench/sdk_outage.py exit [--burners N]          # ~15 s; one JSON line

1. outage: an agent records 1,500 snapshots at a steady 25 per second (60 s) into a Client built
   with the default settings. From t=5 s the server answers 503 with `Retry-After: 5` (what the
   ingest API answers while its database is unreachable) for 45 s, then takes everything again.
   Reported: snapshots stored (once) by the end, lost (failed + dropped), written to the spool,
   still waiting in the spool 60 s after the server came back, and how long after its return the
   last snapshot arrived.
2. exit: 10,000 snapshots queued behind a server that accepts connections and never answers
   (the sender's request hangs for its 10 s timeout), then the process exits: wall time of the
   exit against the documented `exit_timeout` (5 s), the margin left (at least a second is the
   target), and where the snapshots went. `--burners N` runs N processes that spin on the CPU
   meanwhile: a loaded machine.

The server here is a small local HTTP server that speaks the ingest API's answers (200 with
per-item results, duplicates by snapshot_id, 503 + Retry-After); the SDK cannot tell it from the
real one, and the outage is then exactly 45 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ctxobs  # noqa: E402

TOTAL = 1500
RATE = 25.0  # snapshots per second
OUTAGE_START = 5.0
OUTAGE_S = 45.0
AFTER_S = 60.0


class Server:
    def __init__(self) -> None:
        self.down = False
        self.stored: dict[str, float] = {}
        self.posts = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.posts += 1
                    down = server.down
                if down:
                    body = b'{"detail": "database unavailable"}'
                    self.send_response(503)
                    self.send_header("Retry-After", "5")
                else:
                    if self.headers.get("Content-Encoding") == "gzip":
                        raw = gzip.decompress(raw)
                    items = json.loads(raw)["snapshots"]
                    results = []
                    now = time.monotonic()
                    with server.lock:
                        for i, it in enumerate(items):
                            sid = it["snapshot_id"]
                            status = "duplicate" if sid in server.stored else "created"
                            server.stored.setdefault(sid, now)
                            results.append({"index": i, "snapshot_id": sid, "status": status, "errors": []})
                    body = json.dumps({"results": results}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def outage(spool_path: str | None) -> dict[str, Any]:
    server = Server()
    kw: dict[str, Any] = {"flush_at_exit": False}
    if spool_path:
        kw["spool_path"] = spool_path
    obs = ctxobs.Client(server.url, "k", **kw)
    ids: list[str] = []
    start = time.monotonic()
    back_at = start + OUTAGE_START + OUTAGE_S
    for i in range(TOTAL):
        now = time.monotonic() - start
        server.down = OUTAGE_START <= now < OUTAGE_START + OUTAGE_S
        with obs.turn(session_id="outage", model="gpt-4o-mini", context_window=8192, turn=i) as t:
            t.block("system", [{"role": "system", "content": "You are a travel agent."}], pinned=True)
            t.block("user", [{"role": "user", "content": f"question {i}"}])
            t.output("ok")
        ids.append(t.snapshot_id)
        time.sleep(max(0.0, start + (i + 1) / RATE - time.monotonic()))
    server.down = False
    deadline = back_at + AFTER_S
    while time.monotonic() < deadline and len(server.stored) < TOTAL:
        time.sleep(0.1)
    stats = obs.stats()
    stored = [server.stored[i] for i in ids if i in server.stored]
    spool_dir = getattr(obs.transport, "spool_dir", None) or getattr(obs.transport, "spool_path", None)
    waiting = 0
    if spool_dir and Path(spool_dir).exists():
        files = [Path(spool_dir)] if Path(spool_dir).is_file() else list(Path(spool_dir).glob("*.jsonl"))
        waiting = sum(len(f.read_bytes().splitlines()) for f in files)
    obs.close(timeout=1)
    return {
        "scenario": "outage",
        "recorded": TOTAL,
        "outage_s": OUTAGE_S,
        "stored": len(stored),
        "lost": stats["failed"] + stats["dropped"],
        "spooled": stats.get("spooled", 0),
        "waiting_in_spool_60s_after_return": waiting,
        "last_stored_after_return_s": round(max(stored) - back_at, 1) if stored else None,
        "spool": str(spool_dir) if spool_dir else None,
    }


def exit_time(burners: int = 0) -> dict[str, Any]:
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)
    url = f"http://127.0.0.1:{hole.getsockname()[1]}"
    out: dict[str, Any] = {"scenario": "exit", "queued": 10_000, "exit_timeout_s": 5.0, "burners": burners}
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    with tempfile.TemporaryDirectory() as cache:
        script = (
            "import ctxobs\n"
            f"obs = ctxobs.Client({url!r}, 'k')\n"
            "for i in range(10_000):\n"
            "    with obs.turn(session_id='exit', model='gpt-4o-mini', context_window=8192) as t:\n"
            "        t.block('user', [{'role': 'user', 'content': f'question {i}'}])\n"
            "print('exiting', flush=True)\n"
        )
        env = {**os.environ, "XDG_CACHE_HOME": cache, "PYTHONPATH": str(ROOT)}
        env.pop("CTXOBS_SPOOL", None)
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=ROOT,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        t0 = time.monotonic()
        _, err = proc.communicate()
        out["exit_wall_s"] = round(time.monotonic() - t0, 2)
        out["margin_s"] = round(out["exit_timeout_s"] - out["exit_wall_s"], 2)
        for b in spinning:
            b.kill()
            b.wait()
        out["spooled"] = sum(len(f.read_bytes().splitlines()) for f in Path(cache).rglob("*.jsonl"))
        out["log"] = err.strip().splitlines()[-1:] if err.strip() else []
    hole.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["outage", "exit"])
    p.add_argument("--spool-path", help="passed as Client(spool_path=...)")
    p.add_argument("--burners", type=int, default=0, help="exit: CPU-spinning processes meanwhile")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        # The default spool lands in a throwaway cache directory, not the user's.
        os.environ["XDG_CACHE_HOME"] = cache
        os.environ.pop("CTXOBS_SPOOL", None)
        result = outage(args.spool_path) if args.scenario == "outage" else exit_time(args.burners)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
