"""OTLP/HTTP receiver: `POST /api/v1/otlp/v1/traces` and `/v1/logs`.

With `OTEL_EXPORTER_OTLP_ENDPOINT=<server>/api/v1/otlp` and
`OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<ingest key>` the standard exporters send
here. Answers follow OTLP/HTTP: the export response in the request's encoding (protobuf or
JSON) with `partial_success` when items were refused, and for a refused request a
`google.rpc.Status` (as protobuf for a protobuf request; as JSON, next to `detail`, otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Router
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from core.auth import Caller, IngestKeyAuth, request_caller
from core.models import Project
from core.schemas import Detail
from core.services import ingest_key_authenticate
from ingest import selectors
from ingest.api import read_body
from ingest.errors import IngestError, RateLimited
from ingest.otlp import decode, mapping, services
from ingest.otlp.services import OtlpResult
from ingest.ratelimit import retry_after_seconds, take_token

router = Router(tags=["otlp"])

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# google.rpc.Code values the OTLP/HTTP spec uses for refused requests.
_RPC_CODES = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 429: 8, 503: 14}


class OtlpBadRequest(IngestError):
    status_code = 400


class OtlpUnsupported(IngestError):
    status_code = 415


class OtlpKeyAuth(IngestKeyAuth):
    """The ingest key as a bearer token, also when the space is still percent-encoded
    (`Bearer%20<key>`): exporters that read OTEL_EXPORTER_OTLP_HEADERS without decoding it
    (LiteLLM's) send the header so. Keys hold no `%`, so decoding cannot change one."""

    def __call__(self, request: HttpRequest) -> Caller:
        header = request.headers.get("Authorization", "")
        if header[:9].lower() == "bearer%20":
            key = ingest_key_authenticate(raw=unquote(header[9:]))
            return Caller(project=key.project, key=key)
        return super().__call__(request)


def _status_error(exc: IngestError) -> IngestError:
    """EXC with the google.rpc.Status fields beside `detail`, for OTLP/JSON clients."""
    exc.extra = {**exc.extra, "code": _RPC_CODES.get(exc.status_code, 2), "message": exc.detail}
    return exc


def _status_protobuf(code: int, message: str) -> bytes:
    """A google.rpc.Status {code, message} in protobuf (two fields: encoded here rather than
    pulling in googleapis-common-protos for them)."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out.append(b | 0x80)
            else:
                out.append(b)
                return bytes(out)

    text = message.encode("utf-8")
    body = b""
    if code:
        body += b"\x08" + varint(code)
    return body + b"\x12" + varint(len(text)) + text


def _encoding(request: HttpRequest) -> str:
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if ctype == JSON:
        return JSON
    raise OtlpUnsupported(
        f"unsupported Content-Type {ctype or '(none)'!r}: send application/x-protobuf or application/json"
    )


def _ts(ns: int, shift_s: float) -> datetime:
    return datetime.fromtimestamp(ns / 1e9 + shift_s, UTC)


def _traces_store(project: Project, spans: list[decode.Span]) -> OtlpResult:
    """SPANS stored as snapshots, less the model calls an earlier export already stored through
    the span wrapping them or the span they wrap (one export per span with SimpleSpanProcessor)."""

    def stored(ids: list[str]) -> set[str]:
        refs = selectors.snapshot_refs_by_uuid(project=project, snapshot_ids=ids)
        return {str(r.snapshot_id) for r in refs}

    def has_stored_child(span: decode.Span) -> bool:
        # A child starts within its parent's lifetime; the window keeps the tag lookup on the
        # (project, ts) index. A second each side allows for clock steps between the spans.
        bounded = span.start_ns > 0 and span.end_ns >= span.start_ns
        return bool(
            selectors.snapshot_refs_matching(
                project=project,
                tag=(mapping.TAG_PARENT, span.span_id),
                since=_ts(span.start_ns, -1) if bounded else None,
                until=_ts(span.end_ns, 1) if bounded else None,
                limit=1,
            )
        )

    seen = mapping.calls_stored_before(spans, stored=stored, has_stored_child=has_stored_child)
    kept = [s for s in spans if (s.trace_id, s.span_id) not in seen]
    return services.otlp_traces_ingest(project=project, spans=kept)


def _export(
    request: HttpRequest,
    *,
    decoders: tuple[Callable[[bytes], decode.Decoded], Callable[[bytes], decode.Decoded]],
    store: Callable[[Any, decode.Decoded], OtlpResult],
    response: Callable[[OtlpResult], Any],
    rejected_field: str,
) -> HttpResponse:
    # Refusals are answered in the request's encoding; an unknown one gets JSON.
    encoding = JSON
    try:
        encoding = _encoding(request)
        caller = request_caller(request)
        rate, burst = settings.CTXOBS_INGEST_RATE_LIMIT, settings.CTXOBS_INGEST_RATE_BURST
        wait = take_token(bucket=caller.bucket, rate=rate, burst=burst)
        if wait is not None:
            raise RateLimited(
                f"rate limit of {rate:g} requests/s (bursts of {burst}) for this key exceeded; "
                f"retry in {wait:.2f} s",
                headers={"Retry-After": str(retry_after_seconds(wait))},
            )
        body = read_body(request, unsupported=OtlpUnsupported, bad_request=OtlpBadRequest)
        try:
            decoded = (decoders[0] if encoding == PROTOBUF else decoders[1])(body)
        except decode.MalformedExport as exc:
            raise OtlpBadRequest(str(exc)) from None
        result = store(caller.project, decoded)
        if decoded.refused:
            # Items the decoder refused alone: counted and named with those validation refused.
            reasons = "; ".join(decoded.refused[:5]) + (
                f"; and {len(decoded.refused) - 5} more" if len(decoded.refused) > 5 else ""
            )
            result = OtlpResult(
                result.created,
                result.duplicate,
                result.rejected + len(decoded.refused),
                "; ".join(m for m in (reasons, result.message) if m),
            )
    except IngestError as exc:
        if encoding != PROTOBUF:
            raise _status_error(exc) from None
        resp = HttpResponse(
            _status_protobuf(_RPC_CODES.get(exc.status_code, 2), exc.detail),
            status=exc.status_code,
            content_type=PROTOBUF,
        )
        for k, v in exc.headers.items():
            resp[k] = v
        return resp
    msg = response(result)
    if result.rejected:
        msg.partial_success.error_message = result.message or "some items were rejected"
        setattr(msg.partial_success, rejected_field, result.rejected)
    if encoding == PROTOBUF:
        return HttpResponse(msg.SerializeToString(), content_type=PROTOBUF)
    doc: dict[str, Any] = {}
    if result.rejected:
        doc["partialSuccess"] = {
            _camel(rejected_field): str(result.rejected),
            "errorMessage": msg.partial_success.error_message,
        }
    return HttpResponse(json.dumps(doc), content_type=JSON)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


_STATUS_JSON: dict[str, Any] = {
    "type": "object",
    "required": ["detail"],
    "properties": {"detail": {"type": "string"}, "code": {"type": "integer"}, "message": {"type": "string"}},
}


def _body_schema(kind: str) -> dict[str, Any]:
    # The OTLP/JSON shape is defined by the OpenTelemetry protos; the schema names it rather than
    # restating it (ids in hex, 64-bit integers as decimal strings or numbers).
    outer = "resourceSpans" if kind == "traces" else "resourceLogs"
    return {
        "type": "object",
        "description": f'OTLP/JSON Export{kind.title()}ServiceRequest: {{"{outer}": [...]}}',
    }


def _openapi(kind: str, rejected: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                JSON: {"schema": _body_schema(kind)},
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            },
        },
        "responses": {
            **{
                str(code): {
                    "description": "Refused: google.rpc.Status, in the request's encoding",
                    "content": {
                        PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                        JSON: {"schema": _STATUS_JSON},
                    },
                }
                for code in (400, 413, 415, 429, 503)
            },
            "200": {
                "description": f"Export{kind.title()}ServiceResponse; partialSuccess lists the refused count",
                "content": {
                    JSON: {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "partialSuccess": {
                                    "type": "object",
                                    "properties": {
                                        rejected: {"type": "string"},
                                        "errorMessage": {"type": "string"},
                                    },
                                }
                            },
                        }
                    },
                    PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                },
            },
        },
    }


_ERRORS = {400: Detail, 401: Detail, 413: Detail, 415: Detail, 429: Detail, 503: Detail}
_DESCRIPTION = (
    "OTLP/HTTP {what} export (protobuf or JSON, optionally gzip; the ingest key as a bearer token). "
    "Model-call spans of the OTel GenAI, OpenInference and OpenLLMetry conventions become snapshots "
    "(one per innermost model-call span, idempotent on trace id + span id, also when a framework's "
    "span and the provider span it wraps come in separate exports); see docs/otlp.md. "
    "Body limit max_body_bytes, checked after decompression too; an OTLP/JSON body nested deeper than "
    "max_body_depth gets 400, and a model call whose content nests deeper than max_depth is refused "
    "alone (partial_success)."
)


@router.post(
    "/otlp/v1/traces",
    auth=OtlpKeyAuth(),
    response=_ERRORS,
    summary="Ingest OTLP traces (model-call spans become snapshots)",
    description=_DESCRIPTION.format(what="traces"),
    openapi_extra=_openapi("traces", "rejectedSpans"),
)
def otlp_traces(request: HttpRequest) -> HttpResponse:
    return _export(
        request,
        decoders=(decode.decode_traces_protobuf, decode.decode_traces_json),
        store=lambda project, d: _traces_store(project, d.spans),
        response=lambda _r: ExportTraceServiceResponse(),
        rejected_field="rejected_spans",
    )


@router.post(
    "/otlp/v1/logs",
    auth=OtlpKeyAuth(),
    response=_ERRORS,
    summary="Ingest OTLP logs (GenAI inference detail events become snapshots)",
    description=_DESCRIPTION.format(what="logs"),
    openapi_extra=_openapi("logs", "rejectedLogRecords"),
)
def otlp_logs(request: HttpRequest) -> HttpResponse:
    return _export(
        request,
        decoders=(decode.decode_logs_protobuf, decode.decode_logs_json),
        store=lambda project, d: services.otlp_logs_ingest(project=project, records=d.logs),
        response=lambda _r: ExportLogsServiceResponse(),
        rejected_field="rejected_log_records",
    )
