"""Frozen contexts: a turn in the wire form, stored once per project by its content hash, that
replay variants render from instead of the stored turn (evaluation sets pin their items here)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.db import IntegrityError, transaction

from core.models import Project
from replay import ablation
from replay.models import ReplayContext
from replay.types import VariantBlock

# Keys of the wire form that say where and when a turn was sent, not what it held: two copies of
# one context (an export imported into another install, say) are the same context without them.
_IDENTITY_KEYS = ("snapshot_id", "ts", "session_id", "turn", "agent", "tags")


def context_hash(snapshot: Mapping[str, Any]) -> str:
    """What makes two frozen contexts the same: the wire form's content, its identity aside."""
    return ablation.request_hash({k: v for k, v in snapshot.items() if k not in _IDENTITY_KEYS})


def context_blocks(snapshot: Mapping[str, Any]) -> list[VariantBlock]:
    """The blocks of a wire-form SNAPSHOT as replay renders them (key, kind, messages, tokens)."""
    out: list[VariantBlock] = []
    for b in snapshot.get("blocks") or []:
        if not isinstance(b, dict):
            continue
        tokens = b.get("tokens")
        block: dict[str, Any] = {
            "key": str(b.get("key") or ""),
            "kind": str(b.get("kind") or "other"),
            "messages": list(b.get("messages") or []),
            "tokens": tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
            "pinned": bool(b.get("pinned")),
        }
        out.append(cast(VariantBlock, block))
    return out


def context_params(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    params = snapshot.get("params")
    return dict(params) if isinstance(params, dict) else {}


def replay_contexts_freeze(
    *, project: Project, snapshots: Sequence[Mapping[str, Any]]
) -> list[ReplayContext]:
    """The frozen context of each wire-form snapshot, in order: stored once per content hash
    (an existing one is reused); safe against a concurrent freeze of the same content."""
    by_hash: dict[str, Mapping[str, Any]] = {}
    hashes: list[str] = []
    for s in snapshots:
        h = context_hash(s)
        hashes.append(h)
        by_hash.setdefault(h, s)
    existing = {
        c.content_hash: c
        for c in ReplayContext.objects.filter(project=project, content_hash__in=list(by_hash))
    }
    missing = [
        ReplayContext(
            project=project,
            content_hash=h,
            snapshot=dict(s),
            size_bytes=len(json.dumps(s, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")),
        )
        for h, s in by_hash.items()
        if h not in existing
    ]
    if missing:
        try:
            with transaction.atomic():
                ReplayContext.objects.bulk_create(missing)
        except IntegrityError:
            # Another freeze stored some of them first: theirs are the same content.
            ReplayContext.objects.bulk_create(missing, ignore_conflicts=True)
        existing = {
            c.content_hash: c
            for c in ReplayContext.objects.filter(project=project, content_hash__in=list(by_hash))
        }
    return [existing[h] for h in hashes]
