"""Replay sends what the agent sent: a real Celery worker process against an OpenAI-compatible
recorder on loopback (the scripted server, which keeps every request body as received) and
against the real local model server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from core.models import Project
from replay import ablation
from replay.models import ModelEndpoint, ReplayJob, ReplayRun
from replay.selectors import job_results
from replay.services.jobs import replay_job_create
from replay.services.model_endpoints import endpoint_create
from tests import factories as f
from tests.replay.conftest import StubServer, wait_job
from tests.replay.helpers import PLANTED_MEMORY, PLANTED_QUESTION, PLANTED_SYSTEM, post

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Flights for a day",
            "parameters": {"type": "object", "properties": {"day": {"type": "string"}}},
        },
    }
]
SAVED = {
    "temperature": 0.2,
    "top_p": 0.9,
    "max_tokens": 50,
    "stop": ["END"],
    "tools": TOOLS,
    "tool_choice": "auto",
    "response_format": {"type": "json_object"},
}
# What an endpoint used to impose on every call.
BAD_DEFAULTS = {"temperature": 0, "seed": 42, "max_tokens": 64, "stop": ["\nUser:"]}


def agent_turn(**params: Any) -> dict[str, Any]:
    """A turn recorded the SDK's way: tool definitions in params.tools (a tools block without
    messages), a tool call and its result in the history, non-ASCII text."""
    return f.snapshot(
        blocks=[
            f.block("system", "system", "You are Tern. Answer in JSON.", pinned=True),
            f.block("tools", "tools", messages=[], tokens=40),
            f.block("memory", "memory", "Memory: prefers window seats — 靠窗"),
            f.block(
                "history",
                "history",
                messages=[
                    f.message("user", "Book me a flight on Friday"),
                    f.message(
                        "assistant",
                        None,
                        tool_calls=[
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "search_flights", "arguments": '{"day":"fri"}'},
                            }
                        ],
                    ),
                    f.message("tool", '{"status":"error","message":"timeout"}', tool_call_id="call_1"),
                ],
            ),
            f.block("user", "user", "Try again please"),
        ],
        params=params or dict(SAVED),
        output={"text": '{"action":"search"}', "tool_calls": [], "finish_reason": "stop",
                "usage": {"prompt_tokens": 120, "completion_tokens": 5}, "latency_ms": 300},
    )


def wire_messages(wire: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for b in wire["blocks"] for m in b["messages"]]


def canon(value: Any) -> bytes:
    return ablation.canonical_json(value).encode()


def chat_endpoint(project: Project, stub: StubServer, **kw: Any) -> ModelEndpoint:
    return endpoint_create(
        project=project,
        name=kw.pop("name", "recorder"),
        base_url=stub.base_url,
        model="stub-model",
        mode="chat",
        default_params=dict(BAD_DEFAULTS),
        timeout_s=5.0,
        is_default=True,
        **kw,
    )


def calls(stub: StubServer) -> list[dict[str, Any]]:
    return stub.completion_calls()


def test_replay_as_saved_sends_the_agents_request_exactly_in_chat_mode(
    celery_worker_process: Any, api: Any, private_project: Project, stub_server: StubServer,
    editor_client: Client,
) -> None:
    wire = agent_turn()
    post(api, wire)
    ep = chat_endpoint(private_project, stub_server)
    job = replay_job_create(project=private_project, endpoint=ep,
                            spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1})
    job = wait_job(job.pk)
    assert job.status == "done" and job.params == {}
    (call,) = calls(stub_server)
    assert call["path"] == "/v1/chat/completions"
    sent = json.loads(call["raw"])
    # Byte for byte (canonical JSON): the messages and every saved parameter, nothing added;
    # the endpoint's defaults (temperature 0, seed 42, a stop list) changed nothing.
    assert canon(sent["messages"]) == canon(wire_messages(wire))
    assert canon({k: v for k, v in sent.items() if k not in ("messages", "model")}) == canon(SAVED)
    assert "seed" not in sent and sent["temperature"] == 0.2 and sent["stop"] == ["END"]
    run = ReplayRun.objects.get(job=job)
    # The run stores exactly the body it sent.
    assert run.request_path == "/chat/completions" and run.api_mode == "chat" and run.mode_note == ""
    assert canon(run.request_body) == canon(sent)
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/runs/{run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="request-identical"' in html and "chat completions, messages as saved" in html
    # The original's prompt tokens (the agent's model) and the replay's are shown apart, labelled.
    assert 'class="cmp-pt-a">120<' in html and "the agent&#x27;s model" in html and "the replay model" in html
    assert 'id="request-body"' in html


def test_an_override_is_explicit_recorded_and_listed_and_resamples_carry_no_seed(
    celery_worker_process: Any, api: Any, private_project: Project, stub_server: StubServer,
    editor_client: Client,
) -> None:
    wire = agent_turn(**SAVED, seed=7)
    post(api, wire)
    ep = chat_endpoint(private_project, stub_server)
    # The confirm page: the override is a field of its own, the saved values are shown.
    form = {"snapshot_id": wire["snapshot_id"], "kind": "plain", "samples": "3", "endpoint": str(ep.pk)}
    page = editor_client.post(f"/p/{private_project.pk}/replays/new", {**form, "max_tokens": "20"})
    assert page.status_code == 200, page.content[:500]
    html = page.content.decode()
    assert 'id="saved-params"' in html and "response_format" in html and 'name="top_p"' in html
    url = f"/p/{private_project.pk}/replays/new"
    resp = editor_client.post(url, {**form, "max_tokens": "20", "confirm": "1"})
    assert resp.status_code == 302
    job = ReplayJob.objects.get(project=private_project)
    assert job.params == {"max_tokens": 20}
    job = wait_job(job.pk)
    bodies = {r.sample: r.request_body for r in ReplayRun.objects.filter(job=job)}
    assert all(b["max_tokens"] == 20 and b["temperature"] == 0.2 for b in bodies.values())
    # The first sample is the turn as saved, its seed included; the resamples have none.
    assert bodies[0]["seed"] == 7 and "seed" not in bodies[1] and "seed" not in bodies[2]
    assert canon(bodies[0]["messages"]) == canon(wire_messages(wire))
    resample = ReplayRun.objects.get(job=job, sample=1)
    html = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/runs/{resample.pk}/").content.decode()
    assert 'id="request-differences"' in html
    assert "override chosen for this job" in html and "a baseline resample" in html
    assert "response_format" not in html.split('id="request-differences"')[1].split("</table>")[0]
    # An override outside the allowed ones is refused by field.
    bad = editor_client.post(f"/p/{private_project.pk}/replays/new", {**form, "temperature": "hot"})
    assert bad.status_code == 400 and "temperature must be a number" in bad.content.decode()


def test_the_transcript_fallback_keeps_tool_call_ids_and_stops_on_every_label_it_writes(
    celery_worker_process: Any, api: Any, private_project: Project, stub_server: StubServer,
    editor_client: Client,
) -> None:
    wire = agent_turn()  # the memory block is a second system message
    post(api, wire)
    plain = f.snapshot(session_id="s-2", params={"temperature": 0.2},
                       blocks=[f.block("system", "system", "S"), f.block("user", "user", "Q")])
    post(api, plain)
    ep = chat_endpoint(private_project, stub_server, chat_drops_later_system=True)
    job = replay_job_create(project=private_project, endpoint=ep,
                            spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1})
    job = wait_job(job.pk)
    (call,) = calls(stub_server)
    assert call["path"] == "/v1/completions"
    body = call["body"]
    prompt = body["prompt"]
    assert "System: Memory: prefers window seats — 靠窗" in prompt
    assert '[tool call call_1: search_flights({"day":"fri"})]' in prompt
    assert 'Tool result (call_1): {"status":"error","message":"timeout"}' in prompt
    labels = {line.split(": ", 1)[0] for line in prompt.split("\n") if ": " in line}
    assert labels == {"System", "User", "Assistant", "Tool result (call_1)"}
    for label in labels:
        assert any(f"\n{label}:".startswith(s) for s in body["stop"]), (label, body["stop"])
    assert "\nAssistant:" in body["stop"] and "END" in body["stop"]
    assert body["temperature"] == 0.2 and "seed" not in body and "tools" not in body
    run = ReplayRun.objects.get(job=job)
    assert run.api_mode == "completions" and "drops system messages after the first" in run.mode_note
    html = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/runs/{run.pk}/").content.decode()
    assert 'id="mode-note"' in html and "completions, as a transcript" in html
    # A turn without a later system message goes to chat on the same endpoint.
    job = replay_job_create(project=private_project, endpoint=ep,
                            spec={"kind": "plain", "snapshot_id": plain["snapshot_id"], "samples": 1})
    wait_job(job.pk)
    assert calls(stub_server)[-1]["path"] == "/v1/chat/completions"


def test_without_tools_removes_the_definitions_and_a_request_equal_to_the_baseline_is_not_run(
    celery_worker_process: Any, api: Any, private_project: Project, stub_server: StubServer,
    editor_client: Client,
) -> None:
    wire = agent_turn()
    post(api, wire)
    ep = chat_endpoint(private_project, stub_server)
    job = replay_job_create(project=private_project, endpoint=ep, spec={
        "kind": "without", "snapshot_id": wire["snapshot_id"], "block": "tools", "samples": 1})
    job = wait_job(job.pk)
    t = job_results(job=job)["turns"][0]
    base_body = t["baseline_runs"][0].request_body
    (e,) = t["variants"]
    body = e["run"].request_body
    assert base_body["tools"] == TOOLS and base_body["tool_choice"] == "auto"
    assert "tools" not in body and "tool_choice" not in body
    assert canon(body["messages"]) == canon(base_body["messages"])
    assert {k: v for k, v in body.items() if k not in ("tools", "tool_choice")} == {
        k: v for k, v in base_body.items() if k not in ("tools", "tool_choice")}
    n = len(calls(stub_server))
    # Moving the tools block changes nothing that is sent: said so, and not run.
    spec = {"kind": "move", "snapshot_id": wire["snapshot_id"], "block": "tools", "to": "end", "samples": 1}
    preview = editor_client.post(f"/p/{private_project.pk}/replays/new", {**spec, "samples": "1"})
    assert 'id="no-change-note"' in preview.content.decode()
    job = wait_job(replay_job_create(project=private_project, endpoint=ep, spec=spec).pk)
    (e,) = job_results(job=job)["turns"][0]["variants"]
    assert e["no_change"] and e["runs"] == [] and e["changed"] is False
    assert len(calls(stub_server)) == n  # the baseline sample was reused; the variant not run
    html = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert "no change to the request" in html and "same answer" not in html
    out = api.get(f"/replays/{job.pk}")
    assert out.status_code == 200, out.content
    (v,) = [v for v in out.json()["turns"][0]["variants"] if not v["is_baseline"]]
    assert v["no_change"] is True and v["runs"] == []


def test_baseline_samples_are_reused_across_jobs_while_the_request_is_the_same(
    celery_worker_process: Any, api: Any, private_project: Project, stub_server: StubServer,
    editor_client: Client,
) -> None:
    wire = f.snapshot(params={"temperature": 0.7, "max_tokens": 30}, blocks=[
        f.block("system", "system", PLANTED_SYSTEM),
        f.block("memory", "memory", PLANTED_MEMORY),
        f.block("user", "user", PLANTED_QUESTION),
    ])
    post(api, wire)
    ep = chat_endpoint(private_project, stub_server)
    first = wait_job(replay_job_create(project=private_project, endpoint=ep, spec={
        "kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 3}).pk)
    assert first.n_done == 3 and len(calls(stub_server)) == 3
    # The cost preview says what the next job saves.
    form = {"snapshot_id": wire["snapshot_id"], "kind": "loo", "samples": "3", "endpoint": str(ep.pk)}
    html = editor_client.post(f"/p/{private_project.pk}/replays/new", form).content.decode()
    assert 'id="reuse-note"' in html and "3 model calls saved" in html
    assert 'id="est-calls">9<' in html  # three blocks left out, as many samples as the baseline
    loo = wait_job(replay_job_create(project=private_project, endpoint=ep, spec={
        "kind": "loo", "snapshot_id": wire["snapshot_id"], "samples": 3}).pk)
    assert loo.status == "done" and loo.n_done == 12 and loo.estimate["reused"] == 3
    assert len(calls(stub_server)) == 12  # 3 + the three variants' 3 samples each: no baseline call
    reused = ReplayRun.objects.filter(job=loo, variant__is_baseline=True)
    originals = set(ReplayRun.objects.filter(job=first).values_list("pk", flat=True))
    assert {r.reused_from_id for r in reused} == originals
    t = job_results(job=loo)["turns"][0]
    assert t["noise"]["samples"] == 3
    # Another request (an override) or another endpoint: no reuse.
    again = wait_job(replay_job_create(project=private_project, endpoint=ep, spec={
        "kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 2, "params": {"max_tokens": 10}}).pk)
    assert again.estimate["reused"] == 0 and len(calls(stub_server)) == 14
    other = chat_endpoint(private_project, stub_server, name="other")
    other_job = replay_job_create(project=private_project, endpoint=other, spec={
        "kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1})
    assert other_job.estimate["reused"] == 0
    wait_job(other_job.pk)


@pytest.mark.parametrize(
    ("params", "field"),
    [({"temperature": "hot"}, "temperature"), ({"temperature": 3}, "temperature"),
     ({"max_tokens": 0}, "max_tokens"), ({"stream": True}, "stream"), ({"seed": 1.5}, "seed")],
)
def test_the_api_takes_only_declared_overrides_and_names_the_field(
    api: Any, private_project: Project, stub_endpoint: Any, params: dict[str, Any], field: str
) -> None:
    wire = agent_turn()
    post(api, wire)
    resp = api.client.post(
        "/api/v1/replays/preview",
        data=json.dumps({"kind": "plain", "snapshot_id": wire["snapshot_id"], "params": params}),
        content_type="application/json",
        **api.headers(),
    )
    assert 400 <= resp.status_code < 500 and field in resp.content.decode(), resp.content


# --- the real local model -------------------------------------------------------------
def test_baseline_resamples_at_the_saved_temperature_measure_a_real_noise_floor(
    celery_worker_process: Any, api: Any, local_endpoint: ModelEndpoint,
) -> None:
    wire = f.snapshot(params={"temperature": 1.0, "max_tokens": 24}, blocks=[
        f.block("system", "system", PLANTED_SYSTEM),
        f.block("memory", "memory", PLANTED_MEMORY),
        f.block("user", "user", "Tell me a short story about my trip."),
    ])
    post(api, wire)
    job = wait_job(replay_job_create(project=local_endpoint.project, endpoint=local_endpoint, spec={
        "kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 4}).pk, timeout=240)
    assert job.status == "done" and job.n_done == 4
    t = job_results(job=job)["turns"][0]
    bodies = [r.request_body for r in t["baseline_runs"]]
    assert all(b["temperature"] == 1.0 and "seed" not in b for b in bodies)
    texts = [r.output_text for r in t["baseline_runs"]]
    assert len(set(texts)) > 1, texts
    assert t["noise"]["samples"] == 4 and t["noise"]["max"] > 0


def test_replay_as_saved_of_a_demo_agent_turn_reproduces_its_answer(
    celery_worker_process: Any, live_server: Any, project_and_key: tuple[Project, str],
    local_endpoint: ModelEndpoint, local_model: Any,
) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ingest.models import Snapshot

    project, key = project_and_key
    root = Path(__file__).resolve().parents[2]
    # One user message, as the demo runs it; without JSON mode, whose per-token grammar makes
    # every call several times slower on a shared CPU (the request is the same either way).
    cmd = [
        sys.executable, str(root / "examples" / "agent_loop.py"), "--base-url", local_model.base_url,
        "--sessions", "1", "--turns", "1", "--max-tokens", "24", "--no-json-mode",
    ]
    env = dict(os.environ, CTXOBS_ENDPOINT=live_server.url, CTXOBS_API_KEY=key)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420, cwd=str(root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sdk"]["sent"] == result["calls"] >= 1
    snap = Snapshot.objects.filter(project=project).order_by("turn", "ts").first()
    assert snap is not None
    from ingest.selectors import snapshot_full

    saved = snapshot_full(snapshot=snap)
    original = saved["output"]["text"]
    assert original and saved["params"]["temperature"] == 0 and "seed" not in saved["params"]
    # A 600-token prompt on a CPU shared with the rest of the suite can take minutes.
    ModelEndpoint.objects.filter(pk=local_endpoint.pk).update(timeout_s=600.0)
    job = wait_job(replay_job_create(project=project, endpoint=local_endpoint, spec={
        "kind": "plain", "snapshot_id": str(snap.snapshot_id), "samples": 1}).pk, timeout=900)
    assert job.status == "done", list(job.runs.values_list("error", flat=True))
    run = ReplayRun.objects.get(job=job)
    # The embedded base model answers chat calls from the transcript ctxobs renders, and the
    # replay sends that transcript itself: the same prompt, stops and parameters as the agent's
    # call, so the same answer.
    assert run.api_mode == "completions"
    body = run.request_body
    messages = [m for b in saved["blocks"] for m in b["messages"]]
    tools = saved["params"].get("tools")
    assert body["prompt"] == ablation.render_transcript(messages, tools)
    assert body["stop"] == ablation.transcript_stop(messages, tools)
    assert canon({k: v for k, v in body.items() if k not in ("prompt", "stop", "model")}) == canon(
        {k: v for k, v in saved["params"].items() if k not in ("tools", "tool_choice")}
    )
    assert run.output_text == original
