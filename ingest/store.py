"""The snapshot store: how a batch of validated snapshots is written, private to ingest.

Only ingest.services calls it. Snapshots and their child rows are COPYed (several times cheaper than
INSERT for this row shape); each COPY's column list is the field list of one row type below, so
the columns and the values written to them cannot drift apart, and a test compares each list with
the model's columns.

One module, a little over the usual size: it is one write path (`_store_once`, one
transaction), and the row types, their COPY column lists and the derived block changes exist
only for it.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, NamedTuple, TypedDict, cast

import psycopg
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core import pgtext
from core.models import Project
from ctxobs.wire import TIERS, Block, CompressionSource, RecallChannel, Snapshot, Tier, ValidationLayer
from ingest import derive, partitions
from ingest.models import BLOCK_COMPRESSED, BLOCK_ESTIMATED, BLOCK_PINNED, RECEIVED_EVER
from ingest.signals import snapshots_stored
from ingest.types import BlockChange, Message

logger = logging.getLogger(__name__)


class PreparedBlock(NamedTuple):
    """A validated block, left as validation returned it, with what ingest derived from it: its
    content address, its messages' addresses, its token count and whether that count is an estimate
    (the sender's, or the server's when it counted the block). Immutable, as a tuple: a batch makes
    1,200 of them, and a frozen dataclass's constructor (an `object.__setattr__` per field) cost
    twice a tuple's."""

    block: Block
    hash: str
    message_hashes: list[str]
    tokens: int
    estimated: bool


@dataclass(slots=True)
class PreparedSnapshot:
    """A validated snapshot with what ingest derived from it, ready to store."""

    index: int
    snap: Snapshot
    blocks: list[PreparedBlock]  # snap["blocks"] in order, prepared
    total: int
    watermark: float
    tier: Tier
    kind_tokens: dict[str, int]
    counts_estimated: bool
    encoding: str
    drift: float | None
    ref: int = 0  # Snapshot.id
    session_ref: int = 0
    change: BlockChange | None = None  # set by _derive_changes before the row is written
    prev_turn: int | None = None


class _KnownHashes:
    """Content hashes this process has seen committed with today's `last_seen`, so repeats skip
    the database for the rest of the day.

    Entries are added only after the commit that stored them, so a rolled-back batch can
    never leave a reference to content that is not there; and retention never removes content
    seen today (its cutoff is at least a day back), so a known hash stays stored. Bounded:
    cleared when full, and at the turn of the (UTC) day.
    """

    def __init__(self, maxsize: int = 400_000) -> None:
        self.maxsize = maxsize
        # A set of hashes per project: one set of (project, hash) pairs built a tuple for every
        # hash of every batch, twice (2% of a batch's CPU).
        self._known: dict[int, set[str]] = {}
        self._size = 0
        self._day: date | None = None

    def clear(self) -> None:
        self._known.clear()
        self._size = 0

    def unknown(self, project_id: int, hashes: Any, day: date) -> list[str]:
        if day != self._day:
            self.clear()
            self._day = day
        known = self._known.get(project_id)
        if not known:
            return list(hashes)
        return [h for h in hashes if h not in known]

    def add(self, project_id: int, hashes: Any, day: date) -> None:
        if day != self._day:
            return
        if self._size > self.maxsize:
            self.clear()
        known = self._known.setdefault(project_id, set())
        held = len(known)
        known.update(hashes)
        self._size += len(known) - held


_known_blocks = _KnownHashes()
_known_messages = _KnownHashes()


def _j(value: Any) -> str:
    return pgtext.json_dumps(value)


def _text_array(values: list[str]) -> str:
    """A PostgreSQL text[] literal: psycopg adapts Python lists element by element in Python,
    which cost more than the rest of the snapshot row."""
    return "{" + ",".join(['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]) + "}"


def _plain_array(values: list[Any]) -> str:
    """A PostgreSQL array literal of numbers or hex hashes (nothing to quote)."""
    return "{" + ",".join(map(str, values)) + "}"


_STORE_ATTEMPTS = 3


def _row(cur: Any) -> Any:
    row = cur.fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return row


class Stored(NamedTuple):
    """What a batch's store did: {snapshot_id: Snapshot.id} of the snapshots created, and
    {snapshot_id: positions of its blocks} of those refused because a block came by a hash whose
    content the project does not hold (never sent, or expired)."""

    created: dict[str, int]
    unknown_blocks: dict[str, list[int]]


def snapshots_store(*, project: Project, prepared: list[PreparedSnapshot]) -> Stored:
    """Store PREPARED in one transaction, skipping snapshot ids already stored and refusing those
    with a block hash the project does not hold. Retried when a concurrent batch stored one of
    them meanwhile."""
    for attempt in range(1, _STORE_ATTEMPTS + 1):
        try:
            return _store_once(project, prepared)
        except (IntegrityError, psycopg.IntegrityError):
            # Snapshots are COPYed, which has no ON CONFLICT: a snapshot_id that a concurrent batch
            # committed after this one's duplicate check fails the whole transaction. Run again and
            # the duplicate check reports it.
            if attempt == _STORE_ATTEMPTS:
                raise
            logger.info("ingest.batch_retry project_id=%s attempt=%d reason=concurrent_duplicate",
                        project.pk, attempt)
    raise AssertionError("unreachable")


class SnapshotRow(NamedTuple):
    """One ingest_snapshot row, in COPY column order (the field names are the columns)."""

    project_id: int
    id: int
    snapshot_id: str
    session_ref: int
    session_id: str
    turn: int
    agent: str
    ts: datetime
    received_at: datetime
    model_name: str
    context_window: int
    reserve_tokens: int
    encoding: str
    counts_estimated: bool
    params: str
    tags: str
    total_tokens: int
    watermark: float
    tier: str
    kind_tokens: str
    n_blocks: int
    n_compression: int
    n_recall: int
    n_recall_injected: int
    n_validation: int
    n_validation_failed: int
    retries: int
    fallback_used: bool
    output: str | None
    prompt_tokens_reported: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    latency_ms: float | None
    count_drift: float | None
    prev_turn: int | None
    change: str
    block_keys: str
    block_kinds: str
    block_hashes: str
    block_tokens: str
    block_flags: str
    block_refs: str | None


class CompressionRow(NamedTuple):
    project_id: int
    snapshot_ref: int
    position: int
    received_at: datetime
    ts: datetime
    strategy: str
    block: str
    tokens_before: int | None
    tokens_after: int | None
    watermark: float | None
    items: str
    ref: str
    source: CompressionSource
    opaque: bool


class RecallRow(NamedTuple):
    project_id: int
    snapshot_ref: int
    position: int
    received_at: datetime
    memory_id: str
    channel: RecallChannel
    score: float | None
    rank: int | None
    injected: bool
    stale: bool
    conflicting: bool
    block: str
    preview: str


class ValidationRow(NamedTuple):
    project_id: int
    snapshot_ref: int
    position: int
    received_at: datetime
    layer: ValidationLayer
    check: str
    passed: bool
    code: str
    message: str
    attempt: int


# The columns each COPY writes, in row order: the fields of its row type.
COPY_COLUMNS: dict[str, tuple[str, ...]] = {
    "ingest_snapshot": SnapshotRow._fields,
    "ingest_compressionevent": CompressionRow._fields,
    "ingest_recallitem": RecallRow._fields,
    "ingest_validationoutcome": ValidationRow._fields,
}


def copy_sql(table: str, columns: tuple[str, ...]) -> str:
    """The COPY statement for TABLE's COLUMNS (quoted: `check` is a reserved word)."""
    quoted = ", ".join(f'"{c}"' for c in columns)
    return f"COPY {table} ({quoted}) FROM STDIN"


_COPY_SQL = {table: copy_sql(table, columns) for table, columns in COPY_COLUMNS.items()}


# The text[] literals of the blocks' keys and kinds, by their tuple: an agent sends the same
# layout turn after turn, so most turns find theirs here (bounded: cleared when full).
_layout_arrays: dict[tuple[str, ...], str] = {}
_LAYOUT_ARRAYS_MAX = 4_096


def _layout_array(values: tuple[str, ...]) -> str:
    found = _layout_arrays.get(values)
    if found is None:
        if len(_layout_arrays) >= _LAYOUT_ARRAYS_MAX:
            _layout_arrays.clear()
        found = _layout_arrays[values] = _text_array(list(values))
    return found


def _snapshot_row(pid: int, now: datetime, p: PreparedSnapshot) -> SnapshotRow:
    s = p.snap
    out = s["output"]
    usage = out["usage"] if out else {}
    model = s["model"]
    blocks = p.blocks
    # The blocks' columns in one pass over them (a row's arrays were a third of its cost).
    keys: list[str] = []
    kinds: list[str] = []
    hashes: list[str] = []
    tokens: list[int] = []
    flags: list[int] = []
    any_refs = False
    for b in blocks:
        blk = b.block
        keys.append(blk["key"])
        kinds.append(blk["kind"])
        hashes.append(b.hash)
        tokens.append(b.tokens)
        flags.append((BLOCK_ESTIMATED if b.estimated else 0) | (BLOCK_PINNED if blk["pinned"] else 0)
                     | (BLOCK_COMPRESSED if blk["compressed"] else 0))
        any_refs = any_refs or bool(blk["refs"])
    recall, validation = s["recall"], s["validation"]
    # Positional, in the row's field order (42 keyword arguments cost a quarter of the row).
    return SnapshotRow(
        pid, p.ref, s["snapshot_id"], p.session_ref, s["session_id"], s["turn"], s["agent"], s["ts"], now,
        model["name"], model["context_window"], model["reserve_tokens"], p.encoding, p.counts_estimated,
        _j(s["params"]), _j(s["tags"]), p.total, p.watermark, p.tier, _j(p.kind_tokens), len(blocks),
        len(s["compression"]), len(recall), sum(1 for r in recall if r["injected"]), len(validation),
        sum(1 for v in validation if not v["passed"]), s["retries"], s["fallback_used"],
        _j(out) if out is not None else None,
        usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("cached_tokens"),
        out.get("latency_ms") if out else None,
        p.drift, p.prev_turn, _j(p.change or {}),
        _layout_array(tuple(keys)), _layout_array(tuple(kinds)), _plain_array(hashes), _plain_array(tokens),
        _plain_array(flags), _j([b.block["refs"] for b in blocks]) if any_refs else None,
    )


class _Steps:
    """Milliseconds of each step of one batch's store, logged at DEBUG (`ingest.store_steps`):
    where a batch's time goes, for operators and bench/scale.py."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, step: str) -> None:
        now = time.perf_counter()
        self.ms[step] = round((now - self._t) * 1000, 2)
        self._t = now


def _store_once(project: Project, prepared: list[PreparedSnapshot]) -> Stored:
    pid = project.pk
    now = timezone.now()
    steps = _Steps()
    stored = _store_steps(project, prepared, now, steps)
    steps.mark("hooks")
    if stored.created and logger.isEnabledFor(logging.DEBUG):
        logger.debug("ingest.store_steps project_id=%s n=%d %s", pid, len(stored.created),
                     " ".join(f"{k}={v}" for k, v in steps.ms.items()))
    return stored


def _store_steps(project: Project, prepared: list[PreparedSnapshot], now: datetime, steps: _Steps) -> Stored:
    """One batch's transaction, step by step, each step's time marked on STEPS: the duplicates
    and the new ids, the blocks sent by hash, the block and message texts, the turn rows, the
    signal to the other apps, the sessions (whose row locks order concurrent batches of a session
    from here to the commit), the turn-to-turn changes, the snapshots, the child rows and the
    stored turns a late turn changed."""
    pid = project.pk
    today = now.astimezone(UTC).date()
    # Database errors of the psycopg cursors below reach callers as Django's (503 handling).
    with transaction.atomic(), connection.wrap_database_errors:
        # The first hook after the commit: "commit" ends when the locks are released, and what the
        # other hooks (queueing the follow-up work) take is "hooks".
        transaction.on_commit(lambda: steps.mark("commit"))
        raw = connection.cursor().cursor  # Django's psycopg cursor (client-side binding), for COPY
        # Parameters bound server-side: the batch's arrays and JSON travel apart from the SQL text
        # instead of being escaped into it, which cost PostgreSQL's parser more than the rows did.
        # The per-batch statements are prepared (`prepare=True`; settings' CTXOBS_DB_PREPARED): the
        # planning of a lookup over the day partitions cost several times its execution.
        cur = _store_cursor(raw.connection)

        fresh, before = _fresh_numbered(cur, pid, prepared, now)
        steps.mark("duplicates")
        contents = _contents(fresh)
        fresh, unknown = _by_hash_held(cur, pid, fresh, contents, today)
        if not fresh:
            return Stored({}, unknown)
        steps.mark("by_hash")
        # The texts go first: they name no session, so a concurrent batch of the same sessions,
        # waiting on their row locks from the upsert below to our commit, does not wait for them.
        # Every batch takes its content rows (sorted by hash) before its session rows (sorted by
        # session id), so two batches never wait on each other in a cycle.
        touched_blocks = _blocks_upsert(cur, pid, contents, now, today)
        steps.mark("blocks")
        messages = _messages_upsert(cur, pid, contents, touched_blocks, today)
        steps.mark("messages")
        # The turn rows are built before the session rows are locked (all but what the locks
        # decide: the session's row id and the change from the previous turn), so a concurrent
        # batch of the same sessions waits for less.
        rows = [_snapshot_row(pid, now, p) for p in fresh]
        steps.mark("rows")
        # The other apps record the follow-up work they owe these turns (rows of their own, and
        # hooks after the commit) before the session rows are locked too: they name no session.
        refs = [p.ref for p in fresh]
        failed = [p.ref for p in fresh if any(not v["passed"] for v in p.snap["validation"])]
        snapshots_stored.send(
            sender=Project, project_id=pid, snapshot_refs=refs, validation_failed_refs=failed
        )
        steps.mark("signals")
        since, after = _sessions_upsert(cur, pid, fresh, now)
        steps.mark("sessions")
        updates = _derive_changes(cur, pid, fresh, since, before, after)
        steps.mark("changes")
        _snapshots_copy(raw, fresh, rows)
        steps.mark("snapshots")
        _children_copy(raw, pid, now, fresh)
        steps.mark("children")
        _late_turns_update(cur, pid, updates, since)
        steps.mark("late")

        # Blocks that came by hash are held and now last seen today, as the stored ones are.
        block_keys = [*contents, *(b.hash for p in fresh for b in p.blocks if b.block["hash"] is not None)]
        message_keys = list(messages)

        def _committed() -> None:
            _known_blocks.add(pid, block_keys, today)
            _known_messages.add(pid, message_keys, today)

        transaction.on_commit(_committed)
    return Stored({p.snap["snapshot_id"]: p.ref for p in fresh}, unknown)


class _Before(NamedTuple):
    """A stored session as a batch found it before its upsert: the fast path of the turn-to-turn
    changes (`_derive_changes`) stands on it."""

    max_turn: int
    turn_count: int


class _After(NamedTuple):
    """A session as the batch's upsert left it (its row locked until the commit)."""

    turn_count: int
    max_turn: int


# The batch's snapshot ids already stored from SINCE on, and as many new ids as the batch has
# snapshots. One lookup per id on each partition's unique (project_id, snapshot_id) index: with
# `snapshot_id = ANY(...)` instead, a day partition whose statistics date from when it was nearly
# empty (every partition in its first hours, until autovacuum analyses it again) was read whole
# through its primary key, every turn the project stored that day, on every batch (5 ms of
# PostgreSQL's CPU a batch at 6,500 turns, against 0.8 ms; BENCHMARKS.md).
_DUPLICATES_SQL = """
    SELECT ARRAY(SELECT s.snapshot_id::text FROM unnest(%s::uuid[]) AS b(snapshot_id)
                 JOIN LATERAL (
                     SELECT snapshot_id FROM ingest_snapshot x
                     WHERE x.project_id = %s AND x.snapshot_id = b.snapshot_id AND x.received_at >= %s
                     OFFSET 0
                 ) s ON true),
           ARRAY(SELECT nextval('ingest_snapshot_id_seq') FROM generate_series(1, %s))
    """


# psycopg's own (C) loader for timestamptz. Django registers a pure-Python one on its connections
# (a subclass that sets the tzinfo again); on the store's few hundred timestamps a batch (the
# sessions' first_received, the previous turns' ts) it cost 3% of a batch's CPU. Both give the same
# instant in UTC: the connection's TimeZone is Django's (UTC).
_TIMESTAMPTZ_LOADER = psycopg.adapters.get_loader(
    psycopg.adapters.types["timestamptz"].oid, psycopg.pq.Format.TEXT
)


def _store_cursor(conn: Any) -> psycopg.Cursor[Any]:
    """A cursor on Django's psycopg connection CONN that binds parameters server-side and loads
    timestamps with psycopg's C loader."""
    cur: psycopg.Cursor[Any] = psycopg.Cursor(conn)
    if _TIMESTAMPTZ_LOADER is not None:
        cur.adapters.register_loader("timestamptz", _TIMESTAMPTZ_LOADER)
    return cur


def _fresh_numbered(
    cur: Any, pid: int, prepared: list[PreparedSnapshot], now: datetime
) -> tuple[list[PreparedSnapshot], dict[str, _Before]]:
    """The snapshots of PREPARED not stored yet, each given its new id (`ref`), and the batch's
    sessions already stored, as they are now.

    Duplicates already stored (a resend) are never stored twice; ids for the rest come in the same
    round trip (a few may go unused, as sequences allow). A resend belongs to a session already
    stored, so the lookup visits only the day partitions from the earliest `first_received` of the
    batch's stored sessions on, and always today's (the partition the batch writes to, where a
    clashing id would fail the COPY): at a steady rate the cost stays flat however many days are
    kept."""
    session_ids = sorted({p.snap["session_id"] for p in prepared})
    cur.execute(
        """
        SELECT session_id, max_turn, turn_count, COALESCE(first_received, %s) FROM ingest_session
        WHERE project_id = %s AND session_id = ANY(%s::text[])
        """,
        [RECEIVED_EVER, pid, session_ids],
        prepare=True,
    )
    before: dict[str, _Before] = {}
    since = partitions.day_start(now)
    for sid, max_turn, turn_count, first in cur.fetchall():
        before[sid] = _Before(max_turn, turn_count)
        since = min(since, first)
    cur.execute(
        _DUPLICATES_SQL, [[p.snap["snapshot_id"] for p in prepared], pid, since, len(prepared)], prepare=True
    )
    existing_ids, new_ids = _row(cur)
    existing = set(existing_ids)
    fresh = [p for p in prepared if p.snap["snapshot_id"] not in existing]
    for p, ref in zip(fresh, new_ids, strict=False):
        p.ref = ref
    return fresh, before


def _contents(fresh: list[PreparedSnapshot]) -> dict[str, tuple[PreparedBlock, str]]:
    """The distinct block contents FRESH brings (its blocks sent with their messages) by hash, each
    with the encoding of its first turn."""
    contents: dict[str, tuple[PreparedBlock, str]] = {}
    for p in fresh:
        for b in p.blocks:
            if b.hash not in contents and b.block["hash"] is None:
                contents[b.hash] = (b, p.encoding)
    return contents


def _by_hash_held(
    cur: Any, pid: int, fresh: list[PreparedSnapshot], contents: dict[str, tuple[PreparedBlock, str]],
    today: date,
) -> tuple[list[PreparedSnapshot], dict[str, list[int]]]:
    """The snapshots of FRESH whose blocks sent by hash are all held, and {snapshot_id: block
    positions} of the others, whose hashes the project does not hold.

    A hash is held when the batch brings its content, when this process saw it committed today
    (`_known_blocks`: retention never removes content seen today), or when the project's stored
    contents have it. Those are locked against retention's delete until the commit (FOR KEY
    SHARE: a delete that came first has taken them, and they are not found) and marked seen
    today, with their messages, as `_blocks_upsert` marks the contents a batch brings."""
    asked = {b.hash for p in fresh for b in p.blocks if b.block["hash"] is not None}
    if not asked:
        return fresh, {}
    lookup = sorted(h for h in _known_blocks.unknown(pid, asked, today) if h not in contents)
    held = asked - set(lookup)
    if lookup:
        cur.execute(
            """
            WITH held AS (
                SELECT hash, last_seen FROM ingest_blockcontent
                WHERE project_id = %(p)s AND hash = ANY(%(h)s::text[]) FOR KEY SHARE
            ), seen AS (
                UPDATE ingest_blockcontent c SET last_seen = %(d)s FROM held
                WHERE c.project_id = %(p)s AND c.hash = held.hash AND held.last_seen < %(d)s
                RETURNING c.message_hashes
            ), messages AS (
                UPDATE ingest_messagecontent m SET last_seen = %(d)s
                WHERE m.project_id = %(p)s AND m.last_seen < %(d)s
                  AND m.hash IN (SELECT unnest(message_hashes) FROM seen)
            )
            SELECT ARRAY(SELECT hash FROM held)
            """,
            {"p": pid, "h": _plain_array(lookup), "d": today},
            prepare=True,
        )
        held.update(_row(cur)[0])
    if len(held) == len(asked):
        return fresh, {}
    kept: list[PreparedSnapshot] = []
    unknown: dict[str, list[int]] = {}
    for p in fresh:
        missing = [j for j, b in enumerate(p.blocks) if b.block["hash"] is not None and b.hash not in held]
        if missing:
            unknown[p.snap["snapshot_id"]] = missing
        else:
            kept.append(p)
    return kept, unknown


def _blocks_upsert(
    cur: Any, pid: int, contents: dict[str, tuple[PreparedBlock, str]], now: datetime, today: date
) -> list[str]:
    """Store the block contents CONTENTS not stored yet and mark the others seen TODAY; the hashes
    of those inserted or first seen today (whose messages must be stored or marked in turn).

    Block contents and their messages are each stored once per project under their hash, with
    the last day a turn referred to them (retention keeps a text while a kept turn refers to it).
    Hashes this process saw committed today skip the database. For the rest, one upsert stores
    the new blocks and moves `last_seen` of the others to today."""
    maybe_new = sorted(_known_blocks.unknown(pid, contents, today))
    if not maybe_new:
        return []
    rows = [contents[h] for h in maybe_new]
    cur.execute(
        """
        INSERT INTO ingest_blockcontent AS c (project_id, hash, message_hashes, chars, tokens,
            encoding, created_at, last_seen)
        SELECT %s, x.hash, string_to_array(x.mh, ','), x.chars, x.tokens, x.encoding, %s, %s
        FROM unnest(%s::text[], %s::text[], %s::int[], %s::int[], %s::text[])
            AS x(hash, mh, chars, tokens, encoding)
        ON CONFLICT (project_id, hash) DO UPDATE SET last_seen = EXCLUDED.last_seen
            WHERE c.last_seen < EXCLUDED.last_seen
        RETURNING hash
        """,
        [pid, now, today, _plain_array(maybe_new),
         _text_array([",".join(b.message_hashes) for b, _ in rows]),
         _plain_array([b.block["chars"] for b, _ in rows]), _plain_array([b.tokens for b, _ in rows]),
         _text_array([enc for _, enc in rows])],
        prepare=True,
    )
    return [r[0] for r in cur.fetchall()]


def _messages_upsert(
    cur: Any, pid: int, contents: dict[str, tuple[PreparedBlock, str]], touched_blocks: list[str],
    today: date
) -> dict[str, Message]:
    """Upsert the messages of every block TOUCHED_BLOCKS names (new, or first seen today) the way
    `_blocks_upsert` upserts the blocks, so a message is never last seen before a block that holds
    it; those messages by hash."""
    messages: dict[str, Message] = {}
    for h in touched_blocks:
        pb = contents[h][0]
        # Searching a batch's JSON for an escaped NUL costs more than encoding it: validation
        # already knows the blocks whose text needs no escaping (see ctxobs.wire.STORE_ESCAPE).
        verbatim = pb.block["verbatim"]
        # The messages are stored as the agent sent them: JSON objects, whatever their fields.
        for mh, m in zip(pb.message_hashes, cast(list[Message], pb.block["messages"]), strict=True):
            if mh not in messages:
                messages[mh] = m if verbatim else pgtext.escape_message(m)
    new_messages = sorted(_known_messages.unknown(pid, messages, today))
    if new_messages:
        cur.execute(
            """
            INSERT INTO ingest_messagecontent AS c (project_id, hash, message, last_seen)
            SELECT %s, x.hash, x.message, %s
            FROM jsonb_to_recordset(%s::jsonb) AS x(hash text, message jsonb)
            ON CONFLICT (project_id, hash) DO UPDATE SET last_seen = EXCLUDED.last_seen
                WHERE c.last_seen < EXCLUDED.last_seen
            """,
            [pid, today, pgtext.json_dumps([{"hash": mh, "message": messages[mh]} for mh in new_messages],
                                           checked=True)],
            prepare=True,
        )
    return messages


def _sessions_upsert(
    cur: Any, pid: int, fresh: list[PreparedSnapshot], now: datetime
) -> tuple[datetime, dict[int, _After]]:
    """Upsert the sessions of FRESH with their aggregates and set each snapshot's `session_ref`;
    the moment before which no stored turn of these sessions was received, and each session's
    `turn_count` and `max_turn` after the upsert by `session_ref`.

    The aggregates are commutative, so arrival order does not matter; `first_received` is when the
    session's first turn was stored (kept NULL for a session stored before the column existed: its
    turns may lie in any partition). The upsert locks each session row; that serialises concurrent
    batches of one session so the turn-to-turn diffs see a stable order, and sorted ids avoid
    deadlocks between them."""
    by_session: dict[str, list[PreparedSnapshot]] = defaultdict(list)
    for p in fresh:
        by_session[p.snap["session_id"]].append(p)
    # Columns: session id, agent, model, first seen, last seen, max tier; then turns, max turn,
    # max watermark, failed validations, compression events.
    text_cols: tuple[list[str], ...] = ([], [], [], [], [], [])
    num_cols: tuple[list[Any], ...] = ([], [], [], [], [])
    for sid in sorted(by_session):
        ps = by_session[sid]
        latest = max(ps, key=lambda p: (p.snap["ts"], p.snap["turn"]))
        for col, text in zip(text_cols, (
            sid, latest.snap["agent"], latest.snap["model"]["name"],
            min(p.snap["ts"] for p in ps).isoformat(), latest.snap["ts"].isoformat(),
            TIERS[max(TIERS.index(p.tier) for p in ps)],
        ), strict=True):
            col.append(text)
        for num_col, num in zip(num_cols, (
            len(ps), max(p.snap["turn"] for p in ps), max(p.watermark for p in ps),
            sum(1 for p in ps for v in p.snap["validation"] if not v["passed"]),
            sum(len(p.snap["compression"]) for p in ps),
        ), strict=True):
            num_col.append(num)
    cur.execute(
        """
        INSERT INTO ingest_session AS s (project_id, session_id, agent, model, turn_count, max_turn,
            first_seen, last_seen, max_watermark, max_tier, failed_validations, compression_events,
            alert_count, first_received)
        SELECT %s, x.session_id, x.agent, x.model, x.n, x.max_turn, x.first_seen, x.last_seen,
            x.max_watermark, x.max_tier, x.failed, x.compressions, 0, %s::timestamptz
        FROM unnest(%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[], %s::text[],
            %s::int[], %s::int[], %s::float8[], %s::int[], %s::int[])
            AS x(session_id, agent, model, first_seen, last_seen, max_tier, n, max_turn, max_watermark,
                 failed, compressions)
        ORDER BY x.session_id
        ON CONFLICT (project_id, session_id) DO UPDATE SET
            turn_count = s.turn_count + EXCLUDED.turn_count,
            max_turn = GREATEST(s.max_turn, EXCLUDED.max_turn),
            first_seen = LEAST(s.first_seen, EXCLUDED.first_seen),
            agent = CASE WHEN EXCLUDED.last_seen >= s.last_seen OR s.agent = ''
                         THEN EXCLUDED.agent ELSE s.agent END,
            model = CASE WHEN EXCLUDED.last_seen >= s.last_seen OR s.model = ''
                         THEN EXCLUDED.model ELSE s.model END,
            last_seen = GREATEST(s.last_seen, EXCLUDED.last_seen),
            max_watermark = GREATEST(s.max_watermark, EXCLUDED.max_watermark),
            max_tier = CASE
                WHEN array_position(ARRAY['ok','warn','compress','force','break'], EXCLUDED.max_tier)
                     > array_position(ARRAY['ok','warn','compress','force','break'], s.max_tier)
                THEN EXCLUDED.max_tier ELSE s.max_tier END,
            failed_validations = s.failed_validations + EXCLUDED.failed_validations,
            compression_events = s.compression_events + EXCLUDED.compression_events,
            first_received = CASE WHEN s.first_received IS NULL THEN NULL
                                  ELSE LEAST(s.first_received, EXCLUDED.first_received) END
        RETURNING id, session_id, first_received, turn_count, max_turn
        """,
        [pid, now, *map(_text_array, text_cols), *map(_plain_array, num_cols)],
        prepare=True,
    )
    session_rows = cur.fetchall()
    session_refs = {sid: ref for ref, sid, _, _, _ in session_rows}
    for p in fresh:
        p.session_ref = session_refs[p.snap["session_id"]]
    # The upsert's answer, so a session another batch created meanwhile counts too.
    since: datetime = min(first or RECEIVED_EVER for _, _, first, _, _ in session_rows)
    return since, {ref: _After(count, top) for ref, _, _, count, top in session_rows}


def _snapshots_copy(raw: Any, fresh: list[PreparedSnapshot], rows: list[SnapshotRow]) -> None:
    """COPY the ROWS of FRESH (built by `_snapshot_row` before the session upsert), with what
    the upsert and the turn-to-turn changes set since. Their ids are new; a snapshot_id stored
    meanwhile fails the COPY (see snapshots_store)."""
    with raw.copy(_COPY_SQL["ingest_snapshot"]) as copy:
        for p, row in zip(fresh, rows, strict=True):
            # The three fields set since, in place (`_replace` cost eight times this).
            values = list(row)
            values[_SESSION_REF], values[_PREV_TURN] = p.session_ref, p.prev_turn
            values[_CHANGE] = _j(p.change or {})
            copy.write_row(values)


_SESSION_REF, _PREV_TURN, _CHANGE = map(SnapshotRow._fields.index, ("session_ref", "prev_turn", "change"))


def _children_copy(raw: Any, pid: int, now: datetime, fresh: list[PreparedSnapshot]) -> None:
    """COPY the compression events, recall items and validation outcomes of FRESH: the snapshot
    ids are new, so nothing can conflict."""
    if any(p.snap["compression"] for p in fresh):
        with raw.copy(_COPY_SQL["ingest_compressionevent"]) as copy:
            for p in fresh:
                for pos, c in enumerate(p.snap["compression"]):
                    copy.write_row(CompressionRow(
                        project_id=pid, snapshot_ref=p.ref, position=pos, received_at=now,
                        ts=p.snap["ts"],
                        strategy=c["strategy"], block=c["block"], tokens_before=c["tokens_before"],
                        tokens_after=c["tokens_after"], watermark=c["watermark"], items=_j(c["items"]),
                        ref=pgtext.escape_text(c["ref"]), source=c["source"], opaque=c["opaque"]))
    if any(p.snap["recall"] for p in fresh):
        with raw.copy(_COPY_SQL["ingest_recallitem"]) as copy:
            for p in fresh:
                for pos, r in enumerate(p.snap["recall"]):
                    copy.write_row(RecallRow(
                        project_id=pid, snapshot_ref=p.ref, position=pos, received_at=now,
                        memory_id=r["memory_id"],
                        channel=r["channel"], score=r["score"], rank=r["rank"], injected=r["injected"],
                        stale=r["stale"], conflicting=r["conflicting"], block=r["block"],
                        preview=pgtext.escape_text(r["preview"])))
    if any(p.snap["validation"] for p in fresh):
        with raw.copy(_COPY_SQL["ingest_validationoutcome"]) as copy:
            for p in fresh:
                for pos, v in enumerate(p.snap["validation"]):
                    copy.write_row(ValidationRow(
                        project_id=pid, snapshot_ref=p.ref, position=pos, received_at=now,
                        layer=v["layer"],
                        check=v["check"], passed=v["passed"], code=v["code"],
                        message=pgtext.escape_text(v["message"]), attempt=v["attempt"]))


def _late_turns_update(cur: Any, pid: int, updates: list[_ChangeUpdate], since: datetime) -> None:
    """Rewrite the change of stored turns whose predecessor changed because an earlier turn
    arrived late (UPDATES, from `_derive_changes`)."""
    if not updates:
        return
    cur.execute(
        """
        UPDATE ingest_snapshot s SET prev_turn = x.prev_turn, change = x.change
        FROM jsonb_to_recordset(%s::jsonb) AS x(id bigint, prev_turn int, change jsonb)
        WHERE s.project_id = %s AND s.id = x.id AND s.received_at >= %s
        """,
        [_j(updates), pid, since],
    )


# The stored neighbourhood of the new turns of each session (`session_ref`, earliest new turn,
# latest new turn, whether a stored turn may follow the latest), with their blocks: from the last
# stored turn before the earliest new one to the first stored turn after the latest new one, which
# is looked for only where one may be (the session's `max_turn` is above the latest new turn).
# `OFFSET 0` keeps the lateral subquery a per-session index range scan: pulled up into the join,
# the planner read every turn the project stored since the lower bound and ran both bounds' lookups
# for each of them, so that a batch's cost grew with the day's turns (268 ms instead of 8 ms under
# EXPLAIN ANALYZE with 5,000 turns stored that day; BENCHMARKS.md).
_NEIGHBOURS_SQL = """
    WITH b(session_ref, lo, hi, later) AS (
        SELECT * FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::bool[]))
    SELECT s.id, s.session_ref, s.turn, s.ts, s.snapshot_id::text,
           s.block_keys, s.block_kinds, s.block_hashes, s.block_tokens FROM b
    JOIN LATERAL (
        SELECT id, session_ref, turn, ts, snapshot_id, block_keys, block_kinds, block_hashes, block_tokens
        FROM ingest_snapshot s
        WHERE s.project_id = %s AND s.session_ref = b.session_ref AND s.received_at >= %s
          AND s.turn >= COALESCE((SELECT max(x.turn) FROM ingest_snapshot x WHERE x.project_id = %s
                                  AND x.session_ref = b.session_ref AND x.received_at >= %s
                                  AND x.turn < b.lo), b.lo)
          AND s.turn <= CASE WHEN b.later
                        THEN COALESCE((SELECT min(x.turn) FROM ingest_snapshot x WHERE x.project_id = %s
                                       AND x.session_ref = b.session_ref AND x.received_at >= %s
                                       AND x.turn > b.hi), b.hi)
                        ELSE b.hi END
        OFFSET 0
    ) s ON true
    """


# The stored turns numbered TURN of each session (`session_ref`, turn): the neighbourhood of new
# turns that all follow the session's stored ones. A lateral index lookup per session, fenced by
# `OFFSET 0` as above.
_TAILS_SQL = """
    SELECT s.id, s.session_ref, s.turn, s.ts, s.snapshot_id::text,
           s.block_keys, s.block_kinds, s.block_hashes, s.block_tokens
    FROM unnest(%s::bigint[], %s::int[]) AS b(session_ref, turn)
    JOIN LATERAL (
        SELECT id, session_ref, turn, ts, snapshot_id, block_keys, block_kinds, block_hashes, block_tokens
        FROM ingest_snapshot s
        WHERE s.project_id = %s AND s.session_ref = b.session_ref AND s.turn = b.turn AND s.received_at >= %s
        OFFSET 0
    ) s ON true
    """


class _ChangeUpdate(TypedDict):
    id: int | None
    prev_turn: int | None
    change: BlockChange


def _derive_changes(
    cur: Any, pid: int, fresh: list[PreparedSnapshot], since: datetime, before: dict[str, _Before],
    after: dict[int, _After],
) -> list[_ChangeUpdate]:
    """Set `change`/`prev_turn` on FRESH and return the updates for stored turns that follow them.
    No stored turn of FRESH's sessions was received before SINCE: the partitions before it are not
    visited.

    BEFORE (the sessions as `_fresh_numbered` read them) and AFTER (as the upsert, which holds
    their row locks, left them) give most sessions a shorter way. A session the batch created,
    whose count is the batch's own, has nothing stored: no lookup. A session whose count grew by
    exactly the batch's turns, all after its `max_turn`, had no other batch between the two reads,
    so its neighbourhood is its stored turns numbered `max_turn`: one index lookup each. The others
    (a late turn, a batch of another process in between, a count that retention rewrote) and any
    tail no longer stored take the neighbourhood lookup, which looks for stored turns after the
    batch's latest only where the session's `max_turn` after the upsert is above it (a session's
    `max_turn` is never below a turn it stores)."""
    by_ref: dict[int, list[PreparedSnapshot]] = defaultdict(list)
    for p in fresh:
        by_ref[p.session_ref].append(p)
    tails: dict[int, int] = {}
    full: list[int] = []
    for ref, ps in by_ref.items():
        was, count = before.get(ps[0].snap["session_id"]), after[ref].turn_count
        if was is None:
            if count != len(ps):
                full.append(ref)
        elif count == was.turn_count + len(ps) and min(p.snap["turn"] for p in ps) > was.max_turn:
            tails[ref] = was.max_turn
        else:
            full.append(ref)
    rows: list[Any] = []
    if tails:
        cur.execute(_TAILS_SQL, [list(tails), list(tails.values()), pid, since], prepare=True)
        rows = cur.fetchall()
        full.extend(tails.keys() - {r[1] for r in rows})
    if full:
        los = [min(p.snap["turn"] for p in by_ref[ref]) for ref in full]
        his = [max(p.snap["turn"] for p in by_ref[ref]) for ref in full]
        later = [after[ref].max_turn > hi for ref, hi in zip(full, his, strict=True)]
        cur.execute(_NEIGHBOURS_SQL, [full, los, his, later, pid, since, pid, since, pid, since],
                    prepare=True)
        rows.extend(cur.fetchall())
    # One ordered line per session of (turn, ts, snapshot_id) with either a stored turn's blocks
    # or a new turn.
    Entry = tuple[int, datetime, str, int | None, "PreparedSnapshot | None", list[derive.BlockRef] | None]
    lines: dict[int, list[Entry]] = defaultdict(list)
    for sid, sref, turn, ts, snap_uuid, keys, kinds, hashes, tokens in rows:
        stored = list(map(derive.BlockRef, keys, kinds, hashes, tokens))
        lines[sref].append((turn, ts, snap_uuid, sid, None, stored))
    for p in fresh:
        lines[p.session_ref].append((p.snap["turn"], p.snap["ts"], p.snap["snapshot_id"], None, p, None))
    updates: list[_ChangeUpdate] = []
    for line in lines.values():
        line.sort(key=lambda e: (e[0], e[1], e[2]))
        prev_blocks: list[derive.BlockRef] | None = None
        prev_turn: int | None = None
        prev_is_new = False
        for turn, _ts, _u, stored_id, new, stored_blocks in line:
            if new is not None:
                cur_blocks = [derive.BlockRef(b.block["key"], b.block["kind"], b.hash, b.tokens)
                              for b in new.blocks]
                # The first entry of the line may be a new turn with nothing stored before it.
                new.change = derive.block_change(prev_blocks, cur_blocks, prev_turn)
                new.prev_turn = prev_turn
                prev_is_new = True
            else:
                cur_blocks = stored_blocks or []
                if prev_is_new:
                    updates.append({"id": stored_id, "prev_turn": prev_turn,
                                    "change": derive.block_change(prev_blocks, cur_blocks, prev_turn)})
                prev_is_new = False
            prev_blocks, prev_turn = cur_blocks, turn
    return updates
