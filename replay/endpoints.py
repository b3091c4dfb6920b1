"""Talking to an OpenAI-compatible server: base URL checks and one model call (ORM-free).

Errors are sorted into transient ones (429, 5xx, timeouts, refused connections), which the
caller may retry after `retry_after` seconds, and permanent ones, which end the run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from core import net
from ctxobs.retry import parse_retry_after, retryable_status
from replay.errors import EndpointError

# Shorter than ctxobs.retry's default: someone watches the job page, and the bounded attempts
# end a run whose server keeps asking for more.
MAX_RETRY_AFTER_S = 120.0

def shared_client(*, allow_private: bool = False) -> httpx.Client:
    """This process's pooled HTTP client for model servers, which applies the URL policy again on
    every connection (core.net): a name re-pointed at a private address after the endpoint was
    saved is refused. The pool keeps the connection to the model server open between runs."""
    return net.shared_guarded_client(allow_private=allow_private)


class CallError(Exception):
    """A model call that failed; `transient` says whether a retry may succeed."""

    def __init__(
        self, reason: str, *, transient: bool, retry_after: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transient = transient
        self.retry_after = retry_after
        self.status = status


@dataclass
class CallResult:
    text: str
    tool_calls: list[Any] = field(default_factory=list)
    finish_reason: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float = 0.0


def validate_base_url(base_url: str, *, allow_private: bool, resolve: bool = True) -> str:
    """BASE_URL normalised (no trailing slash), or EndpointError, by the one URL policy
    (core.net.url_check): http/https only, a host, no credentials, query or fragment, and unless
    ALLOW_PRIVATE no loopback, private, link-local, multicast or local-name host."""
    try:
        return net.url_check(base_url, allow_private=allow_private, resolve_names=resolve)
    except net.AddressRefused as exc:
        raise EndpointError(f"the base URL {exc.reason}") from None


def _retry_after(headers: httpx.Headers) -> float | None:
    ra = parse_retry_after(headers.get("retry-after"))
    return None if ra is None else min(MAX_RETRY_AFTER_S, ra)


def _headers(api_key: str) -> dict[str, str]:
    h = {"Content-Type": "application/json"}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def _json_body(body: dict[str, Any]) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        # Saved content may hold unpaired surrogates (binary tool output); as \uXXXX escapes
        # the model server gets exactly what the agent sent.
        return json.dumps(body, separators=(",", ":")).encode()


def post_json(
    *,
    base_url: str,
    path: str,
    body: dict[str, Any],
    api_key: str,
    timeout: float,
    allow_private: bool = False,
    client: httpx.Client | None = None,
) -> tuple[dict[str, Any], float]:
    """POST BODY to BASE_URL+PATH; the JSON answer and the round trip in ms, or CallError. An
    address the policy refuses at connect time is a permanent error: retrying cannot help."""
    url = base_url.rstrip("/") + path
    t0 = time.perf_counter()
    try:
        resp = (client or shared_client(allow_private=allow_private)).post(
            url, content=_json_body(body), headers=_headers(api_key), timeout=timeout
        )
    except net.AddressRefused as exc:
        raise CallError(f"the base URL {exc.reason}", transient=False) from None
    except httpx.TimeoutException:
        raise CallError(f"timed out after {timeout:g}s", transient=True) from None
    except httpx.TransportError as exc:
        raise CallError(f"connection failed ({type(exc).__name__})", transient=True) from None
    ms = (time.perf_counter() - t0) * 1000.0
    if retryable_status(resp.status_code):
        raise CallError(
            f"HTTP {resp.status_code} from the model server",
            transient=True,
            retry_after=_retry_after(resp.headers),
            status=resp.status_code,
        )
    if resp.status_code >= 400:
        raise CallError(
            f"HTTP {resp.status_code} from the model server: {_error_detail(resp)}",
            transient=False,
            status=resp.status_code,
        )
    try:
        data = resp.json()
    except ValueError:
        raise CallError("the model server did not answer with JSON", transient=False) from None
    if not isinstance(data, dict):
        raise CallError("the model server answered with unexpected JSON", transient=False)
    return data, ms


def _error_detail(resp: httpx.Response) -> str:
    # The provider's own message, shortened; it never contains our key.
    try:
        data = resp.json()
        err = data.get("error") if isinstance(data, dict) else None
        msg = err.get("message") if isinstance(err, dict) else (err or data.get("detail"))
        return str(msg)[:200] if msg else resp.reason_phrase
    except ValueError:
        return resp.reason_phrase


def complete(
    *,
    base_url: str,
    path: str,
    body: dict[str, Any],
    api_key: str,
    timeout: float,
    allow_private: bool = False,
    client: httpx.Client | None = None,
) -> CallResult:
    """One model call (chat or completions, by PATH) and its output, usage and latency."""
    data, ms = post_json(
        base_url=base_url, path=path, body=body, api_key=api_key, timeout=timeout,
        allow_private=allow_private, client=client,
    )
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise CallError("the model server answered without choices", transient=False)
    ch = choices[0]
    usage = data.get("usage") or {}
    if path == "/completions":
        # The transcript ends at "Assistant:": the answer is what follows the label's space, as
        # a chat reply would hold it.
        text = ch.get("text") or ""
        text = text.lstrip() if isinstance(text, str) else text
        tool_calls: list[Any] = []
    else:
        msg = ch.get("message") or {}
        text = msg.get("content") or ""
        tool_calls = msg.get("tool_calls") or []
    return CallResult(
        text=text if isinstance(text, str) else str(text),
        tool_calls=tool_calls if isinstance(tool_calls, list) else [],
        finish_reason=str(ch.get("finish_reason") or ""),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_ms=ms,
    )


def embed(
    *, base_url: str, model: str, text: str, api_key: str, timeout: float, allow_private: bool = False
) -> list[float]:
    data, _ = post_json(
        base_url=base_url,
        path="/embeddings",
        body={"model": model, "input": text},
        api_key=api_key,
        timeout=timeout,
        allow_private=allow_private,
    )
    try:
        vec = data["data"][0]["embedding"]
        if vec and isinstance(vec[0], list):
            # A server without pooling (llama.cpp's) answers one vector per token: their mean.
            vec = [sum(float(x) for x in col) / len(vec) for col in zip(*vec, strict=True)]
        return [float(x) for x in vec]
    except (KeyError, IndexError, TypeError, ValueError):
        raise CallError("the embeddings answer has no vector", transient=False) from None


def connection_check(
    *, base_url: str, model: str, mode: str, api_key: str, timeout: float = 20.0, allow_private: bool = False
) -> str:
    """A one-token call; a short success description, or CallError."""
    if mode == "completions":
        path, body = "/completions", {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    else:
        path, body = (
            "/chat/completions",
            {
                "model": model,
                "max_tokens": 1,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Hello"}],
            },
        )
    res = complete(
        base_url=base_url, path=path, body=body, api_key=api_key, timeout=timeout, allow_private=allow_private
    )
    return f"ok: answered in {res.latency_ms:.0f} ms"
