"""`ctxobs` command line: `ctxobs push [PATH ...]` sends spooled snapshots; `ctxobs export`
saves a session, or what a project received in a time range, as such a JSONL file;
`ctxobs push --dataset NAME FILE ...` makes JSONL files an evaluation set; `ctxobs experiment run`
runs a context experiment and judges it against thresholds.

The SDK sends its spool by itself once the server answers again; `push` is for the offline case
(a machine that recorded without a server, a spool copied elsewhere). PATH is a spool directory
(its files are sent oldest first, each under the same lock the SDK takes, and removed once
delivered) or a JSONL file; with no PATH, the default spool directory of the endpoint and key.
Pushing is idempotent: the server deduplicates by snapshot_id, so a file (or part of it) that
was already delivered is reported as duplicates, not stored twice.
Exit status: 0 all delivered (created or duplicate), 1 some rejected, 2 some not delivered.

`ctxobs export (--session ID | --since T [--until T]) -o FILE` writes the snapshots in the wire
format, one a line (GET /api/v1/export), so that `ctxobs push FILE` to any project restores them:
archive before retention removes them. Exit status: 0 written, 1 refused by the server, 2 not reached.

`ctxobs push --dataset NAME FILE [FILE ...]` reads JSONL files (`ctxobs export` output, or a set's
export: a {"dataset": {...}} header line, then snapshots with their `checks`) and adds their items
to the evaluation set NAME as one new version, creating the set (with the header's description and
checks) when it does not exist. The key needs the replay scope.
Exit status: 0 all added, 1 some rejected or unreadable lines, 2 nothing stored (refused, not reached).

`ctxobs experiment run --dataset NAME [--strategy NAME] [--fail-under METRIC=VALUE] ...` starts an
experiment (POST /api/v1/experiments; the key needs the replay scope), waits for the replay workers,
prints the strategy against the control and checks the strategy's means against the thresholds.
Exit status: 0 done and every threshold holds, 1 a threshold failed or the experiment ended
failed/partial/cancelled, 2 usage, network or refused errors, or the wait timed out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ctxobs.cli_experiments import add_experiment_parser, experiment_run, push_dataset
from ctxobs.spool import Spool, resolve_spool_dir
from ctxobs.transport import DeliveryReport, Transport, _Item, read_spool


def _target(args: argparse.Namespace, command: str) -> tuple[str, str] | None:
    """The endpoint and API key of COMMAND (flags first, then the environment); None, with the
    reason printed, when there is no endpoint."""
    endpoint = args.endpoint or os.environ.get("CTXOBS_ENDPOINT", "")
    api_key = args.api_key or os.environ.get("CTXOBS_API_KEY", "")
    if not endpoint:
        print(f"ctxobs {command}: no endpoint; pass --endpoint or set CTXOBS_ENDPOINT", file=sys.stderr)
        return None
    return endpoint, api_key


def _push(args: argparse.Namespace) -> int:
    target = _target(args, "push")
    if target is None:
        return 2
    endpoint, api_key = target
    if args.dataset is not None:
        return push_dataset(args, endpoint, api_key, 300.0 if args.timeout is None else args.timeout)
    paths = [Path(p) for p in args.paths]
    if not paths:
        default = resolve_spool_dir(True, endpoint, api_key)
        if default is None:
            print("ctxobs push: the spool is off (CTXOBS_SPOOL); pass a PATH", file=sys.stderr)
            return 2
        paths = [default]
    total = {
        "files": 0,
        "items": 0,
        "created": 0,
        "duplicate": 0,
        "rejected": 0,
        "unsent": 0,
        "unreadable": 0,
    }
    errors: list[str] = []
    transport = Transport(
        endpoint,
        api_key,
        batch_size=args.batch_size,
        max_retries=args.retries,
        timeout=30.0 if args.timeout is None else args.timeout,
        spool=False,
        on_error=lambda e: errors.append(f"{e.kind}: {e}"),
        flush_at_exit=False,
    )
    worst = 0

    def tally(path: Path, items: list[_Item], bad: int, report: DeliveryReport) -> int:
        counts = {
            "created": len(report.created),
            "duplicate": len(report.duplicate),
            "rejected": len(report.rejected),
            "unsent": len(report.unsent) + len(report.refused),
        }
        total["files"] += 1
        total["items"] += len(items)
        total["unreadable"] += bad
        for k, v in counts.items():
            total[k] += v
        for line in errors[:20]:
            print(f"ctxobs push: {path}: {line}", file=sys.stderr)
        errors.clear()
        if counts["unsent"]:
            return 2
        return 1 if counts["rejected"] or bad else 0

    for path in paths:
        if path.is_dir():
            spool = Spool(path)
            while (claim := spool.claim_oldest()) is not None:
                items, bad = _parse(claim.lines)
                report = transport.deliver(items)
                claim.finish([i.body for i in report.unsent + report.refused])
                status = tally(claim.path, items, bad, report)
                worst = max(worst, status)
                if status == 2:
                    break  # the server is not taking them now; the rest stays for later
            continue
        try:
            items, bad = read_spool(path)
        except OSError as exc:
            print(f"ctxobs push: cannot read {path}: {exc.strerror}", file=sys.stderr)
            worst = max(worst, 2)
            continue
        status = tally(path, items, bad, transport.deliver(items))
        worst = max(worst, status)
        if status == 0 and args.delete:
            os.remove(path)
    print(json.dumps(total))
    return worst


def _export(args: argparse.Namespace) -> int:
    target = _target(args, "export")
    if target is None:
        return 2
    endpoint, api_key = target
    if not args.session and not args.since:
        print("ctxobs export: pass --session ID, or --since (and --until)", file=sys.stderr)
        return 2
    pairs = (("session_id", args.session), ("since", args.since), ("until", args.until))
    query = {k: v for k, v in pairs if v}
    url = endpoint.rstrip("/") + "/api/v1/export?" + urllib.parse.urlencode(query)
    if not url.startswith(("http://", "https://")):
        print("ctxobs export: the endpoint must be an http(s) URL", file=sys.stderr)
        return 2
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})  # noqa: S310 - http(s)
    out = Path(args.output)
    tmp = out.with_name(out.name + ".part")
    lines = 0
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp, open(tmp, "wb") as fh:  # noqa: S310
            for line in resp:
                fh.write(line)
                lines += 1
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace")
        print(f"ctxobs export: the server answered {exc.code}: {detail}", file=sys.stderr)
        tmp.unlink(missing_ok=True)
        return 1
    except (OSError, urllib.error.URLError) as exc:
        print(f"ctxobs export: cannot export from {endpoint}: {exc}", file=sys.stderr)
        tmp.unlink(missing_ok=True)
        return 2
    os.replace(tmp, out)
    print(json.dumps({"file": str(out), "snapshots": lines}))
    return 0


def _parse(lines: list[bytes]) -> tuple[list[_Item], int]:
    items: list[_Item] = []
    bad = 0
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            items.append(_Item(str(obj.get("snapshot_id", "")), line))
        else:
            bad += 1
    return items, bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxobs", description="ctxobs SDK tools")
    sub = parser.add_subparsers(dest="command", required=True)
    push = sub.add_parser("push", help="send spooled snapshots (a spool directory or JSONL files)")
    push.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="spool directory or JSONL file (default: the spool of the endpoint and key)",
    )
    push.add_argument("--endpoint", help="server base URL (default: CTXOBS_ENDPOINT)")
    push.add_argument("--api-key", help="project key (default: CTXOBS_API_KEY)")
    push.add_argument("--batch-size", type=int, default=200)
    push.add_argument("--retries", type=int, default=4, help="retries per batch on 429/5xx/errors")
    push.add_argument(
        "--timeout", type=float, default=None, help="seconds per request (default 30; 300 with --dataset)"
    )
    push.add_argument(
        "--dataset", metavar="NAME", help="add the FILEs' items to the evaluation set NAME (one new "
        "version; the set is created when it does not exist)"
    )
    push.add_argument(
        "--delete", action="store_true", help="remove a FILE once all of it was delivered (spool "
        "directories always lose their delivered files)"
    )
    push.add_argument("-v", "--verbose", action="store_true")
    export = sub.add_parser("export", help="save snapshots as JSONL in the wire format (for `ctxobs push`)")
    export.add_argument("--session", help="one session's snapshots")
    export.add_argument("--since", help="snapshots that arrived at or after this time (ISO 8601, "
                        "with offset)")
    export.add_argument("--until", help="... and before this time")
    export.add_argument("-o", "--output", required=True, help="the JSONL file to write")
    export.add_argument("--endpoint", help="server base URL (default: CTXOBS_ENDPOINT)")
    export.add_argument("--api-key", help="project key (default: CTXOBS_API_KEY)")
    export.add_argument("--timeout", type=float, default=300.0)
    export.add_argument("-v", "--verbose", action="store_true")
    add_experiment_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if args.command == "push":
        return _push(args)
    if args.command == "export":
        return _export(args)
    if args.command == "experiment" and args.experiment_command == "run":
        target = _target(args, "experiment")
        return 2 if target is None else experiment_run(args, *target)
    return 2


if __name__ == "__main__":
    sys.exit(main())
