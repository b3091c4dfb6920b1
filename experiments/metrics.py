"""An experiment's figures (ORM-free): per item and arm a digest of its checks' results over
the samples, the metrics over the set with 95% bootstrap intervals over items, and the paired
comparison of two arms (the control against a strategy, or two experiments on one set version)
said in words.

A digest (what `summarize` stores per item and arm, and all a comparison reads):
    {"n": samples answered, "failed": runs failed,
     "facts": [passed, judged], "constraints": [violated, judged], "repeats": [asked, judged],
     "consistent": [passed, judged], "success": [samples with every check passed, samples],
     "checks": {check_id: [passed, judged, kind]},
     "prompt_tokens": mean or None, "completion_tokens": mean or None, "cost": mean USD or None}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments import stats

# name, label, whether higher is better
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("fact_fidelity", "fact fidelity", True),
    ("constraint_violations", "constraint violation rate", False),
    ("repeat_questions", "repeat-question rate", False),
    ("consistency", "consistency with the reference", True),
    ("task_success", "task success", True),
    ("prompt_tokens", "prompt tokens", False),
    ("compression_ratio", "compression ratio", False),
    ("cost", "cost per item (USD)", False),
)
# Shares computed from pass/fail counts: a paired verdict; the others are measured, not sampled.
SAMPLED = ("fact_fidelity", "constraint_violations", "repeat_questions", "consistency", "task_success")
KIND_KEYS = {
    "fact": "facts",
    "constraint": "constraints",
    "no_repeat_question": "repeats",
    "consistent": "consistent",
}


@dataclass(frozen=True)
class Answer:
    """One answer's check results: check_id -> (kind, passed or None when not applicable)."""

    results: Mapping[str, tuple[str, bool | None]]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def digest(
    answers: Sequence[Answer], *, failed: int = 0, price: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The digest of one item's arm from its answers (see the module's docstring). PRICE: USD
    per million (input, output) tokens, when the model has one."""
    counts = {k: [0, 0] for k in ("facts", "constraints", "repeats", "consistent")}
    per_check: dict[str, list[Any]] = {}
    success = 0
    judged_answers = 0
    for a in answers:
        all_pass = True
        any_judged = False
        for cid, (kind, passed) in a.results.items():
            entry = per_check.setdefault(cid, [0, 0, kind])
            if passed is None:
                continue
            any_judged = True
            entry[1] += 1
            entry[0] += 1 if passed else 0
            key = KIND_KEYS.get(kind)
            if key is not None:
                c = counts[key]
                c[1] += 1
                # Constraints and repeats count failures: a violation, a question asked again.
                c[0] += (0 if passed else 1) if key in ("constraints", "repeats") else (1 if passed else 0)
            all_pass = all_pass and passed
        if any_judged:
            judged_answers += 1
            success += 1 if all_pass else 0
    pt = [a.prompt_tokens for a in answers if a.prompt_tokens is not None]
    ct = [a.completion_tokens for a in answers if a.completion_tokens is not None]
    mean_pt = sum(pt) / len(pt) if pt else None
    mean_ct = sum(ct) / len(ct) if ct else None
    cost = None
    if price is not None and mean_pt is not None:
        cost = (mean_pt * price[0] + (mean_ct or 0.0) * price[1]) / 1_000_000
    return {
        "n": len(answers),
        "failed": failed,
        **counts,
        "success": [success, judged_answers],
        "checks": per_check,
        "prompt_tokens": mean_pt,
        "completion_tokens": mean_ct,
        "cost": cost,
    }


def item_value(d: Mapping[str, Any] | None, metric: str, *, ratio: float | None = None) -> float | None:
    """One item's value of METRIC from its digest D (None: the item has nothing to say on it)."""
    if d is None:
        return None
    if metric == "compression_ratio":
        return ratio
    if metric in ("prompt_tokens", "cost"):
        v = d.get(metric)
        return float(v) if v is not None else None
    key = {
        "fact_fidelity": "facts",
        "constraint_violations": "constraints",
        "repeat_questions": "repeats",
        "consistency": "consistent",
        "task_success": "success",
    }[metric]
    num, den = d.get(key) or (0, 0)
    return num / den if den else None


def majority_pass(d: Mapping[str, Any] | None) -> bool | None:
    """Whether the item passes in most of its answers (every check of an answer passed)."""
    if d is None:
        return None
    num, den = d.get("success") or (0, 0)
    return None if not den else num * 2 > den


def _interval(values: Sequence[float]) -> dict[str, Any] | None:
    if not values:
        return None
    mean, lo, hi = stats.bootstrap_ci(values)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(values)}


@dataclass(frozen=True)
class Side:
    """One arm over a set's items: item key -> (digest or None when not run, compression ratio)."""

    label: str
    items: Mapping[str, tuple[Mapping[str, Any] | None, float | None]]


def figures(side: Side) -> list[dict[str, Any]]:
    """Each metric of one arm over its items: the mean with its 95% interval (None: no item has it)."""
    out = []
    for name, label, higher in METRICS:
        values = [v for d, r in side.items.values() if (v := item_value(d, name, ratio=r)) is not None]
        out.append({"name": name, "label": label, "higher_is_better": higher, "value": _interval(values)})
    return out


def fact_changes(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """(lost, gained): fact checks that most of A's answers state and most of B's do not, and
    the other way round."""
    lost: list[str] = []
    gained: list[str] = []
    if a is None or b is None:
        return lost, gained
    for cid, (ap, an, kind) in (a.get("checks") or {}).items():
        if kind != "fact" or not an:
            continue
        bp, bn, _ = (b.get("checks") or {}).get(cid, (0, 0, kind))
        if not bn:
            continue
        if ap * 2 > an and bp * 2 <= bn:
            lost.append(cid)
        elif ap * 2 <= an and bp * 2 > bn:
            gained.append(cid)
    return lost, gained


# Above this many items the intervals and tests of every metric come from one resampling of the
# items, in numpy (a 500-item set is compared in tens of milliseconds); below it, each metric has
# its own exact or seeded test (experiments.stats), which small sets need.
VECTOR_FROM = 30
N_BOOT = 2000


def _values(keys: list[str], side: Side, name: str) -> list[float | None]:
    return [item_value(side.items[k][0], name, ratio=side.items[k][1]) for k in keys]


# The fewest items on which a paired sign-flip test can reach p < 0.05: with n items its smallest
# two-sided p is 2 / 2**n (every difference of one sign), 0.0625 at 5 and 0.031 at 6.
MIN_PAIRS = 6


def _too_few_words(label: str, pairs: int, ci: str, p: float) -> str:
    """The verdict when fewer than MIN_PAIRS items were judged on both sides and no difference was
    shown: it could not be told, not that there is none ('no difference beyond noise' on 2 items
    that both lost every fact would read as a clean bill)."""
    return (
        f"too few items to tell: {pairs} judged on {label} on both sides, and a paired test needs "
        f"{MIN_PAIRS} to show a difference ({ci}, {stats.format_p(p)})"
    )


def _ci_words(d: Mapping[str, float]) -> str:
    return f"95% CI {stats.format_number(d['lo'])} to {stats.format_number(d['hi'])}"


def _row_words(row: dict[str, Any], label: str, b_label: str, higher: bool, alpha: float = 0.05) -> None:
    """The verdict of a share's paired difference: as experiments.stats.paired_verdict says it."""
    d, p = row["diff"], row["p"]
    changed = (d["lo"] > 0 or d["hi"] < 0) and p < alpha
    ci = _ci_words(d)
    if not changed:
        row.update(
            verdict=_too_few_words(label, row["pairs"], ci, p) if row["pairs"] < MIN_PAIRS
            else f"no difference in {label} beyond noise ({ci}, {stats.format_p(p)})",
            changed=False,
            direction="same",
        )
        return
    direction = "better" if (d["mean"] > 0) == higher else "worse"
    verb = "gains" if d["mean"] > 0 else "loses"
    row.update(
        verdict=f"{b_label} {verb} {stats.format_number(abs(d['mean']))} {label} ({ci}): "
        f"{direction}, {stats.format_p(p)}",
        changed=True,
        direction=direction,
    )


def _vector_rows(keys: list[str], a: Side, b: Side) -> list[dict[str, Any]]:
    """Every metric's intervals and paired test from one bootstrap of the items (the mean over
    the items that have the metric, in each resample) and one set of sign flips, every metric
    and side in one matrix product."""
    import numpy as np

    n = len(keys)
    rng = np.random.default_rng(0)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=N_BOOT).astype(float)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(N_BOOT, n))
    names = [m[0] for m in METRICS]
    av = [_values(keys, a, name) for name in names]
    bv = [_values(keys, b, name) for name in names]
    dv = [
        [y - x if x is not None and y is not None else None for x, y in zip(xs, ys, strict=True)]
        for xs, ys in zip(av, bv, strict=True)
    ]
    columns = av + bv + dv  # one column per (side, metric)
    mask = np.array([[v is not None for v in col] for col in columns], dtype=float).T  # n x 3k
    x = np.array([[v if v is not None else 0.0 for v in col] for col in columns], dtype=float).T
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (weights @ (x * mask)) / (weights @ mask)  # N_BOOT x 3k
    counts = mask.sum(axis=0)
    flips = np.abs(signs @ x[:, 2 * len(names) :])  # the paired differences, sign-flipped

    def interval(j: int) -> dict[str, Any] | None:
        if not counts[j]:
            return None
        col = means[:, j]
        col = col[np.isfinite(col)]
        return {
            "mean": float(x[mask[:, j] > 0, j].mean()),
            "lo": float(np.quantile(col, 0.025)),
            "hi": float(np.quantile(col, 0.975)),
            "n": int(counts[j]),
        }

    k = len(names)
    rows = []
    for i, (name, label, higher) in enumerate(METRICS):
        pairs = int(counts[2 * k + i])
        row: dict[str, Any] = {
            "name": name,
            "label": label,
            "higher_is_better": higher,
            "a": interval(i),
            "b": interval(k + i),
            "pairs": pairs,
            "diff": interval(2 * k + i),
            "verdict": "",
            "changed": False,
            "direction": "same",
            "p": None,
        }
        if pairs and name in SAMPLED and pairs >= 2:
            observed = abs(float(x[:, 2 * k + i].sum()))
            extreme = int((flips[:, i] >= observed - 1e-9 * max(1.0, observed)).sum())
            row["p"] = (1 + extreme) / (1 + N_BOOT)
            _row_words(row, label, b.label, higher)
        elif pairs and name not in SAMPLED and row["diff"]["mean"] != 0:
            paired = [
                (xa, yb) for xa, yb in zip(av[i], bv[i], strict=True) if xa is not None and yb is not None
            ]
            mean_a = sum(p[0] for p in paired) / len(paired)
            mean_b = sum(p[1] for p in paired) / len(paired)
            row["verdict"] = f"{b.label}: {_fmt(mean_b)} against {_fmt(mean_a)}"
            row["direction"] = "better" if (row["diff"]["mean"] > 0) == higher else "worse"
        rows.append(row)
    return rows


def _item_rows(keys: list[str], a: Side, b: Side) -> list[dict[str, Any]]:
    """Every metric's intervals and paired verdict, each by its own test (small sets)."""
    metrics: list[dict[str, Any]] = []
    for name, label, higher in METRICS:
        av: list[float] = []
        bv: list[float] = []
        a_all: list[float] = []
        b_all: list[float] = []
        for k in keys:
            (ad, ar), (bd, br) = a.items[k], b.items[k]
            x = item_value(ad, name, ratio=ar)
            y = item_value(bd, name, ratio=br)
            if x is not None:
                a_all.append(x)
            if y is not None:
                b_all.append(y)
            if x is not None and y is not None:
                av.append(x)
                bv.append(y)
        row: dict[str, Any] = {
            "name": name,
            "label": label,
            "higher_is_better": higher,
            "a": _interval(a_all),
            "b": _interval(b_all),
            "pairs": len(av),
            "diff": None,
            "verdict": "",
            "changed": False,
            "direction": "same",
            "p": None,
        }
        if av:
            mean, lo, hi = stats.paired_bootstrap_ci(av, bv)
            row["diff"] = {"mean": mean, "lo": lo, "hi": hi}
            if name in SAMPLED and len(av) >= 2:
                v = stats.paired_verdict(a=av, b=bv, metric=label, higher_is_better=higher, b_label=b.label)
                words = v.words
                if not v.changed and len(av) < MIN_PAIRS:
                    words = _too_few_words(label, len(av), _ci_words(row["diff"]), v.p)
                row.update(verdict=words, changed=v.changed, direction=v.direction, p=v.p)
            elif name in SAMPLED:
                row["verdict"] = f"one item judged on {label}: too few to tell"
            elif mean != 0:
                row["verdict"] = f"{b.label}: {_fmt(sum(bv) / len(bv))} against {_fmt(sum(av) / len(av))}"
                row["direction"] = "better" if (mean > 0) == higher else "worse"
        metrics.append(row)
    return metrics


def compare(a: Side, b: Side) -> dict[str, Any]:
    """B against A over the items both have: each metric's value with its interval on either
    side, the paired difference with its interval and a verdict in words; McNemar on task
    success; the items that flipped (task success, or a fact lost or gained)."""
    keys = [k for k in a.items if k in b.items]
    metrics = _vector_rows(keys, a, b) if len(keys) >= VECTOR_FROM else _item_rows(keys, a, b)
    pairs = [(majority_pass(a.items[k][0]), majority_pass(b.items[k][0]), k) for k in keys]
    judged = [(x, y, k) for x, y, k in pairs if x is not None and y is not None]
    success = None
    if judged:
        v = stats.mcnemar_verdict(
            a_pass=[bool(x) for x, _, _ in judged],
            b_pass=[bool(y) for _, y, _ in judged],
            a_label=a.label,
            b_label=b.label,
        )
        success = {"words": v.words, "changed": v.changed, "direction": v.direction, "p": v.p}
    flipped: list[dict[str, Any]] = []
    lost_total = 0
    for k in keys:
        ad, bd = a.items[k][0], b.items[k][0]
        x, y = majority_pass(ad), majority_pass(bd)
        lost, gained = fact_changes(ad, bd)
        lost_total += len(lost)
        if (x is not None and y is not None and x != y) or lost or gained:
            flipped.append({"item": k, "a_pass": x, "b_pass": y, "lost": lost, "gained": gained})
    facts_judged = sum(
        1
        for k in keys
        for cid, (_, n, kind) in ((a.items[k][0] or {}).get("checks") or {}).items()
        if kind == "fact" and n
    )
    headline = next((m for m in metrics if m["name"] == "fact_fidelity" and m["pairs"]), None)
    if headline is not None and lost_total:
        headline["lost_words"] = (
            f"{b.label} loses {lost_total} of {facts_judged} facts that {a.label} states: "
            + (
                f"{headline['direction']}, {stats.format_p(headline['p'])}"
                if headline["changed"]
                else "no difference beyond noise"
            )
        )
    return {
        "a": a.label,
        "b": b.label,
        "items": len(keys),
        "metrics": metrics,
        "task_success": success,
        "flipped": flipped,
        "lost_facts": lost_total,
    }


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
