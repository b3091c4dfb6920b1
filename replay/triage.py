"""Auto-triage, the ORM-free part: which job a triage runs, and the culprit block it names from
that job's results.

A triage attributes one flagged turn (an alert fired on it, or its output failed validation).
A turn with at least two source blocks besides the system prompt and the question gets an
attribution job (random ablations of those blocks, fitted by a sparse linear surrogate), with as
many ablations as a leave-one-out would make calls (at least attribution.MIN_ABLATIONS): on the
planted-fact benchmark (bench/replay_trust.py) it names memory alone where leave-one-out ties
it with the question. Other turns get a leave-one-out over every block, ranked without the
system prompt and the question unless nothing else is there. The verdict names the block that
moved the answer the most, with its score, the baseline's noise band and the method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from replay import attribution, diff, measures
from replay.types import AttributionResult, ReplayJobSpec, TurnResult

# Baseline samples of a triage job: the noise band its verdict is measured against.
TRIAGE_SAMPLES = 3
# Scores closer than this are a tie: the verdict names every tied block.
TIE_EPS = 1e-6


def triage_method(
    *, blocks: Sequence[Mapping[str, Any]], job_kinds: Sequence[str]
) -> Literal["attribution", "loo"]:
    """ "attribution" when the turn's BLOCKS have two to attribution.MAX_SOURCES sources (blocks
    besides the system prompt and the question) and the replay app offers it (JOB_KINDS), else
    "loo": leave-one-out measures every block of any turn."""
    n = len(attribution.block_sources(blocks))
    return "attribution" if "attribution" in job_kinds and 2 <= n <= attribution.MAX_SOURCES else "loo"


def triage_ablations(blocks: Sequence[Mapping[str, Any]]) -> int:
    """An attribution triage's ablations: as many as a leave-one-out of the turn would make calls
    (one per block), within the bounds an attribution job takes."""
    keys = {b.get("key") for b in blocks}
    return min(attribution.MAX_ABLATIONS, max(attribution.MIN_ABLATIONS, len(keys)))


def triage_job_spec(
    *,
    snapshot_id: str,
    blocks: Sequence[Mapping[str, Any]],
    job_kinds: Sequence[str],
    title: str = "",
) -> ReplayJobSpec:
    """The replay job spec a triage of the turn SNAPSHOT_ID (its saved BLOCKS) runs: an attribution
    job, or a leave-one-out (triage_method); JOB_KINDS is what the replay app offers."""
    kind = triage_method(blocks=blocks, job_kinds=job_kinds)
    spec: ReplayJobSpec = {"kind": kind, "snapshot_id": snapshot_id, "samples": TRIAGE_SAMPLES}
    if kind == "attribution":
        spec["ablations"] = triage_ablations(blocks)
        spec["seed"] = 0
    if title:
        spec["title"] = title
    return spec


class RankedBlock(TypedDict):
    key: str
    kind: str
    position: int | None  # in the saved turn, for a link to the block's text
    score: float
    changed: bool


class TriageResult(TypedDict):
    """What a finished triage names: the block most responsible for the answer (None when nothing
    was measured), its score (an attribution's surrogate weight, or a leave-one-out's mean edit
    distance of the answer without it from the baseline answers), the noise band (the largest
    distance between two baseline answers), whether the score is within that band, the blocks
    that tied with it, every block ranked, and the method ("attribution" or "loo")."""

    block: str | None
    kind: str
    score: float | None
    noise: float
    baseline_samples: int
    within_noise: bool | None
    tied_with: list[str]
    ranking: list[RankedBlock]
    method: str


def triage_result(
    *,
    turn: TurnResult | None,
    block_kinds: Mapping[str, str],
    method: str,
    block_positions: Mapping[str, int] | None = None,
) -> TriageResult:
    """The verdict from one turn's results (replay.selectors.job_results). An attribution job's:
    blocks ranked by their surrogate score, within noise when the top score lies inside the
    baseline's band. A leave-one-out job's: blocks ranked by the distance of the answer without
    them, ties broken by the smallest distance to any baseline sample, then by a changed tool
    call."""
    attributed = turn.get("attribution") if turn else None
    if attributed and attributed["sources"]:
        return _from_attribution(attributed, block_kinds=block_kinds, method=method)
    noise: Mapping[str, Any] = (turn.get("noise") if turn else None) or {}
    noise_max = float(noise.get("max") or 0.0)
    samples = int(noise.get("samples") or 0)
    measured: list[tuple[float, float, bool, str]] = []
    verdicts: dict[str, str | None] = {}
    for e in turn["variants"] if turn else []:
        eff = e.get("effect")
        key = e["variant"].target_key
        if not eff or eff.get("distance") is None or not key:
            continue
        changed_calls = e.get("tool_calls_match") is False
        measured.append((float(eff["distance"]), float(eff["min_distance"]), changed_calls, key))
        verdicts[key] = e.get("verdict")
    # The system prompt and the question stay out of the ranking, as in an attribution: without
    # the question every answer moves. A turn with no other block ranks them.
    context = [m for m in measured if block_kinds.get(m[3], "") not in attribution.FIXED_KINDS]
    measured = context or measured
    measured.sort(key=lambda m: (-m[0], -m[1], not m[2], m[3]))

    def changed(score: float, calls: bool, key: str) -> bool:
        if verdicts.get(key) in (measures.CHANGED, measures.WITHIN_NOISE):
            return verdicts[key] == measures.CHANGED or calls
        # Too few samples for a verdict: whether it left the baseline's spread.
        return score > noise_max + diff.NOISE_EPS or calls

    ranking: list[RankedBlock] = [
        {
            "key": key,
            "kind": block_kinds.get(key, ""),
            "position": (block_positions or {}).get(key),
            "score": round(score, 6),
            "changed": changed(score, calls, key),
        }
        for score, _, calls, key in measured
    ]
    if not measured:
        return {
            "block": None,
            "kind": "",
            "score": None,
            "noise": noise_max,
            "baseline_samples": samples,
            "within_noise": None,
            "tied_with": [],
            "ranking": [],
            "method": method,
        }
    top = measured[0]
    tied = [
        m[3]
        for m in measured[1:]
        if abs(m[0] - top[0]) <= TIE_EPS and abs(m[1] - top[1]) <= TIE_EPS and m[2] == top[2]
    ]
    return {
        "block": top[3],
        "kind": block_kinds.get(top[3], ""),
        "score": round(top[0], 6),
        "noise": round(noise_max, 6),
        "baseline_samples": samples,
        "within_noise": not ranking[0]["changed"],
        "tied_with": tied,
        "ranking": ranking,
        "method": method,
    }


def _from_attribution(att: AttributionResult, *, block_kinds: Mapping[str, str], method: str) -> TriageResult:
    sources = att["sources"]
    ranking: list[RankedBlock] = [
        {
            "key": x["key"],
            "kind": block_kinds.get(x["key"], ""),
            "position": x["position"],
            "score": round(float(x["score"]), 6),
            "changed": not x["within_noise"],
        }
        for x in sources
    ]
    top = sources[0]
    return {
        "block": top["key"],
        "kind": block_kinds.get(top["key"], ""),
        "score": round(float(top["score"]), 6),
        "noise": round(float(att["noise"]), 6),
        "baseline_samples": int(att["samples"]),
        "within_noise": bool(top["within_noise"]),
        "tied_with": [x["key"] for x in sources[1:] if abs(x["score"] - top["score"]) <= TIE_EPS],
        "ranking": ranking,
        "method": method,
    }


def triage_summary(result: Mapping[str, Any] | None) -> str:
    """One line for pages, e-mails and webhooks: "most responsible block: memory (score 0.83,
    noise band 0.05)"."""
    if not result or not result.get("block"):
        return "no block could be measured"
    line = (
        f"most responsible block: {result['block']} (score {float(result['score']):.2f}, "
        f"noise band {float(result['noise']):.2f})"
    )
    if result.get("tied_with"):
        line += f", tied with {', '.join(result['tied_with'])}"
    if result.get("within_noise"):
        line += "; within noise: no block moved the answer beyond the baseline's own spread"
    return line
