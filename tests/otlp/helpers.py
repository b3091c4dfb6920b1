"""OTLP export bodies made by the real OpenTelemetry SDK and its OTLP encoder."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def genai_chat_attributes(
    *, conversation: str = "conv-1", question: str = "Weather in Paris?"
) -> dict[str, Any]:
    """The attributes an OTel GenAI instrumentation records on a chat span with content capture on."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.conversation.id": conversation,
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You answer about weather."}]),
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": question}]}]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}], "finish_reason": "stop"}]
        ),
        "gen_ai.tool.definitions": json.dumps([WEATHER_TOOL]),
        "gen_ai.usage.input_tokens": 42,
        "gen_ai.usage.output_tokens": 3,
    }


def recorded_spans(*spans: tuple[str, dict[str, Any]], service: str = "weather-agent") -> list[ReadableSpan]:
    """Spans recorded by a real TracerProvider: (name, attributes) each, one after the other."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.otlp")
    for name, attrs in spans:
        with tracer.start_as_current_span(name, attributes=attrs):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def traces_protobuf(spans: list[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def _hex_ids(node: Any) -> Any:
    # OTLP/JSON writes trace and span ids as hex, where the protobuf JSON mapping writes base64.
    import base64

    if isinstance(node, dict):
        return {
            k: (
                base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v else _hex_ids(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(x) for x in node]
    return node


def traces_json(spans: list[ReadableSpan]) -> bytes:
    return json.dumps(_hex_ids(json_format.MessageToDict(encode_spans(spans)))).encode()


def logs_request(records: list[dict[str, Any]]) -> ExportLogsServiceRequest:
    """A logs export; each record given as {trace_id, span_id, event_name, attributes, time_unix_nano}."""
    req = ExportLogsServiceRequest()
    scope = req.resource_logs.add().scope_logs.add()
    for r in records:
        lr = scope.log_records.add()
        lr.time_unix_nano = r.get("time_unix_nano", 1_764_750_000_000_000_000)
        lr.trace_id = bytes.fromhex(r["trace_id"])
        lr.span_id = bytes.fromhex(r["span_id"])
        lr.event_name = r["event_name"]
        for k, v in r.get("attributes", {}).items():
            kv = lr.attributes.add()
            kv.key = k
            if isinstance(v, int):
                kv.value.int_value = v
            else:
                kv.value.string_value = str(v)
    return req


def logs_json(req: ExportLogsServiceRequest) -> bytes:
    return json.dumps(_hex_ids(json_format.MessageToDict(req))).encode()
