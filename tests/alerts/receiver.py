"""A real local HTTP webhook receiver (http.server in a thread) that verifies signatures."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alerts.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature_verify


class Receiver:
    def __init__(
        self, *, fail_first: int = 0, fail_status: int = 500, slow_first: int = 0, slow_seconds: float = 0.0
    ) -> None:
        self.secret = ""
        self.fail_first = fail_first
        self.fail_status = fail_status
        # The first SLOW_FIRST requests are answered only after SLOW_SECONDS (timeouts).
        self.slow_first = slow_first
        self.slow_seconds = slow_seconds
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = signature_verify(
                    receiver.secret,
                    self.headers.get(TIMESTAMP_HEADER, ""),
                    body,
                    self.headers.get(SIGNATURE_HEADER, ""),
                )
                with receiver.lock:
                    n = len(receiver.requests)
                    status = receiver.fail_status if n < receiver.fail_first else (200 if ok else 401)
                    receiver.requests.append(
                        {
                            "body": json.loads(body),
                            "headers": dict(self.headers),
                            "signature_ok": ok,
                            "status": status,
                            "at": time.time(),
                        }
                    )
                if n < receiver.slow_first:
                    time.sleep(receiver.slow_seconds)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def accepted(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["status"] == 200]

    def wait_for(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.accepted()
            if len(got) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(
            f"receiver got {len(self.accepted())} accepted requests, wanted {n}: {self.requests}"
        )
