"""POST /api/v1/otlp/v1/traces and /v1/logs through the Django test client on the real database."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from typing import Any

import pytest
from django.test import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core.models import Project
from ctxobs.wire import LIMITS
from ingest import selectors
from ingest.otlp.mapping import DETAILS_EVENT, snapshot_id_for
from tests.otlp.helpers import (
    genai_chat_attributes,
    logs_json,
    logs_request,
    recorded_spans,
    traces_json,
    traces_protobuf,
)

pytestmark = pytest.mark.django_db

TRACES = "/api/v1/otlp/v1/traces"
LOGS = "/api/v1/otlp/v1/logs"
PB = "application/x-protobuf"


def post(
    client: Client,
    path: str,
    body: bytes,
    key: str | None,
    *,
    ctype: str = PB,
    gzip_body: bool = False,
    headers: dict[str, str] | None = None,
) -> Any:
    extra = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    if gzip_body:
        body = gzip.compress(body)
        extra["HTTP_CONTENT_ENCODING"] = "gzip"
    for k, v in (headers or {}).items():
        extra["HTTP_" + k.upper().replace("-", "_")] = v
    return client.post(path, data=body, content_type=ctype, **extra)  # type: ignore[arg-type]


def status_message(resp: Any) -> str:
    """The message of a protobuf google.rpc.Status body (field 2)."""
    from google.rpc import status_pb2

    st = status_pb2.Status()
    st.ParseFromString(resp.content)
    return str(st.message)


def stored(project: Project, span: Any) -> dict[str, Any]:
    ctx = span.get_span_context()
    snap = selectors.snapshot_by_uuid(
        project=project,
        snapshot_id=snapshot_id_for(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")),
    )
    assert snap is not None
    return selectors.snapshot_full(snapshot=snap)


def test_protobuf_export_stores_each_model_call_span_as_a_snapshot(
    client: Client, project: Project, ingest_key: str
) -> None:
    spans = recorded_spans(
        ("chat gpt-4o-mini", genai_chat_attributes()), ("GET /health", {"http.method": "GET"})
    )
    resp = post(client, TRACES, traces_protobuf(spans), ingest_key)
    assert resp.status_code == 200
    assert resp["Content-Type"] == PB
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(resp.content)
    assert not answer.HasField("partial_success")
    full = stored(project, spans[0])
    assert full["session_id"] == "conv-1"
    assert full["agent"] == "weather-agent"
    assert [(b["key"], b["kind"]) for b in full["blocks"]] == [
        ("system", "system"),
        ("tools", "tools"),
        ("user", "user"),
    ]
    assert full["output"]["text"] == "Sunny."
    assert full["tags"]["ctxobs.source"] == "otlp"
    session = selectors.session_get(project=project, session_id="conv-1")
    assert session is not None and session.turn_count == 1


def test_a_percent_encoded_bearer_is_accepted(client: Client, project: Project, ingest_key: str) -> None:
    """Exporters that pass OTEL_EXPORTER_OTLP_HEADERS on undecoded send `Bearer%20<key>`."""
    spans = recorded_spans(("chat", genai_chat_attributes()))
    body = traces_protobuf(spans)
    resp = post(client, TRACES, body, None, headers={"Authorization": f"Bearer%20{ingest_key}"})
    assert resp.status_code == 200
    assert stored(project, spans[0])["session_id"] == "conv-1"
    refused = post(client, TRACES, body, None, headers={"Authorization": "Bearer%20cx_not-a-key"})
    assert refused.status_code == 401


def test_a_compaction_is_stored_as_a_summary_block_and_a_compression_event(
    client: Client, project: Project, ingest_key: str
) -> None:
    attrs = genai_chat_attributes() | {
        "gen_ai.input.messages": json.dumps(
            [
                {
                    "role": "user",
                    "parts": [{"type": "compaction", "id": "cmp_1", "content": "Paris trip, Friday."}],
                },
                {"role": "user", "parts": [{"type": "text", "content": "And the weather?"}]},
            ]
        )
    }
    spans = recorded_spans(("chat", attrs))
    assert post(client, TRACES, traces_protobuf(spans), ingest_key).status_code == 200
    full = stored(project, spans[0])
    assert [b["key"] for b in full["blocks"]] == ["system", "tools", "summary", "user"]
    summary = full["blocks"][2]
    assert summary["kind"] == "summary"
    assert summary["messages"] == [{"role": "user", "content": "Paris trip, Friday."}]
    [event] = full["compression"]
    assert event["strategy"] == "summarize" and event["block"] == "summary" and event["ref"] == "cmp_1"
    assert event["tokens_after"] == summary["tokens"]


def test_re_exported_spans_are_stored_once(client: Client, project: Project, ingest_key: str) -> None:
    body = traces_protobuf(recorded_spans(("chat", genai_chat_attributes())))
    assert post(client, TRACES, body, ingest_key).status_code == 200
    assert post(client, TRACES, body, ingest_key).status_code == 200
    session = selectors.session_get(project=project, session_id="conv-1")
    assert session is not None and session.turn_count == 1


def test_turns_of_a_session_are_numbered_in_order_across_exports(
    client: Client, project: Project, ingest_key: str
) -> None:
    first = recorded_spans(
        ("chat", genai_chat_attributes(question="one")), ("chat", genai_chat_attributes(question="two"))
    )
    second = recorded_spans(("chat", genai_chat_attributes(question="three")))
    assert post(client, TRACES, traces_protobuf(first), ingest_key).status_code == 200
    assert post(client, TRACES, traces_protobuf(second), ingest_key).status_code == 200
    turns = {
        stored(project, s)["blocks"][-1]["messages"][0]["content"]: stored(project, s)["turn"]
        for s in [*first, *second]
    }
    assert turns == {"one": 0, "two": 1, "three": 2}


def test_json_gzip_export_is_accepted(client: Client, project: Project, ingest_key: str) -> None:
    spans = recorded_spans(("chat", genai_chat_attributes(conversation="json-conv")))
    resp = post(client, TRACES, traces_json(spans), ingest_key, ctype="application/json", gzip_body=True)
    assert resp.status_code == 200
    assert resp.json() == {}
    assert stored(project, spans[0])["session_id"] == "json-conv"


def test_zstd_protobuf_export_is_accepted_and_a_bad_frame_refused(
    client: Client, project: Project, ingest_key: str
) -> None:
    """The collector's otlphttp exporter sends `compression: zstd` as one frame."""
    import zstandard

    spans = recorded_spans(("chat", genai_chat_attributes(conversation="zstd-conv")))
    packed = zstandard.ZstdCompressor(level=3).compress(traces_protobuf(spans))
    headers = {"Content-Encoding": "zstd"}
    resp = post(client, TRACES, packed, ingest_key, headers=headers)
    assert resp.status_code == 200
    assert stored(project, spans[0])["session_id"] == "zstd-conv"
    resp = post(client, TRACES, packed[:-4], ingest_key, headers=headers)
    assert resp.status_code == 400
    assert "body is not valid zstd" in status_message(resp)


def test_standard_exporter_header_form_of_the_key_is_accepted(
    client: Client, project: Project, ingest_key: str
) -> None:
    # OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<key>, read as the exporters read it.
    from opentelemetry.util.re import parse_env_headers

    headers = dict(parse_env_headers(f"authorization=Bearer%20{ingest_key}", liberal=True))
    spans = recorded_spans(("chat", genai_chat_attributes()))
    resp = post(client, TRACES, traces_protobuf(spans), None, headers=headers)
    assert resp.status_code == 200


def test_partial_success_reports_rejected_spans_and_stores_the_rest(
    client: Client, project: Project, ingest_key: str
) -> None:
    spans = recorded_spans(
        ("chat", genai_chat_attributes(conversation="bad\x00id")),
        ("chat", genai_chat_attributes(conversation="good")),
    )
    resp = post(client, TRACES, traces_protobuf(spans), ingest_key)
    assert resp.status_code == 200
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(resp.content)
    assert answer.partial_success.rejected_spans == 1
    assert "session_id" in answer.partial_success.error_message
    assert stored(project, spans[1])["session_id"] == "good"

    again = post(client, TRACES, traces_json(spans[:1]), ingest_key, ctype="application/json")
    assert again.status_code == 200
    assert again.json()["partialSuccess"]["rejectedSpans"] == "1"


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_logs_export_sent_to_the_traces_path_is_refused_with_the_reason(
    client: Client, ingest_key: str, encoding: str
) -> None:
    req = logs_request([{"trace_id": "ab" * 16, "span_id": "cd" * 8, "event_name": DETAILS_EVENT}])
    if encoding == "protobuf":
        resp = post(client, TRACES, req.SerializeToString(), ingest_key)
        assert resp.status_code == 400
        assert "send it to /v1/logs" in status_message(resp)
    else:
        resp = post(client, TRACES, logs_json(req), ingest_key, ctype="application/json")
        assert resp.status_code == 400
        body = resp.json()
        assert "send it to /v1/logs" in body["message"]
        assert body["code"] == 3 and body["detail"] == body["message"]


def test_a_traces_export_sent_to_the_logs_path_is_refused(client: Client, ingest_key: str) -> None:
    body = traces_protobuf(recorded_spans(("chat", genai_chat_attributes())))
    resp = post(client, LOGS, body, ingest_key)
    assert resp.status_code == 400
    assert "send it to /v1/traces" in status_message(resp)


@pytest.mark.parametrize(
    ("body", "ctype", "reason"),
    [
        (b"\xff\xff\xff\xff", PB, "protobuf"),
        (b"{not json", "application/json", "not valid JSON"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00"}]}]}]}',
            "application/json",
            "traceId",
        ),
        (b'{"resourceSpans": "x"}', "application/json", "must be a list"),
    ],
    ids=["garbage-protobuf", "bad-json", "bad-trace-id", "wrong-shape"],
)
def test_malformed_exports_get_400_with_a_reason(
    client: Client, ingest_key: str, body: bytes, ctype: str, reason: str
) -> None:
    resp = post(client, TRACES, body, ingest_key, ctype=ctype)
    assert resp.status_code == 400
    text = status_message(resp) if ctype == PB else resp.json()["message"]
    assert reason in text


def test_body_limit_applies_after_decompression(client: Client, ingest_key: str) -> None:
    big = b"{" + b" " * (LIMITS.max_body_bytes + 10) + b"}"
    resp = post(client, TRACES, big, ingest_key, ctype="application/json", gzip_body=True)
    assert resp.status_code == 413
    assert "max_body_bytes" in resp.json()["detail"]


def test_unsupported_content_type_is_415(client: Client, ingest_key: str) -> None:
    resp = post(client, TRACES, b"x", ingest_key, ctype="text/plain")
    assert resp.status_code == 415


def test_missing_key_is_401(client: Client, db: Any) -> None:
    assert post(client, TRACES, b"", None).status_code == 401


def test_an_empty_export_is_a_success(client: Client, ingest_key: str) -> None:
    resp = post(client, TRACES, b'{"resourceSpans": []}', ingest_key, ctype="application/json")
    assert resp.status_code == 200
    assert resp.json() == {}


def test_a_details_log_record_becomes_a_snapshot(client: Client, project: Project, ingest_key: str) -> None:
    attrs = genai_chat_attributes(conversation="from-logs")
    req = logs_request(
        [{"trace_id": "ab" * 16, "span_id": "cd" * 8, "event_name": DETAILS_EVENT, "attributes": attrs}]
    )
    resp = post(client, LOGS, req.SerializeToString(), ingest_key)
    assert resp.status_code == 200
    snap = selectors.snapshot_by_uuid(project=project, snapshot_id=snapshot_id_for("ab" * 16, "cd" * 8))
    assert snap is not None
    full = selectors.snapshot_full(snapshot=snap)
    assert full["session_id"] == "from-logs"
    assert [b["kind"] for b in full["blocks"]] == ["system", "tools", "user"]
    resp = post(client, LOGS, logs_json(req), ingest_key, ctype="application/json")
    assert resp.status_code == 200 and resp.json() == {}


def test_the_turn_page_says_when_the_context_arrived_incomplete(
    client: Client, project: Project, ingest_key: str
) -> None:
    from django.contrib.auth import get_user_model
    from django.urls import reverse

    from core.models import Membership

    attrs = genai_chat_attributes(conversation="redacted-conv")
    attrs["gen_ai.input.messages"] = (
        '[{"role": "user", "parts": [{"type": "text", "content": "__REDACTED__"}]}]'
    )
    bare = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.conversation.id": "bare-conv",
        "gen_ai.usage.input_tokens": 321,
    }
    spans = recorded_spans(("chat", attrs), ("chat", bare))
    assert post(client, TRACES, traces_protobuf(spans), ingest_key).status_code == 200
    user = get_user_model().objects.create_user("viewer", password="pw-123456789")
    Membership.objects.create(project=project, user=user, role="viewer")
    client.force_login(user)

    page = client.get(reverse("ingest:turn", args=[project.pk, "redacted-conv", 0]))
    assert page.status_code == 200
    assert "The context of this turn is incomplete" in page.content.decode()
    assert "redacted" in page.content.decode()

    page = client.get(reverse("ingest:turn", args=[project.pk, "bare-conv", 0]))
    text = page.content.decode()
    assert "The context of this turn is incomplete" in text and "content capture is off" in text
    assert stored(project, spans[1])["derived"]["total_tokens"] == 321

    complete = recorded_spans(("chat", genai_chat_attributes(conversation="full-conv")))
    assert post(client, TRACES, traces_protobuf(complete), ingest_key).status_code == 200
    page = client.get(reverse("ingest:turn", args=[project.pk, "full-conv", 0]))
    assert page.status_code == 200 and "incomplete" not in page.content.decode()


def test_a_conversation_id_over_the_limit_is_refused_never_cut(
    client: Client, project: Project, ingest_key: str
) -> None:
    # Cut to the limit, these two would be one conversation.
    prefix = "c" * LIMITS.max_id_chars
    spans = recorded_spans(
        ("chat", genai_chat_attributes(conversation=prefix + "-first")),
        ("chat", genai_chat_attributes(conversation=prefix + "-second")),
        ("chat", genai_chat_attributes(conversation="short")),
    )
    resp = post(client, TRACES, traces_protobuf(spans), ingest_key)
    assert resp.status_code == 200
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(resp.content)
    assert answer.partial_success.rejected_spans == 2
    assert "session_id" in answer.partial_success.error_message
    assert selectors.session_get(project=project, session_id=prefix) is None
    assert stored(project, spans[2])["session_id"] == "short"


class _ClientExporter(SpanExporter):
    """An OTLP exporter posting each export through the test client, one request per call."""

    def __init__(self, client: Client, key: str) -> None:
        self.client, self.key, self.statuses = client, key, []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.statuses.append(post(self.client, TRACES, traces_protobuf(list(spans)), self.key).status_code)
        return SpanExportResult.SUCCESS


FRAMEWORK_LLM = {
    "openinference.span.kind": "LLM",
    "llm.model_name": "gpt-4o-mini",
    "llm.input_messages.0.message.role": "user",
    "llm.input_messages.0.message.content": "Weather in Paris?",
    "llm.token_count.prompt": 40,
    "session.id": "conv-1",
}


def nested_call(
    exporter: SpanExporter, *, siblings: int = 0
) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """A framework's LLM span wrapping the provider client's span (or, with SIBLINGS, an agent
    span over that many client calls), each span exported on its own as it ends
    (SimpleSpanProcessor). Returns (outer spans, client spans) as recorded."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.otlp")
    if siblings:
        with tracer.start_as_current_span("agent run", attributes={"gen_ai.operation.name": "invoke_agent"}):
            for i in range(siblings):
                with tracer.start_as_current_span("chat", attributes=genai_chat_attributes(question=f"q{i}")):
                    pass
    else:
        with (
            tracer.start_as_current_span("ChatOpenAI", attributes=FRAMEWORK_LLM),
            tracer.start_as_current_span("chat", attributes=genai_chat_attributes()),
        ):
            pass
    provider.shutdown()
    done = list(memory.get_finished_spans())
    clients = [s for s in done if s.name == "chat"]
    return [s for s in done if s.name != "chat"], clients


def stored_count(project: Project) -> int:
    return len(selectors.snapshot_refs_matching(project=project))


def test_a_framework_call_exported_span_by_span_is_stored_once(
    client: Client, project: Project, ingest_key: str
) -> None:
    exporter = _ClientExporter(client, ingest_key)
    [outer], [inner] = nested_call(exporter)
    # The client span ends first, so it came first, each in its own request.
    assert exporter.statuses == [200, 200]
    assert stored_count(project) == 1
    assert stored(project, inner)["output"]["text"] == "Sunny."
    # Sent again, in either grouping, the call is still the one stored.
    for body in ([outer], [inner], [outer, inner]):
        assert post(client, TRACES, traces_protobuf(body), ingest_key).status_code == 200
    assert stored_count(project) == 1


def test_a_framework_call_whose_llm_span_came_first_is_stored_once(
    client: Client, project: Project, ingest_key: str
) -> None:
    [outer], [inner] = nested_call(InMemorySpanExporter())
    assert post(client, TRACES, traces_protobuf([outer]), ingest_key).status_code == 200
    assert post(client, TRACES, traces_protobuf([inner]), ingest_key).status_code == 200
    assert stored_count(project) == 1
    assert selectors.snapshot_by_uuid(project=project, snapshot_id=snapshot_id_for(*ids(outer))) is not None


def test_client_calls_under_one_agent_span_exported_one_by_one_are_all_stored(
    client: Client, project: Project, ingest_key: str
) -> None:
    exporter = _ClientExporter(client, ingest_key)
    _, calls = nested_call(exporter, siblings=2)
    assert exporter.statuses == [200, 200, 200]
    assert stored_count(project) == 2
    assert [stored(project, s)["turn"] for s in calls] == [0, 1]


def ids(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def test_a_log_record_nested_past_the_protobuf_limit_is_refused_alone(
    client: Client, project: Project, ingest_key: str
) -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    good = genai_chat_attributes(conversation="beside-a-deep-one")
    req = logs_request(
        [
            {"trace_id": "ab" * 16, "span_id": "cd" * 8, "event_name": DETAILS_EVENT, "attributes": good},
            {"trace_id": "ab" * 16, "span_id": "ce" * 8, "event_name": DETAILS_EVENT, "attributes": good},
        ]
    )
    deep = req.resource_logs[0].scope_logs[0].log_records[1].attributes.add()
    deep.key = "gen_ai.request.stop_sequences"
    value = deep.value
    for _ in range(200):  # three protobuf levels each: far past the decoder's limit of 100
        value = value.kvlist_value.values.add().value
    value.string_value = "x"
    resp = post(client, LOGS, req.SerializeToString(), ingest_key)
    assert resp.status_code == 200, resp.content[:300]
    answer = ExportLogsServiceResponse.FromString(resp.content)
    assert answer.partial_success.rejected_log_records == 1
    reason = answer.partial_success.error_message
    assert "a log record: nested deeper than the protobuf decoder's limit" in reason
    assert selectors.snapshot_by_uuid(project=project, snapshot_id=snapshot_id_for("ab" * 16, "cd" * 8))
    assert not selectors.snapshot_by_uuid(project=project, snapshot_id=snapshot_id_for("ab" * 16, "ce" * 8))
