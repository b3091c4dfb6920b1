"""`ctxobs push --dataset NAME FILE ...` and `ctxobs experiment run`: evaluation sets and context
experiments through the REST API (/api/v1/datasets, /api/v1/experiments). Standard library and
httpx only, like the rest of the SDK."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from ctxobs.wire import EXPERIMENT_METRICS, MAX_ITEMS_PER_SET

REQUEST_TIMEOUT = 30.0
FINISHED = ("done", "partial", "failed", "cancelled")
# API metric names (ctxobs.wire.EXPERIMENT_METRICS) and their short aliases.
METRICS = EXPERIMENT_METRICS
ALIASES = {
    "fidelity": "fact_fidelity",
    "violations": "constraint_violations",
    "repeats": "repeat_questions",
    "success": "task_success",
    "tokens": "prompt_tokens",
    "ratio": "compression_ratio",
}
SHARES = ("fact_fidelity", "constraint_violations", "repeat_questions", "consistency", "task_success")
MAX_REASONS = 50
POLL_FAILURES = 10  # consecutive failed polls before giving up the wait
PLAIN_PROGRESS_EVERY = 10.0


class ApiError(Exception):
    """The server refused (STATUS > 0) or could not be reached (STATUS == 0)."""

    def __init__(self, status: int, detail: str, body: Any = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.body = body


def _detail(body: Any, text: str) -> str:
    if isinstance(body, dict) and "detail" in body:
        d = body["detail"]
        if isinstance(d, list):  # a schema error: [{"loc": [...], "msg": ...}, ...]
            return "; ".join(
                f"{'.'.join(str(x) for x in e.get('loc', []) if x not in ('body', 'payload'))}: "
                f"{e.get('msg', '')}"
                if isinstance(e, dict)
                else str(e)
                for e in d[:10]
            )
        return str(d)
    return text[:500] or "(no detail)"


class Api:
    """JSON calls to the ctxobs server with a project key; every call has a timeout."""

    def __init__(self, endpoint: str, api_key: str, *, timeout: float = REQUEST_TIMEOUT) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.client = httpx.Client(
            base_url=self.endpoint + "/api/v1",
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=timeout,
        )

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, path: str, body: Any = None, *, ok: Sequence[int] = (200, 201, 207)) -> Any:
        try:
            resp = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.endpoint}: {exc}") from exc
        try:
            data = resp.json()
        except ValueError:
            data = None
        if resp.status_code not in ok:
            raise ApiError(resp.status_code, _detail(data, resp.text), data)
        return data

    def absolute(self, url: str) -> str:
        return urllib.parse.urljoin(self.endpoint + "/", url)


def http_endpoint(endpoint: str, command: str) -> bool:
    if endpoint.startswith(("http://", "https://")):
        return True
    print(f"ctxobs {command}: the endpoint must be an http(s) URL", file=sys.stderr)
    return False


# --- push --dataset ------------------------------------------------------------------------------
@dataclass
class DatasetFile:
    """What FILES hold: the first header (`{"dataset": {...}}`), the items with where each came
    from, and the lines that could not be read."""

    header: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def read_dataset_files(paths: Sequence[Path]) -> DatasetFile:
    """Parse JSONL files as `ctxobs export` or GET /datasets/{ref}/export write them. An
    unreadable line is recorded by its file and number, the rest is kept. Raises OSError."""
    out = DatasetFile()
    for path in paths:
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw)
                except (ValueError, RecursionError):
                    out.unreadable.append(f"{path}:{n}: not JSON (one JSON object per line)")
                    continue
                if not isinstance(value, dict):
                    out.unreadable.append(f"{path}:{n}: not a JSON object (one snapshot per line)")
                    continue
                if len(value) == 1 and isinstance(value.get("dataset"), dict):
                    out.header = out.header or value["dataset"]
                    continue
                out.items.append(value)
                out.where.append(f"{path}:{n}")
    return out


def _rejected_lines(rejected: Any, where: Sequence[str]) -> tuple[list[str], int]:
    """The server's field errors as "file:line: field: msg (hint)", and how many items they cover."""
    lines: list[str] = []
    items: set[int] = set()
    for e in rejected if isinstance(rejected, list) else []:
        if not isinstance(e, dict):
            continue
        loc = list(e.get("loc") or [])
        index = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
        place = where[index] if index is not None and 0 <= index < len(where) else "?"
        if index is not None:
            items.add(index)
        fld = ".".join(str(x) for x in loc[2:]) or "item"
        hint = f" ({e['hint']})" if e.get("hint") else ""
        lines.append(f"{place}: {fld}: {e.get('msg', '')}{hint}")
    return lines, len(items)


def _print_reasons(lines: Sequence[str]) -> None:
    for line in lines[:MAX_REASONS]:
        print(f"ctxobs push: {line}", file=sys.stderr)
    if len(lines) > MAX_REASONS:
        print(f"ctxobs push: ... and {len(lines) - MAX_REASONS} more", file=sys.stderr)


def push_dataset(args: argparse.Namespace, endpoint: str, api_key: str, timeout: float) -> int:
    """Add FILES' items to the evaluation set NAME (created with the header's description and
    checks when it does not exist) in one request: one new version per push. Exit status: 0 all
    added, 1 some rejected or unreadable, 2 nothing stored (not sent, refused, not reached)."""
    name: str = args.dataset
    if not http_endpoint(endpoint, "push"):
        return 2
    if not args.paths:
        print("ctxobs push: --dataset needs FILE(s) to read", file=sys.stderr)
        return 2
    if args.delete:
        print("ctxobs push: --delete does not apply to --dataset", file=sys.stderr)
        return 2
    try:
        parsed = read_dataset_files([Path(p) for p in args.paths])
    except OSError as exc:
        print(f"ctxobs push: cannot read {exc.filename}: {exc.strerror}; nothing sent", file=sys.stderr)
        return 2
    _print_reasons(parsed.unreadable)
    if not parsed.items:
        print("ctxobs push: no snapshot to add; nothing sent", file=sys.stderr)
        return 2
    if len(parsed.items) > MAX_ITEMS_PER_SET:
        print(
            f"ctxobs push: {len(parsed.items)} items; a set version holds at most {MAX_ITEMS_PER_SET}. "
            "Split them over several sets; nothing sent",
            file=sys.stderr,
        )
        return 2
    api = Api(endpoint, api_key, timeout=timeout)
    quoted = urllib.parse.quote(name, safe="")
    created = False
    try:
        try:
            existing = api.call("GET", f"/datasets/{quoted}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            existing = None
        if existing is None:
            body: dict[str, Any] = {"name": name, "items": parsed.items}
            description = parsed.header.get("description")
            if isinstance(description, str) and description:
                body["description"] = description
            checks = parsed.header.get("checks")
            if isinstance(checks, list) and checks:
                body["checks"] = checks
            try:
                answer = api.call("POST", "/datasets", body)
                created = True
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # Created by someone else since the GET: add to it instead.
                answer = api.call("POST", f"/datasets/{quoted}/items", {"items": parsed.items})
        else:
            _warn_checks(existing, parsed.header, name)
            answer = api.call("POST", f"/datasets/{quoted}/items", {"items": parsed.items})
    except ApiError as exc:
        if exc.status == 0:
            print(f"ctxobs push: {exc.detail}; nothing sent", file=sys.stderr)
        else:
            reasons, _ = _rejected_lines((exc.body or {}).get("rejected"), parsed.where)
            _print_reasons(reasons)
            print(f"ctxobs push: the server answered {exc.status}: {exc.detail}", file=sys.stderr)
        return 2
    finally:
        api.close()
    if not isinstance(answer, dict):
        answer = {}
    reasons, n_rejected = _rejected_lines(answer.get("rejected"), parsed.where)
    _print_reasons(reasons)
    print(
        json.dumps(
            {
                "dataset": answer.get("name", name),
                "version": answer.get("latest_version"),
                "created_set": created,
                "items": len(parsed.items),
                "added": len(parsed.items) - n_rejected,
                "rejected": n_rejected,
                "unreadable": len(parsed.unreadable),
                "url": api.absolute(str(answer.get("url", ""))),
            }
        )
    )
    return 1 if n_rejected or parsed.unreadable else 0


def _warn_checks(existing: Any, header: dict[str, Any], name: str) -> None:
    checks = header.get("checks")
    versions = existing.get("versions") if isinstance(existing, dict) else None
    current = versions[0].get("checks") if versions else None
    if isinstance(checks, list) and checks and checks != current:
        print(
            f"ctxobs push: the file's set-level checks were not applied: set {name!r} exists and keeps "
            f"its own (PUT /api/v1/datasets/{{ref}}/checks changes them)",
            file=sys.stderr,
        )


# --- experiment run ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Threshold:
    metric: str
    value: float
    under: bool  # True: fail when the strategy's mean is below VALUE; False: above


def parse_threshold(text: str, *, under: bool) -> Threshold:
    """METRIC=VALUE with an API metric name or an alias; ValueError with the reason."""
    metric, sep, raw = text.partition("=")
    metric = metric.strip().lower().replace("-", "_")
    if not sep or not metric:
        raise ValueError(f"{text!r}: METRIC=VALUE, e.g. fidelity=0.95")
    metric = ALIASES.get(metric, metric)
    if metric not in METRICS:
        names = ", ".join(list(METRICS) + sorted(ALIASES))
        raise ValueError(f"{text!r}: no metric {metric!r}; one of {names}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{text!r}: the value must be a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text!r}: the value must be a finite number")
    return Threshold(metric, value, under)


def fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _value(name: str, x: float | None) -> str:
    if x is None:
        return "-"
    if name in SHARES or name == "compression_ratio":
        return f"{x:.2f}"
    if name == "cost":
        return f"{x:.3g}"
    return f"{x:,.0f}"


def _diff(name: str, d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    if name in SHARES or name == "compression_ratio":
        return f"{d['mean']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}]"
    if name == "cost":
        return f"{d['mean']:+.3g} [{d['lo']:+.3g}, {d['hi']:+.3g}]"
    return f"{d['mean']:+,.0f} [{d['lo']:+,.0f}, {d['hi']:+,.0f}]"


def comparison_table(vs: dict[str, Any]) -> list[str]:
    """The strategy against the control, one aligned row per metric."""
    head = ["metric", str(vs.get("a") or "control"), str(vs.get("b") or "strategy"), "difference (95% CI)",
            "verdict"]
    rows = [head]
    for m in vs.get("metrics") or []:
        name = str(m.get("name"))
        a, b = m.get("a") or {}, m.get("b") or {}
        verdict = m.get("lost_words") or m.get("verdict") or ("not measured" if not a and not b else "")
        rows.append(
            [
                str(m.get("label") or name),
                _value(name, a.get("mean")),
                _value(name, b.get("mean")),
                _diff(name, m.get("diff")),
                str(verdict),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]


def judge(thresholds: Sequence[Threshold], vs: dict[str, Any]) -> list[tuple[bool, str]]:
    """Each threshold against the strategy arm's mean: (holds, line)."""
    by_name = {m.get("name"): m for m in vs.get("metrics") or []}
    out: list[tuple[bool, str]] = []
    for t in thresholds:
        b = (by_name.get(t.metric) or {}).get("b") or {}
        mean = b.get("mean")
        op = ">=" if t.under else "<="
        if mean is None:
            out.append((False, f"FAIL {t.metric}: could not be measured (no item has checks for it), "
                               f"wanted {op} {fmt(t.value)}"))
            continue
        holds = mean >= t.value if t.under else mean <= t.value
        if holds:
            out.append((True, f"ok   {t.metric} {fmt(mean)} {op} {fmt(t.value)}"))
        else:
            out.append((False, f"FAIL {t.metric} {fmt(mean)} {'<' if t.under else '>'} {fmt(t.value)}"))
    return out


class Progress:
    """A text bar on a terminal; elsewhere a plain line every PLAIN_PROGRESS_EVERY seconds."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.drawn = False
        self.last_line = time.monotonic()

    def show(self, exp: dict[str, Any]) -> None:
        p = exp.get("progress") or {}
        runs, done, failed = int(p.get("runs") or 0), int(p.get("done") or 0), int(p.get("failed") or 0)
        status = str(exp.get("status"))
        counts = f"{done}/{runs} runs" + (f", {failed} failed" if failed else "") + f" ({status})"
        if self.tty:
            width = 30
            filled = int(width * done / runs) if runs else 0
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {counts}\x1b[K")
            self.stream.flush()
            self.drawn = True
        elif time.monotonic() - self.last_line >= PLAIN_PROGRESS_EVERY:
            self.last_line = time.monotonic()
            print(f"ctxobs experiment: {exp.get('id')}: {counts}", file=self.stream, flush=True)

    def end(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def _wait(api: Api, exp: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """Poll the experiment until it has finished; None, with the reason printed, when the wait
    ends first (timeout, or the server unreachable for a while)."""
    progress = Progress(sys.stderr)
    started = time.monotonic()
    failures = 0
    url = api.absolute(str(exp.get("url", "")))
    try:
        while str(exp.get("status")) not in FINISHED:
            elapsed = time.monotonic() - started
            if elapsed >= timeout:
                progress.end()
                print(
                    f"ctxobs experiment: gave up waiting after {timeout:g} s; the experiment goes on in "
                    f"the server: {url}",
                    file=sys.stderr,
                )
                return None
            time.sleep(min(1.0 if elapsed < 60 else 2.0, timeout - elapsed))
            try:
                exp = api.call("GET", f"/experiments/{exp['id']}")
                failures = 0
            except ApiError as exc:
                failures += 1
                if (0 < exc.status < 500) or failures >= POLL_FAILURES:
                    progress.end()
                    print(f"ctxobs experiment: {exc.detail}; the experiment goes on in the server: {url}",
                          file=sys.stderr)
                    return None
                continue
            progress.show(exp)
    except KeyboardInterrupt:
        progress.end()
        print(f"ctxobs experiment: interrupted; the experiment goes on in the server: {url}", file=sys.stderr)
        return None
    progress.end()
    return exp


def experiment_run(args: argparse.Namespace, endpoint: str, api_key: str) -> int:
    """Start an experiment, wait for it, print its comparison with the control and judge the
    thresholds. Exit status: 0 done and every threshold holds, 1 a threshold failed or the
    experiment ended failed/partial/cancelled, 2 usage, network or refused, or timeout."""
    if not http_endpoint(endpoint, "experiment"):
        return 2
    thresholds: list[Threshold] = []
    try:
        thresholds += [parse_threshold(t, under=True) for t in args.fail_under or []]
        thresholds += [parse_threshold(t, under=False) for t in args.fail_over or []]
    except ValueError as exc:
        print(f"ctxobs experiment: {exc}", file=sys.stderr)
        return 2
    body: dict[str, Any] = {"dataset": args.dataset, "samples": args.samples}
    for key, value in (
        ("version", args.version),
        ("strategy", args.strategy),
        ("endpoint_id", args.endpoint_id),
        ("temperature", args.temperature),
    ):
        if value is not None:
            body[key] = value
    api = Api(endpoint, api_key)
    try:
        try:
            exp = api.call("POST", "/experiments", body, ok=(201,))
        except ApiError as exc:
            where = "" if exc.status == 0 else f"the server refused ({exc.status}): "
            print(f"ctxobs experiment: {where}{exc.detail}", file=sys.stderr)
            return 2
        print(
            f"ctxobs experiment: {exp.get('id')} started: {exp.get('title')}; "
            f"{api.absolute(str(exp.get('url', '')))}",
            file=sys.stderr,
        )
        final = _wait(api, exp, args.timeout)
    finally:
        api.close()
    if final is None:
        return 2
    return _report(final, thresholds, api, as_json=args.json)


def _report(exp: dict[str, Any], thresholds: Sequence[Threshold], api: Api, *, as_json: bool) -> int:
    out = sys.stderr if as_json else sys.stdout
    status = str(exp.get("status"))
    vs = exp.get("vs_control")
    if as_json:
        print(json.dumps(exp, indent=2, sort_keys=True))
    else:
        print(f"experiment {exp.get('id')}: {exp.get('title')}: {status}"
              + (f" ({exp['reason']})" if exp.get("reason") else ""))
        if vs:
            print()
            for line in comparison_table(vs):
                print(line.rstrip())
            print()
            words = (vs.get("task_success") or {}).get("words")
            print(f"task success: {words or 'not judged (no item has checks)'}")
            print(f"flipped items: {len(vs.get('flipped') or [])}")
        else:
            print("no comparison: the experiment ran as saved (the control only)")
        print(api.absolute(str(exp.get("url", ""))))
    worst = 0 if status == "done" else 1
    if status != "done":
        print(f"ctxobs experiment: ended {status}", file=sys.stderr)
    if thresholds:
        if not vs:
            print("ctxobs experiment: the thresholds cannot be judged: no strategy, so no comparison "
                  "with the control", file=sys.stderr)
            return 1
        for holds, line in judge(thresholds, vs):
            print(line, file=out)
            worst = max(worst, 0 if holds else 1)
    return worst


def add_experiment_parser(sub: Any) -> None:
    """`ctxobs experiment run ...` on the top-level subparsers SUB."""
    experiment = sub.add_parser("experiment", help="context experiments on evaluation sets")
    esub = experiment.add_subparsers(dest="experiment_command", required=True)
    run = esub.add_parser(
        "run",
        help="run a strategy (or as saved) over a set on the replay workers; compare with the control",
        description="Exit status: 0 done and every threshold holds, 1 a threshold failed or the "
        "experiment ended failed/partial/cancelled, 2 usage, network or refused, or timeout.",
    )
    run.add_argument("--dataset", required=True, help="the evaluation set's name or id")
    run.add_argument("--version", type=int, help="the set's version (default: the latest)")
    run.add_argument("--strategy", help="the strategy's name or id (default: as saved, the control)")
    run.add_argument("--endpoint-id", type=int, help="the model endpoint's id (default: the project's)")
    run.add_argument("--samples", type=int, default=3, help="answers per item and arm (1-10)")
    run.add_argument("--temperature", type=float)
    run.add_argument(
        "--fail-under", action="append", metavar="METRIC=VALUE",
        help="fail when the strategy's mean of METRIC is below VALUE (repeatable), e.g. fidelity=0.95",
    )
    run.add_argument(
        "--fail-over", action="append", metavar="METRIC=VALUE",
        help="fail when the strategy's mean of METRIC is above VALUE (repeatable), e.g. violations=0.02",
    )
    run.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the end")
    run.add_argument("--json", action="store_true", help="print the experiment as the API returns it")
    run.add_argument("--endpoint", help="server base URL (default: CTXOBS_ENDPOINT)")
    run.add_argument("--api-key", help="project key with the replay scope (default: CTXOBS_API_KEY)")
    run.add_argument("-v", "--verbose", action="store_true")
