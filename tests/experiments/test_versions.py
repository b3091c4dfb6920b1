"""The Versions page against the real database, turns stored through the ingest API: figures per
tag value with intervals over sessions, each version against the one before it, the untagged
turns, the order of versions, the query count and escaping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.models import Membership, Project
from experiments.stats import BETTER, SAME, WORSE
from experiments.versions import cluster_ratio_bootstrap, version_key
from ingest.partitions import partition_name
from tests import factories as f

pytestmark = pytest.mark.django_db

SESSIONS = 4
TURNS = 3


def turn(
    session_id: str, t: int, *, tags: dict[str, Any] | None, tokens: int, failed: int = 0,
    compressions: int = 0, model: str = "gpt-4o", usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A turn of TOKENS tokens in a 10,000-token window with no reserve (watermark TOKENS / 10,000),
    two checks (FAILED of them failed), two recalled memories (one injected) and USAGE."""
    s = f.snapshot(
        session_id=session_id, turn=t, model=model, context_window=10_000,
        blocks=[f.block("system", "system", "You are a travel assistant.", tokens=tokens)],
        validation=[{"layer": "structure", "check": "json_schema", "passed": failed < 1},
                    {"layer": "semantic", "check": "facts", "passed": failed < 2}],
        recall=[{"memory_id": "m-1", "channel": "vector", "injected": True},
                {"memory_id": "m-2", "channel": "vector", "injected": False}],
        compression=[{"strategy": "drop_tool_output", "block": "history"}] * compressions,
        output={"text": "ok", "usage": usage or {"prompt_tokens": 1000, "completion_tokens": 100,
                                                  "cached_tokens": 400}},
    )
    s["model"]["reserve_tokens"] = 0
    if tags is not None:
        s["tags"] = tags
    return s


def post(api: Any, snaps: list[dict[str, Any]]) -> None:
    r = api.post_snapshots(snaps)
    assert r.status_code == 200, r.content
    assert all(x["status"] == "created" for x in r.json()["results"])


def version_turns(version: str, *, failing: bool) -> list[dict[str, Any]]:
    """SESSIONS sessions of TURNS turns: session i, turn t fills 0.1 (t + 1) + 0.05 i of the
    window, the same in every version. v14 fails one check in all (session 0, turn 0); a failing
    version fails one check on every turn. Two compressions in all (session 0, turn 2)."""
    out = []
    for i in range(SESSIONS):
        for t in range(TURNS):
            failed = (1 if failing else 0) if not (i == 0 and t == 0) else 1
            out.append(turn(f"{version}-s{i}", t, tags={"assembly_version": version, "env": "prod"},
                            tokens=1000 * (t + 1) + 500 * i, failed=failed,
                            compressions=2 if (i, t) == (0, 2) else 0))
    return out


def member_client(project: Project) -> Client:
    user = get_user_model().objects.create_user(username="viewer", password="pw-viewer")
    Membership.objects.create(project=project, user=user, role="viewer")
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def stored(api: Any, project: Project) -> Project:
    """v14 and v15 (v15 fails a check on every turn, same watermarks), and one untagged session
    of a model priced only in the project's table."""
    project.price_table = {"acme-llm": {"input": 1.0, "cached_input": 0.5, "output": 2.0}}
    project.save(update_fields=["price_table"])
    post(api, version_turns("v15", failing=True))
    post(api, version_turns("v14", failing=False))
    post(api, [turn("plain", t, tags=None, tokens=5000, model="acme-llm-2",
                    usage={"prompt_tokens": 2000, "completion_tokens": 1000}) for t in range(2)])
    return project


def page(c: Client, project: Project, **params: str) -> Any:
    r = c.get(reverse("experiments:versions", args=[project.pk]), params)
    assert r.status_code == 200
    return r


def test_each_version_gets_its_figures_with_intervals_over_sessions(stored: Project) -> None:
    report = page(member_client(stored), stored).context["report"]
    assert [g.label for g in report.groups] == ["v14", "v15", "(none)"]
    v14, v15, none = report.groups
    for g in (v14, v15):
        assert (g.turns, g.sessions) == (12, 4)
        e = g.estimates
        # Watermarks 0.1 (t + 1) + 0.05 i: mean 0.2 + 0.075; the 12 sorted values put the median
        # between 0.25 and 0.3 and the 90th percentile 0.9 of the way from 0.35 to 0.4.
        assert e["watermark"].value == pytest.approx(0.275)
        assert g.watermark_median == pytest.approx(0.275)
        assert g.watermark_p90 == pytest.approx(0.395)
        assert e["watermark"].lo < 0.275 < e["watermark"].hi
        assert (e["watermark"].basis, e["watermark"].sessions) == (12, 4)
        assert e["compressions"].value == pytest.approx(2 / 12)
        assert e["recall_injection"].value == pytest.approx(12 / 24)
        assert e["cache_hit"].value == pytest.approx(400 / 1000)
        # gpt-4o: 600 uncached at $2.50, 400 cached at $1.25 and 100 out at $10 per million.
        assert e["cost"].value == pytest.approx((600 * 2.5 + 400 * 1.25 + 100 * 10) / 1e6)
        assert e["validation_failure"].basis == 24
    assert v14.estimates["validation_failure"].value == pytest.approx(1 / 24)
    assert v15.estimates["validation_failure"].value == pytest.approx(12 / 24)
    lo, hi = v15.estimates["validation_failure"].lo, v15.estimates["validation_failure"].hi
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)  # every v15 session fails 3 of 6
    # The untagged session: the project's own price for "acme-llm", no cache reported.
    assert (none.turns, none.sessions) == (2, 1)
    assert none.estimates["watermark"].value == pytest.approx(0.5)
    assert none.estimates["cost"].value == pytest.approx((2000 * 1.0 + 1000 * 2.0) / 1e6)
    assert none.estimates["cache_hit"] is None


def test_v15_is_worse_on_validation_failures_and_the_same_on_the_watermark(stored: Project) -> None:
    r = page(member_client(stored), stored)
    (step,) = r.context["report"].steps  # the untagged turns are not compared
    assert (step.group.label, step.base.label) == ("v15", "v14")
    by = {c.figure.key: c for c in step.comparisons}
    failures = by["validation_failure"]
    assert failures.direction == WORSE and failures.diff == pytest.approx(0.5 - 1 / 24)
    assert failures.lo > 0
    assert failures.words.startswith(
        "v15: validation failure rate 0.5 against 0.042 for v14 (+0.46, 95% CI +")
    assert failures.words.endswith(": worse (p = 0.002)")
    watermark = by["watermark"]
    assert watermark.direction == SAME and watermark.diff == pytest.approx(0, abs=1e-12)
    assert watermark.lo < 0 < watermark.hi
    assert "no difference beyond noise" in watermark.words
    assert all(by[k].direction == SAME for k in ("compressions", "recall_injection", "cache_hit", "cost"))
    assert [c.figure.key for c in step.worse] == ["validation_failure"]
    html = r.content.decode()
    assert failures.words in html and watermark.words in html
    assert 'id="verdict"' in html and 'data-figure="fig-versions"' in html


def test_the_tag_and_the_period_come_from_the_query(stored: Project) -> None:
    c = member_client(stored)
    env = page(c, stored, tag="env").context["report"]
    assert [(g.label, g.turns) for g in env.groups] == [("prod", 24), ("(none)", 2)]
    assert env.steps == []
    early = page(c, stored, since="2020-01-01", until="2020-01-07")
    assert early.context["report"].groups == [] and b'id="versions-empty"' in early.content
    bad = page(c, stored, since="last tuesday")
    assert "since: a date" in bad.content.decode() and len(bad.context["report"].groups) == 3


def test_versions_are_in_natural_order_and_each_is_compared_with_the_one_before(
    api: Any, project: Project
) -> None:
    post(api, [turn(f"{v}-s", 0, tags={"assembly_version": v}, tokens=2000) for v in ("v10", "v9", "v15")])
    report = page(member_client(project), project).context["report"]
    assert [g.label for g in report.groups] == ["v9", "v10", "v15"]
    assert [(s.group.label, s.base.label) for s in report.steps] == [("v10", "v9"), ("v15", "v10")]
    # One session a side: the intervals are not trusted with a verdict.
    assert all(c.direction == SAME and "too few sessions" in c.words
               for s in report.steps for c in s.comparisons)


@pytest.mark.parametrize(
    ("values", "ordered"),
    [
        (["v15", "v9", "v10", "v14"], ["v9", "v10", "v14", "v15"]),
        (["1.10", "1.9", "1.2.3"], ["1.2.3", "1.9", "1.10"]),
        (["rc-2", "RC-10", "rc-1"], ["rc-1", "rc-2", "RC-10"]),
    ],
    ids=["v-numbers", "dotted", "case-insensitive"],
)
def test_version_key_orders_digit_runs_as_numbers(values: list[str], ordered: list[str]) -> None:
    assert sorted(values, key=version_key) == ordered


@pytest.mark.parametrize("sessions", [2, 24], ids=["few-sessions", "many-sessions"])
def test_the_page_reads_in_a_constant_number_of_queries(
    api: Any, project: Project, sessions: int, django_assert_max_num_queries: Any
) -> None:
    snaps = [turn(f"s{i}-{v}", t, tags={"assembly_version": v}, tokens=1000 + 100 * i, failed=i % 2)
             for v in ("v1", "v2", "v3") for i in range(sessions) for t in range(3)]
    snaps += [turn(f"plain-{i}", 0, tags=None, tokens=3000) for i in range(sessions)]
    for start in range(0, len(snaps), 100):
        post(api, snaps[start:start + 100])
    c = member_client(project)
    with django_assert_max_num_queries(6):
        r = page(c, project)
    assert sum(g.turns for g in r.context["report"].groups) == len(snaps)


def test_the_reads_visit_only_the_period_s_day_partitions(stored: Project) -> None:
    today = datetime.now(UTC)
    with CaptureQueriesContext(connection) as ctx:
        r = page(member_client(stored), stored, since=f"{today:%Y-%m-%d}", until=f"{today:%Y-%m-%d}")
    assert sum(g.turns for g in r.context["report"].groups) == 26
    reads = [q["sql"] for q in ctx.captured_queries if "FROM ingest_snapshot" in q["sql"]]
    assert len(reads) == 2
    with connection.cursor() as cur:
        for sql in reads:
            cur.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cur.fetchall())
            assert partition_name("ingest_snapshot", today.date()) in plan
            # The partitions made ahead for the coming days are left out when planning.
            assert partition_name("ingest_snapshot", (today + timedelta(days=1)).date()) not in plan


def test_a_tag_value_with_html_is_escaped(api: Any, project: Project) -> None:
    hostile = '<img src=x onerror="alert(1)">v2'
    post(api, [turn(f"h-{i}", 0, tags={"assembly_version": v}, tokens=2000, model="mystery-1")
               for i in range(2) for v in ("v1", hostile)])
    r = page(member_client(project), project)
    html = r.content.decode()
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;v2" in html
    # In the chart's labels too (plotly renders some HTML in them).
    figure = r.context["report"].figure
    assert set(figure["data"][1]["x"]) == {"v1", "&lt;img src=x onerror=\"alert(1)\"&gt;v2"}
    # A model without a price: no cost.
    assert all(g.estimates["cost"] is None for g in r.context["report"].groups)


def test_a_member_of_another_project_gets_404(stored: Project) -> None:
    other = Project.objects.create(name="other")
    user = get_user_model().objects.create_user(username="outsider", password="pw-outsider")
    Membership.objects.create(project=other, user=user, role="admin")
    c = Client()
    c.force_login(user)
    assert c.get(reverse("experiments:versions", args=[stored.pk])).status_code == 404


@pytest.mark.parametrize(
    ("nums", "dens", "expected"),
    [
        ([1.0, 3.0, 0.0], [2.0, 4.0, 4.0], 4 / 10),
        ([0.2], [1.0], 0.2),
    ],
    ids=["ratio-of-sums", "one-session"],
)
def test_cluster_bootstrap_gives_the_ratio_of_sums_inside_its_interval(
    nums: list[float], dens: list[float], expected: float
) -> None:
    (ratio, lo, hi, reps), (same, *_) = cluster_ratio_bootstrap(
        [(nums, dens), (nums, dens)], seed=1, n_boot=200)
    assert ratio == same == pytest.approx(expected)
    assert lo <= ratio <= hi and len(reps) == 200
    assert cluster_ratio_bootstrap([(nums, dens)], seed=1, n_boot=200)[0][:3] == (ratio, lo, hi)


def test_many_sessions_are_resampled_m_out_of_n_with_the_full_spread() -> None:
    series = [([float(i % 10) for i in range(4000)], [1.0] * 4000)]
    (full,) = cluster_ratio_bootstrap(series, seed=3, n_boot=400, max_resample=4000)
    (capped,) = cluster_ratio_bootstrap(series, seed=3, n_boot=400, max_resample=250)
    assert capped[0] == full[0] == pytest.approx(4.5)
    # The same width within Monte Carlo error, though each resample drew 16 times fewer sessions.
    assert (capped[2] - capped[1]) == pytest.approx(full[2] - full[1], rel=0.25)


def test_better_is_said_when_the_rate_falls(api: Any, project: Project) -> None:
    post(api, version_turns("v1", failing=True) + version_turns("v2", failing=False))
    (step,) = page(member_client(project), project).context["report"].steps
    failures = next(c for c in step.comparisons if c.figure.key == "validation_failure")
    assert failures.direction == BETTER and failures.words.endswith(": better (p = 0.002)")
