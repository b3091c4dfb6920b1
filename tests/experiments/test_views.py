"""The experiment pages as a member sees them: home, set, experiment, item, comparison, sweep;
untrusted text escaped, queries bounded by a constant whatever the number of items."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from core.models import Membership
from experiments.models import Experiment, Sweep
from experiments.services import runs, sets, strategies
from tests import factories as f
from tests.experiments.conftest import fact_answer, run_pending
from tests.replay.helpers import post

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script>'


def _turn(i: int) -> dict[str, Any]:
    return f.snapshot(
        session_id=f"s{i}",
        turn=1,
        blocks=[
            f.block("system", "system", "You are a travel assistant.", pinned=True),
            f.block("memory", "memory", f"Memory: booking code BK{i:03d}."),
            f.block(
                "history",
                "history",
                messages=[
                    {"role": "user", "content": "Find a flight."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"c{i}",
                                "type": "function",
                                "function": {"name": "search", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"c{i}", "content": "x " * 200},
                    {"role": "assistant", "content": "Found one."},
                ],
            ),
            f.block("user", "user", f"What is my booking code? {HOSTILE}"),
        ],
        output={
            "text": f"Your booking code is BK{i:03d}. {HOSTILE}",
            "tool_calls": [],
            "finish_reason": "stop",
        },
    )


def _viewer(client: Client, project: Any) -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-12345678")
    Membership.objects.create(user=user, project=project, role="viewer")
    client.force_login(user)
    return client


def _experiments(api: Any, project: Any, stub_server: Any, n: int) -> tuple[Any, Experiment, Experiment]:
    wires = [_turn(i) for i in range(n)]
    for w in wires:
        post(api, w)
    seeds = sets.seeds_from_turns(project=project, snapshot_ids=[w["snapshot_id"] for w in wires])
    s = sets.eval_set_create(project=project, name=f"set {n}", seeds=seeds)
    sets.eval_set_suggestions_confirm_all(eval_set=s)
    version = sets.latest_version(s)
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d} {HOSTILE}" for i in range(n)})
    st = strategies.preset_ensure(project=project, name="without memory")
    out = []
    for sv in (None, strategies.strategy_latest(st)):
        exp = runs.experiment_start(project=project, set_version=version, strategy_version=sv, samples=1)
        run_pending(exp.job_id)
        runs.experiment_finalize(experiment_id=exp.pk)
        exp.refresh_from_db()
        out.append(exp)
    return s, out[0], out[1]


@pytest.mark.parametrize("n", [2, 6], ids=["2-items", "6-items"])
def test_every_page_escapes_untrusted_text_within_a_constant_number_of_queries(
    api: Any,
    client: Client,
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
    n: int,
    django_assert_max_num_queries: Any,
) -> None:
    s, control, drop = _experiments(api, private_project, stub_server, n)
    _viewer(client, private_project)
    pid = private_project.pk
    item = s.versions.get().items.order_by("position").first()
    pages = [
        (reverse("experiments:home", kwargs={"project_id": pid}), 12),
        (reverse("experiments:set", kwargs={"project_id": pid, "set_id": s.pk}), 14),
        (reverse("experiments:experiment", kwargs={"project_id": pid, "experiment_id": drop.pk}), 12),
        (
            reverse(
                "experiments:item", kwargs={"project_id": pid, "experiment_id": drop.pk, "item_id": item.pk}
            ),
            14,
        ),
        (reverse("experiments:compare", kwargs={"project_id": pid}) + f"?ids={control.pk},{drop.pk}", 12),
        (
            reverse(
                "experiments:compare_item",
                kwargs={"project_id": pid, "a_id": control.pk, "b_id": drop.pk, "item_id": item.pk},
            ),
            16,
        ),
    ]
    for url, bound in pages:
        with django_assert_max_num_queries(bound):
            resp = client.get(url)
        assert resp.status_code == 200, url
        body = resp.content.decode()
        assert HOSTILE not in body, url
    item_page = client.get(pages[3][0]).content.decode()
    assert "&lt;script&gt;" in item_page
    assert "BK000" in item_page


def test_a_sweep_draws_its_curve_and_marks_the_knee(
    api: Any, client: Client, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = [_turn(i) for i in range(4)]
    for w in wires:
        post(api, w)
    s = sets.eval_set_create(
        project=private_project,
        name="sweep",
        seeds=sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires]),
    )
    sets.eval_set_suggestions_confirm_all(eval_set=s)
    st = strategies.strategy_create(
        project=private_project,
        name="cut memory",
        operations=[{"op": "truncate", "key": "memory", "tokens": 40}],
    )
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(4)})
    exps = runs.sweep_start(
        project=private_project,
        set_version=sets.latest_version(s),
        strategy=st,
        parameter="0.tokens",
        values=[40, 6, 3, 1],
        samples=1,
    )
    for e in exps:
        run_pending(e.job_id)
        runs.experiment_finalize(experiment_id=e.pk)
    _viewer(client, private_project)
    sweep = Sweep.objects.get()
    resp = client.get(
        reverse("experiments:sweep", kwargs={"project_id": private_project.pk, "sweep_id": sweep.pk})
    )
    assert resp.status_code == 200
    body = resp.content.decode()
    assert 'data-figure="sweep-figure"' in body and "compression ratio" in body
    # Four points: the memory cut to 40 tokens keeps the code, to 1 token loses it.
    assert body.count("/experiments/") >= 4
    assert 'id="knee"' in body, body[body.find("sweep-curve") :][:800]
    with pytest.raises(Exception, match="operation"):
        runs.sweep_start(
            project=private_project,
            set_version=sets.latest_version(s),
            strategy=st,
            parameter="3.tokens",
            values=[1, 2],
        )


def test_the_strategies_table_shows_operations_as_json(client: Client, private_project: Any) -> None:
    st = strategies.preset_ensure(project=private_project, name="drop tool outputs")
    _viewer(client, private_project)
    body = client.get(reverse("experiments:home", kwargs={"project_id": private_project.pk})).content.decode()
    ops = strategies.strategy_latest(st).operations
    # As a user writes them in the form (JSON, escaped in the page), not as Python's repr.
    assert html.escape(json.dumps(ops, separators=(", ", ": "))) in body
    assert "{'op'" not in body and "{&#x27;op&#x27;" not in body


def test_the_comparison_says_when_the_strategy_did_not_apply(
    api: Any, client: Client, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = [_turn(i) for i in range(3)]
    # The third turn has no memory block: "without memory" does not apply to it.
    wires[2]["blocks"] = [b for b in wires[2]["blocks"] if b["kind"] != "memory"]
    for w in wires:
        post(api, w)
    seeds = sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires])
    version = sets.latest_version(sets.eval_set_create(project=private_project, name="na", seeds=seeds))
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(3)})
    nothing = strategies.strategy_create(
        project=private_project, name="cut retrieval", operations=[{"op": "remove", "key": "retrieval"}]
    )
    exps = []
    for st in (None, strategies.preset_ensure(project=private_project, name="without memory"), nothing):
        sv = strategies.strategy_latest(st) if st is not None else None
        exp = runs.experiment_start(
            project=private_project, set_version=version, strategy_version=sv, samples=1
        )
        run_pending(exp.job_id)
        runs.experiment_finalize(experiment_id=exp.pk)
        exps.append(exp)
    _viewer(client, private_project)
    ids = ",".join(str(e.pk) for e in exps)
    url = reverse("experiments:compare", kwargs={"project_id": private_project.pk})
    text = client.get(f"{url}?ids={ids}").content.decode()
    some = text[text.find(f'id="vs-{exps[1].pk}"') : text.find(f'id="vs-{exps[2].pk}"')]
    none = text[text.find(f'id="vs-{exps[2].pk}"') :]
    assert "did not apply to 1 of 3 items" in some and "applied to none" not in some
    assert "applied to none of the 3 items" in none
    assert f"/experiments/{exps[2].pk}/" in none


def test_while_experiments_run_the_comparison_shows_how_far_each_has_got(
    api: Any, client: Client, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = [_turn(i) for i in range(2)]
    for w in wires:
        post(api, w)
    seeds = sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires])
    version = sets.latest_version(sets.eval_set_create(project=private_project, name="wait", seeds=seeds))
    st = strategies.preset_ensure(project=private_project, name="without memory")
    exps = [
        runs.experiment_start(project=private_project, set_version=version, strategy_version=sv, samples=1)
        for sv in (None, strategies.strategy_latest(st))
    ]
    _viewer(client, private_project)
    url = reverse("experiments:compare", kwargs={"project_id": private_project.pk})
    text = client.get(f"{url}?ids={exps[0].pk},{exps[1].pk}").content.decode()
    assert 'id="waiting"' in text and 'http-equiv="refresh"' in text
    for e in exps:
        assert f'/experiments/{e.pk}/">#{e.pk} ' in text
    assert "0 of 2 answers" in text
    # While it runs, its page says a replay started meanwhile does not wait for it.
    exp_url = reverse("experiments:experiment", kwargs={"project_id": private_project.pk,
                                                        "experiment_id": exps[1].pk})
    page = client.get(exp_url).content.decode()
    assert 'id="exp-queue-note"' in page and "goes ahead of this experiment's model calls" in page


def test_the_facts_an_item_lost_are_named_as_the_checks_say_them(
    api: Any, client: Client, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    _, control, drop = _experiments(api, private_project, stub_server, 2)
    _viewer(client, private_project)
    url = reverse("experiments:compare", kwargs={"project_id": private_project.pk})
    text = client.get(f"{url}?ids={control.pk},{drop.pk}").content.decode()
    flipped = text[text.find("Items that flipped") :]
    lost = [f for f in (drop.summary or {})["vs_control"]["flipped"] if f["lost"]]
    assert lost, drop.summary
    # 'states "BK000"' (escaped in the page), not the check's id.
    assert html.escape('states "BK000"') in flipped or html.escape('states "BK001"') in flipped
    assert not any(cid in flipped for f in lost for cid in f["lost"])
