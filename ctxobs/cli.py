"""`ctxobs` command line: `ctxobs push FILE` sends a spool file written while the server was down.

Pushing is idempotent: the server deduplicates by snapshot_id, so a file (or part of it) that
was already delivered is reported as duplicates, not stored twice.
Exit status: 0 all delivered (created or duplicate), 1 some rejected, 2 some not delivered.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from ctxobs.transport import Transport, read_spool


def _push(args: argparse.Namespace) -> int:
    endpoint = args.endpoint or os.environ.get("CTXOBS_ENDPOINT", "")
    api_key = args.api_key or os.environ.get("CTXOBS_API_KEY", "")
    if not endpoint:
        print("ctxobs push: no endpoint; pass --endpoint or set CTXOBS_ENDPOINT", file=sys.stderr)
        return 2
    total = {
        "files": 0,
        "items": 0,
        "created": 0,
        "duplicate": 0,
        "rejected": 0,
        "unsent": 0,
        "unreadable": 0,
    }
    worst = 0
    for path in args.files:
        try:
            items, bad = read_spool(path)
        except OSError as exc:
            print(f"ctxobs push: cannot read {path}: {exc.strerror}", file=sys.stderr)
            worst = max(worst, 2)
            continue
        errors: list[str] = []
        transport = Transport(
            endpoint,
            api_key,
            batch_size=args.batch_size,
            max_retries=args.retries,
            timeout=args.timeout,
            on_error=lambda e, errors=errors: errors.append(f"{e.kind}: {e}"),
            flush_at_exit=False,
        )
        report = transport.deliver(items)
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
        if counts["unsent"]:
            worst = max(worst, 2)
        elif counts["rejected"] or bad:
            worst = max(worst, 1)
        elif args.delete:
            os.remove(path)
    print(json.dumps(total))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxobs", description="ctxobs SDK tools")
    sub = parser.add_subparsers(dest="command", required=True)
    push = sub.add_parser("push", help="send spooled snapshots (JSONL) to the ingest API")
    push.add_argument("files", nargs="+", metavar="FILE")
    push.add_argument("--endpoint", help="server base URL (default: CTXOBS_ENDPOINT)")
    push.add_argument("--api-key", help="project key (default: CTXOBS_API_KEY)")
    push.add_argument("--batch-size", type=int, default=200)
    push.add_argument("--retries", type=int, default=4, help="retries per batch on 429/5xx/errors")
    push.add_argument("--timeout", type=float, default=30.0)
    push.add_argument("--delete", action="store_true", help="remove a file once all of it was delivered")
    push.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if args.command == "push":
        return _push(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
