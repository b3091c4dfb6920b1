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

A variant's effect gets a verdict (`compare`) from the distribution of its answers against the
baseline's, answers taken as independent draws: how many carry every check (each key fact and
tool call that most baseline answers carry) by Boschloo's exact test; without checks, how many
give the baseline's one answer, or a permutation test of the edit (and semantic) distances.
"changed" when the p-value is below ALPHA, "within noise" otherwise, "needs more samples" under
MIN_SAMPLES baseline answers or MIN_VARIANT_SAMPLES variant answers (or when the test could not
reach ALPHA). `verdict_words` says it in a sentence.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from itertools import combinations
from typing import Any

from replay import stats

# Floats: an effect equal to the baseline's largest spread is still noise.
NOISE_EPS = 1e-9
# With fewer baseline samples their spread says too little about the model's own variation.
MIN_SAMPLES = 3
# One answer is no distribution: it cannot tell a changed answer from an unlucky sample.
MIN_VARIANT_SAMPLES = 2
ALPHA = stats.DEFAULT_ALPHA

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


def _task_pairs(
    texts: Sequence[str], calls: Sequence[Sequence[Any] | None], pairs: Sequence[tuple[int, int]]
) -> list[float]:
    """Task distances of each pair both ways (each answer the reference once), where defined."""
    out: list[float] = []
    for i, j in pairs:
        for a, b in ((i, j), (j, i)):
            d = task_distance(texts[a], texts[b], reference_tool_calls=calls[a], tool_calls=calls[b])
            if d is not None:
                out.append(d)
    return out


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
    task = _task_pairs(texts, calls, pairs)
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
    texts: Sequence[str] | None = None,
    variant_tool_calls: Sequence[Sequence[Any] | None] | None = None,
    variant_embeddings: Sequence[Sequence[float] | None] | None = None,
    label: str = "the variant",
) -> dict[str, Any]:
    """How far the variant's answers (TEXTS, or TEXT alone) are from the baseline samples under
    each measure (mean over every variant-baseline pair), with the verdict of `compare` on the
    two distributions (`verdict`, `p`, `verdict_words`, `tests`). LABEL names the variant in the
    words ("without memory")."""
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
            "verdict_words": "needs more samples: no baseline answer to compare with",
            "p": None,
            "tests": [],
            "samples": 0,
            "variant_samples": len(texts) if texts is not None else 1,
        }
    n = len(baseline_texts)
    calls = list(baseline_tool_calls) if baseline_tool_calls is not None else [None] * n
    embs = list(baseline_embeddings) if baseline_embeddings is not None else [None] * n
    if texts is None:
        v_texts: list[str] = [text]
        v_calls: list[Sequence[Any] | None] = [tool_calls]
        v_embs: list[Sequence[float] | None] = [embedding]
    else:
        v_texts = list(texts)
        v_calls = list(variant_tool_calls) if variant_tool_calls is not None else [None] * len(v_texts)
        v_embs = list(variant_embeddings) if variant_embeddings is not None else [None] * len(v_texts)
    cross = [(b, j) for j in range(len(v_texts)) for b in range(n)]
    dists = [edit_distance(baseline_texts[b], v_texts[j]) for b, j in cross]
    task = [
        d
        for b, j in cross
        if (d := task_distance(baseline_texts[b], v_texts[j], reference_tool_calls=calls[b],
                               tool_calls=v_calls[j])) is not None
    ]
    sem = [d for b, j in cross if (d := semantic_distance(embs[b], v_embs[j])) is not None]
    out: dict[str, Any] = {
        "distance": sum(dists) / len(dists),
        "min_distance": min(dists),
        "word_distance": _mean([word_distance(baseline_texts[b], v_texts[j]) for b, j in cross]),
        "task_distance": _mean(task),
        "semantic_distance": _mean(sem),
        "exact_baseline": all(v in baseline_texts for v in v_texts),
        "samples": noise.get("samples", n),
        "variant_samples": len(v_texts),
    }
    judged = compare(
        baseline_texts,
        v_texts,
        baseline_tool_calls=calls,
        variant_tool_calls=v_calls,
        baseline_embeddings=embs,
        variant_embeddings=v_embs,
        label=label,
    )
    out.update(judged)
    if judged["verdict"] == NEEDS_SAMPLES:
        # No test to go by: whether it stays inside the baseline's spread, as a description.
        out["within_noise"] = _within(out, noise)
    else:
        out["within_noise"] = judged["verdict"] == WITHIN_NOISE
    return out


def _within(eff: dict[str, Any], noise: dict[str, Any]) -> bool:
    """Whether every measure that both the effect and the noise have stays inside the spread."""
    if eff["distance"] > noise.get("max", 0.0) + NOISE_EPS:
        return False
    measures = noise.get("measures") or {}
    for name, key in (("task", "task_distance"), ("semantic", "semantic_distance")):
        spread = measures.get(name)
        if spread is not None and eff.get(key) is not None and eff[key] > spread["max"] + NOISE_EPS:
            return False
    return True


def verdict(eff: dict[str, Any], noise: dict[str, Any]) -> str:
    """An effect's verdict (`compare`'s, which `effect` stores); "needs more samples" under
    MIN_SAMPLES baseline samples or without one."""
    if eff.get("distance") is None or noise.get("samples", 0) < MIN_SAMPLES:
        return NEEDS_SAMPLES
    return str(eff.get("verdict") or (WITHIN_NOISE if eff.get("within_noise") else CHANGED))


# --- verdicts on distributions ------------------------------------------------------------
_PREPOSITIONS = ("with", "without", "after", "before", "under")

def _states(check: tuple[str, str], text: str | None, tool_calls: Sequence[Any] | None) -> bool:
    kind, value = check
    if kind == "tool call":
        return value in _canonical_calls(tool_calls)
    if kind == "field":
        data = _as_json(text or "")
        return data is not None and value in _json_leaves(data)
    return _contains(" ".join((text or "").lower().split()), value)


def baseline_checks(
    texts: Sequence[str], tool_calls: Sequence[Sequence[Any] | None] | None = None
) -> list[tuple[str, str]]:
    """What the baseline's majority answer delivers, as (kind, value) checks: each tool call,
    JSON field ("field") or key fact ("fact") of a baseline answer that more than half of the
    baseline answers carry, in order of first appearance."""
    n = len(texts)
    calls = list(tool_calls) if tool_calls is not None else [None] * n
    candidates: list[tuple[str, str]] = []
    for text, c in zip(texts, calls, strict=True):
        found = [("tool call", x) for x in _canonical_calls(c)]
        kind = "field" if _as_json(text or "") is not None else "fact"
        found += [(kind, f) for f in key_facts(text)]
        candidates += [x for x in found if x not in candidates]
    return [
        x
        for x in candidates
        if 2 * sum(1 for t, c in zip(texts, calls, strict=True) if _states(x, t, c)) > n
    ]


def _check_words(check: tuple[str, str]) -> str:
    kind, value = check
    if kind == "tool call":
        return f"the tool call {value.split(' ', 2)[1] or '(unnamed)'}"
    if kind == "field":
        return f"the field {value[:80]}"
    return f"the fact “{value[:80]}”"


def _samples_words(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _same_text(a: str | None, b: str | None) -> bool:
    return " ".join((a or "").split()) == " ".join((b or "").split())


def _proportion_test(
    what: str, subject: str, measure: str, by: int, nb: int, vy: int, nv: int, label: str
) -> dict[str, Any]:
    return {
        "measure": measure,
        "what": what,
        "p": stats.boschloo_exact(by, nb, vy, nv),
        "baseline": by,
        "variant": vy,
        "words": (
            f"{subject} was in {stats.answers_phrase(by, nb, 'baseline')} and {vy} of {nv} answers "
            f"{_of(label)}"
        ),
    }


def _distance_test(
    measure: str, matrix: list[list[float]], nb: int, label: str
) -> dict[str, Any]:
    n = len(matrix)
    cross = [matrix[i][j] for i in range(nb) for j in range(nb, n)]
    within = [matrix[i][j] for i, j in combinations(range(nb), 2)]
    moved, spread = sum(cross) / len(cross), sum(within) / len(within)
    return {
        "measure": measure,
        "what": f"{measure} distance",
        "p": stats.distance_permutation_test(matrix, nb),
        "smallest_p": stats.smallest_permutation_p(n, nb),
        "baseline": spread,
        "variant": moved,
        "words": (
            f"the answers {_of(label)} are {moved:.2f} from the baseline answers on average, the "
            f"baseline answers {spread:.2f} from each other ({measure} distance)"
        ),
    }


def compare(
    baseline_texts: Sequence[str],
    texts: Sequence[str],
    *,
    baseline_tool_calls: Sequence[Sequence[Any] | None] | None = None,
    variant_tool_calls: Sequence[Sequence[Any] | None] | None = None,
    baseline_embeddings: Sequence[Sequence[float] | None] | None = None,
    variant_embeddings: Sequence[Sequence[float] | None] | None = None,
    label: str = "the variant",
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """The verdict on the variant's answers TEXTS against the baseline's: `verdict` (VERDICTS),
    `p` (of the tests it rests on: the smallest, times their number; None without a verdict),
    `verdict_words` (a sentence for the page) and `tests` (each test's p-value and words, and
    whether the verdict rests on it).

    The tests take the answers as independent draws, never the distances between them (which
    share answers): an answer with checks (`baseline_checks`) is judged on how many answers of
    each side carry every check (Boschloo's exact test), with a test per check for the words;
    else, when the baseline answers are all one text, on how many answers of each side give it;
    else on its edit (and semantic) distances, by permuting which answers are the baseline's."""
    nb, nv = len(baseline_texts), len(texts)
    b_calls = list(baseline_tool_calls) if baseline_tool_calls is not None else [None] * nb
    v_calls = list(variant_tool_calls) if variant_tool_calls is not None else [None] * nv
    if nb < MIN_SAMPLES or nv < MIN_VARIANT_SAMPLES:
        return _needs_samples(
            f"a verdict compares at least {MIN_SAMPLES} baseline answers with at least "
            f"{MIN_VARIANT_SAMPLES} answers {_of(label)} (here {_samples_words(nb, 'baseline answer')} "
            f"and {nv})"
        )
    tests: list[dict[str, Any]] = []
    checks = baseline_checks(baseline_texts, b_calls)
    if checks:
        b_has = [[_states(c, t, k) for c in checks] for t, k in zip(baseline_texts, b_calls, strict=True)]
        v_has = [[_states(c, t, k) for c in checks] for t, k in zip(texts, v_calls, strict=True)]
        for i, c in enumerate(checks):
            b_yes, v_yes = sum(h[i] for h in b_has), sum(h[i] for h in v_has)
            tests.append(_proportion_test(c[1], _check_words(c), c[0], b_yes, nb, v_yes, nv, label))
        if len(checks) > 1:
            b_all, v_all = sum(all(h) for h in b_has), sum(all(h) for h in v_has)
            together = "every fact and call checked"
            tests.append(_proportion_test("every check", together, "checks", b_all, nb, v_all, nv, label))
        deciding = [tests[-1]]
    elif all(_same_text(t, baseline_texts[0]) for t in baseline_texts):
        same = sum(1 for t in texts if _same_text(t, baseline_texts[0]))
        first = baseline_texts[0][:80]
        tests.append(_proportion_test(first, "the baseline's answer", "answer", nb, nb, same, nv, label))
        deciding = [tests[-1]]
    else:
        deciding = []
    answers = [*baseline_texts, *texts]
    n = len(answers)
    edit = [[0.0 if i == j else edit_distance(answers[i], answers[j]) for j in range(n)] for i in range(n)]
    tests.append(_distance_test("edit", edit, nb, label))
    embs = [*(baseline_embeddings or [None] * nb), *(variant_embeddings or [None] * nv)]
    if all(e is not None for e in embs):
        sem = [
            [0.0 if i == j else (semantic_distance(embs[i], embs[j]) or 0.0) for j in range(n)]
            for i in range(n)
        ]
        tests.append(_distance_test("semantic", sem, nb, label))
    if not deciding:
        deciding = tests[-2:] if tests[-1]["measure"] == "semantic" else tests[-1:]
        if min(t["smallest_p"] for t in deciding) * len(deciding) >= alpha:
            return {
                **_needs_samples(
                    f"{nb} baseline answers and {nv} answers {_of(label)}, none of them stating a fact "
                    f"or making a call, cannot show a change in wording at p < {stats.format_number(alpha)}; "
                    "run 4 or more samples"
                ),
                "tests": tests,
            }
    for t in tests:
        t["decides"] = any(t is d for d in deciding)
    m = len(deciding)
    p = min(1.0, min(t["p"] for t in deciding) * m)
    changed = p < alpha
    if checks:
        # The readable form: the check that moved most, with its counts.
        lead = min(tests[: len(checks)], key=lambda t: (t["p"], t["variant"] - t["baseline"]))
    else:
        lead = min(deciding, key=lambda t: t["p"])
    outcome = f"changed, {stats.format_p(p)}" if changed else f"within noise ({stats.format_p(p)})"
    words = f"{lead['words']}: {outcome}"
    reworded = [
        t for t in tests if not t["decides"] and t["measure"] in ("edit", "semantic") and t["p"] < alpha
    ]
    if reworded and not changed:
        r = min(reworded, key=lambda t: t["p"])
        words += (
            f"; worded differently ({r['measure']} distance {r['variant']:.2f} against "
            f"{r['baseline']:.2f}, {stats.format_p(r['p'])})"
        )
    return {"verdict": CHANGED if changed else WITHIN_NOISE, "p": p, "verdict_words": words, "tests": tests}


def _needs_samples(why: str) -> dict[str, Any]:
    return {"verdict": NEEDS_SAMPLES, "p": None, "verdict_words": f"needs more samples: {why}", "tests": []}


def _of(label: str) -> str:
    """"without memory" as is; "memory moved to the end" as "of memory moved to the end"."""
    return label if label.split(" ", 1)[0] in _PREPOSITIONS else f"of {label}"


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
