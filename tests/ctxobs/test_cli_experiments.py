"""`ctxobs push --dataset` and `ctxobs experiment run` against the real server (pytest-django's
live_server on the test PostgreSQL). The experiment's replay runs are executed in the test
process, as a replay worker executes them, against a real OpenAI-compatible HTTP server."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.models import Project
from core.services import ingest_key_create
from ctxobs.cli import main
from ctxobs.cli_experiments import Progress
from experiments.models import EvalSet, Experiment
from experiments.services import runs, sets, strategies
from replay.models import ModelEndpoint
from tests import factories as f
from tests.experiments.conftest import fact_answer, run_pending
from tests.processes import free_port
from tests.replay.conftest import (  # noqa: F401 - fixtures
    private_project,
    stub_endpoint,
    stub_server,
)

# live_server answers from its own thread: what a test writes has to be committed.
live = pytest.mark.django_db(transaction=True)

N_ITEMS = 6
PLANTED = N_ITEMS - 2  # items whose memory holds the booking code they are asked about


def _turn(i: int, *, with_memory: bool = True, session: str = "s") -> dict[str, Any]:
    blocks = [f.block("system", "system", "You are a travel assistant.", pinned=True)]
    if with_memory:
        blocks.append(f.block("memory", "memory", f"Memory: booking code BK{i:03d}."))
    blocks.append(f.block("user", "user", "What is my booking code?"))
    return f.snapshot(
        session_id=f"{session}{i}",
        turn=1,
        blocks=blocks,
        output={"text": f"Your booking code is BK{i:03d}.", "tool_calls": [], "finish_reason": "stop"},
    )


def _fact(i: int) -> dict[str, Any]:
    return {"type": "fact", "match": "text", "value": f"BK{i:03d}"}


def _replay_key(project: Project) -> str:
    _, raw = ingest_key_create(project=project, name="cli", scopes=("ingest", "replay"))
    return raw


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        encoding="utf-8",
    )
    return path


def _last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])


# --- push --dataset ---------------------------------------------------------------------------
@live
def test_push_dataset_creates_the_set_with_its_checks_and_a_second_push_adds_a_version(
    live_server: Any, project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = _replay_key(project)
    set_check = {"type": "constraint", "rule": "max_chars", "limit": 500}
    exported = _write(
        tmp_path / "codes.jsonl",
        [
            {
                "dataset": {
                    "name": "elsewhere", "description": "booking codes", "version": 3, "checks": [set_check]
                }
            },
            *[{**_turn(i), "checks": [_fact(i)]} for i in range(3)],
        ],
    )
    rc = main(["push", "--dataset", "codes", str(exported), "--endpoint", live_server.url, "--api-key", key])
    out, err = capsys.readouterr()
    assert rc == 0, err
    report = _last_json(out)
    assert report["dataset"] == "codes" and report["version"] == 1 and report["created_set"]
    assert (report["added"], report["rejected"], report["unreadable"]) == (3, 0, 0)
    assert report["url"].startswith(live_server.url + "/")
    assert key not in out + err
    eval_set = EvalSet.objects.get(project=project, name="codes")
    assert eval_set.description == "booking codes"
    v1 = sets.latest_version(eval_set)
    assert [(c["type"], c["rule"], c["limit"]) for c in v1.checks] == [("constraint", "max_chars", 500)]
    items = list(v1.items.order_by("position"))
    assert [[c["value"] for c in it.checks] for it in items] == [["BK000"], ["BK001"], ["BK002"]]

    # `ctxobs export` output: no header, no checks.
    plain = _write(tmp_path / "more.jsonl", [_turn(i, session="t") for i in range(2)])
    rc = main(["push", "--dataset", "codes", str(plain), "--endpoint", live_server.url, "--api-key", key])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert _last_json(out)["version"] == 2 and _last_json(out)["added"] == 2
    v2 = sets.latest_version(eval_set)
    assert (v2.number, v2.n_items) == (2, 5)
    assert v2.checks == v1.checks


@live
def test_push_dataset_reports_bad_lines_and_refused_snapshots_and_keeps_the_rest(
    live_server: Any, project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXOBS_ENDPOINT", live_server.url)
    monkeypatch.setenv("CTXOBS_API_KEY", _replay_key(project))
    malformed = {k: v for k, v in _turn(1).items() if k != "ts"}
    path = _write(tmp_path / "mixed.jsonl", [_turn(0), "{not json", malformed, _turn(2)])
    rc = main(["push", "--dataset", "mixed", str(path)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert f"{path}:2: not JSON" in err
    assert f"{path}:3: ts:" in err
    report = _last_json(out)
    assert (report["added"], report["rejected"], report["unreadable"]) == (2, 1, 1)
    v = sets.latest_version(EvalSet.objects.get(project=project, name="mixed"))
    assert v.n_items == 2

    # Every item refused: no new version, and the reasons still say where.
    only_bad = _write(tmp_path / "bad.jsonl", [malformed])
    rc = main(["push", "--dataset", "mixed", str(only_bad)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert f"{only_bad}:1: ts:" in err and "every item was refused" in err
    assert sets.latest_version(EvalSet.objects.get(project=project, name="mixed")).number == 1


def test_push_dataset_to_a_server_that_is_not_there_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "one.jsonl", [_turn(0)])
    url = f"http://127.0.0.1:{free_port()}"
    rc = main(["push", "--dataset", "codes", str(path), "--endpoint", url, "--api-key", "ctx_secret_key"])
    _, err = capsys.readouterr()
    assert rc == 2
    assert "cannot reach" in err and "nothing sent" in err
    assert "ctx_secret_key" not in err


# --- experiment run ---------------------------------------------------------------------------
@pytest.fixture
def planted(
    private_project: Project, stub_endpoint: Any, stub_server: Any  # noqa: F811 - the fixtures imported above
) -> EvalSet:
    """A set whose first PLANTED items ask for a booking code that only their memory block holds,
    and a model that states each code it finds in the prompt."""
    seeds, rejected = sets.seeds_from_wire([_turn(i, with_memory=i < PLANTED) for i in range(N_ITEMS)])
    assert not rejected
    for i, seed in enumerate(seeds[:PLANTED]):
        seed.checks = [_fact(i)]
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(N_ITEMS)})
    return sets.eval_set_create(project=private_project, name="codes", seeds=seeds)


def _run(project: Project, argv: list[str], *, timeout: float = 60.0) -> int:
    """main(ARGV) in a thread; once it has started an experiment, its runs are executed here (as a
    replay worker would) and it is finalized, so that the command sees it finish."""
    before = set(Experiment.objects.filter(project=project).values_list("pk", flat=True))
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["rc"] = main(argv)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result["exc"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    exp = None
    while exp is None and thread.is_alive() and time.monotonic() < deadline:
        exp = Experiment.objects.filter(project=project).exclude(pk__in=before).first()
        if exp is None:
            time.sleep(0.05)
    if exp is not None:
        assert exp.job_id is not None
        run_pending(exp.job_id)
        runs.experiment_finalize(experiment_id=exp.pk)
    thread.join(timeout)
    assert not thread.is_alive(), "the command did not return"
    if "exc" in result:
        raise result["exc"]
    return int(result["rc"])


@live
def test_experiment_run_prints_the_comparison_and_exits_0_when_thresholds_hold(
    live_server: Any, planted: EvalSet, capsys: pytest.CaptureFixture[str],
) -> None:
    project = planted.project
    strategies.strategy_create(
        project=project, name="memory last", operations=[{"op": "move", "key": "memory", "to": "end"}]
    )
    key = _replay_key(project)
    endpoint_id = ModelEndpoint.objects.get(project=project, name="stub").pk
    rc = _run(
        project,
        [
            "experiment", "run", "--dataset", "codes", "--strategy", "memory last",
            "--endpoint-id", str(endpoint_id), "--samples", "2",
            "--fail-under", "fidelity=0.95", "--fail-over", "prompt_tokens=100000",
            "--endpoint", live_server.url, "--api-key", key,
        ],
    )
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("metric"))
    assert "as saved" in header and "memory last" in header and "difference (95% CI)" in header
    fidelity = next(line for line in lines if line.startswith("fact fidelity"))
    control, strategy = header.index("as saved"), header.index("memory last")
    assert fidelity[control:].startswith("1.00 ") and fidelity[strategy:].startswith("1.00 ")
    assert "+0.00 [+0.00, +0.00]" in fidelity
    assert "task success:" in out and "flipped items: 0" in out
    assert "ok   fact_fidelity 1 >= 0.95" in out
    assert "ok   prompt_tokens" in out
    exp = Experiment.objects.get(project=project)
    assert exp.status == Experiment.Status.DONE and exp.samples == 2
    assert f"{live_server.url}/p/{project.pk}/" in out
    assert key not in out + err


@live
def test_experiment_run_fails_a_threshold_the_strategy_misses(
    live_server: Any, planted: EvalSet, capsys: pytest.CaptureFixture[str]
) -> None:
    project = planted.project
    strategies.strategy_create(
        project=project, name="no memory", operations=[{"op": "remove", "key": "memory"}]
    )
    rc = _run(
        project,
        [
            "experiment", "run", "--dataset", "codes", "--strategy", "no memory", "--samples", "1",
            "--fail-under", "fidelity=0.95", "--fail-over", "violations=0.02",
            "--endpoint", live_server.url, "--api-key", _replay_key(project),
        ],
    )
    out, err = capsys.readouterr()
    assert rc == 1, out + err
    assert "FAIL fact_fidelity 0 < 0.95" in out
    # No item has a constraint check: the threshold cannot hold.
    assert "FAIL constraint_violations: could not be measured" in out
    assert f"flipped items: {PLANTED}" in out


@live
def test_experiment_run_exits_1_when_the_experiment_ends_partial(
    live_server: Any, planted: EvalSet, stub_server: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    project = planted.project
    strategies.strategy_create(
        project=project, name="memory last", operations=[{"op": "move", "key": "memory", "to": "end"}]
    )
    stub_server.script = [(400, {}, 0.0)]  # the model refuses one call: that run fails for good
    rc = _run(
        project,
        [
            "experiment", "run", "--dataset", "codes", "--strategy", "memory last", "--samples", "1",
            "--endpoint", live_server.url, "--api-key", _replay_key(project),
        ],
    )
    out, err = capsys.readouterr()
    assert rc == 1, out + err
    assert Experiment.objects.get(project=project).status == Experiment.Status.PARTIAL
    assert ": partial (1 model calls failed" in out and "ended partial" in err


@live
def test_experiment_run_as_saved_cannot_judge_thresholds(
    live_server: Any, planted: EvalSet, capsys: pytest.CaptureFixture[str]
) -> None:
    project = planted.project
    rc = _run(
        project,
        [
            "experiment", "run", "--dataset", "codes", "--samples", "1", "--fail-under", "success=0.5",
            "--json", "--endpoint", live_server.url, "--api-key", _replay_key(project),
        ],
    )
    out, err = capsys.readouterr()
    assert rc == 1
    exp = json.loads(out)
    assert exp["status"] == "done" and exp["vs_control"] is None
    assert "cannot be judged" in err


@live
@live
@pytest.mark.parametrize(
    "flag", ["--fail-under=fidelty=0.9", "--fail-over=violations", "--fail-over=cost=much"],
    ids=["unknown-metric", "no-value", "not-a-number"],
)
def test_experiment_run_refuses_a_bad_threshold_before_starting_anything(
    live_server: Any, planted: EvalSet, flag: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = planted.project
    rc = main(["experiment", "run", "--dataset", "codes", flag, "--endpoint", live_server.url,
               "--api-key", _replay_key(project)])
    _, err = capsys.readouterr()
    assert rc == 2
    assert flag.split("=", 1)[1] in err
    assert not Experiment.objects.exists()


@live
def test_experiment_run_with_a_key_without_the_replay_scope_prints_the_servers_reason(
    live_server: Any, planted: EvalSet, capsys: pytest.CaptureFixture[str]
) -> None:
    project = planted.project
    _, ingest_only = ingest_key_create(project=project, name="agent")
    rc = main(
        ["experiment", "run", "--dataset", "codes", "--endpoint", live_server.url, "--api-key", ingest_only]
    )
    _, err = capsys.readouterr()
    assert rc == 2
    assert "(403)" in err and "lacks the replay scope" in err
    assert ingest_only not in err
    assert not Experiment.objects.exists()


@live
def test_experiment_run_gives_up_at_its_timeout_and_says_the_experiment_goes_on(
    live_server: Any, planted: EvalSet, stub_server: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    project = planted.project
    # A replay worker left running by another test may take the runs: the model answers slowly.
    stub_server.delay = 10.0
    rc = main(["experiment", "run", "--dataset", "codes", "--samples", "1", "--timeout", "1.5",
               "--endpoint", live_server.url, "--api-key", _replay_key(project)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    exp = Experiment.objects.get(project=project)
    assert exp.status == Experiment.Status.RUNNING
    assert f"goes on in the server: {live_server.url}/p/{project.pk}/experiments/{exp.pk}/" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_an_occasional_line_elsewhere() -> None:
    exp = {"id": 7, "status": "running", "progress": {"runs": 40, "done": 10, "failed": 1}}
    term = _Terminal()
    bar = Progress(term)
    bar.show(exp)
    bar.show({**exp, "progress": {"runs": 40, "done": 40, "failed": 1}})
    bar.end()
    drawn = term.getvalue()
    assert drawn.startswith("\r[" + "#" * 7 + "." * 23 + "] 10/40 runs, 1 failed (running)")
    assert "\r[" + "#" * 30 + "] 40/40 runs" in drawn and drawn.endswith("\n")

    log = io.StringIO()
    plain = Progress(log)
    plain.show(exp)
    assert log.getvalue() == ""  # at most a line every ~10 s
    plain.last_line -= 11
    plain.show(exp)
    assert log.getvalue() == "ctxobs experiment: 7: 10/40 runs, 1 failed (running)\n"
