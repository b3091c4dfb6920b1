"""The web application for an event-loop server (uvicorn): Django's WSGI application behind an
adapter that reads each request body in the event loop before a thread runs the view.

Why: a thread-per-request server (gunicorn's sync and gthread workers) holds a thread for as long
as a client takes to send its body; a few hundred clients that declare a large Content-Length and
then send a byte every few seconds hold every thread, and /healthz and the pages stop answering.
Here such a client holds a coroutine and a socket. The views still run in a fixed pool of threads
(CTXOBS_WEB_THREADS per process), which keeps their database connections for CONN_MAX_AGE as
under gunicorn (Django's own ASGI handler would run each request in a thread of its own, with a
database connection of its own).

Bounds, answered without a thread: a declared or received body over max_body_bytes gets 413; a
body that stalls for CTXOBS_WEB_BODY_IDLE_S, or takes longer than CTXOBS_WEB_BODY_TIMEOUT_S in
all, gets 408 and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from typing import Any

from config.wsgi import application as wsgi_application
from core.env import env_float, env_int
from ctxobs.wire import LIMITS

logger = logging.getLogger(__name__)

# Response bytes handed from a view thread to the event loop at a time (at most one such piece
# of a streamed answer waits in the thread).
_SEND_CHUNK = 64 * 1024

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Coroutine[Any, Any, None]]


class _BodyRefused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        self.status, self.detail = status, detail


class BufferedWSGI:
    """An ASGI application serving the WSGI application APP: the body first, then a thread."""

    def __init__(self, app: Any, *, threads: int, max_body: int, body_idle_s: float, body_timeout_s: float
                 ) -> None:
        self.app = app
        self.max_body = max_body
        self.body_idle_s = body_idle_s
        self.body_timeout_s = body_timeout_s
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="view")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets
        try:
            body = await self._body(scope, receive)
        except _BodyRefused as refused:
            await _answer(send, refused.status, refused.detail)
            return
        environ = _environ(scope, body)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self._respond, environ, send, loop)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.executor.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise _BodyRefused(413, f"body of {int(declared)} bytes exceeds the limit "
                                    f"max_body_bytes={self.max_body}")
        parts: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.body_timeout_s
        while True:
            wait = min(self.body_idle_s, deadline - time.monotonic())
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, wait))
            except TimeoutError:
                raise _BodyRefused(408, "the request body did not arrive in time") from None
            if message["type"] == "http.disconnect":
                raise _BodyRefused(400, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _BodyRefused(413, f"body exceeds the limit max_body_bytes={self.max_body}")
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _respond(self, environ: dict[str, Any], send: Send, loop: asyncio.AbstractEventLoop) -> None:
        """In a view thread: run the WSGI application and pass its answer to the event loop."""

        def to_loop(message: Message) -> None:
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        started: list[Message] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if exc_info and started and started[0].get("sent"):
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [{
                "type": "http.response.start",
                "status": int(status.split(" ", 1)[0]),
                # Django writes each Set-Cookie value with a leading space, which HTTP servers trim.
                "headers": [(k.lower().encode("latin-1"), v.strip().encode("latin-1")) for k, v in headers],
            }]
            return lambda data: None  # the legacy write(): Django does not use it

        pending = bytearray()

        def flush() -> None:
            if not started[0].get("sent"):
                to_loop({k: v for k, v in started[0].items() if k != "sent"})
                started[0]["sent"] = True
            if pending:
                to_loop({"type": "http.response.body", "body": bytes(pending), "more_body": True})
                pending.clear()

        try:
            result: Iterable[bytes] = self.app(environ, start_response)
            try:
                for chunk in result:
                    # Small chunks (a file served 4 KiB at a time) go to the loop together: each
                    # hand-over is a round trip between threads.
                    pending += chunk
                    if len(pending) >= _SEND_CHUNK:
                        flush()
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception:
            if started and started[0].get("sent"):
                raise  # mid-answer: the server closes the connection
            logger.exception("web.wsgi_error path=%s", environ.get("PATH_INFO"))
            asyncio.run_coroutine_threadsafe(_answer(send, 500, "internal error"), loop).result()
            return
        flush()
        to_loop({"type": "http.response.body", "body": b"", "more_body": False})


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _environ(scope: Scope, body: bytes) -> dict[str, Any]:
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode("utf-8").decode("latin-1"),
        "PATH_INFO": scope["path"].encode("utf-8").decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "REMOTE_ADDR": client[0],
        "REMOTE_PORT": str(client[1]),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = value
            continue
        if name == "CONTENT_LENGTH":
            continue  # the body as read
        key = f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


application = BufferedWSGI(
    wsgi_application,
    threads=env_int("CTXOBS_WEB_THREADS", 8),
    max_body=LIMITS.max_body_bytes,
    body_idle_s=env_float("CTXOBS_WEB_BODY_IDLE_S", 30.0),
    body_timeout_s=env_float("CTXOBS_WEB_BODY_TIMEOUT_S", 300.0),
)
