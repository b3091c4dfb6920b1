"""Text PostgreSQL cannot hold (U+0000, unpaired surrogates, bytes that are not UTF-8) never costs
the good items of a batch: content is stored as sent and read back as sent, identifiers are
refused with a field error, and nothing answers 5xx."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from core import pgtext
from core.models import Membership
from ctxobs.hashing import content_hash
from ingest.models import BlockContent, MessageContent, Snapshot
from tests.factories import full_snapshot, snapshot

pytestmark = pytest.mark.django_db

NUL = "a\x00b"
SURROGATE = "tool bytes \udcff\ud800 end"


def _set(path: tuple[Any, ...], value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(s: dict[str, Any]) -> None:
        node: Any = s
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
    return mutate


def _tag_key(s: dict[str, Any]) -> None:
    s["tags"][NUL] = "v"


CONTENT_CASES = [
    pytest.param(("blocks", 2, "messages", 2, "content"), id="message-content"),
    pytest.param(("blocks", 2, "messages", 1, "tool_calls", 0, "function", "arguments"), id="tool-arguments"),
    pytest.param(("blocks", 2, "messages", 2, "tool_call_id"), id="tool-call-id"),
    pytest.param(("blocks", 0, "messages", 0, "content"), id="system-prompt"),
    pytest.param(("output", "text"), id="output-text"),
    pytest.param(("output", "finish_reason"), id="finish-reason"),
    pytest.param(("params", "stop"), id="params"),
    pytest.param(("tags", "env"), id="tag-value"),
    pytest.param(("compression", 0, "ref"), id="compression-ref"),
    pytest.param(("compression", 0, "items", 0), id="compression-items"),
    pytest.param(("recall", 0, "preview"), id="recall-preview"),
    pytest.param(("validation", 0, "message"), id="validation-message"),
]


def _post_raw(client: Client, key: str, body: bytes, **headers: str) -> Any:
    return client.post("/api/v1/snapshots", data=body, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {key}", **headers)


def _without_derived(full: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(full)
    for b in out["blocks"]:
        for k in ("hash", "chars", "share", "window_share", "tokens", "estimated", "pinned", "compressed"):
            b.pop(k, None)
    return out


@pytest.mark.parametrize("text", [pytest.param(NUL, id="nul"), pytest.param(SURROGATE, id="surrogate")])
@pytest.mark.parametrize("path", CONTENT_CASES)
def test_content_that_postgres_refuses_is_stored_as_sent_and_the_batch_is_kept(
    api, client, ingest_key, project, path, text
):
    hostile = full_snapshot(turn=1)
    _set(path, text)(hostile)
    good = [snapshot(session_id="neighbour", turn=i) for i in range(2)]
    # ensure_ascii keeps the body valid UTF-8 with the surrogates as \ud800 escapes, as a JSON sender would.
    body = json.dumps({"snapshots": [good[0], hostile, good[1]]}).encode()
    r = _post_raw(client, ingest_key, body)
    assert r.status_code == 200, r.content
    assert [x["status"] for x in r.json()["results"]] == ["created"] * 3
    assert Snapshot.objects.filter(project=project).count() == 3

    got = api.get(f"/snapshots/{hostile['snapshot_id']}").json()
    node: Any = got
    for p in path[:-1]:
        node = node[p]
    assert node[path[-1]] == text
    if path[0] == "blocks":
        stored = got["blocks"][path[1]]
        assert stored["messages"] == hostile["blocks"][path[1]]["messages"]
        # The content address is that of the original text, whichever way it came in.
        assert stored["hash"] == content_hash(hostile["blocks"][path[1]]["messages"])


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        pytest.param(_set(("session_id",), NUL), ("session_id",), id="session-id"),
        pytest.param(_set(("agent",), NUL), ("agent",), id="agent"),
        pytest.param(_set(("model", "name"), NUL), ("model", "name"), id="model-name"),
        pytest.param(_set(("model", "encoding"), NUL), ("model", "encoding"), id="encoding"),
        pytest.param(_set(("blocks", 0, "key"), NUL), ("blocks", 0, "key"), id="block-key"),
        pytest.param(_set(("blocks", 0, "key"), SURROGATE), ("blocks", 0, "key"), id="block-key-surrogate"),
        pytest.param(_set(("compression", 0, "strategy"), NUL), ("compression", 0, "strategy"), id="strat"),
        pytest.param(_set(("compression", 0, "block"), NUL), ("compression", 0, "block"), id="comp-block"),
        pytest.param(_set(("recall", 0, "memory_id"), NUL), ("recall", 0, "memory_id"), id="memory-id"),
        pytest.param(_set(("recall", 0, "block"), NUL), ("recall", 0, "block"), id="recall-block"),
        pytest.param(_set(("validation", 0, "check"), NUL), ("validation", 0, "check"), id="check"),
        pytest.param(_set(("validation", 0, "code"), SURROGATE), ("validation", 0, "code"), id="code"),
    ],
)
def test_identifier_that_postgres_refuses_is_rejected_with_its_field_and_the_rest_stored(
    client, ingest_key, project, mutate, loc
):
    bad = full_snapshot(turn=1)
    mutate(bad)
    good = snapshot(session_id="neighbour")
    r = _post_raw(client, ingest_key, json.dumps({"snapshots": [good, bad]}).encode())
    assert r.status_code == 207, r.content
    result = r.json()["results"][1]
    assert result["status"] == "rejected"
    errors = {tuple(e["loc"]): e for e in result["errors"]}
    assert ("snapshots", 1, *loc) in errors
    assert "U+" in errors[("snapshots", 1, *loc)]["msg"]
    stored = Snapshot.objects.filter(project=project).values_list("session_id", flat=True)
    assert list(stored) == ["neighbour"]


def test_tag_key_with_nul_is_kept(api, project):
    s = full_snapshot()
    _tag_key(s)
    assert api.post_snapshots([s]).status_code == 200
    assert api.get(f"/snapshots/{s['snapshot_id']}").json()["tags"][NUL] == "v"


def test_same_content_with_nul_is_stored_once_under_the_hash_of_the_original(api, project):
    text = "binary\x00payload"
    msgs = [{"role": "tool", "content": text, "tool_call_id": "c"}]
    a = snapshot(session_id="a", blocks=[{"key": "tool", "kind": "tool_results", "messages": msgs}])
    b = snapshot(session_id="b", blocks=[{"key": "tool", "kind": "tool_results", "messages": msgs}])
    assert api.post_snapshots([a]).status_code == 200
    assert api.post_snapshots([b]).status_code == 200
    h = content_hash(a["blocks"][0]["messages"])
    assert BlockContent.objects.filter(project=project, hash=h).count() == 1
    assert MessageContent.objects.filter(project=project).count() == 1
    assert MessageContent.objects.get(project=project).message["content"] == text


def test_text_that_merely_starts_with_the_escape_mark_reads_back_unchanged(api, project):
    tricky = pgtext.ESC + "0 looks escaped " + pgtext.ESC + pgtext.ESC
    s = full_snapshot()
    s["blocks"][0]["messages"][0]["content"] = tricky
    s["output"]["text"] = tricky
    s["recall"][0]["preview"] = tricky
    assert api.post_snapshots([s]).status_code == 200
    got = api.get(f"/snapshots/{s['snapshot_id']}").json()
    assert got["blocks"][0]["messages"][0]["content"] == tricky
    assert got["output"]["text"] == tricky
    assert got["recall"][0]["preview"] == tricky


def test_whole_snapshot_reads_back_as_sent_with_nul_and_surrogates_everywhere(api, client, ingest_key):
    s = full_snapshot()
    for path in CONTENT_CASES:
        _set(path.values[0], NUL + SURROGATE)(s)
    r = _post_raw(client, ingest_key, json.dumps({"snapshots": [s]}).encode())
    assert r.status_code == 200, r.content
    got = _without_derived(api.get(f"/snapshots/{s['snapshot_id']}").json())
    assert got["params"] == s["params"] and got["tags"] == s["tags"]
    for k in ("compression", "recall", "validation"):
        assert got[k][0].items() >= s[k][0].items()
    assert [b["messages"] for b in got["blocks"]] == [b["messages"] for b in s["blocks"]]
    assert got["output"]["text"] == s["output"]["text"]


@pytest.mark.parametrize(
    ("body", "gz"),
    [
        pytest.param(b'{"snapshots": [{"session_id": "caf\xe9"}]}', False, id="latin-1"),
        pytest.param(b'{"snapshots": [{"session_id": "\xff\xfe\x00"}]}', False, id="raw-bytes"),
        pytest.param(b'{"snapshots": [{"session_id": "\xc3"}]}', True, id="truncated-sequence-gzip"),
    ],
)
def test_body_that_is_not_utf8_is_a_clear_400(client, ingest_key, body, gz):
    headers = {}
    if gz:
        body = gzip.compress(body)
        headers["HTTP_CONTENT_ENCODING"] = "gzip"
    r = _post_raw(client, ingest_key, body, **headers)
    assert r.status_code == 400, r.content
    detail = r.json()["detail"]
    assert "UTF-8" in detail and "byte" in detail


def test_turn_page_shows_nul_visibly_and_survives_surrogates(project):
    from tests.ingest.dashboard_factories import ingest

    s = full_snapshot(session_id="bin", turn=0)
    s["blocks"][2]["messages"][2]["content"] = "header\x00body"
    s["output"]["text"] = "reply \udcff end"
    s["recall"][0]["preview"] = "pre\x00view"
    ingest(project, [json.loads(json.dumps(s))])
    user = get_user_model().objects.create_user(username="v", password="pw-v")
    Membership.objects.create(project=project, user=user, role="viewer")
    c = Client()
    c.force_login(user)
    r = c.get(reverse("ingest:turn", args=[project.pk, "bin", 0]))
    assert r.status_code == 200
    page = r.content.decode()
    assert "header\u2400body" in page
    assert "pre\u2400view" in page
    assert "reply \ufffd end" in page
    assert "\x00" not in page
    r = c.get(reverse("ingest:block", args=[project.pk, "bin", 0, 2]))
    assert r.status_code == 200 and "header\u2400body" in r.content.decode()
