"""Background delivery of snapshots to the ingest API.

Contract towards the host agent: `enqueue()` takes a lock for a few microseconds and returns;
nothing here raises into the caller or waits for the network. Delivery happens on one daemon
thread: bounded queue (when full the OLDEST item is dropped and counted), batches by size and
interval, gzip, retries with exponential backoff and jitter on connection errors, 408/425/429
and 5xx (Retry-After honoured), per-item results from the API. A rejected item is reported
once through `on_error` and never retried. When the server stays unreachable, batches go to an
optional JSONL spool file that `ctxobs push FILE` sends later; resending is harmless because
the server deduplicates by `snapshot_id`.
"""

from __future__ import annotations

import atexit
import gzip
import json
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from ctxobs.wire import LIMITS

log = logging.getLogger("ctxobs.transport")

SNAPSHOTS_PATH = "/api/v1/snapshots"
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_BATCH_OVERHEAD = len(b'{"snapshots":[]}')


class CtxobsDeliveryError(Exception):
    """What `on_error` receives: why some snapshots did not (or not yet) reach the server.

    `kind` is one of: rejected (the API refused the item; not retried), auth (401/403),
    unreachable (retries exhausted), too_large (one item over the body limit), invalid (the
    wire validator refused it locally), prepare (redaction or encoding failed; the item is
    dropped rather than sent unredacted).
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        snapshot_ids: list[str] | None = None,
        status: int | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.snapshot_ids = snapshot_ids or []
        self.status = status
        self.errors = errors or []


@dataclass
class Stats:
    """Counters since the transport was created; read with `Transport.stats()`."""

    enqueued: int = 0
    sent: int = 0  # accepted by the server: created or duplicate
    duplicates: int = 0
    dropped: int = 0  # pushed out of the full queue (oldest first)
    failed: int = 0  # rejected by the server, or undeliverable without a spool
    retried: int = 0  # retry attempts, not items
    spooled: int = 0
    sampled_out: int = 0
    batches: int = 0


@dataclass
class _Item:
    snapshot_id: str
    body: bytes  # the snapshot as JSON, prepared (redacted) and encoded once


@dataclass
class DeliveryReport:
    """Outcome of delivering a list of items: each item lands in exactly one list."""

    created: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    unsent: list[_Item] = field(default_factory=list)  # server unreachable
    refused: list[_Item] = field(default_factory=list)  # API key refused (401/403)
    retries: int = 0


@dataclass
class _Response:
    kind: str  # ok | retry | auth | rejected | too_large
    status: int | None = None
    retry_after: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Transport:
    """Sends wire snapshots to `{endpoint}/api/v1/snapshots` from a background thread.

    `prepare` runs on the sender thread for every snapshot before it is encoded (the Client
    uses it for redaction); if it raises, the snapshot is dropped and reported, never sent.
    """

    def __init__(
        self,
        endpoint: str | None,
        api_key: str | None,
        *,
        batch_size: int = 100,
        flush_interval: float = 1.0,
        max_queue: int = 10_000,
        timeout: float = 10.0,
        max_retries: int = 6,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        retry_after_max: float = 300.0,
        compress: bool = True,
        spool_path: str | os.PathLike[str] | None = None,
        on_error: Callable[[CtxobsDeliveryError], None] | None = None,
        prepare: Callable[[Any], dict[str, Any]] | None = None,
        disabled: bool = False,
        flush_at_exit: bool = True,
        exit_timeout: float = 5.0,
    ) -> None:
        self.endpoint = (endpoint or "").rstrip("/")
        self.url = self.endpoint + SNAPSHOTS_PATH
        self._api_key = api_key or ""
        self.batch_size = max(1, min(batch_size, LIMITS.max_items_per_batch))
        self.flush_interval = flush_interval
        self.max_queue = max(1, max_queue)
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.compress = compress
        self.spool_path = Path(spool_path) if spool_path else None
        self.on_error = on_error
        self.prepare = prepare
        self.disabled = disabled or not self.endpoint
        self.exit_timeout = exit_timeout

        self._stats = Stats()
        self._queue: deque[Any] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._inflight: list[_Item] = []
        self._busy = False
        self._down = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._http: httpx.Client | None = None
        self._spool_lock = threading.Lock()
        if flush_at_exit and not self.disabled:
            atexit.register(self._at_exit)

    # --- agent-facing -----------------------------------------------------------------

    def enqueue(self, snapshot: Any) -> bool:
        """Queue one snapshot for delivery; O(1), never blocks, never raises. False if disabled.

        SNAPSHOT is a wire dict, or any object `prepare` turns into one on the sender thread.
        """
        if self.disabled:
            return False
        try:
            with self._cond:
                if self._pid != os.getpid():
                    self._reset_after_fork()
                if not self._queue:
                    self._oldest_ts = time.monotonic()
                elif len(self._queue) >= self.max_queue:
                    self._queue.popleft()
                    self._stats.dropped += 1
                self._queue.append(snapshot)
                self._stats.enqueued += 1
                if len(self._queue) >= self.batch_size:
                    self._cond.notify_all()
                alive = self._thread is not None and self._thread.is_alive()
            if not alive:
                self._start()
            return True
        except Exception:  # noqa: BLE001 - the agent must never see our failure
            log.exception("ctxobs.transport.enqueue_failed")
            return False

    def count_sampled_out(self) -> None:
        with self._cond:
            self._stats.sampled_out += 1

    def stats(self) -> dict[str, int]:
        """A copy of the counters plus `queued` (items waiting or in flight now)."""
        with self._cond:
            out = asdict(self._stats)
            out["queued"] = len(self._queue) + len(self._inflight)
        return out

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send what is queued now; True if the queue drained within TIMEOUT seconds."""
        if self.disabled:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._queue and (self._thread is None or not self._thread.is_alive()):
            self._start()
        with self._cond:
            while self._queue or self._busy:
                self._flush_requested = True
                self._cond.notify_all()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.5 if remaining is None else min(0.5, remaining))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Flush for up to TIMEOUT seconds, then stop; what is left goes to the spool if set."""
        if self.disabled or self._stop.is_set():
            return
        self.flush(timeout)
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self._spool_leftovers()

    # --- sender thread ----------------------------------------------------------------

    _flush_requested = False
    _oldest_ts = 0.0

    def _start(self) -> None:
        with self._cond:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name="ctxobs-transport", daemon=True)
            self._thread.start()

    def _reset_after_fork(self) -> None:
        # The parent's queue is the parent's to send; the child starts empty with its own thread.
        self._pid = os.getpid()
        self._queue.clear()
        self._inflight = []
        self._busy = False
        self._thread = None
        self._http = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._next_batch()
                if batch is not None:
                    self._process(batch)
            except Exception:  # noqa: BLE001 - keep the thread alive whatever happens
                log.exception("ctxobs.transport.loop_error")
            finally:
                with self._cond:
                    self._busy = False
                    self._inflight = []
                    self._cond.notify_all()

    def _next_batch(self) -> list[Any] | None:
        """Wait for a full batch, the flush interval of the oldest item, or a flush request."""
        with self._cond:
            while not self._stop.is_set():
                if not self._queue:
                    self._flush_requested = False
                    self._cond.wait(self.flush_interval)
                    continue
                wait = self._oldest_ts + self.flush_interval - time.monotonic()
                if len(self._queue) >= self.batch_size or self._flush_requested or wait <= 0:
                    break
                self._cond.wait(wait)
            if self._stop.is_set():
                return None
            n = min(self.batch_size, len(self._queue))
            batch = [self._queue.popleft() for _ in range(n)]
            self._oldest_ts = time.monotonic()
            self._busy = True
            return batch

    def _process(self, batch: list[Any]) -> None:
        items = [it for it in (self._encode(s) for s in batch) if it is not None]
        with self._cond:
            self._inflight = items
        if not items:
            return
        report = self.deliver(items, interruptible=True)
        with self._cond:
            self._stats.batches += 1
            self._stats.sent += len(report.created) + len(report.duplicate)
            self._stats.duplicates += len(report.duplicate)
            self._stats.failed += len(report.rejected)
            self._stats.retried += report.retries
        if report.refused:
            self._give_up(report.refused, already_reported=True)
        if report.unsent:
            self._give_up(report.unsent)
            if self._down and self.spool_path is not None:
                self._drain_to_spool()

    def _encode(self, snapshot: Any) -> _Item | None:
        sid = str(snapshot.get("snapshot_id", "") if isinstance(snapshot, dict) else snapshot.snapshot_id)
        try:
            prepared = self.prepare(snapshot) if self.prepare is not None else snapshot
            text = json.dumps(prepared, ensure_ascii=False, separators=(",", ":"), default=_json_default)
            try:
                body = text.encode()
            except UnicodeEncodeError:
                # Unpaired surrogates (binary output decoded with surrogateescape) have no UTF-8
                # form; as \uXXXX escapes the body is valid and the server stores them as sent.
                body = json.dumps(prepared, separators=(",", ":"), default=_json_default).encode()
        except Exception as exc:  # noqa: BLE001
            errors = getattr(exc, "errors", None)
            kind = "invalid" if isinstance(errors, list) else "prepare"
            log.warning("ctxobs.transport.prepare_failed snapshot_id=%s kind=%s", sid, kind)
            with self._cond:
                self._stats.failed += 1
            self._report(
                CtxobsDeliveryError(
                    kind,
                    str(exc) if kind == "invalid" else f"preparing the snapshot failed: {type(exc).__name__}",
                    snapshot_ids=[sid],
                    errors=errors if isinstance(errors, list) else None,
                )
            )
            return None
        if len(body) + _BATCH_OVERHEAD > LIMITS.max_body_bytes:
            with self._cond:
                self._stats.failed += 1
            self._report(
                CtxobsDeliveryError(
                    "too_large",
                    f"snapshot is {len(body)} bytes, over the limit max_body_bytes={LIMITS.max_body_bytes}",
                    snapshot_ids=[sid],
                )
            )
            return None
        return _Item(sid, body)

    # --- delivery (shared by the sender thread and `ctxobs push`) ------------------------

    def deliver(self, items: list[_Item], *, interruptible: bool = False) -> DeliveryReport:
        """POST ITEMS in body-size-bounded batches with retries; synchronous. Never raises."""
        report = DeliveryReport()
        for chunk in _chunks(items, self.batch_size, LIMITS.max_body_bytes):
            if report.unsent:
                # The server just proved unreachable: the rest waits for the next attempt.
                report.unsent.extend(chunk)
                continue
            self._deliver_chunk(chunk, report, interruptible)
        return report

    def _deliver_chunk(self, chunk: list[_Item], report: DeliveryReport, interruptible: bool) -> None:
        # Once the server was found unreachable, each batch gets one probe after a long pause
        # instead of a full retry series, so a dead server costs neither CPU nor memory.
        attempts = 1 if self._down else self.max_retries + 1
        retry_after: float | None = None
        for attempt in range(attempts):
            if attempt or self._down:
                if attempt:
                    report.retries += 1
                if self._sleep(self._delay(attempt, retry_after), interruptible):
                    break
            resp = self._post(chunk)
            if resp.kind == "retry":
                retry_after = resp.retry_after
                log.info(
                    "ctxobs.transport.retry status=%s attempt=%d items=%d detail=%s",
                    resp.status,
                    attempt + 1,
                    len(chunk),
                    resp.detail,
                )
                continue
            self._down = False
            self._settle(chunk, resp, report, interruptible)
            return
        self._down = True
        log.warning("ctxobs.transport.unreachable items=%d", len(chunk))
        report.unsent.extend(chunk)

    def _settle(
        self, chunk: list[_Item], resp: _Response, report: DeliveryReport, interruptible: bool
    ) -> None:
        if resp.kind == "ok":
            self._apply_results(chunk, resp, report)
        elif resp.kind == "too_large" and len(chunk) > 1:
            half = len(chunk) // 2
            self._deliver_chunk(chunk[:half], report, interruptible)
            self._deliver_chunk(chunk[half:], report, interruptible)
        elif resp.kind == "too_large":
            report.rejected.append(chunk[0].snapshot_id)
            self._report(
                CtxobsDeliveryError(
                    "too_large",
                    "the server refused the snapshot as too large (413)",
                    snapshot_ids=[chunk[0].snapshot_id],
                    status=413,
                )
            )
        elif resp.kind == "auth":
            log.warning("ctxobs.transport.auth_failed status=%s items=%d", resp.status, len(chunk))
            self._report(
                CtxobsDeliveryError(
                    "auth",
                    f"the server refused the API key ({resp.status})",
                    snapshot_ids=[i.snapshot_id for i in chunk],
                    status=resp.status,
                )
            )
            # Valid data sent with a wrong key: keep it (spool) for a later `ctxobs push`.
            report.refused.extend(chunk)
        else:
            report.rejected.extend(i.snapshot_id for i in chunk)
            log.warning("ctxobs.transport.batch_rejected status=%s items=%d", resp.status, len(chunk))
            self._report(
                CtxobsDeliveryError(
                    "rejected",
                    f"the server rejected the batch ({resp.status}): {resp.detail}",
                    snapshot_ids=[i.snapshot_id for i in chunk],
                    status=resp.status,
                )
            )

    def _apply_results(self, chunk: list[_Item], resp: _Response, report: DeliveryReport) -> None:
        by_index: dict[int, dict[str, Any]] = {}
        for r in resp.results:
            if isinstance(r, dict) and isinstance(r.get("index"), int):
                by_index[r["index"]] = r
        for i, item in enumerate(chunk):
            r = by_index.get(i, {})
            status = r.get("status", "rejected" if resp.status == 422 else "created")
            if status == "duplicate":
                report.duplicate.append(item.snapshot_id)
            elif status == "rejected":
                report.rejected.append(item.snapshot_id)
                raw_errors = r.get("errors")
                errors: list[Any] = raw_errors if isinstance(raw_errors, list) else []
                log.warning(
                    "ctxobs.transport.item_rejected snapshot_id=%s errors=%d", item.snapshot_id, len(errors)
                )
                summary = "; ".join(
                    f"{e.get('loc')}: {e.get('msg')}" for e in errors[:5] if isinstance(e, dict)
                )
                self._report(
                    CtxobsDeliveryError(
                        "rejected",
                        summary or "rejected by the server",
                        snapshot_ids=[item.snapshot_id],
                        status=resp.status,
                        errors=errors,
                    )
                )
            else:
                report.created.append(item.snapshot_id)

    def _post(self, chunk: list[_Item]) -> _Response:
        body = b'{"snapshots":[' + b",".join(i.body for i in chunk) + b"]}"
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._api_key}"}
        if self.compress:
            body = gzip.compress(body, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        try:
            if self._http is None:
                from ctxobs import __version__

                self._http = httpx.Client(
                    timeout=self.timeout, headers={"User-Agent": f"ctxobs-python/{__version__}"}
                )
            resp = self._http.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return _Response("retry", detail=type(exc).__name__)
        status = resp.status_code
        if status in _RETRY_STATUSES:
            retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            return _Response("retry", status, retry_after, detail=str(status))
        if status in (401, 403):
            return _Response("auth", status)
        if status == 413:
            return _Response("too_large", status)
        if status in (200, 201, 202, 207, 422):
            try:
                payload = resp.json()
                results = payload.get("results") if isinstance(payload, dict) else None
            except ValueError:
                results = None
            if status == 422 and not isinstance(results, list):
                return _Response("rejected", status, detail=resp.text[:200])
            return _Response("ok", status, results=results if isinstance(results, list) else [])
        if 400 <= status < 500:
            return _Response("rejected", status, detail=resp.text[:200])
        return _Response("retry", status, detail=str(status))

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # Honour the server; a little jitter stops many clients returning in lockstep.
            return min(self.retry_after_max, retry_after) * random.uniform(1.0, 1.1)
        if self._down and attempt == 0:
            return self.backoff_max
        base = min(self.backoff_max, self.backoff_base * (2 ** max(0, attempt - 1)))
        return base / 2 + random.uniform(0, base / 2)

    def _sleep(self, seconds: float, interruptible: bool) -> bool:
        """Wait SECONDS; True if the transport is stopping (only when INTERRUPTIBLE)."""
        if interruptible:
            return self._stop.wait(seconds)
        time.sleep(seconds)
        return False

    # --- giving up, spooling -------------------------------------------------------------

    def _give_up(self, items: list[_Item], already_reported: bool = False) -> None:
        if self.spool_path is not None and self._spool(items):
            return
        with self._cond:
            self._stats.failed += len(items)
        if not already_reported:
            self._report(
                CtxobsDeliveryError(
                    "unreachable",
                    f"gave up on {len(items)} snapshots after retries",
                    snapshot_ids=[i.snapshot_id for i in items],
                )
            )

    def _spool(self, items: list[_Item]) -> bool:
        assert self.spool_path is not None
        try:
            with self._spool_lock:
                self.spool_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.spool_path, "ab") as fh:
                    fh.write(b"".join(i.body + b"\n" for i in items))
        except OSError as exc:
            log.warning("ctxobs.transport.spool_failed error=%s", type(exc).__name__)
            return False
        with self._cond:
            self._stats.spooled += len(items)
        log.info("ctxobs.transport.spooled items=%d", len(items))
        return True

    def _drain_to_spool(self) -> None:
        with self._cond:
            pending = list(self._queue)
            self._queue.clear()
        items = [it for it in (self._encode(s) for s in pending) if it is not None]
        if items:
            self._give_up(items)

    def _spool_leftovers(self) -> None:
        with self._cond:
            pending = list(self._queue)
            self._queue.clear()
            inflight = list(self._inflight)
            self._inflight = []
        items = inflight + [it for it in (self._encode(s) for s in pending) if it is not None]
        if not items:
            return
        if self.spool_path is not None:
            # An in-flight batch may still arrive too; a later push then reports duplicates.
            self._spool(items)
        else:
            with self._cond:
                self._stats.failed += len(items)
            log.warning("ctxobs.transport.unsent_at_exit items=%d", len(items))

    def _at_exit(self) -> None:
        try:
            self.close(self.exit_timeout)
        except Exception:  # noqa: BLE001 - never fail the host's shutdown
            log.exception("ctxobs.transport.exit_failed")

    def _report(self, error: CtxobsDeliveryError) -> None:
        if self.on_error is None:
            return
        try:
            self.on_error(error)
        except Exception:  # noqa: BLE001 - a broken callback must not stop delivery
            log.exception("ctxobs.transport.on_error_failed")


def _chunks(items: list[_Item], max_items: int, max_bytes: int) -> list[list[_Item]]:
    out: list[list[_Item]] = []
    cur: list[_Item] = []
    size = _BATCH_OVERHEAD
    for it in items:
        extra = len(it.body) + 1
        if cur and (len(cur) >= max_items or size + extra > max_bytes):
            out.append(cur)
            cur, size = [], _BATCH_OVERHEAD
        cur.append(it)
        size += extra
    if cur:
        out.append(cur)
    return out


def read_spool(path: str | os.PathLike[str]) -> tuple[list[_Item], int]:
    """Items of a JSONL spool file and the number of unreadable lines skipped."""
    items: list[_Item] = []
    bad = 0
    with open(path, "rb") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(obj, dict):
                bad += 1
                continue
            items.append(_Item(str(obj.get("snapshot_id", "")), line))
    return items, bad
