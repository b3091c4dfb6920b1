"""Reads of the ingest app. Other apps read snapshots only through these functions."""

from __future__ import annotations

import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, cast

import orjson
from django.db import connection
from django.db.models import QuerySet

from core import pgtext, registry
from core.models import Project
from ctxobs.tokens import REPLY_PRIMING
from ctxobs.wire import LIMITS, unstorable, usable_window
from ingest.models import (
    BLOCK_COMPRESSED,
    BLOCK_ESTIMATED,
    BLOCK_PINNED,
    AgentSession,
    BlockContent,
    CompressionEvent,
    MessageContent,
    RecallItem,
    Snapshot,
    ValidationOutcome,
)
from ingest.types import (
    BlockChange,
    BlockOutline,
    CacheTurn,
    CompressionEventRow,
    CountInput,
    Message,
    RecallItemRow,
    SnapshotDetail,
    SnapshotEvents,
    SnapshotOutline,
    SnapshotRef,
    StoredBlock,
    TimelineRow,
    TimelineTurn,
    TurnContent,
    TurnRow,
    ValidationOutcomeRow,
)

SESSION_SORTS = {
    "last_seen": "-last_seen",
    "-last_seen": "-last_seen",
    "first_seen": "first_seen",
    "watermark": "-max_watermark",
    "turns": "-turn_count",
    "session_id": "session_id",
    "alerts": "-alert_count",
}


def sessions_filter(
    *,
    project: Project,
    q: str | None = None,
    agent: str | None = None,
    model: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    min_watermark: float | None = None,
    tier: str | None = None,
    has_alerts: bool | None = None,
    has_failures: bool | None = None,
    sort: str = "last_seen",
    extra: dict[str, str] | None = None,
) -> QuerySet[AgentSession]:
    """Sessions of PROJECT matching the filters, ordered by SORT (default: most recent first).
    EXTRA: {name: value} of filters other apps registered (core.registry.session_filters)."""
    qs = AgentSession.objects.filter(project=project)
    if any(v and unstorable(v) for v in (q, agent, model, tier)):
        # Text the store cannot hold (a NUL) matches no stored session.
        return qs.none()
    if q:
        qs = qs.filter(session_id__icontains=q)
    if agent:
        qs = qs.filter(agent=agent)
    if model:
        qs = qs.filter(model=model)
    if since:
        qs = qs.filter(last_seen__gte=since)
    if until:
        qs = qs.filter(first_seen__lte=until)
    if min_watermark is not None:
        qs = qs.filter(max_watermark__gte=min_watermark)
    if tier:
        qs = qs.filter(max_tier=tier)
    if has_alerts is not None:
        qs = qs.filter(alert_count__gt=0) if has_alerts else qs.filter(alert_count=0)
    if has_failures is not None:
        qs = qs.filter(failed_validations__gt=0) if has_failures else qs.filter(failed_validations=0)
    for flt in registry.session_filters():
        value = (extra or {}).get(flt.name)
        if value:
            qs = qs.filter(id__in=flt.sessions(project_id=project.pk, value=value))
    order = SESSION_SORTS.get(sort, "-last_seen")
    return qs.order_by(order, "id")


def session_get(*, project: Project, session_id: str) -> AgentSession | None:
    if unstorable(session_id):
        return None
    return AgentSession.objects.filter(project=project, session_id=session_id).first()


def session_expired(*, project: Project, session_id: str, turn: int | None = None) -> bool:
    """Whether SESSION_ID named a session of PROJECT whose every turn retention removed (it is
    remembered for ingest.retention.EXPIRED_SESSION_DAYS), TURN among them when given; False for
    one never sent."""
    if unstorable(session_id) or (turn is not None and not 0 <= turn <= LIMITS.max_int):
        return False
    with connection.cursor() as cur:
        cur.execute("SELECT expired_turns @> %s::bigint FROM ingest_session_expired "
                    "WHERE project_id = %s AND session_id = %s", [turn, project.pk, session_id])
        row = cur.fetchone()
    return row is not None and (turn is None or bool(row[0]))


def turn_expired(*, project: Project, session: AgentSession, turn: int) -> bool:
    """Whether turn TURN of SESSION was stored and retention has removed it (not: never sent)."""
    if not 0 <= turn <= LIMITS.max_int:  # a turn number no snapshot can have
        return False
    with connection.cursor() as cur:
        cur.execute("SELECT expired_turns @> %s::bigint FROM ingest_session "
                    "WHERE project_id = %s AND id = %s", [turn, project.pk, session.id])
        row = cur.fetchone()
    return bool(row and row[0])


def session_ids_existing(*, project: Project, session_ids: list[str]) -> set[str]:
    """Which of SESSION_IDS are sessions of PROJECT (one query)."""
    session_ids = [s for s in session_ids if not unstorable(s)]
    return set(
        AgentSession.objects.filter(project=project, session_id__in=session_ids).values_list(
            "session_id", flat=True
        )
    )


TIMELINE_FIELDS = (
    "id", "snapshot_id", "turn", "ts", "total_tokens", "watermark", "tier", "kind_tokens", "n_compression",
    "n_recall", "n_recall_injected", "n_validation_failed", "count_drift", "prev_turn", "context_window",
    "reserve_tokens", "model_name", "latency_ms", "counts_estimated", "prompt_tokens_reported",
)


def session_turns(*, project: Project, session: AgentSession) -> QuerySet[Snapshot]:
    """SESSION's stored turns, visiting only the day partitions from its first turn on."""
    return Snapshot.objects.filter(project=project, session_ref=session.id,
                                   received_at__gte=session.received_since)


def session_timeline(*, project: Project, session: AgentSession) -> list[TimelineRow]:
    """Per turn, in order: tokens per block kind, watermark, tier and event counts (one query)."""
    rows = (
        session_turns(project=project, session=session)
        .order_by("turn", "ts", "snapshot_id")
        .values(*TIMELINE_FIELDS)
    )
    return cast(list[TimelineRow], list(rows))


def session_timeline_turns(
    *, project: Project, session: AgentSession
) -> tuple[list[TimelineTurn], tuple[int, int] | None]:
    """Per turn, in order, the read API's fields (ingest.schemas.TimelineTurn) as plain values, with
    `ts` already in the API's JSON form (DjangoJSONEncoder's: UTC, milliseconds, "Z"), and the
    (context_window, reserve_tokens) of the last turn (None without turns). One query, read as
    tuples: model instances and parsing timestamps only to format them again cost most of the
    time of a 2,000-turn session."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT turn, snapshot_id::text,
                   to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                   || CASE WHEN extract(microseconds FROM ts)::bigint %% 1000000 = 0 THEN ''
                      ELSE to_char(ts AT TIME ZONE 'UTC', '.MS') END || 'Z',
                   total_tokens, watermark, tier, kind_tokens::text,
                   n_compression, n_recall, n_recall_injected, n_validation_failed, count_drift, prev_turn,
                   context_window, reserve_tokens
            FROM ingest_snapshot WHERE project_id = %s AND session_ref = %s AND received_at >= %s
            ORDER BY turn, ts, snapshot_id
            """,
            [project.pk, session.id, session.received_since],
        )
        rows = cur.fetchall()
    loads = orjson.loads
    turns: list[TimelineTurn] = [
        {
            "turn": r[0], "snapshot_id": r[1], "ts": r[2], "total_tokens": r[3], "watermark": r[4],
            "tier": r[5], "kind_tokens": loads(r[6]), "compression_events": r[7], "recall_items": r[8],
            "recall_injected": r[9], "failed_validations": r[10], "count_drift": r[11], "prev_turn": r[12],
        }
        for r in rows
    ]
    return turns, ((rows[-1][13], rows[-1][14]) if rows else None)


def snapshot_by_uuid(*, project: Project, snapshot_id: str | uuid.UUID) -> Snapshot | None:
    try:
        sid = uuid.UUID(str(snapshot_id))
    except ValueError:
        return None
    return Snapshot.objects.filter(project=project, snapshot_id=sid).first()


def snapshot_by_turn(*, project: Project, session: AgentSession, turn: int) -> Snapshot | None:
    return (
        session_turns(project=project, session=session).filter(turn=turn)
        .order_by("ts", "snapshot_id")
        .first()
    )


def _snapshot_ref(snapshot: Snapshot) -> SnapshotRef:
    return SnapshotRef(ref=snapshot.id, snapshot_id=snapshot.snapshot_id, session_id=snapshot.session_id,
                       turn=snapshot.turn, params=snapshot.params, output=snapshot.output)


def snapshot_ref_by_uuid(*, project: Project, snapshot_id: str | uuid.UUID) -> SnapshotRef | None:
    """The snapshot SNAPSHOT_ID of PROJECT as other apps see it; None when there is none."""
    snap = snapshot_by_uuid(project=project, snapshot_id=snapshot_id)
    return _snapshot_ref(snap) if snap is not None else None


def snapshot_neighbours(
    *, project: Project, session: AgentSession, snapshot: Snapshot
) -> tuple[int | None, int | None]:
    """Turn numbers before and after SNAPSHOT in SESSION (only the day partitions from the
    session's first turn on are read)."""
    base = Snapshot.objects.filter(
        project=project, session_ref=session.id, received_at__gte=session.received_since
    )
    prev = base.filter(turn__lt=snapshot.turn).order_by("-turn").values_list("turn", flat=True).first()
    nxt = base.filter(turn__gt=snapshot.turn).order_by("turn").values_list("turn", flat=True).first()
    return prev, nxt


_BLOCK_ARRAYS = (
    "id", "block_keys", "block_kinds", "block_hashes", "block_tokens", "block_flags", "block_refs",
)


def _blocks_from_arrays(
    snapshot_ref: int, keys: list[str], kinds: list[str], hashes: list[str], tokens: list[int],
    flags: list[int], refs: list[list[str]] | None,
) -> list[StoredBlock]:
    """One block per entry of the `block_*` arrays of a snapshot row, in order, without its
    messages yet (see _attach_messages)."""
    return [
        {"snapshot_ref": snapshot_ref, "position": i, "key": keys[i], "kind": kinds[i],
         "content_hash": hashes[i], "tokens": tokens[i], "estimated": bool(flags[i] & BLOCK_ESTIMATED),
         "pinned": bool(flags[i] & BLOCK_PINNED), "compressed": bool(flags[i] & BLOCK_COMPRESSED),
         "refs": refs[i] if refs else [], "messages": [], "chars": 0}
        for i in range(len(keys))
    ]


def _attach_messages(project_id: int, blocks: list[StoredBlock]) -> None:
    """Give each block its messages, exactly as sent, in two queries whatever the number of blocks."""
    hashes = {b["content_hash"] for b in blocks}
    contents = {
        c["hash"]: c
        for c in BlockContent.objects.filter(project_id=project_id, hash__in=hashes).values(
            "hash", "message_hashes", "chars")
    }
    wanted = {mh for c in contents.values() for mh in c["message_hashes"]}
    messages = dict(
        MessageContent.objects.filter(project_id=project_id, hash__in=wanted).values_list("hash", "message")
    )
    for b in blocks:
        c = contents.get(b["content_hash"])
        b["messages"] = [messages[mh] for mh in c["message_hashes"]] if c else []
        b["chars"] = c["chars"] if c else 0


def snapshot_blocks(*, project_id: int, snapshot_ref: int) -> list[StoredBlock]:
    """The blocks of a snapshot in order, each with its messages exactly as sent (three queries)."""
    return snapshots_blocks(project_id=project_id, snapshot_refs=[snapshot_ref])[snapshot_ref]


def snapshots_blocks(*, project_id: int, snapshot_refs: list[int]) -> dict[int, list[StoredBlock]]:
    """Blocks (with messages) of many snapshots at once: three queries whatever their number."""
    out: dict[int, list[StoredBlock]] = {r: [] for r in snapshot_refs}
    rows = Snapshot.objects.filter(project_id=project_id, id__in=snapshot_refs).values_list(*_BLOCK_ARRAYS)
    for ref, *arrays in rows:
        out[ref] = _blocks_from_arrays(ref, *arrays)
    _attach_messages(project_id, [b for blocks in out.values() for b in blocks])
    return out


def snapshots_params(*, project_id: int, snapshot_refs: list[int]) -> dict[int, dict[str, Any]]:
    """The saved request parameters of many snapshots at once (one query); {} for one without."""
    rows = Snapshot.objects.filter(project_id=project_id, id__in=snapshot_refs).values_list("id", "params")
    return {ref: dict(params or {}) for ref, params in rows}


def snapshot_events(*, project_id: int, snapshot_ref: int) -> SnapshotEvents:
    """Compression events, recall items and validation outcomes of one snapshot, in order."""
    flt = {"project_id": project_id, "snapshot_ref": snapshot_ref}
    validation: list[ValidationOutcomeRow] = [
        {"layer": v["layer"], "check": v["check_name"], "passed": v["passed"], "code": v["code"],
         "message": v["message"], "attempt": v["attempt"]}
        for v in ValidationOutcome.objects.filter(**flt).order_by("position").values(
            "layer", "check_name", "passed", "code", "message", "attempt")
    ]
    compression = CompressionEvent.objects.filter(**flt).order_by("position").values(
        "strategy", "block", "tokens_before", "tokens_after", "watermark", "items", "ref", "source", "opaque")
    recall = RecallItem.objects.filter(**flt).order_by("position").values(
        "memory_id", "channel", "score", "rank", "injected", "stale", "conflicting", "block", "preview")
    return {
        "compression": cast(list[CompressionEventRow], list(compression)),
        "recall": cast(list[RecallItemRow], list(recall)),
        "validation": validation,
    }


def snapshot_full(*, snapshot: Snapshot) -> SnapshotDetail:
    """One snapshot in its wire form (as the SDK sent it) plus everything derived at ingest."""
    blocks = snapshot_blocks(project_id=snapshot.project_id, snapshot_ref=snapshot.id)
    events = snapshot_events(project_id=snapshot.project_id, snapshot_ref=snapshot.id)
    total = snapshot.total_tokens or 0
    usable = usable_window(snapshot.context_window, snapshot.reserve_tokens)
    # The drift against the model's usual ratio, where an app calibrates counts (insights).
    cal = registry.count_drifts(project_id=snapshot.project_id, snapshot_refs=[snapshot.id]).get(snapshot.id)
    return {
        "snapshot_id": str(snapshot.snapshot_id),
        "session_id": snapshot.session_id,
        "turn": snapshot.turn,
        "agent": snapshot.agent,
        "ts": snapshot.ts,
        "model": {
            "name": snapshot.model_name,
            "context_window": snapshot.context_window,
            "reserve_tokens": snapshot.reserve_tokens,
            "encoding": snapshot.encoding,
            "counts": "estimated" if snapshot.counts_estimated else "exact",
        },
        "params": snapshot.params,
        "blocks": [
            {
                "key": b["key"],
                "kind": b["kind"],
                "messages": b["messages"],
                "tokens": b["tokens"],
                "estimated": b["estimated"],
                "pinned": b["pinned"],
                "compressed": b["compressed"],
                "refs": b["refs"],
                "hash": b["content_hash"],
                "chars": b["chars"],
                "share": (b["tokens"] / total) if total else 0.0,
                "window_share": b["tokens"] / usable,
            }
            for b in blocks
        ],
        "compression": events["compression"],
        "recall": events["recall"],
        "validation": events["validation"],
        "output": snapshot.output,
        "tags": snapshot.tags,
        "retries": snapshot.retries,
        "fallback_used": snapshot.fallback_used,
        "derived": {
            "total_tokens": total,
            "usable_tokens": usable,
            "watermark": snapshot.watermark,
            "tier": snapshot.tier,
            "kind_tokens": snapshot.kind_tokens,
            "count_drift": snapshot.count_drift,
            "count_calibration": None if cal is None else {
                "drift": cal.drift,
                "usual_drift": cal.usual_drift,
                "usual_n": cal.usual_n,
                "flagged": cal.flagged,
                "counted": cal.counted,
                "tokenizer": cal.tokenizer,
            },
            "prompt_tokens_reported": snapshot.prompt_tokens_reported,
            "prev_turn": snapshot.prev_turn,
            "change": snapshot.change,
            "received_at": snapshot.received_at,
        },
    }


# --- for other apps ------------------------------------------------------------
# The columns of a `TurnRow`, in its field order; the block columns only when asked for.
TURN_ROW_COLUMNS = (
    "id",
    "session_ref",
    "turn",
    "ts",
    "snapshot_id",
    "watermark",
    "tier",
    "context_window",
    "reserve_tokens",
    "total_tokens",
    "n_compression",
    "n_validation",
    "n_validation_failed",
    "n_recall",
    "n_recall_injected",
    "count_drift",
    "agent",
    "model_name",
    "session_id",
    "received_at",
)
TURN_ROW_BLOCK_COLUMNS = ("block_keys", "block_kinds", "block_tokens")


def _turn_order(row: TurnRow) -> tuple[int, datetime, str]:
    # The order of a session's snapshots: turn, then time, then id (repeated turns).
    return (row.turn, row.ts, str(row.snapshot_id))


def _turn_lines(rows: Iterable[TurnRow]) -> dict[int, list[TurnRow]]:
    out: dict[int, list[TurnRow]] = defaultdict(list)
    for r in rows:
        out[r.session_ref].append(r)
    for line in out.values():
        line.sort(key=_turn_order)
    return dict(out)


def turn_neighbourhoods(
    *, project_id: int, snapshot_refs: Sequence[int], window: int, with_blocks: bool = False
) -> dict[int, list[TurnRow]]:
    """Per session touched by SNAPSHOT_REFS: those snapshots, the WINDOW snapshots before each
    of them and the WINDOW after each (by turn), in turn order, with their blocks when
    WITH_BLOCKS. One query, whatever the length of the sessions."""
    columns = TURN_ROW_COLUMNS + (TURN_ROW_BLOCK_COLUMNS if with_blocks else ())
    cols = ", ".join(f"s.{c}" for c in columns)
    inner = ", ".join(columns)
    # The project id never reaches the planner as a literal (a sub-select, then the rows found):
    # with a literal and statistics that lag a fast-growing project, it estimates one row for
    # the project and may scan all of it through the (project, ts) index instead.
    sql = f"""
        WITH n AS (
            SELECT project_id, session_ref, turn FROM ingest_snapshot
            WHERE project_id = (SELECT %(p)s::bigint) AND id = ANY(%(refs)s::bigint[])
        )
        SELECT DISTINCT ON (s.id) {cols} FROM n
        JOIN LATERAL (
            -- Ordered by turn alone so that the (project, session_ref, turn) index ends each
            -- scan after WINDOW rows; ties within a turn are ordered in Python.
            (SELECT {inner} FROM ingest_snapshot s
               WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn < n.turn
               ORDER BY s.turn DESC LIMIT %(w)s)
            UNION ALL
            (SELECT {inner} FROM ingest_snapshot s
               WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn = n.turn)
            UNION ALL
            (SELECT {inner} FROM ingest_snapshot s
               WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn > n.turn
               ORDER BY s.turn LIMIT %(w)s)
        ) s ON true
    """  # noqa: S608 - the interpolated text is a fixed column list
    with connection.cursor() as cur:
        cur.execute(sql, {"p": project_id, "refs": list(snapshot_refs), "w": window})
        rows = cur.fetchall()
    return _turn_lines(TurnRow(*r) for r in rows)


def turns_since(
    *, project_id: int, since: datetime, limit: int, with_blocks: bool = False
) -> tuple[dict[int, list[TurnRow]], bool]:
    """The project's snapshots since SINCE (at most LIMIT, the most recent) per session in turn
    order, with their blocks when WITH_BLOCKS, and whether the limit cut some off (one query)."""
    columns = TURN_ROW_COLUMNS + (TURN_ROW_BLOCK_COLUMNS if with_blocks else ())
    rows = list(
        Snapshot.objects.filter(project_id=project_id, ts__gte=since)
        .order_by("-ts", "-id")
        .values_list(*columns)[: limit + 1]
    )
    return _turn_lines(TurnRow(*r) for r in rows[:limit]), len(rows) > limit


def snapshot_outlines(*, project_id: int, snapshot_refs: Sequence[int]) -> dict[int, SnapshotOutline]:
    """The blocks (no messages) in prompt order and the turn-to-turn change of some snapshots
    (one query)."""
    if not snapshot_refs:
        return {}
    with connection.cursor() as cur:
        # The project id as a sub-select: see `turn_neighbourhoods`.
        cur.execute(
            "SELECT id, block_keys, block_kinds, block_tokens, change FROM ingest_snapshot"
            " WHERE project_id = (SELECT %s::bigint) AND id = ANY(%s::bigint[])",
            [project_id, list(snapshot_refs)],
        )
        rows = cur.fetchall()
    out: dict[int, SnapshotOutline] = {}
    for ref, keys, kinds, tokens, change in rows:
        blocks: list[BlockOutline] = [
            {"position": i, "key": k, "kind": kd, "tokens": t}
            for i, (k, kd, t) in enumerate(zip(keys, kinds, tokens, strict=True))
        ]
        # Django reads jsonb as text and leaves decoding to the field; this is a raw query.
        decoded = orjson.loads(change) if isinstance(change, str) else change
        out[ref] = SnapshotOutline(blocks=blocks, change=cast(BlockChange, decoded or {}))
    return out


def compressed_tokens_by_block(*, project_id: int, snapshot_refs: Sequence[int]) -> dict[int, dict[str, int]]:
    """Per snapshot: the tokens its compression events removed, per block key; an event that
    does not say how many counts as one (one query)."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with connection.cursor() as cur:
        # The project id as a sub-select: see `turn_neighbourhoods`.
        cur.execute(
            "SELECT snapshot_ref, block, tokens_before, tokens_after FROM ingest_compressionevent"
            " WHERE project_id = (SELECT %s::bigint) AND snapshot_ref = ANY(%s::bigint[])",
            [project_id, list(snapshot_refs)],
        )
        rows = cur.fetchall()
    for ref, block, before, after in rows:
        if before is not None and after is not None:
            out[ref][block] += max(1, before - after)
        else:
            out[ref][block] += 1
    return {k: dict(v) for k, v in out.items()}


class _ContentCache:
    """Block contents (their message hashes) and messages by hash, read for content analyses.
    Both are immutable under their hash, so a bounded per-process cache is exact: a session's
    next turn repeats most blocks and messages of the last, and only what is new is read (with
    arrays, not IN lists: a batch names thousands of hashes)."""

    MAX_BLOCKS = 50_000
    MAX_MESSAGE_CHARS = 64 * 1024 * 1024

    def __init__(self) -> None:
        self.blocks: OrderedDict[tuple[int, str], tuple[list[str], int]] = OrderedDict()
        self.messages: OrderedDict[tuple[int, str], tuple[Message, int]] = OrderedDict()
        self.chars = 0

    def read(
        self, project_id: int, block_hashes: set[str], message_blocks: set[str]
    ) -> tuple[dict[str, tuple[list[str], int]], dict[str, Message]]:
        """({block hash: (message hashes, chars)} of BLOCK_HASHES, {message hash: message} of the
        blocks MESSAGE_BLOCKS): two queries at most, for what is not cached."""
        contents: dict[str, tuple[list[str], int]] = {}
        for h in block_hashes:
            hit = self.blocks.get((project_id, h))
            if hit is not None:
                self.blocks.move_to_end((project_id, h))
                contents[h] = hit
        missing = [h for h in block_hashes if h not in contents]
        with connection.cursor() as cur:
            if missing:
                # The project id as a sub-select: see `turn_neighbourhoods`.
                cur.execute(
                    "SELECT hash, message_hashes, chars FROM ingest_blockcontent"
                    " WHERE project_id = (SELECT %s::bigint) AND hash = ANY(%s::varchar[])",
                    [project_id, missing],
                )
                for h, mhs, chars in cur.fetchall():
                    contents[h] = self.blocks[(project_id, h)] = (mhs, chars)
                while len(self.blocks) > self.MAX_BLOCKS:
                    self.blocks.popitem(last=False)
            wanted = {mh for h in message_blocks for mh in contents.get(h, ([], 0))[0]}
            messages: dict[str, Message] = {}
            for mh in wanted:
                got = self.messages.get((project_id, mh))
                if got is not None:
                    self.messages.move_to_end((project_id, mh))
                    messages[mh] = got[0]
            need = [mh for mh in wanted if mh not in messages]
            if need:
                cur.execute(
                    "SELECT hash, message::text FROM ingest_messagecontent"
                    " WHERE project_id = (SELECT %s::bigint) AND hash = ANY(%s::varchar[])",
                    [project_id, need],
                )
                for mh, raw in cur.fetchall():
                    # As EscapedJSONField reads it: only a text holding ESC holds an escaped string.
                    msg = pgtext.unescape_json(orjson.loads(raw)) if pgtext.ESC in raw else orjson.loads(raw)
                    messages[mh] = msg
                    self.messages[(project_id, mh)] = (msg, len(raw))
                    self.chars += len(raw)
                while self.chars > self.MAX_MESSAGE_CHARS and self.messages:
                    self.chars -= self.messages.popitem(last=False)[1][1]
        return contents, messages


_content_cache = _ContentCache()


def turn_contents(
    *, project_id: int, snapshot_refs: Sequence[int], message_kinds: Collection[str] | None = None
) -> dict[int, TurnContent]:
    """The snapshots SNAPSHOT_REFS and the turn before each in its session, keyed by ref (a
    requested snapshot names its predecessor in `prev_ref`), with compression events and recall
    lists. The requested snapshots' blocks carry their messages (only blocks of MESSAGE_KINDS when
    given); a predecessor's blocks carry none, only `message_counts`. Six queries at most,
    whatever the number of snapshots; contents and messages read before come from a per-process
    cache (callers must not change the messages they get)."""
    if not snapshot_refs:
        return {}
    with connection.cursor() as cur:
        # The project id as a sub-select: see `turn_neighbourhoods`.
        cur.execute(
            """
            SELECT n.id, p.id FROM ingest_snapshot n
            LEFT JOIN LATERAL (
                SELECT s.id FROM ingest_snapshot s
                WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn < n.turn
                ORDER BY s.turn DESC, s.ts DESC, s.snapshot_id DESC LIMIT 1
            ) p ON true
            WHERE n.project_id = (SELECT %s::bigint) AND n.id = ANY(%s::bigint[])
            """,
            [project_id, list(snapshot_refs)],
        )
        prev = dict(cur.fetchall())
    refs = set(prev) | {p for p in prev.values() if p is not None}
    rows = Snapshot.objects.filter(project_id=project_id, id__in=refs).values_list(
        "session_ref", "session_id", "turn", "received_at", "total_tokens", "context_window",
        "reserve_tokens", "output", *_BLOCK_ARRAYS)
    out: dict[int, TurnContent] = {}
    for sref, sid, turn, received, total, window, reserve, output, ref, *arrays in rows:
        out[ref] = {
            "ref": ref, "session_ref": sref, "session_id": sid, "turn": turn, "received_at": received,
            "total_tokens": total, "context_window": window, "reserve_tokens": reserve, "output": output,
            "blocks": _blocks_from_arrays(ref, *arrays), "message_counts": [], "compression": [],
            "recall": [], "prev_ref": prev.get(ref),
        }
    blocks = [b for t in out.values() for b in t["blocks"]]
    wanted = [b for ref in prev for b in out[ref]["blocks"]
              if message_kinds is None or b["kind"] in message_kinds]
    contents, messages = _content_cache.read(
        project_id, {b["content_hash"] for b in blocks}, {b["content_hash"] for b in wanted})
    for t in out.values():
        for b in t["blocks"]:
            mhs, chars = contents.get(b["content_hash"], ([], 0))
            b["chars"] = chars
            t["message_counts"].append(len(mhs))
    for b in wanted:
        b["messages"] = [messages[mh] for mh in contents.get(b["content_hash"], ([], 0))[0]]
    flt = {"project_id": project_id, "snapshot_ref__in": list(out)}
    for ev in CompressionEvent.objects.filter(**flt).order_by("snapshot_ref", "position").values(
            "snapshot_ref", "strategy", "block", "tokens_before", "tokens_after", "watermark", "items",
            "ref", "source", "opaque"):
        out[ev["snapshot_ref"]]["compression"].append(cast(CompressionEventRow, {
            k: v for k, v in ev.items() if k != "snapshot_ref"}))
    for r in RecallItem.objects.filter(**flt).order_by("snapshot_ref", "position").values(
            "snapshot_ref", "memory_id", "channel", "score", "rank", "injected", "stale", "conflicting",
            "block", "preview"):
        out[r["snapshot_ref"]]["recall"].append(cast(RecallItemRow, {
            k: v for k, v in r.items() if k != "snapshot_ref"}))
    return out


def count_inputs(*, project_id: int, snapshot_refs: Sequence[int]) -> list[CountInput]:
    """The snapshots SNAPSHOT_REFS as the count calibration reads them, in the order they were
    received (one query)."""
    if not snapshot_refs:
        return []
    with connection.cursor() as cur:
        # The project id as a sub-select: see `turn_neighbourhoods`.
        cur.execute(
            "SELECT id, received_at, model_name, total_tokens, prompt_tokens_reported, counts_estimated,"
            " encoding, params -> 'tools' FROM ingest_snapshot"
            " WHERE project_id = (SELECT %s::bigint) AND id = ANY(%s::bigint[])"
            " ORDER BY received_at, id",
            [project_id, list(snapshot_refs)],
        )
        rows = cur.fetchall()
    return [
        CountInput(ref=ref, received_at=at, model_name=model, counted=total + REPLY_PRIMING,
                   reported=reported,
                   counts_estimated=estimated, encoding=encoding or "",
                   tools=pgtext.unescape_json(orjson.loads(tools) if isinstance(tools, str) else tools))
        for ref, at, model, total, reported, estimated, encoding, tools in rows
    ]
# The columns of a `CacheTurn`, in its field order.
CACHE_TURN_COLUMNS = (
    "id", "session_ref", "turn", "ts", "received_at", "model_name", "params", "tags", "total_tokens",
    "prompt_tokens_reported", "completion_tokens", "cached_tokens", "block_keys", "block_kinds",
    "block_hashes", "block_tokens",
)


_CACHE_WRITES = "(({t}output -> 'usage' ->> 'cache_write_tokens')::bigint)"


def _cache_turn(row: Sequence[object]) -> CacheTurn:
    values = list(row)
    for i in (6, 7):  # params, tags: jsonb read as text by a raw query
        v = values[i]
        if isinstance(v, str | bytes):
            text = v.decode() if isinstance(v, bytes) else v
            decoded = orjson.loads(text)
            v = pgtext.unescape_json(decoded) if pgtext.ESC in text else decoded
        values[i] = v or {}
    return CacheTurn(*values)  # type: ignore[arg-type]


def cache_turn_pairs(
    *, project_id: int, snapshot_refs: Sequence[int]
) -> list[tuple[CacheTurn, CacheTurn | None]]:
    """Each of SNAPSHOT_REFS and the snapshot of the next turn of its session (whose previous
    turn a late arrival changes), each with the snapshot of the previous turn of its session
    (None for a session's first turn). One query, whatever the length of the sessions."""
    if not snapshot_refs:
        return []
    # The reported cache writes live in the stored reply's usage, not in a column of their own.
    cols = ", ".join(CACHE_TURN_COLUMNS) + f", {_CACHE_WRITES.format(t='')} AS cache_write_tokens"
    t_cols = ", ".join(f"t.{c}" for c in CACHE_TURN_COLUMNS) + f", {_CACHE_WRITES.format(t='t.')}"
    p_cols = ", ".join(f"p.{c}" for c in CACHE_TURN_COLUMNS) + ", p.cache_write_tokens"
    # The project id as a sub-select: see `turn_neighbourhoods`.
    sql = f"""
        WITH n AS (
            SELECT id, session_ref, turn FROM ingest_snapshot
            WHERE project_id = (SELECT %(p)s::bigint) AND id = ANY(%(refs)s::bigint[])
        ), targets AS (
            SELECT id FROM n
            UNION
            SELECT x.id FROM n JOIN LATERAL (
                SELECT s.id FROM ingest_snapshot s
                WHERE s.project_id = %(p)s AND s.session_ref = n.session_ref AND s.turn > n.turn
                ORDER BY s.turn, s.ts, s.snapshot_id LIMIT 1
            ) x ON true
        )
        SELECT {t_cols}, {p_cols}
        FROM targets
        JOIN ingest_snapshot t ON t.project_id = %(p)s AND t.id = targets.id
        LEFT JOIN LATERAL (
            SELECT {cols} FROM ingest_snapshot s
            WHERE s.project_id = t.project_id AND s.session_ref = t.session_ref AND s.turn < t.turn
            ORDER BY s.turn DESC, s.ts DESC, s.snapshot_id DESC LIMIT 1
        ) p ON true
        ORDER BY t.id
    """  # noqa: S608 - the interpolated text is a fixed column list
    with connection.cursor() as cur:
        cur.execute(sql, {"p": project_id, "refs": list(snapshot_refs)})
        rows = cur.fetchall()
    n = len(CACHE_TURN_COLUMNS) + 1
    return [(_cache_turn(r[:n]), _cache_turn(r[n:]) if r[n] is not None else None) for r in rows]
# --- retention ----------------------------------------------------------------
def snapshots_existing(*, project_id: int, snapshot_refs: Sequence[int]) -> set[int]:
    """Those of SNAPSHOT_REFS still stored: the others have expired (ingest.retention)."""
    if not snapshot_refs:
        return set()
    return set(Snapshot.objects.filter(project_id=project_id, id__in=list(snapshot_refs))
               .values_list("id", flat=True))


# --- export ---------------------------------------------------------------------
EXPORT_CHUNK = 500


def _wire_model(s: Snapshot) -> dict[str, object]:
    model: dict[str, object] = {"name": s.model_name, "context_window": s.context_window,
                                "reserve_tokens": s.reserve_tokens}
    if s.encoding:
        model["encoding"] = s.encoding
    if s.counts_estimated:
        model["counts"] = "estimated"
    return model


def _events_many(project_id: int, refs: list[int]) -> dict[int, SnapshotEvents]:
    out: dict[int, SnapshotEvents] = {r: {"compression": [], "recall": [], "validation": []} for r in refs}
    flt = {"project_id": project_id, "snapshot_ref__in": refs}
    for c in CompressionEvent.objects.filter(**flt).order_by("snapshot_ref", "position").values(
            "snapshot_ref", "strategy", "block", "tokens_before", "tokens_after", "watermark", "items",
            "ref", "source", "opaque"):
        out[c["snapshot_ref"]]["compression"].append(
            cast(CompressionEventRow, {k: v for k, v in c.items() if k != "snapshot_ref"}))
    for r in RecallItem.objects.filter(**flt).order_by("snapshot_ref", "position").values(
            "snapshot_ref", "memory_id", "channel", "score", "rank", "injected", "stale", "conflicting",
            "block", "preview"):
        out[r["snapshot_ref"]]["recall"].append(
            cast(RecallItemRow, {k: v for k, v in r.items() if k != "snapshot_ref"}))
    for v in ValidationOutcome.objects.filter(**flt).order_by("snapshot_ref", "position").values(
            "snapshot_ref", "layer", "check_name", "passed", "code", "message", "attempt"):
        out[v["snapshot_ref"]]["validation"].append(
            {"layer": v["layer"], "check": v["check_name"], "passed": v["passed"], "code": v["code"],
             "message": v["message"], "attempt": v["attempt"]})
    return out


def snapshots_export(
    *, project: Project, session: AgentSession | None = None, since: datetime | None = None,
    until: datetime | None = None,
) -> Iterable[dict[str, object]]:
    """PROJECT's snapshots in the wire form the SDK sends (what `ctxobs push` takes back): one
    SESSION's, or those that arrived in [SINCE, UNTIL); by session and turn within each chunk of
    EXPORT_CHUNK, six queries a chunk."""
    qs = Snapshot.objects.filter(project=project)
    if session is not None:
        qs = qs.filter(session_ref=session.id)
    if since is not None:
        qs = qs.filter(received_at__gte=since)
    if until is not None:
        qs = qs.filter(received_at__lt=until)
    last = 0
    while True:
        chunk = list(qs.filter(id__gt=last).order_by("id")[:EXPORT_CHUNK])
        if not chunk:
            return
        last = chunk[-1].id
        yield from _wire_chunk(project, chunk)


def snapshots_wire(*, project: Project, snapshot_refs: Sequence[int]) -> dict[int, dict[str, object]]:
    """The wire form (as the SDK sent it, what `ctxobs push` takes) of each stored snapshot of
    SNAPSHOT_REFS, by ref; expired ones are absent. Six queries per EXPORT_CHUNK snapshots."""
    out: dict[int, dict[str, object]] = {}
    refs = sorted(set(snapshot_refs))
    for i in range(0, len(refs), EXPORT_CHUNK):
        chunk = list(Snapshot.objects.filter(project=project, id__in=refs[i:i + EXPORT_CHUNK]))
        for s, wire in zip(sorted(chunk, key=lambda s: (s.session_ref, s.turn, s.ts)),
                           _wire_chunk(project, chunk), strict=True):
            out[s.id] = wire
    return out


def snapshot_refs_by_uuid(*, project: Project, snapshot_ids: Sequence[str | uuid.UUID]) -> list[SnapshotRef]:
    """The stored snapshots among SNAPSHOT_IDS (ids that are not UUIDs or not stored are left
    out), in the order given."""
    wanted: list[uuid.UUID] = []
    for sid in snapshot_ids:
        try:
            wanted.append(uuid.UUID(str(sid)))
        except ValueError:
            continue
    found = {s.snapshot_id: s for s in Snapshot.objects.filter(project=project, snapshot_id__in=wanted)}
    return [_snapshot_ref(found[u]) for u in dict.fromkeys(wanted) if u in found]


def snapshot_refs_matching(
    *,
    project: Project,
    agent: str | None = None,
    model: str | None = None,
    tag: tuple[str, str] | None = None,
    failed_validation: bool = False,
    has_alerts: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 10_000,
) -> list[SnapshotRef]:
    """Stored turns of PROJECT matching every condition given (a tag as (name, value); turns
    whose output failed validation; turns of sessions with alerts; sent in [SINCE, UNTIL)), in
    session and turn order, at most LIMIT."""
    qs = Snapshot.objects.filter(project=project)
    if any(v and unstorable(v) for v in (agent, model, *(tag or ()))):
        return []
    if agent:
        qs = qs.filter(agent=agent)
    if model:
        qs = qs.filter(model_name=model)
    if tag:
        qs = qs.filter(tags__contains={tag[0]: tag[1]})
    if failed_validation:
        qs = qs.filter(n_validation_failed__gt=0)
    if since:
        qs = qs.filter(ts__gte=since)
    if until:
        qs = qs.filter(ts__lt=until)
    if has_alerts:
        sessions = AgentSession.objects.filter(project=project, alert_count__gt=0)
        # A subquery: a project can have thousands of sessions with alerts.
        qs = qs.filter(session_ref__in=sessions.values("id")[:limit])
    rows = qs.order_by("session_id", "turn", "ts").only(
        "id", "snapshot_id", "session_id", "turn", "params", "output")[:limit]
    return [_snapshot_ref(s) for s in rows]


def _wire_chunk(project: Project, chunk: list[Snapshot]) -> Iterable[dict[str, object]]:
    """CHUNK's snapshots in the wire form, by session and turn."""
    refs = [s.id for s in chunk]
    blocks = snapshots_blocks(project_id=project.pk, snapshot_refs=refs)
    events = _events_many(project.pk, refs)
    for s in sorted(chunk, key=lambda s: (s.session_ref, s.turn, s.ts)):
        yield {
            "snapshot_id": str(s.snapshot_id), "session_id": s.session_id, "turn": s.turn,
            "agent": s.agent, "ts": s.ts.isoformat(), "model": _wire_model(s), "params": s.params,
            "blocks": [
                {"key": b["key"], "kind": b["kind"], "messages": b["messages"], "tokens": b["tokens"],
                 "estimated": b["estimated"], "pinned": b["pinned"], "compressed": b["compressed"],
                 "refs": b["refs"]}
                for b in blocks[s.id]
            ],
            "compression": events[s.id]["compression"], "recall": events[s.id]["recall"],
            "validation": events[s.id]["validation"], "output": s.output, "tags": s.tags,
            "retries": s.retries, "fallback_used": s.fallback_used,
        }


# --- figures per tag value --------------------------------------------------------
# Quantiles of a value's turn watermarks, in the order of the `watermark_quantiles` a summary gives.
TAG_WATERMARK_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def tag_value_summaries(
    *, project: Project, tag: str, since: datetime, until: datetime, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """PROJECT's turns received in [SINCE, UNTIL) grouped by the value of their tag TAG (None:
    turns without it): the LIMIT values with the most turns, most first, each with `value`,
    `turns`, `sessions`, `first_received`, `watermark_mean` and `watermark_quantiles` (see
    TAG_WATERMARK_QUANTILES); and how many values there are in all. One query."""
    with connection.cursor() as cur:
        # received_at bounds every scan to the period's day partitions.
        cur.execute(
            """
            SELECT v, turns, sessions, first_received, wm_mean, wm_q, count(*) OVER () FROM (
                SELECT tags ->> %(key)s AS v, count(*) AS turns, count(DISTINCT session_ref) AS sessions,
                       min(received_at) AS first_received, avg(watermark) AS wm_mean,
                       percentile_cont(%(q)s::float8[]) WITHIN GROUP (ORDER BY watermark) AS wm_q
                FROM ingest_snapshot
                WHERE project_id = %(p)s AND received_at >= %(since)s AND received_at < %(until)s
                GROUP BY 1
            ) g
            ORDER BY turns DESC, v NULLS LAST
            LIMIT %(limit)s
            """,
            {"key": pgtext.escape_text(tag), "q": list(TAG_WATERMARK_QUANTILES), "p": project.pk,
             "since": since, "until": until, "limit": limit},
        )
        rows = cur.fetchall()
    groups = [
        {"value": None if v is None else pgtext.unescape_text(v), "turns": turns, "sessions": sessions,
         "first_received": first, "watermark_mean": float(mean), "watermark_quantiles": [float(x) for x in q]}
        for v, turns, sessions, first, mean, q, _ in rows
    ]
    return groups, (rows[0][6] if rows else 0)


def tag_value_session_sums(
    *, project: Project, tag: str, since: datetime, until: datetime, values: Sequence[str | None]
) -> list[dict[str, Any]]:
    """Per value of VALUES (None: turns without the tag TAG), session and model, sums over PROJECT's
    turns received in [SINCE, UNTIL): `turns`, `watermark`, `compressions`, `checks`,
    `checks_failed`, `recalled`, `injected`; over the turns that report both prompt and cached
    tokens, `cache_turns`, `cache_prompt` and `cache_read` (cached tokens, at most the prompt's);
    over the turns that report prompt tokens, `usage_turns`, `usage_plain` (uncached prompt
    tokens), `usage_cached` and `usage_completion`. One query, one row per (value, session, model)."""
    wanted = [pgtext.escape_text(v) for v in values if v is not None]
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT tags ->> %(key)s, session_ref, model_name, count(*), sum(watermark), sum(n_compression),
                   sum(n_validation), sum(n_validation_failed), sum(n_recall), sum(n_recall_injected),
                   count(*) FILTER (WHERE cached_tokens IS NOT NULL AND prompt_tokens_reported > 0),
                   coalesce(sum(prompt_tokens_reported)
                            FILTER (WHERE cached_tokens IS NOT NULL AND prompt_tokens_reported > 0), 0),
                   coalesce(sum(least(cached_tokens, prompt_tokens_reported))
                            FILTER (WHERE cached_tokens IS NOT NULL AND prompt_tokens_reported > 0), 0),
                   count(prompt_tokens_reported),
                   coalesce(sum(greatest(prompt_tokens_reported - coalesce(cached_tokens, 0), 0)), 0),
                   coalesce(sum(least(coalesce(cached_tokens, 0), prompt_tokens_reported)), 0),
                   coalesce(sum(coalesce(completion_tokens, 0))
                            FILTER (WHERE prompt_tokens_reported IS NOT NULL), 0)
            FROM ingest_snapshot
            WHERE project_id = %(p)s AND received_at >= %(since)s AND received_at < %(until)s
              AND (tags ->> %(key)s = ANY(%(values)s::text[]) OR (%(none)s AND tags ->> %(key)s IS NULL))
            GROUP BY 1, 2, 3
            """,
            {"key": pgtext.escape_text(tag), "p": project.pk, "since": since, "until": until,
             "values": wanted, "none": None in values},
        )
        rows = cur.fetchall()
    names = ("turns", "watermark", "compressions", "checks", "checks_failed", "recalled", "injected",
             "cache_turns", "cache_prompt", "cache_read", "usage_turns", "usage_plain", "usage_cached",
             "usage_completion")
    out: list[dict[str, Any]] = []
    for v, session_ref, model, *sums in rows:
        row: dict[str, Any] = {"value": None if v is None else pgtext.unescape_text(v),
                               "session_ref": session_ref, "model": model}
        row.update(zip(names, (float(x) if i == 1 else int(x) for i, x in enumerate(sums)), strict=True))
        out.append(row)
    return out
