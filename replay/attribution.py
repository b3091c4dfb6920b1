"""ContextCite-style attribution (ORM-free): which sources of a context the answer rests on.

The **sources** are the blocks of a turn other than the system prompt and the question (block
level), or the sentences of one large block (sentence level: retrieval, tool results, history).
Each **ablation** keeps every source with probability 1/2 (seeded, so a job's plan is
reproducible) and removes the others. The answer of each ablated context is scored against the
baseline answers (`response`: 1 = the baseline's answer, 0 = nothing in common), and a sparse
linear surrogate (`lasso`) is fitted: response ~ intercept + sum(weight_j * kept_j). A source's
weight is how much keeping it brings the answer back towards the baseline. The fit's quality is
its R² on ablations held out of the fit (cross-validated).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, TypedDict

from replay.types import KeepSentencesOp, Operation, RemoveOp

DEFAULT_ABLATIONS = 32
MIN_ABLATIONS = 8
MAX_ABLATIONS = 128
KEEP_P = 0.5
MAX_SOURCES = 48
# Kinds that stay in every ablation: the instructions and the question are not sources.
FIXED_KINDS = ("system", "user")
LASSO_ALPHA = 0.01
FOLDS = 4

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


class Unit(TypedDict):
    """One sentence of a block: message index, character span in its content, the text."""

    message: int
    start: int
    end: int
    text: str


# --- sources ---------------------------------------------------------------------------------
def block_sources(blocks: Sequence[Any]) -> list[str]:
    """The keys of the blocks an attribution ablates: all but the system prompt and the question
    (kinds FIXED_KINDS), each key once, in context order."""
    out: list[str] = []
    for b in blocks:
        key = b.get("key")
        if isinstance(key, str) and key not in out and b.get("kind") not in FIXED_KINDS:
            out.append(key)
    return out


def sentence_units(messages: Sequence[Any]) -> list[Unit]:
    """The sentences of the string contents of MESSAGES, in order (a line break also ends one)."""
    out: list[Unit] = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, str):
            continue
        pos = 0
        for piece in [*_SENTENCE_END.finditer(content), None]:
            end = piece.start() if piece else len(content)
            text = content[pos:end]
            if text.strip():
                lead = len(text) - len(text.lstrip())
                out.append({"message": i, "start": pos + lead, "end": end, "text": text.strip()})
            pos = piece.end() if piece else len(content)
    return out


def keep_sentences(messages: Sequence[Any], keep: Sequence[int]) -> list[Any]:
    """MESSAGES with only the sentences numbered KEEP (sentence_units order) left in their
    contents; roles, names, tool calls and ids stay, so the request keeps its shape."""
    units = sentence_units(messages)
    wanted = set(keep)
    by_message: dict[int, list[tuple[int, Unit]]] = {}
    for n, u in enumerate(units):
        by_message.setdefault(u["message"], []).append((n, u))
    out = []
    for i, m in enumerate(messages):
        if i not in by_message:
            out.append(dict(m) if isinstance(m, dict) else m)
            continue
        m2 = dict(m)
        m2["content"] = " ".join(u["text"] for n, u in by_message[i] if n in wanted)
        out.append(m2)
    return out


# --- the plan ----------------------------------------------------------------------------------
def masks(n_sources: int, n_ablations: int, seed: int) -> list[list[bool]]:
    """N_ABLATIONS keep-masks over N_SOURCES sources, each source kept with probability KEEP_P."""
    rng = random.Random(f"ctxobs-attribution:{seed}:{n_sources}")
    return [[rng.random() < KEEP_P for _ in range(n_sources)] for _ in range(n_ablations)]


def mask_operations(
    sources: Sequence[str], mask: Sequence[bool], block_key: str | None
) -> list[Operation]:
    """The operations of one ablation: remove each dropped block, or (sentence level) keep the
    kept sentences of BLOCK_KEY."""
    if block_key:
        keep = [i for i, k in enumerate(mask) if k]
        return [KeepSentencesOp(op="keep_sentences", key=block_key, keep=keep)]
    return [RemoveOp(op="remove", key=s) for s, k in zip(sources, mask, strict=True) if not k]


def mask_of(operations: Sequence[Any], sources: Sequence[str], block_key: str | None) -> list[bool]:
    """The keep-mask an ablation's OPERATIONS encode (inverse of mask_operations)."""
    if block_key:
        keep: set[int] = set()
        for op in operations:
            if op.get("op") == "keep_sentences":
                keep = set(op.get("keep") or [])
        return [i in keep for i in range(len(sources))]
    removed = {op.get("key") for op in operations if op.get("op") == "remove"}
    return [s not in removed for s in sources]


def describe_mask(sources: Sequence[str], mask: Sequence[bool], block_key: str | None) -> str:
    dropped = [s for s, k in zip(sources, mask, strict=True) if not k]
    if block_key:
        return f"{block_key}: {sum(mask)} of {len(mask)} sentences kept"
    return "without " + ", ".join(dropped) if dropped else "all sources kept"


# --- the surrogate ------------------------------------------------------------------------------
def lasso(
    x: Sequence[Sequence[float]], y: Sequence[float], *, alpha: float = LASSO_ALPHA, iters: int = 500
) -> tuple[float, list[float]]:
    """(intercept, weights) minimising 1/(2n) ||y - b - Xw||² + alpha ||w||₁ by coordinate
    descent on centred columns (the objective scikit-learn's Lasso uses)."""
    n = len(y)
    p = len(x[0]) if n else 0
    if n == 0:
        return 0.0, [0.0] * p
    means = [sum(row[j] for row in x) / n for j in range(p)]
    y_mean = sum(y) / n
    cols = [[row[j] - means[j] for row in x] for j in range(p)]
    sq = [sum(v * v for v in c) / n for c in cols]
    resid = [yi - y_mean for yi in y]
    w = [0.0] * p
    for _ in range(iters):
        biggest = 0.0
        for j in range(p):
            if sq[j] == 0:
                continue
            c = cols[j]
            rho = sum(c[i] * resid[i] for i in range(n)) / n + sq[j] * w[j]
            new = _soft(rho, alpha) / sq[j]
            step = new - w[j]
            if step:
                for i in range(n):
                    resid[i] -= c[i] * step
                w[j] = new
                biggest = max(biggest, abs(step))
        if biggest < 1e-7:
            break
    intercept = y_mean - sum(w[j] * means[j] for j in range(p))
    return intercept, w


def _soft(v: float, t: float) -> float:
    return v - t if v > t else v + t if v < -t else 0.0


def predict(intercept: float, weights: Sequence[float], row: Sequence[float]) -> float:
    return intercept + sum(w * v for w, v in zip(weights, row, strict=True))


def r_squared(actual: Sequence[float], predicted: Sequence[float]) -> float | None:
    """1 - SS_res / SS_tot; None when the answers did not vary (nothing to explain)."""
    if len(actual) < 2:
        return None
    mean = sum(actual) / len(actual)
    ss_tot = sum((a - mean) ** 2 for a in actual)
    if ss_tot <= 1e-12:
        return None
    ss_res = sum((a - p) ** 2 for a, p in zip(actual, predicted, strict=True))
    return 1.0 - ss_res / ss_tot


class Fit(TypedDict):
    intercept: float
    weights: list[float]
    r2_holdout: float | None
    r2_train: float | None
    n: int
    folds: int


def fit(masks_: Sequence[Sequence[bool]], responses: Sequence[float], *, alpha: float = LASSO_ALPHA) -> Fit:
    """The surrogate on all ablations, and its R² on held-out ablations: each ablation predicted
    by the surrogate fitted on the other folds (FOLDS-fold cross-validation; none under
    MIN_ABLATIONS ablations)."""
    x = [[1.0 if k else 0.0 for k in m] for m in masks_]
    y = list(responses)
    folds = FOLDS if len(y) >= MIN_ABLATIONS else 0
    r2_holdout = None
    if folds:
        predicted = [0.0] * len(y)
        for f in range(folds):
            train = [i for i in range(len(y)) if i % folds != f]
            b0, w0 = lasso([x[i] for i in train], [y[i] for i in train], alpha=alpha)
            for i in range(f, len(y), folds):
                predicted[i] = predict(b0, w0, x[i])
        r2_holdout = r_squared(y, predicted)
    b, w = lasso(x, y, alpha=alpha)
    return {
        "intercept": b,
        "weights": w,
        "r2_holdout": r2_holdout,
        "r2_train": r_squared(y, [predict(b, w, row) for row in x]),
        "n": len(y),
        "folds": folds,
    }
