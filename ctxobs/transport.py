"""Background delivery of snapshots to the ingest API.

Contract towards the host agent: `enqueue()` takes a lock for a few microseconds and returns;
nothing here raises into the caller or waits for the network. Delivery happens on one daemon
thread: bounded queue (when full the OLDEST item is dropped and counted), batches by size and
interval, gzip, retries with exponential backoff and jitter on connection errors, 408/425/429
and 5xx (Retry-After honoured), per-item results from the API. A rejected item is reported
once through `on_error` and never retried. A second daemon thread, the reader, runs the
`digest` given with an item (instrumented calls read their reply there) every few
milliseconds, so what the item holds does not stay alive until its batch is sent.

What the server does not take within the retry budget goes to the spool (ctxobs/spool.py, on by
default): from then on new snapshots queue up behind it on disk, in order, and the same thread
sends the spool's files oldest first as soon as the server answers again, probing with backoff
(Retry-After honoured) meanwhile. A new Transport for the same spool sends what an earlier
process left there. Resending is harmless: the server deduplicates by `snapshot_id`.

Blocks sent by hash: most of a turn's blocks repeat an earlier turn's (system prompt, tools,
memory, retrieved documents). Once the server has taken a snapshot, its blocks' content
addresses are known to be held there, and later snapshots carry such a block as its hash and
token count instead of its messages, which spares the server inflating, parsing, validating and
hashing the same text on every turn. A snapshot the server refuses for an unknown hash (content
removed by retention, or a hash it computes differently) is sent again whole at once; the spool
always holds whole snapshots, since it may be sent by another process or after retention.

One module, over the usual size, for one job: the sender thread's state machine. Enqueueing,
batching, retries, the spool and the flush at exit all read and change the same queue under the
same lock and condition; split apart, they would share that private state across modules.
"""

from __future__ import annotations

import atexit
import gzip
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from ctxobs.hashing import block_hashes
from ctxobs.retry import RETRY_AFTER_MAX_S, backoff_delay, parse_retry_after, retryable_status
from ctxobs.spool import DEFAULT_MAX_BYTES, Spool, resolve_spool_dir
from ctxobs.wire import LIMITS

log = logging.getLogger("ctxobs.transport")

SNAPSHOTS_PATH = "/api/v1/snapshots"
_BATCH_OVERHEAD = len(b'{"snapshots":[]}')
# One spool file holds at most this much, so a claimed file is read into memory cheaply.
_FILE_ITEMS = 500
_FILE_BYTES = 8 * 1024 * 1024
# Until the sender has encoded something, assume a snapshot costs this much to prepare; and
# never assume less than the floor.
_ENCODE_GUESS_S = 0.0005
_ENCODE_FLOOR_S = 0.0001
# The same for sending one snapshot (a batch's round trip over its size), until measured.
_SEND_GUESS_S = 0.001
# close() returns at most this long after its timeout (the last spool write in progress).
EXIT_MARGIN_S = 0.5
# At exit, the part of exit_timeout left to the rest of the interpreter's exit (other atexit
# handlers, threads, encoding the spool on a loaded machine): close() gets exit_timeout minus this
# and EXIT_MARGIN_S, so that the process is gone within exit_timeout with a second or more to
# spare. A short exit_timeout keeps half of itself for close().
EXIT_RESERVE_S = 2.0
# How often the reader thread runs the digests queued since its last run.
_DIGEST_INTERVAL_S = 0.02
# Snapshots pushed out of the full queue wait for the sender to free them, up to this many.
_EVICTED_MAX = 1024

# Block hashes the server acknowledged, and those never to send by hash (it said it did not hold
# them): each set is cleared when it reaches its bound, which costs some blocks sent whole again.
_ACKED_MAX = 100_000
_NEVER_MAX = 10_000
# Stands in for a snapshot's blocks list while the rest of it is encoded, so each block's place in
# the body is known. Random per process: a snapshot containing it is encoded the plain way.
_BLOCKS_SENTINEL = f"ctxobs-blocks-{uuid.uuid4().hex}"
_BLOCKS_SENTINEL_JSON = json.dumps(_BLOCKS_SENTINEL)

# Fork count, raised in the child: a Transport compares it with the count it last saw, which
# costs less on every enqueue than os.getpid() (a system call).
_forks = [0]


def _after_fork() -> None:
    _forks[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class CtxobsDeliveryError(Exception):
    """What `on_error` receives: why some snapshots did not (or not yet) reach the server.

    `kind` is one of: rejected (the API refused the item; not retried), auth (401/403; the
    items are dropped, not spooled), unreachable (undeliverable and not spooled), spool_full
    (the oldest spooled snapshots were dropped to stay under `spool_max_bytes`), too_large (one
    item over the body limit), invalid (the wire validator refused it locally), prepare (redaction or encoding
    failed; the item is dropped rather than sent unredacted).
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
    sent: int = 0  # accepted by the server: created or duplicate (spooled ones included)
    duplicates: int = 0
    dropped: int = 0  # pushed out of the full queue (oldest first)
    failed: int = 0  # rejected by the server, or undeliverable and not spooled
    retried: int = 0  # retry attempts, not items
    spooled: int = 0  # written to the spool
    spool_dropped: int = 0  # oldest spooled snapshots dropped to stay under spool_max_bytes
    sampled_out: int = 0
    batches: int = 0
    blocks_by_hash: int = 0  # blocks that reached the server as their hash in snapshots it took


class _HashedBlock(NamedTuple):
    """A block of an item's body that may travel as its content address."""

    position: int  # in the snapshot's blocks
    start: int  # its JSON is body[start:end]
    end: int
    hash: str  # ctxobs.hashing.block_hashes(messages)[0]
    by_hash: bytes  # the block's JSON with `hash` in place of `messages`


@dataclass
class _Item:
    snapshot_id: str
    body: bytes  # the snapshot as JSON, prepared (redacted) and encoded once; always whole
    ts_ns: int = 0  # when it was enqueued: orders spool files
    blocks: tuple[_HashedBlock, ...] = ()  # the blocks of body that may go by hash
    whole: bool = False  # sent as body only (after the server refused a hash of it)
    sent_by_hash: tuple[_HashedBlock, ...] = ()  # the blocks the last POST sent by hash


@dataclass
class DeliveryReport:
    """Outcome of delivering a list of items: each item lands in exactly one list."""

    created: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    unsent: list[_Item] = field(default_factory=list)  # server unreachable
    refused: list[_Item] = field(default_factory=list)  # API key refused (401/403)
    retries: int = 0
    retry_after: float | None = None  # from the last answer that asked to come back later


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


# One encoder for each form: json.dumps() with options builds a new encoder on every call, which
# costs more than encoding a small block.
_ENCODERS = {
    ascii_only: json.JSONEncoder(ensure_ascii=ascii_only, separators=(",", ":"), default=_json_default)
    for ascii_only in (False, True)
}


def _dumps(value: Any, ascii_only: bool) -> str:
    return _ENCODERS[ascii_only].encode(value)


def _encode_plain(prepared: Any) -> bytes:
    try:
        return _dumps(prepared, False).encode()
    except UnicodeEncodeError:
        # Unpaired surrogates (binary output decoded with surrogateescape) have no UTF-8
        # form; as \uXXXX escapes the body is valid and the server stores them as sent.
        return _dumps(prepared, True).encode()


def _plain_messages(messages: Any) -> bool:
    """MESSAGES decode on the server to values equal to these, so its hash of them is ours:
    a non-empty list of objects holding only strings and nulls (role, content, name,
    tool_call_id). Content parts, tool calls and numbers are sent whole."""
    if type(messages) is not list or not messages:
        return False
    for m in messages:
        if type(m) is not dict:
            return False
        for k, v in m.items():
            if type(k) is not str or (v is not None and type(v) is not str):
                return False
    return True


class _BlockJson:
    """The JSON of blocks sent before, whole and by hash, by content hash and the block's other
    fields: a block repeated on every turn (the system prompt, tools, memory) is encoded once, so
    the sender thread, which holds the GIL while it encodes, leaves the agent's thread alone.
    Bounded by the bytes it holds; cleared when full."""

    def __init__(self, max_bytes: int = 32 * 1024**2) -> None:
        self.max_bytes = max_bytes
        self._held = 0
        self._map: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}

    def get(self, key: tuple[Any, ...]) -> tuple[bytes, bytes] | None:
        return self._map.get(key)

    def put(self, key: tuple[Any, ...], value: tuple[bytes, bytes]) -> None:
        size = len(value[0]) + len(value[1])
        if self._held + size > self.max_bytes:
            self._map.clear()
            self._held = 0
        self._map[key] = value
        self._held += size


_block_json = _BlockJson()


def _block_key(block: dict[str, Any], h: str, ascii_only: bool) -> tuple[Any, ...] | None:
    """What decides BLOCK's JSON besides its messages (whose content H names): its other fields in
    order, each with its type (True and 1 are equal keys otherwise); None when one is not a plain
    value or a list of strings."""
    items: list[Any] = [h, ascii_only]
    for k, v in block.items():
        if k == "messages":
            items.append(k)
        elif v is None or type(v) in (str, int, bool, float):
            items.append((k, type(v), v))
        elif type(v) is list and all(type(x) is str for x in v):
            items.append((k, list, *v))
        else:
            return None
    return tuple(items)


def _encode_split(prepared: Any) -> tuple[bytes, tuple[_HashedBlock, ...]] | None:
    """PREPARED encoded as `_encode_plain` encodes it, with where each block lies in it and, for
    those whose content can travel as its hash, that hash and the block's by-hash JSON; None for a
    snapshot of another shape (it is encoded the plain way). A block encoded before is taken from
    `_block_json`: the same JSON, up to the order of keys inside its messages."""
    if type(prepared) is not dict:
        return None
    blocks = prepared.get("blocks")
    if type(blocks) is not list or not blocks or any(type(b) is not dict for b in blocks):
        return None
    outer = dict(prepared)
    outer["blocks"] = _BLOCKS_SENTINEL
    for ascii_only in (False, True):
        try:
            text = _dumps(outer, ascii_only)
            if text.count(_BLOCKS_SENTINEL_JSON) != 1:
                return None
            head, _, tail = text.partition(_BLOCKS_SENTINEL_JSON)
            head_b, tail_b = head.encode(), tail.encode()
            parts: list[bytes] = []
            hashed: list[_HashedBlock] = []
            pos = len(head_b) + 1
            for j, b in enumerate(blocks):
                msgs, tokens = b.get("messages"), b.get("tokens")
                if type(tokens) is int and "hash" not in b and _plain_messages(msgs):
                    h = block_hashes(msgs)[0]
                    key = _block_key(b, h, ascii_only)
                    hit = _block_json.get(key) if key is not None else None
                    if hit is None:
                        swapped = {k: v for k, v in b.items() if k != "messages"}
                        swapped["hash"] = h
                        hit = (_dumps(b, ascii_only).encode(), _dumps(swapped, ascii_only).encode())
                        if key is not None:
                            _block_json.put(key, hit)
                    part = hit[0]
                    hashed.append(_HashedBlock(j, pos, pos + len(part), h, hit[1]))
                else:
                    part = _dumps(b, ascii_only).encode()
                parts.append(part)
                pos += len(part) + 1
        except UnicodeEncodeError:
            continue  # the whole body goes as \uXXXX escapes, as `_encode_plain` sends it
        return head_b + b"[" + b",".join(parts) + b"]" + tail_b, tuple(hashed)
    return None


class Transport:
    """Sends wire snapshots to `{endpoint}/api/v1/snapshots` from a background thread.

    `prepare` runs on the sender thread for every snapshot before it is encoded (the Client
    uses it for redaction); if it raises, the snapshot is dropped and reported, never sent.
    `spool`: True (default) for the default directory (`CTXOBS_SPOOL`, else the user's cache
    directory), a directory path, or False for none; `spool_path` is the same as a path.
    `send_block_hashes`: True sends a block the server has acknowledged as its content address
    (off by default: see docs/sdk.md, "Blocks sent by hash", for what it costs the sender thread).
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
        retry_after_max: float = RETRY_AFTER_MAX_S,
        compress: bool = True,
        spool: bool | str | os.PathLike[str] | None = True,
        spool_path: str | os.PathLike[str] | None = None,
        spool_max_bytes: int = DEFAULT_MAX_BYTES,
        on_error: Callable[[CtxobsDeliveryError], None] | None = None,
        prepare: Callable[[Any], Mapping[str, Any]] | None = None,
        disabled: bool = False,
        flush_at_exit: bool = True,
        exit_timeout: float = 5.0,
        send_block_hashes: bool = False,
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
        self.on_error = on_error
        self.prepare = prepare
        self.disabled = disabled or not self.endpoint
        self.exit_timeout = exit_timeout
        self.send_block_hashes = send_block_hashes
        # Block hashes of snapshots the server took (so it holds their content), and those it
        # said it does not hold, never sent by hash again (a hash it computes differently must
        # not cost a refusal on every turn). Changed under _hash_lock; read without it.
        self._acked: set[str] = set()
        self._never: set[str] = set()
        self._hash_lock = threading.Lock()
        try:
            directory = resolve_spool_dir(
                spool_path if spool_path is not None else spool, self.endpoint, self._api_key
            )
        except Exception:  # noqa: BLE001 - e.g. no home directory: run without a spool
            log.warning("ctxobs.transport.spool_unavailable reason=no_directory")
            directory = None
        self.spool_dir: Path | None = directory if not self.disabled else None
        self._spool = (
            Spool(self.spool_dir, max_bytes=spool_max_bytes, on_drop=self._spool_dropped)
            if self.spool_dir is not None
            else None
        )

        self._stats = Stats()
        self._queue: deque[tuple[int, Any]] = deque()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._idle = False  # the sender waits on _cond for work
        self._running = False  # a sender thread is started and has not ended
        self._evicted: list[tuple[int, Any]] = []  # pushed out of the full queue, not yet freed
        # Digests waiting for the reader thread; bounded like the queue (an item whose digest
        # falls out is read by the sender instead).
        self._digests: deque[Callable[[], None]] = deque(maxlen=self.max_queue)
        self._digesting = False  # the reader thread is started and has not ended
        self._stop = threading.Event()
        self._interrupt = threading.Event()  # closing: retry sleeps end at once
        self._inflight: list[_Item] = []
        self._taken: list[tuple[int, Any]] = []  # what the sender took, before it is encoded
        self._inflight_taken = False  # close() spooled a copy of the in-flight batch
        self._busy = False  # the sender holds items taken from the queue
        self._down = False
        self._closing = False
        # The spool may hold files to send; while it does, new snapshots queue behind them there.
        self._backlog = False
        self._next_drain = 0.0
        self._drain_failures = 0
        self._encode_s = _ENCODE_GUESS_S
        self._send_s = _SEND_GUESS_S
        self._thread: threading.Thread | None = None
        self._forks = _forks[0]
        self._http: httpx.Client | None = None
        if flush_at_exit and not self.disabled:
            atexit.register(self._at_exit)
        if self._spool is not None:
            try:
                leftover = bool(self._spool.files())
            except Exception:  # noqa: BLE001 - a broken cache directory must not break the agent
                leftover = False
            if leftover:
                # What an earlier process left goes out now, not at this one's first snapshot.
                self._backlog = True
                self._start()

    # --- agent-facing -----------------------------------------------------------------

    def enqueue(self, snapshot: Any, *, digest: Callable[[], None] | None = None) -> bool:
        """Queue one snapshot for delivery; O(1), never blocks, never raises. False if disabled.

        SNAPSHOT is a wire dict, or any object `prepare` turns into one on the sender thread.
        DIGEST, if given, is called soon on a background reader thread (never the caller's), to
        read what SNAPSHOT holds into a compact form before its batch is sent.
        """
        if self.disabled:
            return False
        # This runs on the agent's thread for every call: the plain lock (a C-level context
        # manager; the Condition's own methods are Python) held for a few list operations; the
        # sender is woken only when a batch is full and it is waiting for one; a snapshot pushed
        # out of a full queue is handed to the sender to free, since freeing a reply's objects
        # costs more than queueing one.
        evicted = None
        try:
            with self._lock:
                if self._forks != _forks[0]:
                    self._reset_after_fork()
                queue = self._queue
                if not queue:
                    self._oldest_ts = time.monotonic()
                elif len(queue) >= self.max_queue:
                    self._evicted.append(queue.popleft())
                    self._stats.dropped += 1
                queue.append((time.time_ns(), snapshot))
                self._stats.enqueued += 1
                if self._idle and len(queue) >= self.batch_size:
                    self._cond.notify_all()
                running = self._running
                if digest is not None:
                    self._digests.append(digest)
                    if not self._digesting:
                        self._start_reader()
                if len(self._evicted) >= _EVICTED_MAX:
                    # The sender is stuck in a request: free them here, in one go, rather than
                    # let memory grow past the queue's bound.
                    evicted, self._evicted = self._evicted, []
            del evicted
            if not running:
                self._start()
            return True
        except Exception:  # noqa: BLE001 - the agent must never see our failure
            log.exception("ctxobs.transport.enqueue_failed")
            return False

    def count_sampled_out(self) -> None:
        with self._cond:
            self._stats.sampled_out += 1

    def stats(self) -> dict[str, int]:
        """A copy of the counters plus `queued` (items waiting or in flight now) and `backlog`
        (snapshots waiting in the spool directory, from any process)."""
        with self._cond:
            out = asdict(self._stats)
            out["queued"] = len(self._queue) + len(self._inflight)
        out["backlog"] = self._spool.pending() if self._spool is not None else 0
        return out

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send what is queued now, and the spool's backlog; True if both emptied within TIMEOUT."""
        if self.disabled:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if (self._queue or self._backlog) and (self._thread is None or not self._thread.is_alive()):
            self._start()
        with self._cond:
            while self._queue or self._busy or self._backlog:
                self._flush_requested = True
                self._cond.notify_all()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.5 if remaining is None else min(0.5, remaining))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Send for up to TIMEOUT seconds, spool the rest, stop; returns within TIMEOUT (+0.5 s).

        The sender keeps sending from the head of the queue while this thread, as soon as the
        sender would not get through the queue in time (or the server is known to be down),
        spools from the tail. Without a spool, what is left at TIMEOUT is counted as
        failed, never encoded.
        """
        if self.disabled or self._stop.is_set():
            return
        deadline = time.monotonic() + max(0.0, timeout)
        # A batch in its retry series stops waiting (and goes to the spool); later batches get
        # one attempt each: there is no time for backoff.
        self._interrupt.set()
        with self._cond:
            self._closing = True
            self._flush_requested = True
            self._cond.notify_all()
        if self._queue and (self._thread is None or not self._thread.is_alive()):
            self._start()
        spooling = False
        lost: list[tuple[int, Any]] = []
        while True:
            with self._cond:
                now = time.monotonic()
                if not (self._queue or self._busy) or now >= deadline:
                    break
                if self._spool is not None and not spooling:
                    # Start when the sender would not get through the queue in time. Both then
                    # work at once: the sender from the head, this thread from the tail.
                    n = len(self._queue)
                    spooling = (
                        self._backlog
                        or self._down
                        or now + n * self._send_s + self._spool_cost(n) >= deadline
                    )
                if not (spooling and self._queue):
                    self._cond.wait(min(0.05, deadline - now))
                    continue
                n = min(_FILE_ITEMS, len(self._queue))
                tail = [self._queue.pop() for _ in range(n)]
            tail.reverse()
            lost += self._spool_pending(tail, deadline)
        with self._cond:
            pending = list(self._queue)
            self._queue.clear()
            inflight = list(self._inflight) if self._busy else []
            # Still being encoded (or spilled): encoded again here, a duplicate at worst.
            taken = list(self._taken) if self._busy and not inflight else []
            self._inflight_taken = bool(inflight)
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        lost_ids: list[str] = []
        if self._spool is None:
            lost += pending + taken
            lost_ids = [i.snapshot_id for i in inflight]
        else:
            if inflight:
                # It may still arrive too; a later send of the spool then reports duplicates.
                self._write_spool(inflight)
            lost += self._spool_pending(taken, deadline + EXIT_MARGIN_S / 2)
            lost += self._spool_pending(pending, deadline)
        lost_ids += [_snapshot_id(s) for _, s in lost]
        if lost_ids:
            with self._cond:
                self._stats.failed += len(lost_ids)
            log.warning(
                "ctxobs.transport.unsent_at_exit items=%d spool=%s",
                len(lost_ids),
                "off" if self._spool is None else "timeout",
            )
            self._report(
                CtxobsDeliveryError(
                    "unreachable",
                    f"{len(lost_ids)} snapshots neither sent nor spooled at close",
                    snapshot_ids=lost_ids,
                )
            )

    # --- sender thread ----------------------------------------------------------------

    _flush_requested = False
    _oldest_ts = 0.0

    def _start(self) -> None:
        with self._cond:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name="ctxobs-transport", daemon=True)
            self._running = True
            try:
                self._thread.start()
            except BaseException:
                self._running = False
                raise

    def _reset_after_fork(self) -> None:
        # The parent's queue is the parent's to send; the child starts empty with its own thread.
        # The spool is shared: the child drains it too (file locks keep each file to one sender).
        self._forks = _forks[0]
        self._queue.clear()
        self._evicted = []
        self._running = False
        self._idle = False
        self._digests.clear()
        self._digesting = False
        self._inflight = []
        self._taken = []
        self._busy = False
        self._thread = None
        self._http = None
        self._hash_lock = threading.Lock()
        if self._spool is not None:
            self._spool.reset_after_fork()

    def _start_reader(self) -> None:
        # Called with the lock held.
        if self._stop.is_set():
            return
        self._digesting = True
        try:
            threading.Thread(target=self._read_loop, name="ctxobs-reader", daemon=True).start()
        except BaseException:
            self._digesting = False
            raise

    def _read_loop(self) -> None:
        """Run the queued digests every _DIGEST_INTERVAL_S: woken by a timer rather than by
        each enqueue, so the agent's thread never signals anything, and in short bursts."""
        digests = self._digests
        try:
            while not self._stop.wait(_DIGEST_INTERVAL_S):
                while digests:
                    try:
                        digests.popleft()()
                    except IndexError:
                        break
                    except Exception:  # noqa: BLE001 - the sender reads the item itself then
                        log.debug("ctxobs.transport.digest_failed")
        finally:
            with self._lock:
                self._digesting = False

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._lock:
                self._running = False

    def _loop(self) -> None:
        if self._spool is not None:
            try:
                found = bool(self._spool.files())
            except Exception:  # noqa: BLE001
                found = False
            if found:
                with self._cond:
                    self._backlog = True
                log.info("ctxobs.transport.backlog_found dir=%s", self.spool_dir)
        while not self._stop.is_set():
            try:
                action, batch = self._next_action()
                with self._lock:
                    evicted, self._evicted = self._evicted, []
                del evicted  # freed here, outside the lock
                if action == "send":
                    self._process(batch)
                elif action == "spill":
                    self._spill(batch)
                elif action == "drain":
                    self._drain_one()
            except Exception:  # noqa: BLE001 - keep the thread alive whatever happens
                log.exception("ctxobs.transport.loop_error")
            finally:
                with self._cond:
                    self._busy = False
                    self._inflight = []
                    self._taken = []
                    self._cond.notify_all()

    def _next_action(self) -> tuple[str, list[tuple[int, Any]]]:
        """What to do next: send a batch, spill the queue behind the spool's backlog, send the
        backlog's oldest file, or stop; waits for a full batch, the flush interval of the oldest
        item, a flush request or the next drain attempt."""
        with self._cond:
            while not self._stop.is_set():
                now = time.monotonic()
                timeout = self.flush_interval
                if self._queue:
                    wait = self._oldest_ts + self.flush_interval - now
                    if (
                        len(self._queue) >= self.batch_size
                        or self._flush_requested
                        or self._closing
                        or wait <= 0
                    ):
                        n = min(_FILE_ITEMS if self._backlog else self.batch_size, len(self._queue))
                        batch = [self._queue.popleft() for _ in range(n)]
                        self._oldest_ts = now
                        self._busy = True
                        self._taken = batch
                        return ("spill" if self._backlog else "send"), batch
                    timeout = min(timeout, wait)
                else:
                    self._flush_requested = False
                if self._backlog and not self._closing:
                    due = self._next_drain - now
                    if due <= 0:
                        return "drain", []
                    timeout = min(timeout, due)
                self._idle = True
                try:
                    self._cond.wait(max(0.001, timeout))
                finally:
                    self._idle = False
            return "stop", []

    def _process(self, batch: list[tuple[int, Any]]) -> None:
        items = [it for it in (self._encode(s, ts) for ts, s in batch) if it is not None]
        with self._cond:
            self._inflight = items
        if not items:
            return
        started = time.monotonic()
        report = self.deliver(items, interruptible=True)
        if not report.unsent:
            self._send_s = 0.7 * self._send_s + 0.3 * (time.monotonic() - started) / len(items)
        with self._cond:
            self._stats.batches += 1
            self._stats.sent += len(report.created) + len(report.duplicate)
            self._stats.duplicates += len(report.duplicate)
            self._stats.failed += len(report.rejected)
            self._stats.retried += report.retries
            taken, self._inflight_taken = self._inflight_taken, False
        if taken:
            return  # close() already spooled this batch
        if report.refused:
            with self._cond:
                self._stats.failed += len(report.refused)
        if report.unsent:
            self._give_up(report.unsent, retry_after=report.retry_after)

    def _spill(self, batch: list[tuple[int, Any]]) -> None:
        """Queue BATCH behind the spool's backlog: order is kept and memory stays flat."""
        items = [it for it in (self._encode(s, ts, whole=True) for ts, s in batch) if it is not None]
        if items and not self._write_spool(items):
            # The disk refused: try the network after all rather than lose the batch.
            with self._cond:
                self._inflight = items
            report = self.deliver(items, interruptible=True)
            with self._cond:
                self._stats.sent += len(report.created) + len(report.duplicate)
                self._stats.duplicates += len(report.duplicate)
                self._stats.failed += len(report.rejected) + len(report.unsent) + len(report.refused)
            if report.unsent:
                self._report(
                    CtxobsDeliveryError(
                        "unreachable",
                        f"gave up on {len(report.unsent)} snapshots: server unreachable and the "
                        "spool not writable",
                        snapshot_ids=[i.snapshot_id for i in report.unsent],
                    )
                )

    def _drain_one(self) -> None:
        """Send the spool's oldest file nobody else is sending; on failure keep what was not
        taken and schedule the next attempt with backoff."""
        assert self._spool is not None
        claim = self._spool.claim_oldest()
        if claim is None:
            others = bool(self._spool.files())
            with self._cond:
                if others:
                    # Other processes are sending the rest; look again shortly.
                    self._next_drain = time.monotonic() + max(0.2, self.flush_interval)
                else:
                    self._backlog = False
                    self._down = False
                self._cond.notify_all()
            if not others:
                log.info("ctxobs.transport.backlog_empty dir=%s", self.spool_dir)
            return
        items: list[_Item] = []
        bad = 0
        for line in claim.lines:
            sid = _snapshot_id_of(line)
            if sid is None:
                bad += 1
            else:
                items.append(_Item(sid, line))
        if bad:
            log.warning("ctxobs.transport.spool_unreadable lines=%d file=%s", bad, claim.path.name)
        report = DeliveryReport()
        try:
            report = self.deliver(items, attempts=1, interruptible=True)
        finally:
            left = report.unsent if items else []
            claim.finish([i.body for i in left])
        with self._cond:
            if items:
                self._stats.batches += 1
            self._stats.sent += len(report.created) + len(report.duplicate)
            self._stats.duplicates += len(report.duplicate)
            self._stats.failed += len(report.rejected) + len(report.refused) + bad
            self._stats.retried += 1 if left else 0
            if left:
                self._drain_failures += 1
                delay = self._delay(self._drain_failures, report.retry_after)
                self._down = True
                self._next_drain = time.monotonic() + delay
            else:
                self._drain_failures = 0
                self._down = False
                self._next_drain = time.monotonic()
            self._cond.notify_all()
        if left:
            log.info(
                "ctxobs.transport.drain_paused items=%d next_in_s=%.2f",
                len(left),
                self._next_drain - time.monotonic(),
            )
        else:
            log.info(
                "ctxobs.transport.drained items=%d created=%d duplicate=%d rejected=%d",
                len(items),
                len(report.created),
                len(report.duplicate),
                len(report.rejected),
            )

    def _encode(self, snapshot: Any, ts_ns: int = 0, *, whole: bool = False) -> _Item | None:
        """SNAPSHOT prepared and encoded; with where its blocks lie, to send some by hash, unless
        WHOLE (it goes to the spool, which holds whole snapshots only)."""
        sid = _snapshot_id(snapshot)
        started = time.perf_counter()
        try:
            prepared = self.prepare(snapshot) if self.prepare is not None else snapshot
            split = self._encode_split(sid, prepared) if self.send_block_hashes and not whole else None
            body, hashed = split if split is not None else (_encode_plain(prepared), ())
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
        # A moving average of the cost, so close() knows how long spooling the queue will take.
        self._encode_s = 0.9 * self._encode_s + 0.1 * (time.perf_counter() - started)
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
        return _Item(sid, body, ts_ns, hashed)

    def _encode_split(self, sid: str, prepared: Any) -> tuple[bytes, tuple[_HashedBlock, ...]] | None:
        try:
            return _encode_split(prepared)
        except Exception:  # noqa: BLE001 - encoded the plain way, which reports what is wrong
            log.debug("ctxobs.transport.split_failed snapshot_id=%s", sid)
            return None

    # --- delivery (shared by the sender thread and `ctxobs push`) ------------------------

    def deliver(
        self, items: list[_Item], *, interruptible: bool = False, attempts: int | None = None
    ) -> DeliveryReport:
        """POST ITEMS in body-size-bounded batches with retries; synchronous. Never raises.

        ATTEMPTS per batch defaults to 1 + max_retries.
        """
        report = DeliveryReport()
        for chunk in _chunks(items, self.batch_size, LIMITS.max_body_bytes):
            if report.unsent:
                # The server just proved unreachable: the rest waits for the next attempt.
                report.unsent.extend(chunk)
                continue
            self._deliver_chunk(chunk, report, interruptible, attempts)
        return report

    def _deliver_chunk(
        self, chunk: list[_Item], report: DeliveryReport, interruptible: bool, attempts: int | None = None
    ) -> None:
        # Without a spool, once the server was found unreachable each batch gets one probe after
        # a long pause instead of a full retry series, so a dead server costs neither CPU nor
        # memory. With a spool the sender does not get here while the server is down.
        probe_only = self._down and self._spool is None and attempts is None
        if attempts is None:
            attempts = 1 if probe_only else self.max_retries + 1
        if interruptible and self._interrupt.is_set():
            attempts = 1  # closing: no time for a retry series
        retry_after: float | None = None
        for attempt in range(max(1, attempts)):
            if attempt or probe_only:
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
            self._settle(chunk, resp, report, interruptible, attempts)
            return
        self._down = True
        report.retry_after = retry_after
        log.warning("ctxobs.transport.unreachable items=%d", len(chunk))
        report.unsent.extend(chunk)

    def _settle(
        self, chunk: list[_Item], resp: _Response, report: DeliveryReport, interruptible: bool,
        attempts: int | None = None,
    ) -> None:
        if resp.kind == "ok":
            resend = self._apply_results(chunk, resp, report)
            if resend:
                # Refused for a block hash the server does not hold: once more, every block whole.
                self._deliver_chunk(resend, report, interruptible, attempts)
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
            # Not spooled: the spool belongs to this key, and a refused key would hold its backlog
            # (and everything queued behind it) on disk for good.
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

    def _apply_results(self, chunk: list[_Item], resp: _Response, report: DeliveryReport) -> list[_Item]:
        """Sort CHUNK's items into REPORT by the server's results; those to send again whole
        (refused for a block hash), not yet sorted."""
        by_index: dict[int, dict[str, Any]] = {}
        for r in resp.results:
            if isinstance(r, dict) and isinstance(r.get("index"), int):
                by_index[r["index"]] = r
        resend: list[_Item] = []
        by_hash = 0
        for i, item in enumerate(chunk):
            r = by_index.get(i, {})
            status = r.get("status", "rejected" if resp.status == 422 else "created")
            raw_errors = r.get("errors")
            errors: list[Any] = raw_errors if isinstance(raw_errors, list) else []
            if status != "rejected":
                if item.blocks:
                    self._acknowledge(b.hash for b in item.blocks)
                by_hash += len(item.sent_by_hash)
            if status == "duplicate":
                report.duplicate.append(item.snapshot_id)
            elif status == "rejected" and item.sent_by_hash and self._refused_for_hash(item, errors):
                item.whole = True
                resend.append(item)
            elif status == "rejected":
                report.rejected.append(item.snapshot_id)
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
        if by_hash:
            with self._cond:
                self._stats.blocks_by_hash += by_hash
        return resend

    # --- blocks sent by hash -------------------------------------------------------------

    def _acknowledge(self, hashes: Iterable[str]) -> None:
        """The server holds the content of HASHES: later snapshots may send those blocks by hash."""
        with self._hash_lock:
            acked, never = self._acked, self._never
            for h in hashes:
                if h not in acked and h not in never:
                    if len(acked) >= _ACKED_MAX:
                        acked.clear()
                    acked.add(h)

    def _refused_for_hash(self, item: _Item, errors: list[Any]) -> bool:
        """Whether ITEM, sent with blocks by hash, was refused for one of them (and goes again
        whole). A hash the server does not hold is never sent by hash again; an error about the
        messages of a block sent by hash comes from a server that takes no hashes, and turns
        sending by hash off."""
        sent = {b.position: b for b in item.sent_by_hash}
        unknown: list[str] = []
        refused = False
        older_server = False
        for e in errors:
            loc = e.get("loc") if isinstance(e, dict) else None
            if not isinstance(loc, list) or len(loc) != 5 or loc[2] != "blocks":
                continue
            if loc[4] == "hash":
                refused = True
                b = sent.get(loc[3]) if isinstance(loc[3], int) else None
                if b is not None:
                    unknown.append(b.hash)
            elif loc[4] == "messages" and isinstance(loc[3], int) and loc[3] in sent:
                refused = older_server = True
        if not refused:
            return False
        if older_server and not unknown:
            self.send_block_hashes = False
            log.warning("ctxobs.transport.block_hashes_off reason=server_wants_messages")
            return True
        if not unknown:
            # The errors name no block sent by hash: none of them is trusted again.
            unknown = [b.hash for b in item.sent_by_hash]
        with self._hash_lock:
            for h in unknown:
                self._acked.discard(h)
                if len(self._never) >= _NEVER_MAX:
                    self._never.clear()
                self._never.add(h)
        log.info(
            "ctxobs.transport.block_hash_unknown snapshot_id=%s hashes=%d", item.snapshot_id, len(unknown)
        )
        return True

    def _body_of(self, item: _Item) -> bytes:
        """ITEM's JSON for this POST: its blocks the server holds as their hash, the rest whole."""
        item.sent_by_hash = ()
        if not item.blocks or item.whole or not self.send_block_hashes:
            return item.body
        try:
            acked, never = self._acked, self._never
            use = tuple(b for b in item.blocks if b.hash in acked and b.hash not in never)
            if not use:
                return item.body
            view = memoryview(item.body)
            parts: list[bytes | memoryview] = []
            pos = 0
            for b in use:
                parts += (view[pos : b.start], b.by_hash)
                pos = b.end
            parts.append(view[pos:])
            body = b"".join(parts)
        except Exception:  # noqa: BLE001 - sent whole
            log.debug("ctxobs.transport.by_hash_failed snapshot_id=%s", item.snapshot_id)
            return item.body
        item.sent_by_hash = use
        return body

    def _post(self, chunk: list[_Item]) -> _Response:
        body = b'{"snapshots":[' + b",".join([self._body_of(i) for i in chunk]) + b"]}"
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
        if retryable_status(status):
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
        if retry_after is None and self._down and attempt == 0:
            return self.backoff_max
        # Many agents fail together when the server goes away: jitter stops them returning in lockstep.
        return backoff_delay(
            attempt,
            base=self.backoff_base,
            cap=self.backoff_max,
            retry_after=retry_after,
            retry_after_cap=self.retry_after_max,
            jitter=0.5,
            retry_after_jitter=0.1,
        )

    def _sleep(self, seconds: float, interruptible: bool) -> bool:
        """Wait SECONDS; True if the transport is closing (only when INTERRUPTIBLE)."""
        if interruptible:
            return self._interrupt.wait(seconds)
        time.sleep(seconds)
        return False

    # --- giving up, spooling -------------------------------------------------------------

    def _give_up(
        self, items: list[_Item], already_reported: bool = False, retry_after: float | None = None
    ) -> None:
        if self._spool is not None and self._write_spool(items):
            with self._cond:
                # The retry budget is spent: probe on from where the retry series left off.
                self._drain_failures = max(self._drain_failures, self.max_retries, 1)
                self._next_drain = time.monotonic() + self._delay(self._drain_failures, retry_after)
                self._cond.notify_all()
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

    def _write_spool(self, items: list[_Item]) -> bool:
        """Append ITEMS to the spool in files of bounded size; from now on the sender drains it.

        A file holds at most a quarter of the spool's bound: the spool makes room by dropping
        whole files, oldest first, so a batch bigger than the bound keeps its newest snapshots,
        and making room never takes more than a quarter of what is kept."""
        assert self._spool is not None
        written = 0
        file_bytes = min(_FILE_BYTES, max(1, self._spool.max_bytes // 4))
        for chunk in _chunks(items, _FILE_ITEMS, file_bytes):
            if not self._spool.append([i.body for i in chunk], chunk[0].ts_ns or None):
                break
            written += len(chunk)
        with self._cond:
            self._stats.spooled += written
            if written:
                self._backlog = True
            self._cond.notify_all()
        if written:
            log.info("ctxobs.transport.spooled items=%d dir=%s", written, self.spool_dir)
        return written == len(items)

    def _spool_cost(self, n: int) -> float:
        """Seconds to encode and spool N queued snapshots, with room to spare: the average is
        taken on the sender thread and varies with the machine's load."""
        return n * max(self._encode_s, _ENCODE_FLOOR_S) * 3 + 0.05

    def _spool_pending(self, pending: list[tuple[int, Any]], deadline: float) -> list[tuple[int, Any]]:
        """Encode and spool PENDING (queue entries, in order) until DEADLINE; those that were not."""
        buf: list[_Item] = []
        size = 0
        lost: list[tuple[int, Any]] = []
        for n, (ts, snapshot) in enumerate(pending):
            if time.monotonic() >= deadline:
                lost = pending[n:]
                break
            item = self._encode(snapshot, ts, whole=True)
            if item is None:
                continue
            buf.append(item)
            size += len(item.body)
            if len(buf) >= _FILE_ITEMS or size >= _FILE_BYTES:
                self._write_spool(buf)
                buf, size = [], 0
        if buf:
            self._write_spool(buf)
        return lost

    def _spool_dropped(self, items: int, files: int) -> None:
        with self._cond:
            self._stats.spool_dropped += items
        self._report(
            CtxobsDeliveryError(
                "spool_full",
                f"dropped the {items} oldest spooled snapshots ({files} files) to stay under "
                f"spool_max_bytes",
            )
        )

    def exit_budget(self) -> float:
        """The timeout the at-exit close() gets out of exit_timeout (see EXIT_RESERVE_S)."""
        reserve = min(EXIT_RESERVE_S + EXIT_MARGIN_S, self.exit_timeout / 2)
        return max(0.0, self.exit_timeout - reserve)

    def _at_exit(self) -> None:
        try:
            self.close(self.exit_budget())
        except Exception:  # noqa: BLE001 - never fail the host's shutdown
            log.exception("ctxobs.transport.exit_failed")

    def _report(self, error: CtxobsDeliveryError) -> None:
        if self.on_error is None:
            return
        try:
            self.on_error(error)
        except Exception:  # noqa: BLE001 - a broken callback must not stop delivery
            log.exception("ctxobs.transport.on_error_failed")


def _snapshot_id(snapshot: Any) -> str:
    if isinstance(snapshot, dict):
        return str(snapshot.get("snapshot_id", ""))
    return str(getattr(snapshot, "snapshot_id", ""))


def _snapshot_id_of(line: bytes) -> str | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return str(obj.get("snapshot_id", "")) if isinstance(obj, dict) else None


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
