"""How far a replayed answer is from the baseline (ORM-free): three measures and a verdict.

- **edit distance** (`edit_distance`): the mean of a character-level and a word-level normalised
  edit distance. A word-level distance alone saturates on short answers (one changed number in
  a five-word answer moves it by a fifth of the words, and a reworded one-liner reaches 1.0);
  the character-level half keeps a one-digit change small but above zero.
- **task distance** (`task_distance`): the share of what the reference answer delivered that the
  answer no longer delivers: its tool calls (same name, same arguments), its JSON fields (when
  the answer is JSON, each leaf the validators would look at), and its key facts (numbers,
  codes, names, quoted strings). None when the reference delivers none of these.
- **semantic distance** (`semantic_distance`): 1 - cosine of two embeddings (the endpoint's
  embeddings model; the embedded local server can serve them offline).

A variant's effect gets a verdict (`verdict`): "changed" when it moves the answer further than
the baseline samples differ from each other, "within noise" when it does not, and "needs more
samples" while fewer than MIN_SAMPLES baseline samples make the spread meaningless.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from itertools import combinations
from typing import Any

# Floats: an effect equal to the baseline's largest spread is still noise.
NOISE_EPS = 1e-9
# With fewer baseline samples their spread says too little about the model's own variation.
MIN_SAMPLES = 3

WITHIN_NOISE = "within noise"
CHANGED = "changed"
NEEDS_SAMPLES = "needs more samples"
VERDICTS = (WITHIN_NOISE, CHANGED, NEEDS_SAMPLES)

_WORDS = re.compile(r"\S+")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,:/-]\d+)*(?![\w])")
_CODE = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]*[A-Za-z0-9]\b")
_NAME = re.compile(r"\b[A-Z][a-zA-Z'-]{2,}\b")
_QUOTED = re.compile(r"[\"“']([^\"”'\n]{2,80})[\"”']")
# Capitalised words that start sentences rather than name things.
_COMMON = frozenset(
    """the this that these those there their they then than your you yours our we its it is are was
    were will would can could should shall may might must not no yes sure okay ok here what which who
    whom whose when where why how and but or nor for so yet if because since although though
    unfortunately however please thanks thank hello dear based according i'm i've i'd i'll let
    sorry great certainly of all any some none each every my me mine his her hers him she he
    answer question user assistant system tool memory""".split()
)


# --- distances --------------------------------------------------------------------------
def _ratio(a: Sequence[Any], b: Sequence[Any]) -> float:
    if not a and not b:
        return 1.0
    return SequenceMatcher(None, a, b, autojunk=False).ratio()


def word_distance(a: str | None, b: str | None) -> float:
    """1 - the word-level edit similarity (0 same words, 1 nothing shared)."""
    return 1.0 - _ratio(_WORDS.findall(a or ""), _WORDS.findall(b or ""))


def char_distance(a: str | None, b: str | None) -> float:
    """1 - the character-level edit similarity, whitespace runs counted as one space."""
    return 1.0 - _ratio(" ".join((a or "").split()), " ".join((b or "").split()))


def edit_distance(a: str | None, b: str | None) -> float:
    """The mean of the character- and word-level distances: 0 for the same text, 1 for texts
    with nothing in common, and far from 1 for one changed number in a short answer."""
    return (char_distance(a, b) + word_distance(a, b)) / 2.0


def cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    if not a or not b or len(a) != len(b):
        return None
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return None
    return dot / (na * nb)


def semantic_distance(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    """1 - cosine similarity of two embeddings, clipped to [0, 1]; None without both."""
    c = cosine(a, b)
    return None if c is None else min(1.0, max(0.0, 1.0 - c))


# --- the task measure ---------------------------------------------------------------------
def _canonical_calls(tool_calls: Sequence[Any] | None) -> list[str]:
    out = []
    for c in tool_calls or []:
        c = c if isinstance(c, dict) else {}
        fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else c
        name = str(fn.get("name") or "")
        args = fn.get("arguments", "")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                out.append(f"call {name} {args}")
                continue
        out.append(
            f"call {name} " + json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        )
    return out


def _json_leaves(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in _json_leaves(value[k], f"{path}.{k}")]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _json_leaves(v, f"{path}[{i}]")]
    return [f"{path}={json.dumps(value, ensure_ascii=False, sort_keys=True)}"]


def _as_json(text: str) -> Any:
    s = text.strip()
    if s.startswith("```"):
        s = s.strip("`").removeprefix("json").strip()
    if not s or s[0] not in "[{":
        return None
    try:
        return json.loads(s)
    except ValueError:
        return None


def key_facts(text: str | None) -> list[str]:
    """What a reference answer states that another answer should still state: for a JSON
    answer its leaves (path=value); otherwise its numbers, codes, names and quoted strings,
    lower-cased, each once, in order of appearance."""
    text = text or ""
    data = _as_json(text)
    if data is not None:
        return _json_leaves(data)
    found: list[tuple[int, str]] = []
    for rx in (_NUMBER, _CODE, _QUOTED):
        for m in rx.finditer(text):
            found.append((m.start(), (m.group(1) if rx is _QUOTED else m.group(0)).lower()))
    for m in _NAME.finditer(text):
        # A capitalised word that opens a sentence is usually not a name.
        opens = not text[: m.start()].strip() or text[: m.start()].rstrip()[-1] in ".!?:\n"
        if m.group(0).lower() not in _COMMON and not opens:
            found.append((m.start(), m.group(0).lower()))
    out: list[str] = []
    for _, fact in sorted(found):
        if fact not in out:
            out.append(fact)
    return out


def task_distance(
    reference: str | None,
    text: str | None,
    *,
    reference_tool_calls: Sequence[Any] | None = None,
    tool_calls: Sequence[Any] | None = None,
) -> float | None:
    """The share of the reference's tool calls and key facts that TEXT / TOOL_CALLS no longer
    carry (0: all kept, 1: none); None when the reference has nothing to keep."""
    wanted_calls = _canonical_calls(reference_tool_calls)
    facts = key_facts(reference)
    if not wanted_calls and not facts:
        return None
    have_calls = _canonical_calls(tool_calls)
    kept = sum(1 for c in wanted_calls if c in have_calls)
    data = _as_json(reference or "")
    if data is not None:
        other = _as_json(text or "")
        leaves = set(_json_leaves(other)) if other is not None else set()
        kept += sum(1 for f in facts if f in leaves)
    else:
        hay = " ".join((text or "").lower().split())
        kept += sum(1 for f in facts if _contains(hay, f))
    return 1.0 - kept / (len(wanted_calls) + len(facts))


def _contains(hay: str, fact: str) -> bool:
    if fact[:1].isalnum() and fact[-1:].isalnum():
        return re.search(rf"(?<![\w]){re.escape(fact)}(?![\w])", hay) is not None
    return fact in hay


# --- noise and effect -----------------------------------------------------------------------
def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "max": max(values) if values else 0.0,
        "mean": sum(values) / len(values) if values else 0.0,
        "pairs": len(values),
    }


def noise_floor(
    texts: Sequence[str],
    *,
    tool_calls: Sequence[Sequence[Any] | None] | None = None,
    embeddings: Sequence[Sequence[float] | None] | None = None,
) -> dict[str, Any]:
    """The spread of the baseline samples under each measure (pairwise; 0 with fewer than two
    samples), with the sample count. `max`/`mean`/`pairwise` are the edit distance's."""
    n = len(texts)
    calls = list(tool_calls) if tool_calls is not None else [None] * n
    embs = list(embeddings) if embeddings is not None else [None] * n
    pairs = list(combinations(range(n), 2))
    edit = [edit_distance(texts[i], texts[j]) for i, j in pairs]
    task: list[float] = []
    for i, j in pairs:
        for a, b in ((i, j), (j, i)):
            d = task_distance(texts[a], texts[b], reference_tool_calls=calls[a], tool_calls=calls[b])
            if d is not None:
                task.append(d)
    sem = [d for i, j in pairs if (d := semantic_distance(embs[i], embs[j])) is not None]
    return {
        "samples": n,
        "defined": n >= 2,
        "enough": n >= MIN_SAMPLES,
        "pairwise": edit,
        "max": max(edit) if edit else 0.0,
        "mean": sum(edit) / len(edit) if edit else 0.0,
        "exact_all": len(set(texts)) <= 1,
        "measures": {
            "edit": _spread(edit),
            "word": _spread([word_distance(texts[i], texts[j]) for i, j in pairs]),
            "task": _spread(task) if task else None,
            "semantic": _spread(sem) if sem else None,
        },
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def effect(
    text: str,
    baseline_texts: Sequence[str],
    noise: dict[str, Any],
    *,
    tool_calls: Sequence[Any] | None = None,
    baseline_tool_calls: Sequence[Sequence[Any] | None] | None = None,
    embedding: Sequence[float] | None = None,
    baseline_embeddings: Sequence[Sequence[float] | None] | None = None,
) -> dict[str, Any]:
    """How far TEXT is from the baseline samples under each measure (mean over the samples),
    against their own spread, with its verdict."""
    if not baseline_texts:
        return {
            "distance": None,
            "min_distance": None,
            "within_noise": None,
            "exact_baseline": None,
            "word_distance": None,
            "task_distance": None,
            "semantic_distance": None,
            "verdict": NEEDS_SAMPLES,
            "samples": 0,
        }
    n = len(baseline_texts)
    calls = list(baseline_tool_calls) if baseline_tool_calls is not None else [None] * n
    embs = list(baseline_embeddings) if baseline_embeddings is not None else [None] * n
    dists = [edit_distance(b, text) for b in baseline_texts]
    task = [
        d
        for b, bc in zip(baseline_texts, calls, strict=True)
        if (d := task_distance(b, text, reference_tool_calls=bc, tool_calls=tool_calls)) is not None
    ]
    sem = [d for e in embs if (d := semantic_distance(e, embedding)) is not None]
    out: dict[str, Any] = {
        "distance": sum(dists) / n,
        "min_distance": min(dists),
        "word_distance": sum(word_distance(b, text) for b in baseline_texts) / n,
        "task_distance": _mean(task),
        "semantic_distance": _mean(sem),
        "exact_baseline": any(text == b for b in baseline_texts),
        "samples": noise.get("samples", n),
    }
    out["within_noise"] = _within(out, noise)
    out["verdict"] = verdict(out, noise)
    return out


def _within(eff: dict[str, Any], noise: dict[str, Any]) -> bool:
    """Whether every measure that both the effect and the noise have stays inside the spread."""
    if eff["distance"] > noise["max"] + NOISE_EPS:
        return False
    measures = noise.get("measures") or {}
    for name, key in (("task", "task_distance"), ("semantic", "semantic_distance")):
        spread = measures.get(name)
        if spread is not None and eff.get(key) is not None and eff[key] > spread["max"] + NOISE_EPS:
            return False
    return True


def verdict(eff: dict[str, Any], noise: dict[str, Any]) -> str:
    """ "needs more samples" under MIN_SAMPLES baseline samples, else "within noise" or "changed"."""
    if eff.get("distance") is None or noise.get("samples", 0) < MIN_SAMPLES:
        return NEEDS_SAMPLES
    return WITHIN_NOISE if eff.get("within_noise") else CHANGED


# Combined distances closer than this are a tie for the ranking.
RANK_TIE = 0.01


def combined_distance(eff: dict[str, Any]) -> float:
    """The distance effects are ranked and attributed by: the mean of the edit distance and,
    when the baseline has tool calls or key facts to keep, the task distance. An answer that
    keeps its wording but loses the fact is thus further than one reworded around the fact."""
    ds = [float(eff["distance"])]
    if eff.get("task_distance") is not None:
        ds.append(float(eff["task_distance"]))
    return sum(ds) / len(ds)


def rank_key(eff: dict[str, Any] | None) -> tuple[float, float, float, float]:
    """Sort key (descending) of an effect: the combined distance (to RANK_TIE), ties broken by
    the task distance, then the semantic distance (a missing measure counts as 0), then the
    exact combined distance."""
    if not eff or eff.get("distance") is None:
        return (-1.0, -1.0, -1.0, -1.0)
    d = combined_distance(eff)
    return (
        round(d / RANK_TIE),
        float(eff.get("task_distance") or 0.0),
        float(eff.get("semantic_distance") or 0.0),
        d,
    )
