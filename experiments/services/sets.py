"""Evaluation sets: create one from turns (a timeline selection, a sessions filter, an alert's
turns, the API) or from JSONL in the wire form; add and remove items (each change makes a new
version); set and confirm checks; export and import a set as JSONL, checks included.

Items pin their context as a replay.ReplayContext (a frozen copy of the turn), so retention never
changes what a set holds."""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from core.models import Project
from ctxobs.validate import parse_ts, validate_snapshot
from experiments import checks as checks_mod
from experiments.errors import Conflict, ExperimentError, NotFound
from experiments.models import MAX_CHECKS_PER_ITEM, MAX_ITEMS_PER_SET, EvalItem, EvalSet, EvalSetVersion
from ingest import selectors as ingest_selectors
from ingest.types import SnapshotRef
from replay.services.contexts import replay_contexts_freeze

logger = logging.getLogger(__name__)

SOURCES = ("timeline", "filter", "alert", "triage", "api", "jsonl")
MAX_NAME = 100
MAX_SUGGESTIONS = 20


@dataclass
class ItemSeed:
    """An item before it is stored: the turn in the wire form, where it came from, its checks."""

    snapshot: dict[str, Any]
    source: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    suggestions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def snapshot_uuid(self) -> uuid.UUID | None:
        try:
            return uuid.UUID(str(self.snapshot.get("snapshot_id")))
        except ValueError:
            return None


def suggestions_for(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The checks ctxobs suggests for a turn (experiments.checks.suggest_checks), as stored."""
    output = snapshot.get("output") if isinstance(snapshot.get("output"), dict) else {}
    assert isinstance(output, dict)
    blocks = [b for b in snapshot.get("blocks") or [] if isinstance(b, dict)]
    recall = [r for r in snapshot.get("recall") or [] if isinstance(r, dict)]
    if not any(r.get("injected") for r in recall):
        # A memory block is what was injected, whether or not the agent sent its recall list.
        recall = recall + [
            {
                "injected": True,
                "preview": str(m.get("content") or ""),
                "block": b.get("key"),
                "memory_id": b.get("key"),
            }
            for b in blocks
            if b.get("kind") == "memory"
            for m in b.get("messages") or []
            if isinstance(m, dict) and isinstance(m.get("content"), str)
        ]
    found = checks_mod.suggest_checks(
        blocks=blocks,
        validation=[v for v in snapshot.get("validation") or [] if isinstance(v, dict)],
        recall=recall,
        output_text=str(output.get("text") or ""),
        output_tool_calls=[c for c in output.get("tool_calls") or [] if isinstance(c, dict)],
    )
    return [{"check": s.check, "source": s.source, "why": s.why} for s in found[:MAX_SUGGESTIONS]]


def _checks(raw: Any, where: str) -> list[dict[str, Any]]:
    if raw is None:
        return []
    try:
        out = checks_mod.validate_checks(raw)
    except checks_mod.CheckError as exc:
        raise ExperimentError(f"{where}{exc.field}: {exc.reason}") from exc
    if len(out) > MAX_CHECKS_PER_ITEM:
        raise ExperimentError(f"{where}checks: at most {MAX_CHECKS_PER_ITEM} checks, got {len(out)}")
    return out


# --- where items come from ------------------------------------------------------------------
def _seeds_from_refs(project: Project, refs: Sequence[SnapshotRef], source: str) -> list[ItemSeed]:
    wire = ingest_selectors.snapshots_wire(project=project, snapshot_refs=[r.ref for r in refs])
    out = []
    for r in refs:
        snap = wire.get(r.ref)
        if snap is None:
            continue
        s = dict(snap)
        out.append(ItemSeed(snapshot=s, source=source, suggestions=suggestions_for(s)))
    return out


def seeds_from_turns(
    *, project: Project, snapshot_ids: Sequence[Any], source: str = "timeline"
) -> list[ItemSeed]:
    """Items for the stored turns SNAPSHOT_IDS (UUIDs), in the order given. An id that is not a
    stored turn of the project is refused by name."""
    if len(snapshot_ids) > MAX_ITEMS_PER_SET:
        raise ExperimentError(f"at most {MAX_ITEMS_PER_SET} items per set; {len(snapshot_ids)} turns given")
    refs = ingest_selectors.snapshot_refs_by_uuid(project=project, snapshot_ids=list(snapshot_ids))
    found = {str(r.snapshot_id) for r in refs}
    missing = [str(s) for s in snapshot_ids if str(s) not in found]
    if missing:
        raise NotFound(f"no stored turn {missing[0][:64]!r} in this project (expired, or never sent)")
    return _seeds_from_refs(project, refs, source)


def seeds_from_alert(*, project: Project, alert_id: int) -> list[ItemSeed]:
    """Items for the turns an alert covers (its session's turns from its first to its last)."""
    from alerts import selectors as alert_selectors

    alert = alert_selectors.alert_get(project_id=project.pk, alert_id=alert_id)
    if alert is None:
        raise NotFound("no such alert in this project")
    session = ingest_selectors.session_get(project=project, session_id=alert.session_id)
    if session is None:
        raise NotFound("the alert's session has expired")
    ids = [
        row["snapshot_id"]
        for row in ingest_selectors.session_timeline(project=project, session=session)
        if alert.turn <= row["turn"] <= max(alert.turn, alert.last_turn)
    ]
    if not ids:
        raise NotFound("the alert's turns have expired")
    return seeds_from_turns(project=project, snapshot_ids=ids[:MAX_ITEMS_PER_SET], source="alert")


FILTER_FIELDS = (
    "agent",
    "model",
    "tag",
    "failed_validation",
    "has_alerts",
    "since",
    "until",
    "sample",
    "seed",
)


def _when(value: Any, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    ts = parse_ts(value)
    if ts is None:
        raise ExperimentError(f"filter.{name}: an ISO 8601 time with a timezone, e.g. 2026-12-01T00:00:00Z")
    return ts


def seeds_from_filter(*, project: Project, flt: Mapping[str, Any]) -> list[ItemSeed]:
    """Items for the turns matching FLT: agent, model, tag ("name=value"), failed_validation,
    has_alerts, since/until (ISO times); `sample` N picks N of them at random (`seed` fixes which)."""
    if not isinstance(flt, Mapping):
        raise ExperimentError("filter must be an object")
    unknown = sorted(set(flt) - set(FILTER_FIELDS))
    if unknown:
        raise ExperimentError(f"filter.{unknown[0][:64]}: not a filter; one of {', '.join(FILTER_FIELDS)}")
    tag = None
    if flt.get("tag"):
        name, sep, value = str(flt["tag"]).partition("=")
        if not sep or not name:
            raise ExperimentError("filter.tag: name=value, e.g. assembly_version=v14")
        tag = (name.strip(), value.strip())
    sample = flt.get("sample")
    if sample not in (None, "") and (not isinstance(sample, int) or isinstance(sample, bool) or sample < 1):
        raise ExperimentError("filter.sample: a whole number >= 1")
    refs = ingest_selectors.snapshot_refs_matching(
        project=project,
        agent=str(flt.get("agent") or "") or None,
        model=str(flt.get("model") or "") or None,
        tag=tag,
        failed_validation=bool(flt.get("failed_validation")),
        has_alerts=bool(flt.get("has_alerts")),
        since=_when(flt.get("since"), "since"),
        until=_when(flt.get("until"), "until"),
        limit=50_000 if sample else MAX_ITEMS_PER_SET + 1,
    )
    if sample and len(refs) > sample:
        seed = flt.get("seed") if isinstance(flt.get("seed"), int) else 0
        picked = set(random.Random(seed).sample(range(len(refs)), sample))  # noqa: S311 - a sample, not a secret
        refs = [r for i, r in enumerate(refs) if i in picked]
    if len(refs) > MAX_ITEMS_PER_SET:
        raise ExperimentError(
            f"the filter matches more than {MAX_ITEMS_PER_SET} turns (the limit per set); "
            "narrow it or take a random sample"
        )
    return _seeds_from_refs(project, refs, "filter")


def seeds_from_wire(
    items: Sequence[Any], *, source: str = "api"
) -> tuple[list[ItemSeed], list[dict[str, Any]]]:
    """Items from wire-form snapshots (each may carry `checks`), and the field errors of those
    refused: a bad item is refused by itself, the others are kept."""
    seeds: list[ItemSeed] = []
    errors: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        if not isinstance(raw, dict):
            errors.append({"loc": ["items", i], "msg": "must be an object", "hint": "one snapshot per item"})
            continue
        body = {k: v for k, v in raw.items() if k != "checks"}
        snap, errs = validate_snapshot(body, i)
        if snap is None:
            errors.extend({**e, "loc": ["items", *e["loc"][1:]]} for e in errs)
            continue
        try:
            item_checks = _checks(raw.get("checks"), f"items[{i}].")
        except ExperimentError as exc:
            errors.append(
                {"loc": ["items", i, "checks"], "msg": exc.detail, "hint": "fix or leave out the check"}
            )
            continue
        seeds.append(
            ItemSeed(snapshot=body, source=source, checks=item_checks, suggestions=suggestions_for(body))
        )
    return seeds, errors


# --- sets and versions --------------------------------------------------------------------
def _name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ExperimentError("name: required, a short text")
    clean = str(name).strip()
    if len(clean) > MAX_NAME or "\x00" in clean:
        raise ExperimentError(f"name: at most {MAX_NAME} characters, no NUL")
    return clean


def _store_items(version: EvalSetVersion, seeds: Sequence[ItemSeed], start: int = 0) -> None:
    for i, seed in enumerate(seeds):
        seed.checks = _checks(seed.checks, f"items[{i}].")
    contexts = replay_contexts_freeze(project=version.eval_set.project, snapshots=[s.snapshot for s in seeds])
    EvalItem.objects.bulk_create(
        [
            EvalItem(
                version=version,
                position=start + i,
                context=ctx,
                snapshot_uuid=seed.snapshot_uuid,
                session_id=str(seed.snapshot.get("session_id") or "")[:256],
                turn=seed.snapshot.get("turn") if isinstance(seed.snapshot.get("turn"), int) else None,
                agent=str(seed.snapshot.get("agent") or "")[:256],
                source=seed.source,
                checks=seed.checks,
                suggestions=seed.suggestions,
            )
            for i, (seed, ctx) in enumerate(zip(seeds, contexts, strict=True))
        ]
    )


def eval_set_create(
    *,
    project: Project,
    name: Any,
    seeds: Sequence[ItemSeed],
    description: str = "",
    checks: Any = None,
    user: Any = None,
    note: str = "",
) -> EvalSet:
    """A new set named NAME with its first version holding SEEDS. A set needs at least one item
    and at most MAX_ITEMS_PER_SET; its name is unique in the project."""
    name = _name(name)
    set_checks = _checks(checks, "")
    if not seeds:
        raise ExperimentError("a set needs at least one item; nothing was selected")
    if len(seeds) > MAX_ITEMS_PER_SET:
        raise ExperimentError(f"at most {MAX_ITEMS_PER_SET} items per set; {len(seeds)} given")
    who = user if getattr(user, "pk", None) else None
    try:
        with transaction.atomic():
            eval_set = EvalSet.objects.create(
                project=project, name=name, description=str(description or "")[:5000], created_by=who
            )
            version = EvalSetVersion.objects.create(
                eval_set=eval_set,
                number=1,
                checks=set_checks,
                n_items=len(seeds),
                created_by=who,
                note=(note or f"created with {len(seeds)} items")[:300],
            )
            _store_items(version, seeds)
    except IntegrityError as exc:
        raise Conflict(f"a set named {name!r} exists already in this project") from exc
    logger.info(
        "experiments.set_created set_id=%s project_id=%s items=%s", eval_set.pk, project.pk, len(seeds)
    )
    return eval_set


def latest_version(eval_set: EvalSet) -> EvalSetVersion:
    v = eval_set.versions.order_by("-number").first()
    if v is None:
        raise NotFound("this set has no version")
    return v


def _next_version(
    eval_set: EvalSet,
    base: EvalSetVersion,
    *,
    keep: Sequence[EvalItem],
    add: Sequence[ItemSeed],
    checks: list[dict[str, Any]] | None,
    note: str,
    user: Any,
) -> EvalSetVersion:
    """A new version: the items KEEP (copied, in order), then ADD, with CHECKS (default: BASE's)."""
    n = len(keep) + len(add)
    if n == 0:
        raise ExperimentError("a set needs at least one item; this change would leave none")
    if n > MAX_ITEMS_PER_SET:
        raise ExperimentError(f"at most {MAX_ITEMS_PER_SET} items per set; this change would make {n}")
    number = (eval_set.versions.aggregate(m=Max("number"))["m"] or 0) + 1
    version = EvalSetVersion.objects.create(
        eval_set=eval_set,
        number=number,
        checks=base.checks if checks is None else checks,
        n_items=n,
        note=note[:300],
        created_by=user if getattr(user, "pk", None) else None,
    )
    EvalItem.objects.bulk_create(
        [
            EvalItem(
                version=version,
                position=i,
                context_id=it.context_id,
                snapshot_uuid=it.snapshot_uuid,
                session_id=it.session_id,
                turn=it.turn,
                agent=it.agent,
                source=it.source,
                checks=it.checks,
                suggestions=it.suggestions,
            )
            for i, it in enumerate(keep)
        ]
    )
    _store_items(version, add, start=len(keep))
    eval_set.save(update_fields=["updated_at"])
    return version


def eval_set_items_add(*, eval_set: EvalSet, seeds: Sequence[ItemSeed], user: Any = None) -> EvalSetVersion:
    """A new version with SEEDS added after the latest version's items."""
    if not seeds:
        raise ExperimentError("nothing to add: no turn was selected")
    with transaction.atomic():
        EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        base = latest_version(eval_set)
        return _next_version(
            eval_set,
            base,
            keep=list(base.items.order_by("position")),
            add=seeds,
            checks=None,
            note=f"added {len(seeds)} item{'s' if len(seeds) != 1 else ''}",
            user=user,
        )


def eval_set_items_remove(*, eval_set: EvalSet, item_ids: Sequence[int], user: Any = None) -> EvalSetVersion:
    """A new version without the items ITEM_IDS of the latest version."""
    with transaction.atomic():
        EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        base = latest_version(eval_set)
        items = list(base.items.order_by("position"))
        drop = set(item_ids)
        unknown = drop - {it.pk for it in items}
        if unknown:
            raise NotFound(f"no item {sorted(unknown)[0]} in the latest version of this set")
        keep = [it for it in items if it.pk not in drop]
        return _next_version(
            eval_set,
            base,
            keep=keep,
            add=[],
            checks=None,
            note=f"removed {len(drop)} item{'s' if len(drop) != 1 else ''}",
            user=user,
        )


def _editable(eval_set: EvalSet, user: Any) -> tuple[EvalSetVersion, dict[int, EvalItem]]:
    """The version a change of checks applies to: the latest one when no experiment used it yet,
    otherwise a new copy of it (an experiment keeps what it ran on). Items by their old ids."""
    base = latest_version(eval_set)
    items = list(base.items.order_by("position"))
    if not base.experiments.exists():
        return base, {it.pk: it for it in items}
    version = _next_version(eval_set, base, keep=items, add=[], checks=None, note="checks changed", user=user)
    new = {it.position: it for it in version.items.all()}
    return version, {it.pk: new[it.position] for it in items}


def eval_set_checks_set(*, eval_set: EvalSet, checks: Any, user: Any = None) -> EvalSetVersion:
    """Set the set-level checks (applied to every item)."""
    valid = _checks(checks, "")
    with transaction.atomic():
        EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        version, _ = _editable(eval_set, user)
        version.checks = valid
        version.save(update_fields=["checks"])
    return version


def eval_item_checks_set(
    *, eval_set: EvalSet, item_id: int, checks: Any, confirm: Sequence[int] = (), user: Any = None
) -> EvalItem:
    """Set an item's checks to CHECKS (None: keep them) plus its suggestions at the indexes
    CONFIRM; the confirmed suggestions leave the list of suggestions."""
    valid = None if checks is None else _checks(checks, "")
    with transaction.atomic():
        EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        version, by_old = _editable(eval_set, user)
        item = by_old.get(item_id) or next((it for it in by_old.values() if it.pk == item_id), None)
        if item is None:
            raise NotFound(f"no item {item_id} in the latest version of this set")
        new_checks = list(item.checks if valid is None else valid)
        suggestions = list(item.suggestions or [])
        bad = [i for i in confirm if not 0 <= i < len(suggestions)]
        if bad:
            raise ExperimentError(f"confirm: no suggestion {bad[0]} on this item")
        have = {json.dumps(c, sort_keys=True) for c in new_checks}
        for i in sorted(set(confirm)):
            c = suggestions[i]["check"]
            if json.dumps(c, sort_keys=True) not in have:
                new_checks.append(c)
        item.checks = _checks(new_checks, "")
        item.suggestions = [s for i, s in enumerate(suggestions) if i not in set(confirm)]
        item.save(update_fields=["checks", "suggestions"])
    return item


def eval_set_suggestions_confirm_all(*, eval_set: EvalSet, user: Any = None) -> EvalSetVersion:
    """Confirm every pending suggestion of every item of the latest version."""
    with transaction.atomic():
        EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        version, _ = _editable(eval_set, user)
        for item in version.items.exclude(suggestions=[]):
            merged = list(item.checks)
            have = {json.dumps(c, sort_keys=True) for c in merged}
            for s in item.suggestions:
                if json.dumps(s["check"], sort_keys=True) not in have:
                    merged.append(s["check"])
            item.checks = _checks(merged[:MAX_CHECKS_PER_ITEM], "")
            item.suggestions = []
            item.save(update_fields=["checks", "suggestions"])
    return version


# --- JSONL --------------------------------------------------------------------------------
def eval_set_export(*, version: EvalSetVersion) -> Iterable[str]:
    """The version as JSONL: a header line {"dataset": {name, description, version, checks}}, then
    one line per item: the turn in the wire form with its `checks` (what import reads back)."""
    eval_set = version.eval_set
    yield (
        json.dumps(
            {
                "dataset": {
                    "name": eval_set.name,
                    "description": eval_set.description,
                    "version": version.number,
                    "checks": version.checks,
                }
            },
            ensure_ascii=False,
        )
        + "\n"
    )
    for item in version.items.select_related("context").order_by("position").iterator(chunk_size=200):
        yield json.dumps({**item.context.snapshot, "checks": item.checks}, ensure_ascii=False) + "\n"


def parse_jsonl(lines: Iterable[bytes | str]) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
    """(header, items, errors) of a JSONL file: an optional {"dataset": {...}} line, then wire
    snapshots (each may carry `checks`). A line that is not JSON is refused by its number."""
    header: dict[str, Any] = {}
    items: list[Any] = []
    errors: list[dict[str, Any]] = []
    for n, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            errors.append({"loc": ["line", n], "msg": "not JSON", "hint": "one JSON object per line"})
            continue
        if isinstance(value, dict) and isinstance(value.get("dataset"), dict) and len(value) == 1:
            header = value["dataset"]
            continue
        items.append(value)
    return header, items, errors
