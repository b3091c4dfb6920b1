"""Checks (probes) run on every answer of a context experiment: pure, ORM-free.

A check is a JSON object: it is stored as JSON, sent over the REST API and written to JSONL
exports. `validate_check` turns a raw definition into its normalised form or raises a
`CheckError` naming the field; `evaluate` runs a normalised check on one answer. Four types:

- ``fact``: the answer states a value. ``match`` is "text" (contained, case- and
  whitespace-insensitive), "regex", "number" (some number within ``tolerance``) or "json_path"
  (the answer's JSON has ``path`` equal to ``value``).
- ``constraint``: a ``rule`` the answer keeps: valid_json, json_schema, not_contains, max_chars,
  max_tokens, calls_tool, no_tool.
- ``no_repeat_question``: the answer does not ask the user for a slot whose value the context
  already gives (the articles' repeat-question rate).
- ``consistent``: the answer stays within the item's noise floor of its reference answer under
  one of replay.measures' distances.

Every normalised check carries a ``name`` (a short label) and an ``id`` (stable: by default a
hash of the canonical definition, so the same check gets the same id everywhere).

`suggest_checks` proposes checks from what a saved turn recorded (validation outcomes, a
constraints block, pinned blocks, injected memories); the user confirms them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import jsonschema_rs

from ctxobs import tokens
from replay import measures

TYPES = ("fact", "constraint", "no_repeat_question", "consistent")
FACT_MATCHES = ("text", "regex", "number", "json_path")
RULES = ("valid_json", "json_schema", "not_contains", "max_chars", "max_tokens", "calls_tool", "no_tool")
MEASURES = ("edit", "task", "semantic")
SOURCES = ("validation", "constraints", "pinned", "memory")

MAX_PATTERN_CHARS = 1000
MAX_TEXT_CHARS = 2000
MAX_SCHEMA_BYTES = 64 * 1024
MAX_VALUE_BYTES = 16 * 1024  # a json_path value, calls_tool arguments
MAX_SLOTS = 50
MAX_ALIASES = 20
MAX_NAME_CHARS = 120
MAX_ID_CHARS = 64
MAX_PATH_CHARS = 500
MAX_TOOL_CHARS = 200
MAX_LIMIT = 10_000_000
MAX_CHECKS = 200
MAX_EVIDENCE_CHARS = 500
MAX_SUGGESTIONS = 20
REGEX_FLAGS = "ims"
# The encoding max_tokens counts with: always available offline, the one ablation counts with.
TOKEN_ENCODING = "cl100k_base"  # noqa: S105 - an encoding name, not a secret
# Floats: a distance equal to the noise floor is still within it.
NOISE_EPS = measures.NOISE_EPS

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
_SNIPPET_MARGIN = 60


class CheckError(ValueError):
    """A check definition that cannot run: FIELD is where ("pattern", "slots[1].value",
    "checks[3].schema"; "" for the definition itself) and REASON says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason

    def under(self, prefix: str) -> CheckError:
        """The same error with FIELD placed under PREFIX (e.g. "checks[3]")."""
        if not self.field:
            return CheckError(prefix, self.reason)
        sep = "" if self.field.startswith("[") else "."
        return CheckError(f"{prefix}{sep}{self.field}", self.reason)


# --- caches -----------------------------------------------------------------------------------
@lru_cache(maxsize=2048)
def compile_pattern(pattern: str, flags: str = "") -> re.Pattern[str]:
    """PATTERN compiled with FLAGS (letters of REGEX_FLAGS), cached by both; raises re.error."""
    bits = 0
    for letter in flags:
        bits |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}[letter]
    return re.compile(pattern, bits)


@lru_cache(maxsize=2048)
def _text_pattern(value: str) -> re.Pattern[str]:
    # Case-insensitive, and any run of whitespace in the answer matches any run in the value.
    return re.compile(r"\s+".join(re.escape(w) for w in value.split()), re.IGNORECASE)


@lru_cache(maxsize=256)
def schema_validator(schema_json: str) -> jsonschema_rs.Validator:
    """The validator of a JSON Schema given as its canonical JSON text, cached by that text.
    Raises jsonschema_rs.ValidationError when it is not a valid schema. Remote $refs are never
    fetched (a check must not make the server call URLs); formats are asserted."""
    return jsonschema_rs.validator_for(json.loads(schema_json), validate_formats=True, offline=True)


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def check_key(check: Mapping[str, Any]) -> str:
    """The canonical text of a check's definition (without its id and name): equal exactly when
    two checks test the same thing."""
    return _canonical_json({k: v for k, v in check.items() if k not in ("id", "name")})


def _check_id(check: Mapping[str, Any]) -> str:
    return hashlib.sha256(check_key(check).encode()).hexdigest()[:12]


# --- validation -------------------------------------------------------------------------------
class _Fields:
    """Reads a raw definition, remembering which keys were used so that unknown ones are
    reported (a misspelt "tolerence" must not silently become the default)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.used: set[str] = {"type", "id", "name"}

    def get(self, key: str) -> Any:
        self.used.add(key)
        return self.raw.get(key)

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def text(self, key: str, max_chars: int) -> str:
        return _text(self.get(key), key, max_chars)

    def number(self, key: str, *, default: float | None = None, minimum: float | None = None) -> float:
        v = self.get(key)
        if v is None and default is not None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise CheckError(key, "required: a number" if v is None else "must be a finite number")
        if minimum is not None and v < minimum:
            raise CheckError(key, f"must be >= {minimum:g}")
        return _tidy_number(v)

    def limit(self) -> int:
        v = self.get("limit")
        if isinstance(v, bool) or not isinstance(v, int):
            raise CheckError("limit", "required: an integer" if v is None else "must be an integer")
        if v < 0:
            raise CheckError("limit", "must be >= 0")
        if v > MAX_LIMIT:
            raise CheckError("limit", f"must be <= {MAX_LIMIT}")
        return v

    def json_value(self, key: str, *, required: bool) -> Any:
        if key not in self.raw:
            if required:
                raise CheckError(key, "required")
            return None
        v = self.get(key)
        try:
            size = len(_canonical_json(v).encode())
        except (TypeError, ValueError):
            raise CheckError(key, "must be plain JSON (objects, arrays, strings, finite numbers)") from None
        if size > MAX_VALUE_BYTES:
            raise CheckError(key, f"too large: {size} bytes, at most {MAX_VALUE_BYTES}")
        return v

    def finish(self) -> None:
        unknown = sorted(k for k in self.raw if k not in self.used)
        if unknown:
            raise CheckError(str(unknown[0]), "unknown field for this check")


def _text(v: Any, where: str, max_chars: int) -> str:
    if not isinstance(v, str) or not v.strip():
        raise CheckError(where, "required: a non-empty string" if v is None else "must be a non-empty string")
    s: str = v.strip()
    if len(s) > max_chars:
        raise CheckError(where, f"too long: {len(s)} characters, at most {max_chars}")
    return s


def _tidy_number(v: float) -> float:
    # 600 and 600.0 are one value: the canonical form (and so the default id) must not differ.
    return int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2**53 else v


def _regex(f: _Fields, key: str = "pattern") -> tuple[str, str]:
    pattern = f.get(key)
    if not isinstance(pattern, str) or not pattern:
        missing = pattern is None
        raise CheckError(key, "required: a non-empty regular expression" if missing else "must be a string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise CheckError(key, f"too long: {len(pattern)} characters, at most {MAX_PATTERN_CHARS}")
    flags = f.get("flags")
    if flags is None:
        flags = ""
    if not isinstance(flags, str) or any(c not in REGEX_FLAGS for c in flags):
        raise CheckError("flags", f"must be letters of {REGEX_FLAGS!r} (ignore case, multi-line, dot-all)")
    flags = "".join(sorted(set(flags)))
    try:
        rx = compile_pattern(pattern, flags)
    except re.error as e:
        raise CheckError(key, f"does not compile: {e}") from None
    if rx.search("") is not None:
        raise CheckError(key, "matches the empty string, so it matches every answer")
    return pattern, flags


_PATH_STEP = re.compile(
    r"""\.([^\W\d][\w-]*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\["((?:[^"\\]|\\.)*)"\]"""
)


@lru_cache(maxsize=1024)
def parse_path(path: str) -> tuple[str | int, ...]:
    """The steps of a JSONPath in the supported subset ($, .name, ['name'], ["name"], [index]);
    raises CheckError("path", ...) for anything else."""
    if not path.startswith("$"):
        raise CheckError("path", "must start with $")
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _PATH_STEP.match(path, pos)
        if m is None:
            near = path[pos : pos + 12]
            hint = "use .name, ['name'] or [index]"
            raise CheckError("path", f"unsupported at character {pos + 1} ({near!r}): {hint}")
        name, index, single, double = m.groups()
        if index is not None:
            steps.append(int(index))
        else:
            quoted = single if single is not None else double
            steps.append(name if quoted is None else re.sub(r"\\(.)", r"\1", quoted))
        pos = m.end()
    return tuple(steps)


def _fact(f: _Fields) -> dict[str, Any]:
    match = f.get("match")
    if match is None:
        # A definition that names only its operand says which match it means.
        value = f.raw.get("value")
        if f.has("pattern"):
            match = "regex"
        elif f.has("path"):
            match = "json_path"
        elif isinstance(value, int | float) and not isinstance(value, bool):
            match = "number"
        else:
            match = "text"
    if match not in FACT_MATCHES:
        raise CheckError("match", f"unknown match {str(match)[:40]!r}: use one of {', '.join(FACT_MATCHES)}")
    out: dict[str, Any] = {"type": "fact", "match": match}
    if match == "text":
        out["value"] = f.text("value", MAX_TEXT_CHARS)
    elif match == "regex":
        out["pattern"], out["flags"] = _regex(f)
    elif match == "number":
        out["value"] = f.number("value")
        out["tolerance"] = f.number("tolerance", default=0, minimum=0)
    else:
        path = f.get("path")
        if not isinstance(path, str) or not path.strip():
            raise CheckError("path", "required: a JSONPath such as $.order.items[0].sku")
        path = path.strip()
        if len(path) > MAX_PATH_CHARS:
            raise CheckError("path", f"too long: {len(path)} characters, at most {MAX_PATH_CHARS}")
        parse_path(path)
        out["path"] = path
        out["value"] = f.json_value("value", required=True)
    return out


def _constraint(f: _Fields) -> dict[str, Any]:
    rule = f.get("rule")
    if rule not in RULES:
        shown = "required" if rule is None else f"unknown rule {str(rule)[:40]!r}"
        raise CheckError("rule", f"{shown}: use one of {', '.join(RULES)}")
    out: dict[str, Any] = {"type": "constraint", "rule": rule}
    if rule == "json_schema":
        out["schema"] = _schema(f.get("schema"))
    elif rule == "not_contains":
        if f.has("text") == f.has("pattern"):
            raise CheckError("text", "give exactly one of text (a phrase) or pattern (a regular expression)")
        if f.has("text"):
            out["text"] = f.text("text", MAX_TEXT_CHARS)
        else:
            out["pattern"], out["flags"] = _regex(f)
    elif rule in ("max_chars", "max_tokens"):
        out["limit"] = f.limit()
    elif rule in ("calls_tool", "no_tool"):
        out["tool"] = f.text("tool", MAX_TOOL_CHARS)
        if rule == "calls_tool":
            args = f.json_value("arguments", required=False)
            if args is not None and not isinstance(args, dict):
                raise CheckError("arguments", "must be an object of the argument values to expect")
            out["arguments"] = args or {}
    return out


def _schema(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        why = "required: a JSON Schema object" if schema is None else "must be an object"
        raise CheckError("schema", why)
    try:
        text = _canonical_json(schema)
    except (TypeError, ValueError):
        raise CheckError("schema", "must be plain JSON") from None
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise CheckError("schema", f"too large: {len(text.encode())} bytes, at most {MAX_SCHEMA_BYTES}")
    try:
        schema_validator(text)
    except jsonschema_rs.ValidationError as e:
        where = "/" + "/".join(str(p) for p in e.instance_path)
        raise CheckError("schema", f"not a valid JSON Schema at {where}: {e.message}") from None
    return schema


def _no_repeat(f: _Fields) -> dict[str, Any]:
    slots = f.get("slots")
    if not isinstance(slots, list) or not slots:
        raise CheckError("slots", "required: a non-empty list of {name, value, aliases?}")
    if len(slots) > MAX_SLOTS:
        raise CheckError("slots", f"too many: {len(slots)}, at most {MAX_SLOTS}")
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, slot in enumerate(slots):
        try:
            s = _slot(slot)
        except CheckError as e:
            raise e.under(f"slots[{i}]") from None
        if s["name"].lower() in names:
            raise CheckError(f"slots[{i}].name", f"duplicate slot {s['name']!r}")
        names.add(s["name"].lower())
        out.append(s)
    return {"type": "no_repeat_question", "slots": out}


def _slot(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise CheckError("", "must be an object {name, value, aliases?}")
    unknown = sorted(k for k in raw if k not in ("name", "value", "aliases"))
    if unknown:
        raise CheckError(str(unknown[0]), "unknown field for a slot")
    name = _text(raw.get("name"), "name", MAX_NAME_CHARS)
    value = raw.get("value")
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(_tidy_number(value))
    value = _text(value, "value", MAX_TEXT_CHARS)
    aliases = raw.get("aliases")
    if aliases is None:
        # Stored expanded: a saved check keeps evaluating the same if the defaults change.
        aliases = default_aliases(name)
    if not isinstance(aliases, list):
        raise CheckError("aliases", "must be a list of strings")
    if len(aliases) > MAX_ALIASES:
        raise CheckError("aliases", f"too many: {len(aliases)}, at most {MAX_ALIASES}")
    kept: list[str] = []
    for j, a in enumerate(aliases):
        a = _text(a, f"aliases[{j}]", MAX_NAME_CHARS)
        if a.lower() != name.lower() and a.lower() not in (k.lower() for k in kept):
            kept.append(a)
    return {"name": name, "value": value, "aliases": kept}


def _consistent(f: _Fields) -> dict[str, Any]:
    measure = f.get("measure")
    if measure is None:
        measure = "edit"
    if measure not in MEASURES:
        shown = str(measure)[:40]
        raise CheckError("measure", f"unknown measure {shown!r}: use one of {', '.join(MEASURES)}")
    return {"type": "consistent", "measure": measure}


_BUILDERS: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "fact": _fact,
    "constraint": _constraint,
    "no_repeat_question": _no_repeat,
    "consistent": _consistent,
}


def validate_check(raw: object) -> dict[str, Any]:
    """The normalised check (its type, operands, ``name`` and ``id``), or CheckError naming the
    field and why: unknown type, rule, match or field; a missing or empty operand; a regex that
    does not compile or matches the empty string; a JSON Schema that is not a valid schema; a
    negative limit or tolerance; a JSONPath outside the subset. Bounds: pattern <= 1000
    characters, text values <= 2000, schema <= 64 KB serialised, at most 50 slots."""
    if not isinstance(raw, Mapping):
        raise CheckError("", "a check must be an object with a type")
    kind = raw.get("type")
    build = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        shown = "required" if kind is None else f"unknown type {str(kind)[:40]!r}"
        raise CheckError("type", f"{shown}: use one of {', '.join(TYPES)}")
    f = _Fields(raw)
    check = build(f)
    f.finish()
    name = raw.get("name")
    check["name"] = _text(name, "name", MAX_NAME_CHARS) if name is not None else _default_name(check)
    check_id = raw.get("id")
    if check_id is None:
        check["id"] = _check_id(check)
    elif not isinstance(check_id, str) or len(check_id) > MAX_ID_CHARS or not _ID.fullmatch(check_id):
        raise CheckError(
            "id", f"must be 1-{MAX_ID_CHARS} letters, digits or _ . : -, starting with a letter or digit"
        )
    else:
        check["id"] = check_id
    return check


def validate_checks(raw: object) -> list[dict[str, Any]]:
    """Each check of a list normalised (validate_check); errors name the index, e.g.
    "checks[3].pattern". Two checks may not share an id."""
    if not isinstance(raw, list):
        raise CheckError("checks", "must be a list of checks")
    if len(raw) > MAX_CHECKS:
        raise CheckError("checks", f"too many: {len(raw)}, at most {MAX_CHECKS}")
    out: list[dict[str, Any]] = []
    ids: set[str] = set()
    for i, item in enumerate(raw):
        try:
            check = validate_check(item)
        except CheckError as e:
            raise e.under(f"checks[{i}]") from None
        if check["id"] in ids:
            raise CheckError(f"checks[{i}].id", f"duplicate id {check['id']!r} (the same check twice?)")
        ids.add(check["id"])
        out.append(check)
    return out


def _short(value: Any, n: int = 40) -> str:
    s = value if isinstance(value, str) else _canonical_json(value)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _default_name(check: Mapping[str, Any]) -> str:
    kind = check["type"]
    if kind == "fact":
        match = check["match"]
        if match == "regex":
            return f"fact: /{_short(check['pattern'])}/"
        if match == "json_path":
            return f"fact: {_short(check['path'])} = {_short(check['value'])}"
        return f"fact: {_short(check['value'])}"
    if kind == "constraint":
        rule = check["rule"]
        detail = check.get("text") or check.get("pattern") or check.get("tool") or check.get("limit")
        return f"{rule}: {_short(detail)}" if detail is not None else str(rule)
    if kind == "no_repeat_question":
        return _short("no repeat question: " + ", ".join(s["name"] for s in check["slots"]), MAX_NAME_CHARS)
    return f"consistent: {check['measure']}"


# --- describing ---------------------------------------------------------------------------------
def describe(check: Mapping[str, Any]) -> str:
    """One line for a page saying what the check wants, e.g. 'states "Guangzhou"', 'valid JSON',
    'does not ask for destination, budget'."""
    kind = check.get("type")
    if kind == "fact":
        match = check.get("match")
        if match == "regex":
            return f"matches /{_short(check.get('pattern'), 60)}/{check.get('flags') or ''}"
        if match == "number":
            tol = check.get("tolerance") or 0
            return f"states {check.get('value')}" + (f" (± {tol})" if tol else "")
        if match == "json_path":
            return f"has {check.get('path')} = {_short(check.get('value'), 60)}"
        return f"states {json.dumps(_short(check.get('value'), 60), ensure_ascii=False)}"
    if kind == "constraint":
        rule = check.get("rule")
        if rule == "valid_json":
            return "valid JSON"
        if rule == "json_schema":
            schema = check.get("schema") or {}
            title = schema.get("title") if isinstance(schema, dict) else None
            return f"JSON matching the schema {_short(title)!r}" if title else "JSON matching the schema"
        if rule == "not_contains":
            if check.get("text"):
                return f"does not contain {json.dumps(_short(check.get('text'), 60), ensure_ascii=False)}"
            return f"does not match /{_short(check.get('pattern'), 60)}/{check.get('flags') or ''}"
        if rule == "max_chars":
            return f"at most {check.get('limit', 0):,} characters"
        if rule == "max_tokens":
            return f"at most {check.get('limit', 0):,} tokens"
        if rule == "calls_tool":
            args = check.get("arguments")
            return f"calls {check.get('tool')}" + (f" with {_short(args, 60)}" if args else "")
        if rule == "no_tool":
            return f"does not call {check.get('tool')}"
        return str(rule)
    if kind == "no_repeat_question":
        names = [str(s.get("name")) for s in check.get("slots") or [] if isinstance(s, Mapping)]
        return _short("does not ask for " + ", ".join(names), 120)
    if kind == "consistent":
        return f"stays within the noise floor ({check.get('measure', 'edit')} distance)"
    return str(kind)


# --- answers and results --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Call:
    name: str
    arguments: Any  # the decoded arguments; None when they are not JSON
    raw: str


@dataclass(frozen=True)
class _Json:
    ok: bool
    value: Any
    error: str  # why not, when not ok
    span: tuple[int, int] | None  # the JSON's text, or where parsing failed


_FENCE = re.compile(r"```[ \t]*([A-Za-z]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_NUMBER = re.compile(r"(?<![\w.])([-+\u2212]?)(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(\.\d+)?(?!\d)")
_SENTENCE = re.compile(r"(?:[^\n.!?。！？]|(?<=\d)\.(?=\d))+[.!?。！？]*")


@dataclass(frozen=True)
class Answer:
    """One model answer: its text and its tool calls in OpenAI's shape
    ({"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}). What checks
    derive from it (its JSON, numbers, sentences, decoded calls) is computed once per answer."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_output(cls, output: Mapping[str, Any] | None) -> Answer:
        """The answer of a saved or replayed output ({"text", "tool_calls", ...})."""
        output = output or {}
        calls = output.get("tool_calls") or []
        return cls(str(output.get("text") or ""), [c for c in calls if isinstance(c, dict)])

    @cached_property
    def parsed_json(self) -> _Json:
        return _parse_json(self.text)

    @cached_property
    def calls(self) -> list[_Call]:
        out = []
        for c in self.tool_calls:
            fn: Mapping[str, Any] = c["function"] if isinstance(c.get("function"), dict) else c
            args = fn.get("arguments")
            raw = args if isinstance(args, str) else _canonical_json(args) if args is not None else ""
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    args = None
            out.append(_Call(str(fn.get("name") or ""), args, raw))
        return out

    @cached_property
    def numbers(self) -> list[tuple[float, int, int]]:
        out = []
        for m in _NUMBER.finditer(self.text):
            sign, whole, frac = m.groups()
            v = float(whole.replace(",", "") + (frac or ""))
            out.append((-v if sign in ("-", "\u2212") else v, m.start(), m.end()))
        return out

    @cached_property
    def sentences(self) -> list[tuple[str, int, int]]:
        return [(m.group(0), m.start(), m.end()) for m in _SENTENCE.finditer(self.text) if m.group(0).strip()]


def _parse_json(text: str) -> _Json:
    stripped = text.strip()
    if not stripped:
        return _Json(False, None, "the answer is empty", None)
    lead = len(text) - len(text.lstrip())
    try:
        return _Json(True, json.loads(stripped), "", (lead, lead + len(stripped)))
    except json.JSONDecodeError as e:
        first = _Json(False, None, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}",
                      (lead + e.pos, min(len(text), lead + e.pos + 1)))
    # A fenced block is how chat models wrap JSON; its content is the answer's JSON.
    for m in _FENCE.finditer(text):
        if m.group(1).lower() not in ("", "json"):
            continue
        body = m.group(2)
        try:
            value = json.loads(body)
        except json.JSONDecodeError as e:
            at = m.start(2) + e.pos
            why = f"fenced block is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
            return _Json(False, None, why, (at, min(len(text), at + 1)))
        start = m.start(2) + len(body) - len(body.lstrip())
        return _Json(True, value, "", (start, m.start(2) + len(body.rstrip())))
    return first


@dataclass(frozen=True)
class CheckContext:
    """What some checks need besides the answer: the item's reference answer and its noise
    floor (``threshold``, computed from baseline samples) for ``consistent``, and for its
    semantic measure the two embeddings."""

    reference_text: str = ""
    reference_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    threshold: float | None = None
    # The semantic measure's own noise floor: the control answers' largest semantic distance
    # from the reference (an edit distance is on another scale).
    semantic_threshold: float | None = None
    answer_embedding: list[float] | None = None
    reference_embedding: list[float] | None = None


@dataclass(frozen=True)
class CheckResult:
    """One check on one answer. ``passed`` is None when the check does not apply (the reason is
    in ``evidence``); ``evidence`` (<= 500 characters) is the matched text with a little around
    it, or why it failed; ``span`` is (start, end) of that text in the answer, when there is one."""

    check_id: str
    kind: str
    passed: bool | None
    evidence: str
    span: tuple[int, int] | None = None


def _cap(s: str) -> str:
    return s if len(s) <= MAX_EVIDENCE_CHARS else s[: MAX_EVIDENCE_CHARS - 1] + "…"


def _snippet(text: str, start: int, end: int) -> str:
    a = max(0, start - _SNIPPET_MARGIN)
    b = min(len(text), end + _SNIPPET_MARGIN)
    return ("…" if a else "") + " ".join(text[a:b].split()) + ("…" if b < len(text) else "")


_Verdict = tuple[bool | None, str, tuple[int, int] | None]


def _found(rx: re.Pattern[str], text: str, what: str) -> _Verdict:
    m = rx.search(text)
    if m is None:
        return False, f"does not state {what}", None
    return True, f"states {what}: {_snippet(text, m.start(), m.end())}", (m.start(), m.end())


def _eval_fact(check: Mapping[str, Any], answer: Answer, _ctx: CheckContext) -> _Verdict:
    match = check["match"]
    text = answer.text
    if match == "text":
        value = check["value"]
        return _found(_text_pattern(value), text, json.dumps(value, ensure_ascii=False))
    if match == "regex":
        rx = compile_pattern(check["pattern"], check.get("flags", ""))
        return _found(rx, text, f"/{check['pattern']}/")
    if match == "number":
        want, tol = float(check["value"]), float(check.get("tolerance") or 0)
        for v, a, b in answer.numbers:
            if abs(v - want) <= tol + NOISE_EPS:
                return True, f"states {text[a:b]}: {_snippet(text, a, b)}", (a, b)
        seen = ", ".join(text[a:b] for _, a, b in answer.numbers[:8])
        within = f" within ± {check.get('tolerance')}" if tol else ""
        return False, f"no number{within} equal to {check['value']} (found: {seen or 'none'})", None
    parsed = answer.parsed_json
    if not parsed.ok:
        return False, f"no JSON to look up {check['path']} in: {parsed.error}", parsed.span
    ok, got, where = _walk(parsed.value, parse_path(check["path"]))
    if not ok:
        return False, f"the answer's JSON has no {check['path']} (nothing at {where})", parsed.span
    shown = _short(got, 120)
    if _json_equal(got, check["value"]):
        return True, f"{check['path']} = {shown}", parsed.span
    return False, f"{check['path']} = {shown}, expected {_short(check['value'], 120)}", parsed.span


def _walk(value: Any, steps: tuple[str | int, ...]) -> tuple[bool, Any, str]:
    path = "$"
    for step in steps:
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return False, None, f"{path}[{step}]"
            value = value[step]
            path = f"{path}[{step}]"
        else:
            if not isinstance(value, dict) or step not in value:
                return False, None, f"{path}.{step}"
            value = value[step]
            path = f"{path}.{step}"
    return True, value, path


def _json_equal(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1 (Python's == says it is), 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _json_subset(want: Any, got: Any) -> bool:
    """Whether GOT has every key/value of WANT (recursively for objects; other values equal)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _json_subset(v, got[k]) for k, v in want.items())
    return _json_equal(want, got)


def _eval_constraint(check: Mapping[str, Any], answer: Answer, _ctx: CheckContext) -> _Verdict:
    rule = check["rule"]
    text = answer.text
    if rule == "valid_json":
        parsed = answer.parsed_json
        return (True, "valid JSON", parsed.span) if parsed.ok else (False, parsed.error, parsed.span)
    if rule == "json_schema":
        parsed = answer.parsed_json
        if not parsed.ok:
            return False, parsed.error, parsed.span
        validator = schema_validator(_canonical_json(check["schema"]))
        errors = []
        for e in validator.iter_errors(parsed.value):
            errors.append(f"at /{'/'.join(str(p) for p in e.instance_path)}: {e.message}")
            if len(errors) == 3:
                break
        if not errors:
            return True, "the JSON matches the schema", parsed.span
        return False, "; ".join(errors), parsed.span
    if rule == "not_contains":
        if check.get("text"):
            rx, what = _text_pattern(check["text"]), json.dumps(check["text"], ensure_ascii=False)
        else:
            rx, what = compile_pattern(check["pattern"], check.get("flags", "")), f"/{check['pattern']}/"
        m = rx.search(text)
        if m is None:
            return True, f"does not contain {what}", None
        return False, f"contains {what}: {_snippet(text, m.start(), m.end())}", (m.start(), m.end())
    if rule == "max_chars":
        limit, n = check["limit"], len(text)
        if n <= limit:
            return True, f"{n:,} characters <= {limit:,}", None
        return False, f"{n:,} characters > {limit:,}", (limit, n)
    if rule == "max_tokens":
        limit, n = check["limit"], tokens.get_counter(TOKEN_ENCODING).count_text(text)
        verdict = n <= limit
        return verdict, f"{n:,} tokens ({TOKEN_ENCODING}) {'<=' if verdict else '>'} {limit:,}", None
    tool = check["tool"]
    named = [c for c in answer.calls if c.name == tool]
    if rule == "no_tool":
        if not named:
            return True, f"does not call {tool}", None
        return False, f"calls {tool} with {_short(named[0].raw, 200)}", None
    want = check.get("arguments") or {}
    for c in named:
        if _json_subset(want, c.arguments):
            return True, f"calls {tool} with {_short(c.raw, 200)}", None
    if not named:
        called = sorted({c.name for c in answer.calls})
        return False, f"no call of {tool} (calls: {', '.join(called) or 'none'})", None
    return False, f"calls {tool} with {_short(named[0].raw, 200)}, expected {_short(want, 200)}", None


# --- repeat questions ---------------------------------------------------------------------------
# Slots agents keep asking for, and how a question names them. Interrogatives ("when",
# "where", ...) count only where they open the question: mid-sentence they are conjunctions.
_ALIAS_GROUPS: tuple[tuple[str, ...], ...] = (
    ("destination", "city", "where", "destination city", "travel to", "going to", "目的地", "城市", "去哪"),
    ("origin", "departure city", "leaving from", "flying from", "出发地", "出发城市"),
    ("budget", "price", "cost", "how much", "price range", "spend", "预算", "价格", "多少钱"),
    ("date", "dates", "day", "when", "travel date", "what date", "日期", "哪天", "什么时候"),
    ("time", "what time", "时间", "几点"),
    ("name", "full name", "first name", "last name", "your name", "姓名", "名字"),
    ("email", "e-mail", "email address", "mail address", "邮箱", "电子邮件"),
    ("phone", "phone number", "telephone", "mobile", "mobile number", "contact number", "电话", "手机"),
    ("address", "shipping address", "delivery address", "street", "地址", "收货地址"),
    ("guests", "travelers", "travellers", "people", "passengers", "how many people", "party size", "人数"),
    ("duration", "nights", "how long", "length of stay", "几晚", "多久"),
    ("order_id", "order id", "order number", "订单号"),
    ("account", "account number", "account id", "账号", "账户"),
    ("age", "how old", "年龄"),
    ("language", "preferred language", "语言"),
    ("currency", "货币", "币种"),
)
_INTERROGATIVES = frozenset(
    {"where", "when", "which", "how much", "how many", "how long", "how old", "what time", "what date"}
)
_GROUP_OF = {term.lower(): group for group in _ALIAS_GROUPS for term in group}
_SLOT_SYNONYMS = {"city": "destination", "price": "budget", "cost": "budget", "day": "date",
                  "mail": "email", "telephone": "phone", "mobile": "phone", "travelers": "guests",
                  "people": "guests", "order": "order_id"}


def default_aliases(name: str) -> list[str]:
    """How a question may name the slot NAME besides its name (e.g. destination: city, where),
    for the common slots of agents (destination, budget, date, name, email, phone, ...)."""
    key = " ".join(name.lower().replace("_", " ").replace("-", " ").split())
    group = _GROUP_OF.get(key) or _GROUP_OF.get(key.replace(" ", "_"))
    if group is None and key:
        last = key.split()[-1]
        group = _GROUP_OF.get(_SLOT_SYNONYMS.get(last, last))
    if group is None:
        return []
    return [t for t in group if t.lower() != name.lower()]


def _term_regex(term: str) -> str:
    words = [re.escape(w) for w in re.split(r"[\s_-]+", term.strip()) if w]
    body = r"[\s_-]+".join(words)
    # Word boundaries only at ASCII letters and digits: CJK text has no spaces to bound on.
    head = r"(?<![A-Za-z0-9])" if term[:1].isascii() and term[:1].isalnum() else ""
    tail = r"(?![A-Za-z0-9])" if term[-1:].isascii() and term[-1:].isalnum() else ""
    return head + body + tail


@lru_cache(maxsize=1024)
def _slot_regex(terms: tuple[str, ...]) -> re.Pattern[str]:
    anywhere = [_term_regex(t) for t in terms if t.lower() not in _INTERROGATIVES]
    opening = [_term_regex(t) for t in terms if t.lower() in _INTERROGATIVES]
    parts = []
    if opening:
        lead = r"^\W*(?:(?:and|so|also|then|ok|okay|great|sure)\W+)*"
        parts.append(lead + "(?:" + "|".join(opening) + ")")
    if anywhere:
        parts.append("|".join(anywhere))
    return re.compile("|".join(parts), re.IGNORECASE)


# A question without its question mark. "When"/"where"/"which" open one only when a verb of
# asking follows ("When would you ..."): "When you land, ..." is a statement.
_ASKS = re.compile(
    r"^\W*(?:could\s+you|can\s+you|would\s+you|will\s+you|may\s+i\s+(?:ask|have|know)|let\s+me\s+know"
    r"|please\s+(?:tell|provide|share|confirm|let\s+me\s+know|specify|give|send|enter|advise)"
    r"|what(?:'s|\s+is|\s+are|\s+was)\s+your"
    r"|(?:which|where|when|how\s+much|how\s+many|how\s+long)(?:\s+\w+)?"
    r"\s+(?:is|are|was|were|do|does|did|would|will|should|can|could|shall)\b)\b"
    r"|请问|请提供|请告诉|请告知|请输入|请确认",
    re.IGNORECASE,
)
_ASKS_ZH_END = re.compile(r"[吗呢][\s。.!！]*$")


def _is_question(sentence: str) -> bool:
    s = sentence.strip()
    return s.endswith(("?", "？")) or _ASKS.search(s) is not None or _ASKS_ZH_END.search(s) is not None


def _fold(s: str) -> str:
    return " ".join(s.lower().split())


@lru_cache(maxsize=1024)
def _value_marks(value: str) -> tuple[str, ...]:
    # What shows a question uses the value: the value itself, or one of its key facts
    # ("Is 600 still your budget?" uses "600 EUR").
    folded = _fold(value)
    marks = [folded, re.sub(r"(?<=\d),(?=\d{3})", "", folded)]
    marks += [f for f in measures.key_facts(value) if len(f) >= 2]
    return tuple(dict.fromkeys(m for m in marks if m))


def _uses_value(sentence: str, value: str) -> bool:
    folded = _fold(sentence)
    plain = re.sub(r"(?<=\d),(?=\d{3})", "", folded)
    return any(m in folded or m in plain for m in _value_marks(value))


def _eval_no_repeat(check: Mapping[str, Any], answer: Answer, _ctx: CheckContext) -> _Verdict:
    slots = check["slots"]
    questions = [(s, a, b) for s, a, b in answer.sentences if _is_question(s)]
    offending: list[tuple[Mapping[str, Any], str, int, int]] = []
    for sentence, a, b in questions:
        for slot in slots:
            rx = _slot_regex((slot["name"], *slot.get("aliases", ())))
            if rx.search(sentence.strip()) and not _uses_value(sentence, slot["value"]):
                offending.append((slot, sentence, a, b))
                break
    if not offending:
        names = ", ".join(s["name"] for s in slots)
        if not questions:
            return True, "asks no question", None
        return True, f"asks {len(questions)} question(s), none for a slot the context gives ({names})", None
    slot, sentence, a, b = offending[0]
    more = f" (+{len(offending) - 1} more)" if len(offending) > 1 else ""
    value = _short(slot["value"], 60)
    return (
        False,
        f"asks for {slot['name']}, which the context gives ({value}): {' '.join(sentence.split())}{more}",
        (a + len(sentence) - len(sentence.lstrip()), b),
    )


def _eval_consistent(check: Mapping[str, Any], answer: Answer, ctx: CheckContext) -> _Verdict:
    measure = check["measure"]
    d: float | None
    if measure == "semantic":
        threshold = ctx.semantic_threshold
        d = measures.semantic_distance(ctx.answer_embedding, ctx.reference_embedding)
        if d is None:
            return None, "no embeddings of the answer and the reference (the endpoint serves none)", None
    else:
        threshold = ctx.threshold
        if threshold is None:
            return None, "no noise floor for this item yet (needs baseline samples)", None
        if not ctx.reference_text and not ctx.reference_tool_calls:
            return None, "no reference answer", None
        if measure == "task":
            d = measures.task_distance(
                ctx.reference_text,
                answer.text,
                reference_tool_calls=ctx.reference_tool_calls,
                tool_calls=answer.tool_calls,
            )
            if d is None:
                return None, "the reference answer has no tool calls or key facts to keep", None
        else:
            d = measures.edit_distance(ctx.reference_text, answer.text)
    if threshold is None:
        return None, "no noise floor for this item yet (needs baseline samples)", None
    within = d <= threshold + NOISE_EPS
    op = "<=" if within else ">"
    return within, f"{measure} distance {d:.3f} {op} noise floor {threshold:.3f}", None


_EVALUATORS: dict[str, Callable[[Mapping[str, Any], Answer, CheckContext], _Verdict]] = {
    "fact": _eval_fact,
    "constraint": _eval_constraint,
    "no_repeat_question": _eval_no_repeat,
    "consistent": _eval_consistent,
}
_NO_CONTEXT = CheckContext()


def evaluate(check: Mapping[str, Any], answer: Answer, context: CheckContext | None = None) -> CheckResult:
    """The result of one normalised check (validate_check's output) on ANSWER."""
    kind = check.get("type")
    run = _EVALUATORS.get(kind) if isinstance(kind, str) else None
    if run is None:
        raise CheckError("type", f"unknown type {str(kind)[:40]!r}")
    passed, evidence, span = run(check, answer, context or _NO_CONTEXT)
    return CheckResult(str(check.get("id") or _check_id(check)), str(kind), passed, _cap(evidence), span)


def evaluate_all(
    checks: Sequence[Mapping[str, Any]], answer: Answer, context: CheckContext | None = None
) -> list[CheckResult]:
    """The result of each check on ANSWER, in order."""
    return [evaluate(c, answer, context) for c in checks]


# --- suggestions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Suggestion:
    """A check proposed from a saved turn, for the user to confirm: where it came from
    (one of SOURCES) and why."""

    check: dict[str, Any]
    source: str
    why: str


def _message_text(m: Any) -> str:
    if not isinstance(m, Mapping):
        return ""
    content = m.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def _block_text(block: Mapping[str, Any]) -> str:
    return "\n".join(t for t in (_message_text(m) for m in block.get("messages") or []) if t)


def _tool_names(blocks: Sequence[Mapping[str, Any]]) -> set[str]:
    names = set()
    for block in blocks:
        if block.get("kind") != "tools":
            continue
        for m in block.get("messages") or []:
            if not isinstance(m, Mapping):
                continue
            fn: Mapping[str, Any] = m["function"] if isinstance(m.get("function"), Mapping) else m
            if isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return names


_CLAUSE = re.compile(r"[^\n;；。]+")
_BULLET = re.compile(r"^\s*(?:[-*•·]|\d+[.)]|[（(]?\d+[）)])\s*")
_NEG = r"(?:never|do\s+not|don't|dont|must\s+not|mustn't|should\s+not|shouldn't|may\s+not|cannot|can't)"
_ZH_NEG = r"(?:不要|禁止|不得|不能|不可|切勿|请勿|别)"
_TOOL_NAME = r"[`'\"“‘]?([A-Za-z_][\w.-]*)[`'\"”’]?(\s+(?:tool|function))?"
_R_NO_TOOL = re.compile(
    rf"\b{_NEG}\s+(?:ever\s+)?(?:call|use|invoke|run|trigger)\s+(?:the\s+)?{_TOOL_NAME}", re.I
)
_R_CALL_TOOL = re.compile(
    rf"\b(?:always|must(?:\s+always)?|first)\s+(?:call|use|invoke|run)\s+(?:the\s+)?{_TOOL_NAME}", re.I
)
_R_NO_TOOL_ZH = re.compile(rf"{_ZH_NEG}再?(?:调用|使用)\s*{_TOOL_NAME}")
_R_CALL_TOOL_ZH = re.compile(rf"(?:必须|总是|始终|务必|一定要)先?(?:调用|使用)\s*{_TOOL_NAME}")
_R_JSON = re.compile(
    r"\b(?:respond|answer|reply|output|return|format|write|give)\b[^.]*?\bjson\b|\bjson\s+only\b"
    r"|\bonly\s+(?:valid\s+)?json\b|(?:用|以|使用|输出|返回|回复|回答)[^。，,]*?json|json\s*格式",
    re.I,
)
_R_JSON_NEG = re.compile(rf"\b{_NEG}\b[^.]*\bjson\b|{_ZH_NEG}[^。]*json", re.I)
_R_NOT_SAY = re.compile(
    rf"\b{_NEG}\s+(?:ever\s+)?(?:mention|say|include|reveal|disclose|write|output|discuss|promise|recommend"
    r"|refer\s+to|bring\s+up|use\s+the\s+(?:words?|phrases?|terms?|names?))\s+(.+)",
    re.I,
)
_R_NOT_SAY_ZH = re.compile(rf"{_ZH_NEG}(?:提及|提到|说出|说|包含|透露|出现|推荐|谈论|承诺|泄露)\s*(.+)")
_QUOTED = re.compile(r"[\"“'‘「『]([^\"”'’」』\n]{1,80})[\"”'’」』]")
_PHRASE_END = re.compile(
    r"\s+(?:in|to|when|unless|because|if|or|and|with|for|even|under)\s+|[,，、(（:：—]|\s-\s", re.I
)
_VAGUE = frozenset({"it", "this", "that", "them", "these", "those", "anything", "any", "something", "other"})
_R_MAX = re.compile(
    r"\b(at\s+most|no\s+more\s+than|not\s+more\s+than|maximum(?:\s+of)?|max\.?|up\s+to|under|fewer\s+than"
    r"|less\s+than|within|not\s+exceed(?:ing)?|limit(?:ed)?\s+to)\s+(\d[\d,]*)\s*"
    r"(characters?|chars?|words?|tokens?)\b",
    re.I,
)
_R_MAX_ZH = re.compile(r"(不超过|不要超过|最多|少于|不多于|控制在)\s*(\d+)\s*个?(字符|字|tokens?)", re.I)
_STRICT = ("under", "fewer", "less", "少于")
# Characters per English word, for a limit stated in words.
_CHARS_PER_WORD = 6


def _clauses(text: str) -> list[str]:
    out = []
    for line in _CLAUSE.findall(text):
        line = _BULLET.sub("", line).strip()
        # Sentences within a line: a period that ends a sentence, not a decimal point.
        out += [c.strip() for c in re.split(r"(?<=[.!?])\s+(?=[A-Z\"“'])", line) if c.strip()]
    return out


def _tool_in(m: re.Match[str], known: set[str]) -> str | None:
    name, marked = m.group(1), m.group(2)
    if known:
        return name if name in known else None
    # Without the tools block a name counts when it looks like one: marked, quoted or snake_case.
    quoted = m.string[m.start(1) - 1 : m.start(1)] in ("`", "'", '"', "“", "‘")
    return name if marked or quoted or "_" in name else None


def _phrase(rest: str) -> list[str]:
    quoted = _QUOTED.findall(rest)
    if quoted:
        return [q.strip() for q in quoted if q.strip()]
    phrase = _PHRASE_END.split(rest, maxsplit=1)[0].strip().rstrip(".!。！;；")
    phrase = re.sub(r"^(?:the|any|a|an|your|our)\s+", "", phrase, flags=re.I).strip()
    if not phrase or phrase.lower() in _VAGUE:
        return []
    cjk = any("\u4e00" <= ch <= "\u9fff" for ch in phrase)
    if (cjk and len(phrase) > 12) or (not cjk and len(phrase.split()) > 4) or len(phrase) < 2:
        return []
    return [phrase]


def _constraint_checks(clause: str, known_tools: set[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    tool_hit = False
    for rx, rule in ((_R_NO_TOOL, "no_tool"), (_R_NO_TOOL_ZH, "no_tool"),
                     (_R_CALL_TOOL, "calls_tool"), (_R_CALL_TOOL_ZH, "calls_tool")):
        for m in rx.finditer(clause):
            tool = _tool_in(m, known_tools)
            if tool:
                found.append({"type": "constraint", "rule": rule, "tool": tool})
                tool_hit = True
    if _R_JSON.search(clause) and not _R_JSON_NEG.search(clause):
        found.append({"type": "constraint", "rule": "valid_json"})
    if not tool_hit:
        for rx in (_R_NOT_SAY, _R_NOT_SAY_ZH):
            said = rx.search(clause)
            if said:
                phrases = _phrase(said.group(1))
                found += [{"type": "constraint", "rule": "not_contains", "text": p} for p in phrases]
    size = _R_MAX.search(clause) or _R_MAX_ZH.search(clause)
    if size:
        bound, n, unit = size.group(1).lower(), int(size.group(2).replace(",", "")), size.group(3).lower()
        n -= 1 if bound.startswith(_STRICT) else 0
        if unit.startswith("token"):
            found.append({"type": "constraint", "rule": "max_tokens", "limit": n})
        else:
            found.append({"type": "constraint", "rule": "max_chars",
                          "limit": n * _CHARS_PER_WORD if unit.startswith("word") else n})
    return found


_PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_LETTER = re.compile(r"[^\W\d_]")
# Facts proposed per block or memory: a pinned block can hold dozens, the page shows 20 in all.
_FACTS_PER_SOURCE = 6


def _fact_candidate(fact: str, reference: str) -> dict[str, Any] | None:
    """A fact check for a value or one of replay.measures' key facts, or None for one too
    slight to prove anything."""
    if fact[:1] in ".[=" and "=" in fact:
        # A JSON leaf, path=value: the value is what an answer states.
        try:
            value = json.loads(fact.partition("=")[2])
        except ValueError:
            return None
        if isinstance(value, bool) or value is None:
            return None
        fact = value if isinstance(value, str) else _canonical_json(value)
    if _PLAIN_NUMBER.fullmatch(fact):
        v = float(fact.replace(",", ""))
        # Single-digit counts are in every answer: stating one proves nothing.
        if v.is_integer() and abs(v) < 10:
            return None
        return {"type": "fact", "match": "number", "value": v}
    if len(fact) < 3 or fact.endswith("-") or (not _LETTER.search(fact) and len(fact) < 5):
        return None
    m = _text_pattern(fact).search(reference)
    # The answer's own spelling reads better on the page than the lower-cased key fact.
    return {"type": "fact", "match": "text", "value": m.group(0) if m else fact}


def _fact_texts(text: str) -> list[str]:
    """What a pinned block or a memory states, most telling first: the values of its
    `key: value` pairs, then replay.measures' key facts that are not a pair's key or a word
    opening a line (a label, not a name)."""
    pairs = slot_pairs(text)
    keys = {k for k, _ in pairs}
    out = [v for _, v in pairs]
    for fact in measures.key_facts(text):
        if fact in keys:
            continue
        if fact.isalpha() and not re.search(rf"[^\s*•-][^\S\n]*(?<!\w){re.escape(fact)}(?!\w)", text, re.I):
            continue
        out.append(fact)
    return list(dict.fromkeys(out))


_PAIR = re.compile(
    r"^(?:(?:the\s+)?(?:user'?s?|customer'?s?|client'?s?|my|their|his|her)\s+)?"
    r"([A-Za-z][A-Za-z0-9_-]*(?:\s+[A-Za-z0-9_-]+){0,3}?)\s*(?::|=|\s+is\s+|\s+are\s+)\s*(.+?)$",
    re.I,
)
_PAIR_ZH = re.compile(r"^(?:用户的?|客户的?)?([\u4e00-\u9fff]{1,8})\s*[:：=]\s*(.+?)$")
_NOT_SLOTS = frozenset(
    {"user", "customer", "client", "he", "she", "it", "they", "this", "that", "there", "i", "we", "you",
     "note", "notes", "source", "updated", "id", "memory", "summary"}
)
_PAIR_SPLIT = re.compile(r"\n|[;；。]|(?<=\D),\s*(?=[A-Za-z][\w ]{0,30}\s*[:=])|\.\s+(?=[A-Z])")


def slot_pairs(text: str) -> list[tuple[str, str]]:
    """The `key: value`, `key = value` and `key is value` pairs of a memory text (English, or
    Chinese with a colon), keys lower-cased, each key once."""
    out: dict[str, str] = {}
    for part in _PAIR_SPLIT.split(text):
        part = _BULLET.sub("", part).strip().rstrip(".!")
        m = _PAIR.match(part) or _PAIR_ZH.match(part)
        if m is None:
            continue
        key = re.sub(r"^(?:the|a|an|my|your|their)\s+", "", " ".join(m.group(1).lower().split()))
        value = m.group(2).strip().strip("\"'“”")
        if key in _NOT_SLOTS or not value or len(value) > 80 or len(value.split()) > 8:
            continue
        out.setdefault(key, value)
    return list(out.items())


def suggest_checks(
    *,
    blocks: Sequence[Mapping[str, Any]],
    validation: Sequence[Mapping[str, Any]],
    recall: Sequence[Mapping[str, Any]],
    output_text: str,
    output_tool_calls: Sequence[Mapping[str, Any]] = (),
) -> list[Suggestion]:
    """Checks proposed from one saved turn (its blocks, validation outcomes, recall rows and
    answer), deduplicated, at most MAX_SUGGESTIONS, in the order: recorded validations, the
    constraints block, pinned facts, injected memories. Facts are proposed only when the saved
    answer states them; a rule the saved answer breaks is proposed with that said in ``why``."""
    reference = Answer(output_text or "", [dict(c) for c in output_tool_calls])
    out: list[Suggestion] = []
    seen: set[str] = set()

    def add(raw: dict[str, Any], source: str, why: str, *, stated: bool = False) -> None:
        if len(out) >= MAX_SUGGESTIONS:
            return
        try:
            check = validate_check(raw)
        except CheckError:
            return
        key = check_key(check)
        if key in seen:
            return
        passed = evaluate(check, reference).passed
        if stated and passed is not True:
            return
        if passed is False:
            why = why.rstrip(". ") + " (the saved answer fails it)"
        seen.add(key)
        out.append(Suggestion(check, source, why))

    for row in validation:
        name = str(row.get("check") or row.get("code") or "")
        token = re.sub(r"[^a-z0-9]+", "_", name.lower())
        if "json" not in token:
            continue
        layer = row.get("layer") or "structure"
        if "schema" in token:
            add({"type": "constraint", "rule": "valid_json"}, "validation",
                f"the agent validates its answer against a JSON Schema ({name}, {layer} layer); the schema "
                "is not recorded, so this checks JSON syntax only: add the schema to check the fields")
        else:
            add({"type": "constraint", "rule": "valid_json"}, "validation",
                f"the agent checks its answer with {name} ({layer} layer)")

    known_tools = _tool_names(blocks)
    for block in blocks:
        if block.get("kind") != "constraints":
            continue
        for clause in _clauses(_block_text(block)):
            for raw in _constraint_checks(clause, known_tools):
                where = block.get("key") or "constraints"
                add(raw, "constraints", f"constraints block {where}: {_short(clause, 160)}")

    def add_facts(text: str, source: str, why: str) -> None:
        stated: list[str] = []
        for fact in _fact_texts(text):
            # "600" says nothing more once "600 EUR" is proposed.
            if len(stated) >= _FACTS_PER_SOURCE or any(_text_pattern(fact).search(s) for s in stated):
                continue
            raw = _fact_candidate(fact, reference.text)
            try:
                found = raw is not None and evaluate(validate_check(raw), reference).passed
            except CheckError:
                continue
            if raw is not None and found:
                stated.append(fact)
                add(raw, source, why, stated=True)

    for block in blocks:
        if block.get("pinned") and block.get("kind") not in ("system", "tools"):
            where = block.get("key") or block.get("kind")
            why = f"pinned block {where} states it, and so does the saved answer"
            add_facts(_block_text(block), "pinned", why)

    injected = [r for r in recall if r.get("injected") and isinstance(r.get("preview"), str)]
    slots: dict[str, dict[str, Any]] = {}
    origins: list[str] = []
    for r in injected:
        pairs = slot_pairs(r["preview"])
        if pairs:
            origins.append(f"memory {r.get('memory_id') or '?'}")
        for key, value in pairs:
            slots.setdefault(key, {"name": key, "value": value})
    for block in blocks:
        if block.get("kind") == "memory":
            pairs = slot_pairs(_block_text(block))
            if pairs:
                origins.append(f"block {block.get('key') or 'memory'}")
            for key, value in pairs:
                slots.setdefault(key, {"name": key, "value": value})
    if slots:
        chosen = list(slots.values())[:MAX_SUGGESTIONS]
        add({"type": "no_repeat_question", "slots": chosen}, "memory",
            f"the context gives {', '.join(s['name'] for s in chosen)} ({', '.join(origins)}); "
            "asking for them again is a repeat question")
    for r in injected:
        add_facts(r["preview"], "memory",
                  f"injected memory {r.get('memory_id') or '?'} states it, and so does the saved answer")
    return out
