"""Reads of the prompt-cache lens: a turn's figures, a session's and a project's summaries, the
timeline overlay and the hit rate per assembly version (for the alert rule)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from insights.cache import NOT_BREAKS, REASONS
from insights.cache_models import TurnCache

TOP_BREAKERS = 5


@dataclass(frozen=True, slots=True)
class Breaker:
    key: str
    kind: str
    turns: int
    reasons: str  # the reasons seen, most frequent first


@dataclass(frozen=True, slots=True)
class CacheSummary:
    """Cache figures over some turns. Costs cover the turns whose model has a price."""

    turns: int
    prompt_tokens: int
    cached_tokens: int  # reported where reported, else expected
    expected_cached: int
    reported_turns: int
    breaks: int
    cost_no_cache: float
    cost_expected: float
    cost_actual: float  # reported cache where reported, else expected
    cost_lost: float
    priced_turns: int
    breakers: list[Breaker]

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def expected_rate(self) -> float | None:
        return self.expected_cached / self.prompt_tokens if self.prompt_tokens else None


_SUMMARY = """
    SELECT count(*), coalesce(sum(prompt_tokens), 0),
           coalesce(sum(coalesce(reported_cached, expected_cached)), 0), coalesce(sum(expected_cached), 0),
           count(reported_cached), count(*) FILTER (WHERE NOT (reason = ANY(%(ok)s))),
           coalesce(sum(cost_no_cache), 0), coalesce(sum(cost_expected), 0),
           coalesce(sum(coalesce(cost_actual, cost_expected)), 0), coalesce(sum(cost_lost), 0),
           count(cost_no_cache)
    FROM insights_turncache WHERE project_id = %(p)s {where}
"""
_BREAKERS = """
    SELECT break_key, max(break_kind), count(*), array_agg(reason)
    FROM insights_turncache WHERE project_id = %(p)s AND NOT (reason = ANY(%(ok)s)) {where}
    GROUP BY break_key ORDER BY count(*) DESC, break_key LIMIT %(n)s
"""


def _breakers(keys: list[str], kinds: list[str], reasons: list[str]) -> list[Breaker]:
    """The blocks at which the cache broke most often, from one (key, kind, reason) per break."""
    per: dict[str, dict[str, int]] = {}
    kind_of: dict[str, str] = {}
    for key, kind, reason in zip(keys, kinds, reasons, strict=True):
        per.setdefault(key, {})
        per[key][reason] = per[key].get(reason, 0) + 1
        kind_of[key] = kind
    top = sorted(per, key=lambda k: (-sum(per[k].values()), k))[:TOP_BREAKERS]
    return [
        Breaker(
            key=k,
            kind=kind_of[k],
            turns=sum(per[k].values()),
            reasons=", ".join(REASONS.get(r, r) for r in sorted(per[k], key=lambda r: (-per[k][r], r))),
        )
        for k in top
    ]


def turn_cache_in_session(*, project_id: int, snapshot_ref: int) -> tuple[TurnCache, CacheSummary] | None:
    """A turn's figures and its session's summary, in one query; None before the turn is analysed."""
    cols = [f.column for f in TurnCache._meta.concrete_fields]
    t_cols = ", ".join(f"t.{c}" for c in cols)
    sql = f"""
        SELECT {t_cols}, a.* FROM insights_turncache t
        CROSS JOIN LATERAL (
            SELECT count(*), coalesce(sum(prompt_tokens), 0),
                   coalesce(sum(coalesce(reported_cached, expected_cached)), 0),
                   coalesce(sum(expected_cached), 0), count(reported_cached),
                   count(*) FILTER (WHERE NOT (reason = ANY(%(ok)s))),
                   coalesce(sum(cost_no_cache), 0), coalesce(sum(cost_expected), 0),
                   coalesce(sum(coalesce(cost_actual, cost_expected)), 0), coalesce(sum(cost_lost), 0),
                   count(cost_no_cache),
                   coalesce(array_agg(break_key) FILTER (WHERE NOT (reason = ANY(%(ok)s))), '{{}}'),
                   coalesce(array_agg(break_kind) FILTER (WHERE NOT (reason = ANY(%(ok)s))), '{{}}'),
                   coalesce(array_agg(reason) FILTER (WHERE NOT (reason = ANY(%(ok)s))), '{{}}')
            FROM insights_turncache s WHERE s.project_id = t.project_id AND s.session_ref = t.session_ref
        ) a
        WHERE t.project_id = %(p)s AND t.snapshot_ref = %(r)s
    """  # noqa: S608 - the interpolated text is a fixed column list
    with connection.cursor() as cur:
        cur.execute(sql, {"p": project_id, "r": snapshot_ref, "ok": list(NOT_BREAKS)})
        row = cur.fetchone()
    if row is None:
        return None
    n = len(cols)
    turn = TurnCache(**{f.attname: v for f, v in zip(TurnCache._meta.concrete_fields, row[:n], strict=True)})
    a = row[n:]
    summary = CacheSummary(
        turns=a[0],
        prompt_tokens=a[1],
        cached_tokens=a[2],
        expected_cached=a[3],
        reported_turns=a[4],
        breaks=a[5],
        cost_no_cache=a[6],
        cost_expected=a[7],
        cost_actual=a[8],
        cost_lost=a[9],
        priced_turns=a[10],
        breakers=_breakers(list(a[11]), list(a[12]), list(a[13])),
    )
    return turn, summary


def _summary(where: str, params: dict[str, Any]) -> CacheSummary:
    args = {**params, "ok": list(NOT_BREAKS), "n": TOP_BREAKERS}
    with connection.cursor() as cur:
        cur.execute(_SUMMARY.format(where=where), args)
        row = cur.fetchone()
        cur.execute(_BREAKERS.format(where=where), args)
        brows = cur.fetchall()
    breakers = []
    for key, kind, n, reasons in brows:
        counts: dict[str, int] = {}
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
        ordered = sorted(counts, key=lambda r: (-counts[r], r))
        breakers.append(
            Breaker(key=key, kind=kind, turns=n, reasons=", ".join(REASONS.get(r, r) for r in ordered))
        )
    return CacheSummary(
        turns=row[0],
        prompt_tokens=row[1],
        cached_tokens=row[2],
        expected_cached=row[3],
        reported_turns=row[4],
        breaks=row[5],
        cost_no_cache=row[6],
        cost_expected=row[7],
        cost_actual=row[8],
        cost_lost=row[9],
        priced_turns=row[10],
        breakers=breakers,
    )


def turn_cache(*, project_id: int, snapshot_ref: int) -> TurnCache | None:
    return TurnCache.objects.filter(project_id=project_id, snapshot_ref=snapshot_ref).first()


def session_cache_summary(*, project_id: int, session_ref: int) -> CacheSummary:
    """The cache figures of one session (two queries)."""
    return _summary("AND session_ref = %(s)s", {"p": project_id, "s": session_ref})


_DAYS_SUMMARY = """
    SELECT coalesce(sum(turns), 0), coalesce(sum(prompt_tokens), 0), coalesce(sum(cached_tokens), 0),
           coalesce(sum(expected_cached), 0), coalesce(sum(reported_turns), 0), coalesce(sum(breaks), 0),
           coalesce(sum(cost_no_cache), 0), coalesce(sum(cost_expected), 0), coalesce(sum(cost_actual), 0),
           coalesce(sum(cost_lost), 0), coalesce(sum(priced_turns), 0)
    FROM insights_cacheday WHERE project_id = %(p)s {where}
"""
_DAYS_BREAKERS = """
    SELECT break_key, max(break_kind), sum(n)::bigint, array_agg(reason ORDER BY reason),
           array_agg(n ORDER BY reason)
    FROM (SELECT break_key, reason, max(break_kind) AS break_kind, sum(turns) AS n FROM insights_cachebreakday
          WHERE project_id = %(p)s {where} GROUP BY break_key, reason HAVING sum(turns) > 0) x
    GROUP BY break_key ORDER BY sum(n) DESC, break_key LIMIT %(n)s
"""


def project_cache_summary(*, project_id: int, since: datetime | None = None) -> CacheSummary:
    """The cache figures of a project's turns received on the UTC day of SINCE and after (all when
    None). Read from the day sums the analyzer keeps: two queries, one row per day (and per
    breaking block and reason), whatever the number of turns."""
    where = "AND day >= %(since)s" if since is not None else ""
    args = {"p": project_id, "since": since.astimezone(UTC).date() if since is not None else None,
            "n": TOP_BREAKERS}
    with connection.cursor() as cur:
        cur.execute(_DAYS_SUMMARY.format(where=where), args)
        row = cur.fetchone()
        cur.execute(_DAYS_BREAKERS.format(where=where), args)
        brows = cur.fetchall()
    breakers = []
    for key, kind, n, reasons, counts in brows:
        ordered = sorted(zip(reasons, counts, strict=True), key=lambda rc: (-rc[1], rc[0]))
        breakers.append(Breaker(key=key, kind=kind, turns=int(n),
                                reasons=", ".join(REASONS.get(r, r) for r, c in ordered if c > 0)))
    return CacheSummary(
        turns=int(row[0]),
        prompt_tokens=int(row[1]),
        cached_tokens=int(row[2]),
        expected_cached=int(row[3]),
        reported_turns=int(row[4]),
        breaks=int(row[5]),
        cost_no_cache=float(row[6]),
        cost_expected=float(row[7]),
        cost_actual=float(row[8]),
        cost_lost=float(row[9]),
        priced_turns=int(row[10]),
        breakers=breakers,
    )


def session_cache_line(*, project_id: int, session_ref: int) -> list[tuple[int, int, int, str]]:
    """Per analysed turn of a session, in turn order: (turn, shared prefix tokens, cache reads —
    reported, else expected —, reason). One query."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT turn, prefix_tokens, coalesce(reported_cached, expected_cached), reason"
            " FROM insights_turncache WHERE project_id = %s AND session_ref = %s ORDER BY turn, snapshot_ref",
            [project_id, session_ref],
        )
        return [(int(a), int(b), int(c), str(d)) for a, b, c, d in cur.fetchall()]


@dataclass(frozen=True, slots=True)
class VersionRate:
    """The cache figures of the turns tagged with one assembly version."""

    version: str
    first_seen: datetime
    turns: int
    prompt_tokens: int
    cached_tokens: int
    first_snapshot_ref: int
    first_session_ref: int
    first_turn: int

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def version_hit_rates(*, project_id: int, since: datetime | None = None) -> list[VersionRate]:
    """Per `tags.assembly_version` of the project's turns (received since SINCE), its hit rate
    and the turn it was first seen on, oldest version first. Turns without a version and
    first turns of sessions (which cannot hit the cache) are left out. One query."""
    where = "AND received_at >= %(since)s" if since is not None else ""
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT assembly_version, min(received_at), count(*), sum(prompt_tokens),
                   sum(coalesce(reported_cached, expected_cached)),
                   (array_agg(snapshot_ref ORDER BY received_at, snapshot_ref))[1],
                   (array_agg(session_ref ORDER BY received_at, snapshot_ref))[1],
                   (array_agg(turn ORDER BY received_at, snapshot_ref))[1]
            FROM insights_turncache
            WHERE project_id = %(p)s AND assembly_version <> '' AND prev_turn IS NOT NULL {where}
            GROUP BY assembly_version ORDER BY min(received_at), assembly_version
            """,  # noqa: S608 - the interpolated text is a fixed condition
            {"p": project_id, "since": since},
        )
        rows = cur.fetchall()
    return [
        VersionRate(str(v), first, int(n), int(p or 0), int(c or 0), int(sr), int(ss), int(t))
        for v, first, n, p, c, sr, ss, t in rows
    ]
