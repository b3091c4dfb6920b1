"""OTLP/HTTP export requests (protobuf or JSON) as plain, immutable spans and log records.

Both encodings end in the same `Span` / `LogRecord` values, so the mapping never sees which
one was sent. Identifiers are lower-case hex (trace id 32 characters, span id 16), as in the
OTLP/JSON encoding; attribute values are plain Python values (str, int, float, bool, bytes,
lists and dicts of them).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from core import jsonbody


class MalformedExport(ValueError):
    """The body is not an OTLP export of the expected signal; the message says why."""


@dataclass(frozen=True)
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: tuple[Event, ...] = ()
    status_code: int = 0  # 0 unset, 1 ok, 2 error
    status_message: str = ""


@dataclass(frozen=True)
class LogRecord:
    trace_id: str
    span_id: str
    event_name: str
    time_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    body: Any = None


@dataclass
class Decoded:
    spans: list[Span] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    # Items refused while decoding, one reason each (a span or log record nested past the
    # protobuf decoder's own limit): answered in partial_success, the others are stored.
    refused: list[str] = field(default_factory=list)


# --- protobuf ---------------------------------------------------------------------------


def _pb_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "double_value":
        return v.double_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return bytes(v.bytes_value)
    return None


def _pb_attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value) for kv in kvs}


def _id(raw: bytes, size: int, what: str, where: str) -> str:
    if len(raw) != size:
        raise MalformedExport(f"{where}: {what} must be {size} bytes, got {len(raw)}")
    return raw.hex()


# --- item by item, when the whole request does not parse -------------------------------------
# protobuf's decoder refuses a message nested past its recursion limit (100 levels; an attribute
# value level takes three), and with it the whole request. The export's outer levels are read
# here from the wire format instead, and each span or log record is parsed on its own: one
# nested too deep is refused alone, as a too-deep item of a JSON export is.


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _length_fields(buf: bytes) -> list[tuple[int, bytes]]:
    """The length-delimited fields of the message BUF as (field number, bytes); other wire types
    are skipped. ValueError when BUF is not a protobuf message."""
    out: list[tuple[int, bytes]] = []
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise ValueError("truncated field")
            out.append((number, buf[i : i + size]))
            i += size
        else:
            raise ValueError(f"wire type {wire}")
        if i > n:
            raise ValueError("truncated field")
    return out


def _refusal(item: bytes, what: str) -> str:
    name = "a log record"
    if what == "span":
        try:
            span_id = dict(_length_fields(item)).get(2, b"").hex()
        except ValueError:
            span_id = ""
        name = f"span {span_id or '?'}"
    return f"{name}: nested deeper than the protobuf decoder's limit (about 30 levels of attribute values)"


def _item_by_item(body: bytes, req: Any, what: str) -> list[str] | None:
    """Fill REQ (an empty ExportTraceServiceRequest or ExportLogsServiceRequest) from BODY, parsing
    each resource, scope and item (span or log record: WHAT) on its own; the reasons of the items
    refused. None when BODY is not such a request even read this way."""
    refused: list[str] = []
    outer = req.resource_spans if what == "span" else req.resource_logs
    try:
        for number, resource_bytes in _length_fields(body):
            if number != 1:
                continue
            resource = outer.add()
            scopes = resource.scope_spans if what == "span" else resource.scope_logs
            for n2, v2 in _length_fields(resource_bytes):
                if n2 == 1:
                    resource.resource.ParseFromString(v2)
                elif n2 == 3:
                    resource.schema_url = v2.decode("utf-8", "replace")
                elif n2 == 2:
                    scope = scopes.add()
                    items = scope.spans if what == "span" else scope.log_records
                    for n3, v3 in _length_fields(v2):
                        if n3 == 1:
                            scope.scope.ParseFromString(v3)
                        elif n3 == 3:
                            scope.schema_url = v3.decode("utf-8", "replace")
                        elif n3 == 2:
                            item = items.add()
                            try:
                                item.ParseFromString(v3)
                            except DecodeError:
                                del items[len(items) - 1]
                                refused.append(_refusal(v3, what))
    except (ValueError, DecodeError):
        return None
    return refused


def decode_traces_protobuf(body: bytes) -> Decoded:
    req = ExportTraceServiceRequest()
    refused: list[str] = []
    try:
        req.ParseFromString(body)
    except DecodeError as exc:
        req = ExportTraceServiceRequest()
        by_item = _item_by_item(body, req, "span")
        if by_item is None:
            if _looks_like_logs(body):
                raise MalformedExport(
                    "this is an OTLP logs export (ExportLogsServiceRequest): send it to /v1/logs"
                ) from None
            raise MalformedExport(
                f"body is not an OTLP ExportTraceServiceRequest in protobuf: {exc}"
            ) from None
        refused = by_item
    out = Decoded(refused=refused)
    for ri, rs in enumerate(req.resource_spans):
        resource = _pb_attrs(rs.resource.attributes)
        for si, ss in enumerate(rs.scope_spans):
            for pi, sp in enumerate(ss.spans):
                where = f"resourceSpans[{ri}].scopeSpans[{si}].spans[{pi}]"
                try:
                    trace_id = _id(sp.trace_id, 16, "traceId", where)
                    span_id = _id(sp.span_id, 8, "spanId", where)
                except MalformedExport as exc:
                    if _looks_like_logs(body):
                        raise MalformedExport(
                            "this is an OTLP logs export (ExportLogsServiceRequest): send it to /v1/logs"
                        ) from None
                    raise exc from None
                out.spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=sp.parent_span_id.hex() if len(sp.parent_span_id) == 8 else "",
                        name=sp.name,
                        start_ns=sp.start_time_unix_nano,
                        end_ns=sp.end_time_unix_nano,
                        attributes=_pb_attrs(sp.attributes),
                        resource=resource,
                        events=tuple(
                            Event(e.name, e.time_unix_nano, _pb_attrs(e.attributes)) for e in sp.events
                        ),
                        status_code=int(sp.status.code),
                        status_message=sp.status.message,
                    )
                )
    if not out.spans and _looks_like_logs(body):
        raise MalformedExport("this is an OTLP logs export (ExportLogsServiceRequest): send it to /v1/logs")
    return out


def _looks_like_logs(body: bytes) -> bool:
    req = ExportLogsServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError:
        return False
    return any(
        lr.time_unix_nano or lr.observed_time_unix_nano or lr.HasField("body") or lr.event_name
        for rl in req.resource_logs
        for sl in rl.scope_logs
        for lr in sl.log_records
    )


def _looks_like_traces(body: bytes) -> bool:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError:
        return False
    return any(
        len(sp.trace_id) == 16 and len(sp.span_id) == 8
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for sp in ss.spans
    )


def decode_logs_protobuf(body: bytes) -> Decoded:
    req = ExportLogsServiceRequest()
    refused: list[str] = []
    try:
        req.ParseFromString(body)
    except DecodeError as exc:
        req = ExportLogsServiceRequest()
        by_item = _item_by_item(body, req, "log")
        if by_item is None:
            if _looks_like_traces(body):
                raise MalformedExport(
                    "this is an OTLP traces export (ExportTraceServiceRequest): send it to /v1/traces"
                ) from None
            raise MalformedExport(
                f"body is not an OTLP ExportLogsServiceRequest in protobuf: {exc}"
            ) from None
        refused = by_item
    out = Decoded(refused=refused)
    for rl in req.resource_logs:
        resource = _pb_attrs(rl.resource.attributes)
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                attrs = _pb_attrs(lr.attributes)
                out.logs.append(
                    LogRecord(
                        trace_id=lr.trace_id.hex() if len(lr.trace_id) == 16 else "",
                        span_id=lr.span_id.hex() if len(lr.span_id) == 8 else "",
                        event_name=lr.event_name or str(attrs.get("event.name") or ""),
                        time_ns=lr.time_unix_nano or lr.observed_time_unix_nano,
                        attributes=attrs,
                        resource=resource,
                        body=_pb_value(lr.body) if lr.HasField("body") else None,
                    )
                )
    if not out.logs and _looks_like_traces(body):
        raise MalformedExport(
            "this is an OTLP traces export (ExportTraceServiceRequest): send it to /v1/traces"
        )
    return out


# --- JSON -------------------------------------------------------------------------------


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    # OTLP/JSON uses lowerCamelCase; the protobuf JSON mapping also allows the original names.
    v = obj.get(camel)
    return obj.get(snake) if v is None else v


def _json_int(v: Any, where: str) -> int:
    if v is None or v == "":
        return 0
    if isinstance(v, bool):
        raise MalformedExport(f"{where}: must be an integer (or its decimal string)")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.isascii() and v.lstrip("-").isdigit():
        return int(v)
    raise MalformedExport(f"{where}: must be an integer (or its decimal string), got {str(v)[:40]!r}")


def _json_value(v: Any, where: str) -> Any:
    if not isinstance(v, dict):
        raise MalformedExport(f'{where}: an AnyValue must be an object like {{"stringValue": ...}}')
    for camel, snake in (
        ("stringValue", "string_value"),
        ("boolValue", "bool_value"),
        ("intValue", "int_value"),
        ("doubleValue", "double_value"),
        ("arrayValue", "array_value"),
        ("kvlistValue", "kvlist_value"),
        ("bytesValue", "bytes_value"),
    ):
        x = _get(v, camel, snake)
        if x is None:
            continue
        if camel == "stringValue":
            if not isinstance(x, str):
                raise MalformedExport(f"{where}.stringValue: must be a string")
            return x
        if camel == "boolValue":
            return bool(x)
        if camel == "intValue":
            return _json_int(x, f"{where}.intValue")
        if camel == "doubleValue":
            if isinstance(x, str):
                try:
                    return float(x)
                except ValueError:
                    raise MalformedExport(f"{where}.doubleValue: must be a number") from None
            if not isinstance(x, int | float) or isinstance(x, bool):
                raise MalformedExport(f"{where}.doubleValue: must be a number")
            return float(x)
        if camel == "arrayValue":
            values = x.get("values") if isinstance(x, dict) else None
            return [_json_value(e, f"{where}.arrayValue.values[{i}]") for i, e in enumerate(values or [])]
        if camel == "kvlistValue":
            values = x.get("values") if isinstance(x, dict) else None
            return _json_attrs(values, f"{where}.kvlistValue.values")
        if camel == "bytesValue":
            try:
                return base64.b64decode(str(x), validate=True)
            except ValueError:  # binascii.Error, or text that is not ASCII
                raise MalformedExport(f"{where}.bytesValue: must be base64") from None
    return None


def _json_attrs(kvs: Any, where: str) -> dict[str, Any]:
    if kvs is None:
        return {}
    if not isinstance(kvs, list):
        raise MalformedExport(f'{where}: must be a list of {{"key": ..., "value": {{...}}}}')
    out: dict[str, Any] = {}
    for i, kv in enumerate(kvs):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise MalformedExport(f"{where}[{i}]: must be an object with a string key")
        out[kv["key"]] = _json_value(kv.get("value") or {}, f"{where}[{i}].value")
    return out


def _json_id(v: Any, size: int, where: str, required: bool) -> str:
    if v is None or v == "":
        if required:
            raise MalformedExport(f"{where}: required")
        return ""
    if not isinstance(v, str):
        raise MalformedExport(f"{where}: must be a hex string")
    text = v.strip()
    if len(text) == 2 * size:
        try:
            return bytes.fromhex(text).hex()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error, or text that is not ASCII
        raw = b""
    if len(raw) == size:
        return raw.hex()
    raise MalformedExport(f"{where}: must be {2 * size} hex digits")


def _json_list(obj: dict[str, Any], camel: str, snake: str, where: str) -> list[Any]:
    v = _get(obj, camel, snake)
    if v is None:
        return []
    if not isinstance(v, list):
        raise MalformedExport(f"{where}.{camel}: must be a list")
    return v


def _json_obj(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise MalformedExport(f"{where}: must be an object")
    return v


def _json_load(body: bytes) -> dict[str, Any]:
    try:
        data = jsonbody.loads(body)
    except jsonbody.TooDeep as exc:
        raise MalformedExport(str(exc)) from None
    except UnicodeDecodeError:
        raise MalformedExport("body is not valid UTF-8 JSON") from None
    except ValueError as exc:
        raise MalformedExport(f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedExport("body must be a JSON object")
    return data


def decode_traces_json(body: bytes) -> Decoded:
    data = _json_load(body)
    if (
        "resourceSpans" not in data
        and "resource_spans" not in data
        and ("resourceLogs" in data or "resource_logs" in data)
    ):
        raise MalformedExport("this is an OTLP logs export (resourceLogs): send it to /v1/logs")
    if "resourceMetrics" in data or "resource_metrics" in data:
        raise MalformedExport(
            "this is an OTLP metrics export (resourceMetrics): ctxobs takes traces and logs"
        )
    out = Decoded()
    for ri, rs in enumerate(_json_list(data, "resourceSpans", "resource_spans", "body")):
        w = f"resourceSpans[{ri}]"
        rs = _json_obj(rs, w)
        res = _json_obj(rs.get("resource") or {}, f"{w}.resource")
        resource = _json_attrs(res.get("attributes"), f"{w}.resource.attributes")
        for si, ss in enumerate(_json_list(rs, "scopeSpans", "scope_spans", w)):
            ws = f"{w}.scopeSpans[{si}]"
            ss = _json_obj(ss, ws)
            for pi, sp in enumerate(_json_list(ss, "spans", "spans", ws)):
                wp = f"{ws}.spans[{pi}]"
                sp = _json_obj(sp, wp)
                status = _json_obj(sp.get("status") or {}, f"{wp}.status")
                events = []
                for ei, e in enumerate(_json_list(sp, "events", "events", wp)):
                    e = _json_obj(e, f"{wp}.events[{ei}]")
                    events.append(
                        Event(
                            name=str(e.get("name") or ""),
                            time_ns=_json_int(
                                _get(e, "timeUnixNano", "time_unix_nano"), f"{wp}.events[{ei}].timeUnixNano"
                            ),
                            attributes=_json_attrs(e.get("attributes"), f"{wp}.events[{ei}].attributes"),
                        )
                    )
                out.spans.append(
                    Span(
                        trace_id=_json_id(_get(sp, "traceId", "trace_id"), 16, f"{wp}.traceId", True),
                        span_id=_json_id(_get(sp, "spanId", "span_id"), 8, f"{wp}.spanId", True),
                        parent_span_id=_json_id(
                            _get(sp, "parentSpanId", "parent_span_id"), 8, f"{wp}.parentSpanId", False
                        ),
                        name=str(sp.get("name") or ""),
                        start_ns=_json_int(
                            _get(sp, "startTimeUnixNano", "start_time_unix_nano"), f"{wp}.startTimeUnixNano"
                        ),
                        end_ns=_json_int(
                            _get(sp, "endTimeUnixNano", "end_time_unix_nano"), f"{wp}.endTimeUnixNano"
                        ),
                        attributes=_json_attrs(sp.get("attributes"), f"{wp}.attributes"),
                        resource=resource,
                        events=tuple(events),
                        status_code=_json_int(status.get("code"), f"{wp}.status.code"),
                        status_message=str(status.get("message") or ""),
                    )
                )
    return out


def decode_logs_json(body: bytes) -> Decoded:
    data = _json_load(body)
    if (
        "resourceLogs" not in data
        and "resource_logs" not in data
        and ("resourceSpans" in data or "resource_spans" in data)
    ):
        raise MalformedExport("this is an OTLP traces export (resourceSpans): send it to /v1/traces")
    out = Decoded()
    for ri, rl in enumerate(_json_list(data, "resourceLogs", "resource_logs", "body")):
        w = f"resourceLogs[{ri}]"
        rl = _json_obj(rl, w)
        res = _json_obj(rl.get("resource") or {}, f"{w}.resource")
        resource = _json_attrs(res.get("attributes"), f"{w}.resource.attributes")
        for si, sl in enumerate(_json_list(rl, "scopeLogs", "scope_logs", w)):
            ws = f"{w}.scopeLogs[{si}]"
            sl = _json_obj(sl, ws)
            for li, lr in enumerate(_json_list(sl, "logRecords", "log_records", ws)):
                wl = f"{ws}.logRecords[{li}]"
                lr = _json_obj(lr, wl)
                attrs = _json_attrs(lr.get("attributes"), f"{wl}.attributes")
                body_v = lr.get("body")
                out.logs.append(
                    LogRecord(
                        trace_id=_json_id(_get(lr, "traceId", "trace_id"), 16, f"{wl}.traceId", False),
                        span_id=_json_id(_get(lr, "spanId", "span_id"), 8, f"{wl}.spanId", False),
                        event_name=str(_get(lr, "eventName", "event_name") or attrs.get("event.name") or ""),
                        time_ns=_json_int(_get(lr, "timeUnixNano", "time_unix_nano"), f"{wl}.timeUnixNano")
                        or _json_int(
                            _get(lr, "observedTimeUnixNano", "observed_time_unix_nano"),
                            f"{wl}.observedTimeUnixNano",
                        ),
                        attributes=attrs,
                        resource=resource,
                        body=_json_value(body_v, f"{wl}.body") if body_v is not None else None,
                    )
                )
    return out
