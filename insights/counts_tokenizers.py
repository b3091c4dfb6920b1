"""A model family's own tokenizer, where one can be had offline, for the counts analyzer.

Configured with `CTXOBS_TOKENIZERS`, a JSON object from a model-family prefix to a source:

    CTXOBS_TOKENIZERS='{"gemma": "http://127.0.0.1:8011/v1", "llama-3": "/models/llama3/tokenizer.json"}'

- an `http(s)://` URL is a llama.cpp server holding a model of that family: its vocabulary
  tokenizes the text (llama-cpp-python's `POST /extras/tokenize/count`, or llama.cpp's own
  `POST /tokenize`);
- a path ending in `.gguf` is a GGUF model file whose vocabulary is loaded without its weights
  (llama-cpp-python, the `local-model` extra);
- any other path is a Hugging Face `tokenizer.json`, read with the `tokenizers` package when it
  is installed (it is not a dependency of ctxobs).

A model belongs to the longest prefix its name (lower case, after the last `/`) starts with.
Counting happens in the worker, off the request path; a source that fails or is missing leaves
the turn with ingest's count (tiktoken, marked estimated); the source is not asked again for
RETRY_AFTER_S, and the failure is logged at most once a minute.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from django.conf import settings

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 5.0
CACHE_ITEMS = 50_000
LOG_EVERY_S = 60.0
RETRY_AFTER_S = 30.0


class TokenizerUnavailable(Exception):
    """The family's tokenizer could not count (server away, file unreadable, package missing)."""


class FamilyTokenizer(Protocol):
    label: str

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, without special tokens; raises TokenizerUnavailable."""
        ...


class _CountCache:
    """Counts by (source, text digest), oldest evicted first: a system prompt or old history
    repeated on every turn is sent to the tokenizer once per worker process."""

    def __init__(self, maxsize: int = CACHE_ITEMS) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(source: str, text: str) -> tuple[str, bytes]:
        return source, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, key: tuple[str, bytes]) -> int | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: tuple[str, bytes], n: int) -> None:
        with self._lock:
            self._data[key] = n
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)


_cache = _CountCache()


def _cached_count(source: str, texts: Sequence[str], count_missing: Any) -> list[int]:
    keys = [_cache.key(source, t) for t in texts]
    out: list[int | None] = [_cache.get(k) if t else 0 for k, t in zip(keys, texts, strict=True)]
    missing = sorted({t for t, n in zip(texts, out, strict=True) if n is None})
    if missing:
        counted = dict(zip(missing, count_missing(missing), strict=True))
        for i, t in enumerate(texts):
            if out[i] is None:
                out[i] = counted[t]
                _cache.put(keys[i], counted[t])
    return [int(n or 0) for n in out]


@dataclass
class LlamaServerTokenizer:
    """The vocabulary of the model a llama.cpp server holds, through its tokenize endpoint."""

    base_url: str
    label: str = ""
    _path: str | None = None
    _offset: int | None = None

    def __post_init__(self) -> None:
        root = self.base_url.rstrip("/")
        self.root = root.removesuffix("/v1")
        # The label is shown on pages and in logs: the server's address, never credentials in the URL.
        self.label = self.label or f"llama.cpp server {httpx.URL(self.root).copy_with(userinfo=b'')}"

    def _one(self, client: httpx.Client, text: str) -> int:
        paths = [self._path] if self._path else ["/extras/tokenize/count", "/tokenize"]
        last = ""
        for path in paths:
            body: dict[str, Any] = (
                {"input": text, "add_special": False} if path.startswith("/extras") else
                {"content": text, "add_special": False}
            )
            r = client.post(self.root + path, json=body)
            if r.status_code in (404, 405):
                last = f"{path}: HTTP {r.status_code}"
                continue
            if r.status_code != 200:
                raise TokenizerUnavailable(f"{path}: HTTP {r.status_code}")
            data = r.json()
            n = data.get("count") if isinstance(data, dict) else None
            if n is None and isinstance(data, dict) and isinstance(data.get("tokens"), list):
                n = len(data["tokens"])
            if not isinstance(n, int):
                raise TokenizerUnavailable(f"{path}: no count in the answer")
            self._path = path
            return n
        raise TokenizerUnavailable(f"no tokenize endpoint ({last})")

    def _count_missing(self, texts: list[str]) -> list[int]:
        try:
            with httpx.Client(timeout=HTTP_TIMEOUT_S, trust_env=False) as client:
                if self._offset is None:
                    # llama-cpp-python's endpoints add the model's BOS token to every text: the
                    # count of an empty text is what each count carries besides the text itself.
                    self._offset = self._one(client, "")
                return [max(0, self._one(client, t) - self._offset) for t in texts]
        except (httpx.HTTPError, ValueError) as exc:
            raise TokenizerUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def count(self, texts: Sequence[str]) -> list[int]:
        return _cached_count(self.label, texts, self._count_missing)


@dataclass
class GgufTokenizer:
    """The vocabulary of a GGUF model file, loaded without its weights (llama-cpp-python)."""

    path: str
    label: str = ""
    _llama: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.label = self.label or f"GGUF vocabulary {Path(self.path).name}"

    def _load(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise TokenizerUnavailable("llama-cpp-python is not installed") from exc
            try:
                self._llama = Llama(model_path=self.path, vocab_only=True, verbose=False)
            except Exception as exc:  # noqa: BLE001 - a missing or unreadable file
                raise TokenizerUnavailable(f"cannot read {self.path}: {exc}") from exc
        return self._llama

    def _count_missing(self, texts: list[str]) -> list[int]:
        with self._lock:
            llama = self._load()
            try:
                return [len(llama.tokenize(t.encode("utf-8", "replace"), add_bos=False, special=True))
                        for t in texts]
            except Exception as exc:  # noqa: BLE001
                raise TokenizerUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def count(self, texts: Sequence[str]) -> list[int]:
        return _cached_count(self.label, texts, self._count_missing)


@dataclass
class TokenizerJsonTokenizer:
    """A Hugging Face `tokenizer.json`, read with the `tokenizers` package."""

    path: str
    label: str = ""
    _tok: Any = None

    def __post_init__(self) -> None:
        p = Path(self.path)
        self.label = self.label or f"{p.parent.name}/{p.name}"

    def _load(self) -> Any:
        if self._tok is None:
            try:
                from tokenizers import Tokenizer  # type: ignore[import-not-found,unused-ignore]
            except ImportError as exc:
                raise TokenizerUnavailable("the tokenizers package is not installed") from exc
            try:
                self._tok = Tokenizer.from_file(self.path)
            except Exception as exc:  # noqa: BLE001 - an unreadable or invalid file
                raise TokenizerUnavailable(f"cannot read {self.path}: {exc}") from exc
        return self._tok

    def _count_missing(self, texts: list[str]) -> list[int]:
        tok = self._load()
        try:
            return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
        except Exception as exc:  # noqa: BLE001
            raise TokenizerUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def count(self, texts: Sequence[str]) -> list[int]:
        return _cached_count(self.label, texts, self._count_missing)


def parse_sources(raw: str) -> dict[str, FamilyTokenizer]:
    """The family tokenizers RAW (CTXOBS_TOKENIZERS' JSON) names; raises ValueError when it is not
    a JSON object of non-empty strings."""
    if not raw.strip():
        return {}
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("CTXOBS_TOKENIZERS must be a JSON object: {\"family prefix\": \"URL or path\"}")
    out: dict[str, FamilyTokenizer] = {}
    for family, source in data.items():
        if not (isinstance(family, str) and family.strip() and isinstance(source, str) and source.strip()):
            raise ValueError(f"CTXOBS_TOKENIZERS: {family!r} needs a URL or a path")
        src = source.strip()
        tok: FamilyTokenizer
        if src.startswith(("http://", "https://")):
            tok = LlamaServerTokenizer(src)
        elif src.lower().endswith(".gguf"):
            tok = GgufTokenizer(src)
        else:
            tok = TokenizerJsonTokenizer(src)
        out[family.strip().lower()] = tok
    return out


_configured: tuple[str, dict[str, FamilyTokenizer]] | None = None
_last_logged: dict[str, float] = {}


def configured() -> dict[str, FamilyTokenizer]:
    """The family tokenizers of settings.CTXOBS_TOKENIZERS (parsed again when it changes)."""
    global _configured
    raw = str(getattr(settings, "CTXOBS_TOKENIZERS", "") or "")
    if _configured is None or _configured[0] != raw:
        try:
            _configured = (raw, parse_sources(raw))
        except ValueError as exc:
            logger.error("insights.tokenizers_invalid error=%s", exc)
            _configured = (raw, {})
    return _configured[1]


def for_model(model: str) -> FamilyTokenizer | None:
    """The tokenizer of MODEL's family: the longest configured prefix of its name."""
    name = (model or "").lower().split("/")[-1]
    best: tuple[int, FamilyTokenizer] | None = None
    for family, tok in configured().items():
        if name.startswith(family) and (best is None or len(family) > best[0]):
            best = (len(family), tok)
    return best[1] if best else None


_down_until: dict[str, float] = {}


def unavailable(tok: FamilyTokenizer, exc: Exception) -> None:
    """Record that TOK could not count: it is not asked again for RETRY_AFTER_S (a server that is
    away must not cost a timeout per turn), and the failure is logged at most once a minute."""
    now = time.monotonic()
    _down_until[tok.label] = now + RETRY_AFTER_S
    if now - _last_logged.get(tok.label, -LOG_EVERY_S) >= LOG_EVERY_S:
        _last_logged[tok.label] = now
        logger.warning("insights.tokenizer_unavailable source=%s error=%s", tok.label, exc)


def is_down(tok: FamilyTokenizer) -> bool:
    """Whether TOK failed less than RETRY_AFTER_S ago."""
    return time.monotonic() < _down_until.get(tok.label, 0.0)
