"""Ingest and read endpoints: thin handlers over services and selectors."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import zstandard
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from isal import isal_zlib
from ninja import Query, Router, Schema
from ninja.responses import NinjaJSONEncoder

from core import jsonbody
from core.auth import IngestKeyAuth, ProjectReadAuth, request_caller
from core.errors import NotFound
from core.params import FiniteFloat, Instant, PageLimit, PageOffset
from core.schemas import Detail
from ctxobs.wire import LIMITS, limits_doc, usable_window
from ingest import selectors, services, wirebody
from ingest.errors import IngestError, LimitExceeded, RateLimited
from ingest.ratelimit import retry_after_seconds, take_token
from ingest.schemas import SNAPSHOTS_BATCH_SCHEMA, BatchOut, SessionOut, SessionPage, SnapshotOut, TimelineOut
from ingest.types import SnapshotDetail

router = Router(tags=["snapshots"])

_LIMITS_TEXT = ", ".join(f"{k}={v}" for k, v in limits_doc().items())


class BadRequest(IngestError):
    status_code = 400


class Unsupported(IngestError):
    status_code = 415


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = True


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch is parsed and stored.

    A batch is tens of thousands of freshly parsed dicts and lists: their allocation triggers
    collections that walk all of them again and again (a quarter of the CPU time of a batch),
    though nothing in them forms a cycle. Reference counting still frees everything; collection
    resumes when the last concurrent batch of this process is done.
    """
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


def read_body(
    request: HttpRequest,
    *,
    unsupported: type[IngestError] = Unsupported,
    bad_request: type[IngestError] = BadRequest,
) -> bytes:
    """The request body, gunzipped when sent gzip-encoded; the byte limit applies to both forms.
    Snapshot ingest and OTLP share it; each names the errors its answers are encoded from."""
    limit = LIMITS.max_body_bytes
    declared = request.META.get("CONTENT_LENGTH")
    if declared and declared.isdigit() and int(declared) > limit:
        raise LimitExceeded(f"body of {declared} bytes exceeds the limit max_body_bytes={limit}")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise LimitExceeded(f"body exceeds the limit max_body_bytes={limit}")
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "zstd":
        return _unzstd(body, limit, bad_request)
    if encoding != "gzip":
        raise unsupported(f"unsupported Content-Encoding {encoding!r}: send zstd, gzip or none")
    return _gunzip(body, limit, bad_request)


def _gunzip(body: bytes, limit: int, bad_request: type[IngestError]) -> bytes:
    # ISA-L inflates the same gzip streams about 2.5x faster than zlib: for a batch of 100
    # snapshots that is ~10 ms of CPU saved per request.
    parts: list[bytes] = []
    size = 0
    rest = body
    # A gzip body may be several members one after the other (RFC 1952, `cat a.gz b.gz`): each is
    # inflated in turn, the limit counting them all. Zero bytes after the last member are padding
    # (as gzip(1) and Python's gzip module read them); anything else is not gzip.
    while True:
        d = isal_zlib.decompressobj(wbits=16 + isal_zlib.MAX_WBITS)
        try:
            out = d.decompress(rest, limit + 1 - size)
        except isal_zlib.error as exc:  # type: ignore[misc]  # IsalError, an Exception subclass
            raise bad_request(f"body is not valid gzip: {exc}") from None
        size += len(out)
        if size > limit or d.unconsumed_tail:
            raise LimitExceeded(f"decompressed body exceeds the limit max_body_bytes={limit}")
        if not d.eof:
            # ISA-L waits for more input where zlib rejects a bad header at once.
            raise bad_request("body is not valid gzip: not a gzip stream, or truncated")
        parts.append(out)
        rest = d.unused_data
        if not rest.strip(b"\0"):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


# A zstd frame that does not declare its size and whose window is larger is refused (the decoder
# would hold that much); levels 19 and below stay within it.
ZSTD_MAX_WINDOW = 8 << 20
_ZSTD_SIZE_UNKNOWN = zstandard.CONTENTSIZE_UNKNOWN


def _unzstd(body: bytes, limit: int, bad_request: type[IngestError]) -> bytes:
    """BODY, one zstd frame (RFC 8878), decompressed: OpenTelemetry exporters and other senders may
    compress with zstd, which inflates in less than half the time of gzip by ISA-L. The byte limit
    applies to the size the frame declares before anything is decompressed, and to the output of a
    frame that declares none. Data after the frame (a second frame, padding) is refused."""
    try:
        frame = zstandard.get_frame_parameters(body)
    except zstandard.ZstdError as exc:
        raise bad_request(f"body is not valid zstd (one frame, nothing after it): {exc}") from None
    declared = frame.content_size
    if declared != _ZSTD_SIZE_UNKNOWN:
        # Decompressed in one pass into a buffer of the declared size, whatever the window.
        if declared > limit:
            raise LimitExceeded(
                f"decompressed body of {declared} bytes exceeds the limit max_body_bytes={limit}"
            )
    elif frame.window_size > ZSTD_MAX_WINDOW:
        raise bad_request(
            f"body's zstd window of {frame.window_size} bytes exceeds {ZSTD_MAX_WINDOW} in a frame that does "
            "not declare its size: compress at level 19 or below, or with the size in the frame"
        )
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    try:
        out = dctx.decompress(body, max_output_size=limit + 1, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        if declared == _ZSTD_SIZE_UNKNOWN and _zstd_exceeds(body, limit):
            raise LimitExceeded(f"decompressed body exceeds the limit max_body_bytes={limit}") from None
        raise bad_request(f"body is not valid zstd (one frame, nothing after it): {exc}") from None
    if len(out) > limit:
        raise LimitExceeded(f"decompressed body exceeds the limit max_body_bytes={limit}")
    if not out and _zstd_trailing(body):
        # decompress() lets anything after a frame that holds nothing through.
        raise bad_request("body is not valid zstd (one frame, nothing after it): data after an empty frame")
    return out


def _zstd_trailing(body: bytes) -> bool:
    """Whether BODY, a frame that decompresses to nothing, is followed by anything or incomplete."""
    reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompressobj()
    try:
        reader.decompress(body)
    except zstandard.ZstdError:
        return True
    return bool(reader.unused_data) or not reader.eof


def _zstd_exceeds(body: bytes, limit: int) -> bool:
    """Whether the frame BODY, which declares no size and did not decompress within LIMIT + 1 bytes,
    holds more than LIMIT bytes (rather than being corrupt): read, at most LIMIT + 1 bytes of it."""
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(body)
        return len(reader.read(limit + 1)) > limit
    except zstandard.ZstdError:
        return False


def _snapshots(data: Any) -> list[Any]:
    """The snapshots of a batch body decoded the general way."""
    if not isinstance(data, dict) or not isinstance(data.get("snapshots"), list):
        raise BadRequest('body must be an object {"snapshots": [...]}')
    snapshots: list[Any] = data["snapshots"]
    return snapshots


@router.post(
    "/snapshots",
    auth=IngestKeyAuth(),
    response={200: BatchOut, 207: BatchOut, 400: Detail, 401: Detail, 413: Detail, 415: Detail,
              422: BatchOut, 429: Detail, 503: Detail},
    summary="Ingest a batch of context snapshots",
    description=(
        "Body: `{\"snapshots\": [...]}` in the wire form, optionally `Content-Encoding: gzip` (as the SDK "
        "sends it) or `zstd` (one frame). "
        "Each item is `created`, `duplicate` (same snapshot_id again: stored once) or `rejected` "
        "with field errors (loc, msg, hint); good items are stored even when others are rejected "
        "(207). The answer comes after the commit. Limits: " + _LIMITS_TEXT + ". "
        "A body over max_body_bytes (before or after decompression) or a batch over "
        "max_items_per_batch gets 413; a body whose arrays and objects nest deeper than max_body_depth "
        "gets 400; the other limits (max_depth among them: levels counted from the snapshot) reject the "
        "item (422 in its result). "
        "429 and 503 carry Retry-After."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": SNAPSHOTS_BATCH_SCHEMA,
                }
            },
        },
        "x-ctxobs-limits": limits_doc(),
    },
)
def snapshots_ingest(request: HttpRequest) -> HttpResponse:
    caller = request_caller(request)
    rate, burst = settings.CTXOBS_INGEST_RATE_LIMIT, settings.CTXOBS_INGEST_RATE_BURST
    wait = take_token(bucket=caller.bucket, rate=rate, burst=burst)
    if wait is not None:
        raise RateLimited(
            f"rate limit of {rate:g} requests/s (bursts of {burst}) for this key exceeded; "
            f"retry in {wait:.2f} s",
            headers={"Retry-After": str(retry_after_seconds(wait))},
        )
    body = read_body(request)
    with _cyclic_gc_paused():
        try:
            batch = wirebody.batch_decode(body)
            if batch is None:
                batch = _snapshots(jsonbody.loads(body))
        except jsonbody.TooDeep as exc:
            raise BadRequest(str(exc)) from None
        except UnicodeDecodeError as exc:
            # Binary tool output pasted in as raw bytes: the sender has to encode it as text.
            bad = exc.object[exc.start : exc.start + 1].hex()
            raise BadRequest(
                f"body is not valid UTF-8: byte 0x{bad} at position {exc.start} ({exc.reason}); send JSON "
                "encoded as UTF-8, binary content as text (e.g. base64)"
            ) from None
        except ValueError as exc:
            raise BadRequest(f"body is not valid JSON: {exc}") from None
        if len(batch) > LIMITS.max_items_per_batch:
            raise LimitExceeded(
                f"{len(batch)} snapshots exceed the limit max_items_per_batch={LIMITS.max_items_per_batch}"
            )
        result = services.snapshot_batch_ingest(project=caller.project, batch=batch)
        del batch  # freed now, so the next collection does not walk them
    if result.rejected == 0:
        status = 200
    elif result.created + result.duplicate == 0:
        status = 422
    else:
        status = 207
    return HttpResponse(json.dumps(result.as_dict()), status=status, content_type="application/json")


class SessionFilters(Schema):
    q: str | None = None
    agent: str | None = None
    model: str | None = None
    since: Instant | None = None
    until: Instant | None = None
    min_watermark: FiniteFloat | None = None
    tier: str | None = None
    sort: str = "last_seen"
    limit: PageLimit = 50
    offset: PageOffset = 0


def _session_or_404(project: Any, session_id: str) -> Any:
    session = selectors.session_get(project=project, session_id=session_id)
    if session is None:
        if selectors.session_expired(project=project, session_id=session_id):
            raise NotFound(f"session expired: every turn of it is older than the {project.retention_days} "
                           "days this project keeps turns")
        raise NotFound("no such session: none with this id was sent to this project")
    return session


def _session_out(s: Any) -> dict[str, Any]:
    return {f: getattr(s, f) for f in SessionOut.model_fields}


@router.get("/sessions", auth=ProjectReadAuth(), response={200: SessionPage, 401: Detail, 404: Detail},
            tags=["read"], summary="List sessions (filters: agent, model, time range, minimum max-watermark)")
def sessions_list(request: HttpRequest, filters: Query[SessionFilters]) -> dict[str, Any]:
    caller = request_caller(request)
    qs = selectors.sessions_filter(
        project=caller.project, q=filters.q, agent=filters.agent, model=filters.model, since=filters.since,
        until=filters.until, min_watermark=filters.min_watermark, tier=filters.tier, sort=filters.sort,
    )
    limit, offset = filters.limit, filters.offset
    items = [_session_out(s) for s in qs[offset : offset + limit]]
    return {"count": qs.count(), "limit": limit, "offset": offset, "items": items}


@router.get("/sessions/{session_id}/timeline", auth=ProjectReadAuth(),
            response={200: TimelineOut, 401: Detail, 404: Detail}, tags=["read"],
            summary="Per turn: tokens per block kind, watermark, tier, event counts")
def session_timeline(request: HttpRequest, session_id: str) -> HttpResponse:
    caller = request_caller(request)
    project = caller.project
    session = _session_or_404(project, session_id)
    turns, window = selectors.session_timeline_turns(project=project, session=session)
    doc = {
        "session": _session_out(session),
        "context_window": window[0] if window else None,
        "usable_tokens": usable_window(*window) if window else None,
        "thresholds": dict(zip(("warn", "compress", "force", "break"), project.thresholds, strict=True)),
        "turns": turns,
    }
    # The rows are already of TimelineOut's types: returned as a response, they skip ninja's
    # per-turn validation, which took three quarters of the time for 2,000 turns. The encoder is
    # ninja's, so the document is byte for byte what the schema would have produced.
    return HttpResponse(json.dumps(doc, cls=NinjaJSONEncoder), content_type="application/json; charset=utf-8")


@router.get("/snapshots/{snapshot_id}", auth=ProjectReadAuth(),
            response={200: SnapshotOut, 401: Detail, 404: Detail}, tags=["read"],
            summary="One snapshot in full: blocks with messages in order, and everything derived")
def snapshot_get(request: HttpRequest, snapshot_id: str) -> SnapshotDetail:
    caller = request_caller(request)
    snap = selectors.snapshot_by_uuid(project=caller.project, snapshot_id=snapshot_id)
    if snap is None:
        # Snapshot ids are the senders' random UUIDs: what retention removed leaves no trace of
        # them, so the answer cannot tell an expired one from one never sent.
        raise NotFound(f"no snapshot with this id is stored in this project (it was never sent, or it "
                       f"is older than the {caller.project.retention_days} days this project keeps turns)")
    return selectors.snapshot_full(snapshot=snap)


class ExportFilters(Schema):
    session_id: str | None = None
    since: Instant | None = None
    until: Instant | None = None


def export_lines(snapshots: Any) -> Iterator[bytes]:
    """JSONL: one wire snapshot per line."""
    for snap in snapshots:
        yield json.dumps(snap, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@router.get("/export", auth=ProjectReadAuth(), response={401: Detail, 404: Detail},
            tags=["read"], summary="Snapshots as JSONL in the wire format (one session, or those that "
            "arrived in [since, until)); `ctxobs push` sends such a file back",
            openapi_extra={"responses": {"200": {
                "description": "One wire snapshot (the body of POST /snapshots' items) per line",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}}})
def snapshots_export(request: HttpRequest, filters: Query[ExportFilters]) -> HttpResponseBase:
    caller = request_caller(request)
    project = caller.project
    session = None
    if filters.session_id is not None:
        session = _session_or_404(project, filters.session_id)
    snaps = selectors.snapshots_export(project=project, session=session, since=filters.since,
                                       until=filters.until)
    resp = StreamingHttpResponse(export_lines(snaps), content_type="application/x-ndjson; charset=utf-8")
    name = f"{project.name}-{filters.session_id or 'export'}.jsonl"
    resp["Content-Disposition"] = f'attachment; filename="{_safe_filename(name)}"'
    return resp


def _safe_filename(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:200]
