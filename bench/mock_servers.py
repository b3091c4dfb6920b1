"""Stand-ins that answer at once, run in their own process so they never take the benchmark's GIL.

    python bench/mock_servers.py   # prints {"openai": PORT, "ingest": PORT, "hole": PORT}
                                   # and serves until its stdin closes

- openai: an OpenAI-compatible `/v1/chat/completions` (plain JSON or SSE when `stream` is set),
  HTTP/1.1 keep-alive, a fixed short reply with usage.
- ingest: a ctxobs `/api/v1/snapshots` that accepts every snapshot.
- hole: accepts TCP connections and never answers (a ctxobs server that is down).
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "Sure: the 09:40 flight to Lisbon has a window seat left."


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one segment, sent at once: a reply split in two small writes
    # meets the client's delayed ACK and every call would wait ~40 ms for nothing.
    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def log_message(self, *a: Any) -> None:
        pass


class _OpenAI(_Handler):
    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        usage = {"prompt_tokens": 4200, "completion_tokens": 14, "total_tokens": 4214}
        base = {"id": "chatcmpl-bench", "created": 1, "model": req.get("model")}
        if req.get("stream"):
            events = [
                {**base, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": w if i == 0 else " " + w},
                              "finish_reason": None}]}
                for i, w in enumerate(REPLY.split(" "))
            ]
            events.append({**base, "object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (req.get("stream_options") or {}).get("include_usage"):
                events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
            body = ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()
            ctype = "text/event-stream"
        else:
            body = json.dumps({**base, "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
                "usage": usage}).encode()
            ctype = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Ingest(_Handler):

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        n = len(json.loads(raw)["snapshots"])
        body = json.dumps({"results": [{"index": i, "status": "created"} for i in range(n)],
                           "created": n, "duplicate": 0, "rejected": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), h) for h in (_OpenAI, _Ingest)]
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1024)
    ports = {"openai": servers[0].server_address[1], "ingest": servers[1].server_address[1],
             "hole": hole.getsockname()[1]}
    print(json.dumps(ports), flush=True)
    sys.stdin.read()  # the parent closes our stdin (or exits) to stop us


if __name__ == "__main__":
    main()
