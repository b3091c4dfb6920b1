"""The wire contract, once: the JSON Schema generated from the typed structures of ctxobs.wire,
the request schema the API publishes, the shipped docs/snapshot.schema.json and the validator
all agree.

The agreement with the validator is probed field by field: every property of the schema, at every
depth, gets values of every JSON type, each enum member and a stranger, each limit and one past
it, no value and null. A JSON Schema implementation (jsonschema-rs, with format checks) gives the
schema's verdict on the whole snapshot, and validate_snapshot() must give the same one, blaming
the probed field when it refuses. Only the two rules JSON Schema cannot state
(ctxobs.wire.RULES_BEYOND_SCHEMA) are left to the validator alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from ctxobs.hashing import block_chars
from ctxobs.schema import NO_NUL, batch_json_schema, json_schema, schema_text
from ctxobs.validate import validate_snapshot
from ctxobs.wire import (
    LIMITS,
    RULES_BEYOND_SCHEMA,
    Block,
    CompressionEvent,
    FieldError,
    Model,
    Output,
    RecallItem,
    Snapshot,
    Usage,
    ValidationOutcome,
    deeper_than,
    limits_doc,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json_schema()
SCHEMA_VERDICT = jsonschema_rs.Draft202012Validator(SCHEMA, validate_formats=True)

Path_ = tuple[str | int, ...]


def every_field_snapshot() -> dict[str, Any]:
    """A valid snapshot with every optional field of every structure present."""
    return {
        "snapshot_id": "5f0c6a53-8a61-4d7c-9a7e-3f2b3c1d9e01",
        "session_id": "s-1",
        "turn": 3,
        "agent": "travel-bot",
        "ts": "2026-12-03T08:15:03.120Z",
        "model": {"name": "gpt-4o", "context_window": 128_000, "reserve_tokens": 1_000,
                  "encoding": "o200k_base", "counts": "exact"},
        "params": {"temperature": 0},
        "blocks": [{
            "key": "history", "kind": "history", "tokens": 40, "estimated": False, "pinned": True,
            "compressed": False, "refs": ["r1"],
            "messages": [{"role": "assistant", "content": "hi", "name": "bot", "tool_call_id": "c0",
                          "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "f", "arguments": "{}"}}]}],
        }],
        "compression": [{"strategy": "truncate", "block": "history", "tokens_before": 90, "tokens_after": 40,
                         "watermark": 0.7, "items": ["c0"], "ref": "spool/c0", "source": "sdk",
                         "opaque": False}],
        "recall": [{"memory_id": "m-1", "channel": "vector", "score": 0.8, "rank": 1, "injected": True,
                    "stale": False, "conflicting": False, "block": "memory", "preview": "Guangzhou"}],
        "validation": [{"layer": "structure", "passed": False, "check": "json_schema", "code": "E_FIELD",
                        "message": "order_id missing", "attempt": 2}],
        "output": {"text": "ok", "tool_calls": [], "finish_reason": "stop", "latency_ms": 812.5,
                   "usage": {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125,
                             "cached_tokens": 0, "cache_write_tokens": 0}},
        "tags": {"env": "test", "attempt": 2, "canary": True},
        "retries": 1,
        "fallback_used": False,
    }


# A block holds its messages or, for content the project holds, its hash with a token count
# (ctxobs.wire.BLOCK_ONE_OF): the hash is probed on a snapshot whose block came by hash, and each of
# the two is required where the other is absent.
BY_HASH: set[Path_] = {("blocks", 0, "hash")}
EITHER: dict[Path_, Path_] = {("blocks", 0, "messages"): ("blocks", 0, "hash"),
                              ("blocks", 0, "hash"): ("blocks", 0, "messages")}


def by_hash_snapshot() -> dict[str, Any]:
    """The base snapshot with its block sent as its content address instead of its messages."""
    snap = every_field_snapshot()
    del snap["blocks"][0]["messages"]
    snap["blocks"][0]["hash"] = "0123456789abcdef" * 2
    return snap


def _base(path: Path_) -> dict[str, Any]:
    return by_hash_snapshot() if path in BY_HASH else every_field_snapshot()


def _fields(schema: dict[str, Any], path: Path_ = ()) -> Iterator[tuple[Path_, dict[str, Any], bool]]:
    """(instance path, schema, required) of every property, depth first."""
    for name, sub in schema.get("properties", {}).items():
        where = (*path, name)
        yield where, sub, name in schema.get("required", []) or where in EITHER
        if "properties" in sub:
            yield from _fields(sub, where)
        if "properties" in sub.get("items", {}):
            yield from _fields(sub["items"], (*where, 0))


FIELDS = list(_fields(SCHEMA))
_TYPE_SAMPLES: list[Any] = [None, True, 7, 1.5, "x", [], {}]


def _sample(schema: dict[str, Any], existing: Any) -> Any:
    """One valid element of an array or value of an object, for filling them up to a limit."""
    if existing is not None:
        return existing
    return "r" if schema.get("type") == "string" else "x"


def _probes(sub: dict[str, Any], current: Any) -> Iterator[tuple[str, Any]]:
    yield "valid", copy.deepcopy(current)
    yield from ((f"type-{type(v).__name__}", v) for v in _TYPE_SAMPLES)
    yield "whole-float", 7.0
    for member in sub.get("enum", []):
        yield f"enum-{member}", member
    if "enum" in sub:
        yield "enum-stranger", "not-a-member"
    if "minLength" in sub:
        yield "empty-string", ""
    if "maxLength" in sub:
        yield "longest", "a" * sub["maxLength"]
        yield "too-long", "a" * (sub["maxLength"] + 1)
    # An identifier (pattern) may not hold U+0000; content may.
    yield "nul", "a\x00b"
    for bound in ("minimum", "maximum"):
        if bound in sub:
            step = -1 if bound == "minimum" else 1
            yield bound, sub[bound]
            yield f"beyond-{bound}", sub[bound] + step
    if "format" in sub:
        yield "not-the-format", "2026-13-45 or so"
    if "maxItems" in sub or "minItems" in sub:
        item = _sample(sub.get("items", {}), current[0] if isinstance(current, list) and current else None)
        yield "no-items", []
        if "maxItems" in sub:
            yield "most-items", [copy.deepcopy(item) for _ in range(sub["maxItems"])]
            yield "too-many-items", [copy.deepcopy(item) for _ in range(sub["maxItems"] + 1)]
    if "items" in sub and sub["items"].get("type") == "string":
        yield "item-not-a-string", [1]
    if "maxProperties" in sub:
        yield "most-properties", {f"k{i}": "v" for i in range(sub["maxProperties"])}
        yield "too-many-properties", {f"k{i}": "v" for i in range(sub["maxProperties"] + 1)}
    if "additionalProperties" in sub:
        yield from ((f"value-{type(v).__name__}", {"k": v}) for v in ("v", 2, 2.5, True, None, [1], {}))


def _beyond_schema(snap: dict[str, Any]) -> bool:
    """Whether SNAP breaks one of RULES_BEYOND_SCHEMA (valid or not otherwise)."""
    model = snap.get("model")
    if isinstance(model, dict):
        window, reserve = model.get("context_window"), model.get("reserve_tokens")
        if (isinstance(window, int | float) and isinstance(reserve, int | float)
                and not isinstance(reserve, bool) and reserve >= window):
            return True
    if deeper_than(snap, LIMITS.max_depth):
        return True
    blocks = snap.get("blocks")
    if isinstance(blocks, list):
        for b in blocks:
            msgs = b.get("messages") if isinstance(b, dict) else None
            if (isinstance(msgs, list) and all(isinstance(m, dict) for m in msgs)
                    and block_chars(msgs) > LIMITS.max_chars_per_block):
                return True
    return False


def _put(snap: dict[str, Any], path: Path_, value: Any, *, delete: bool = False) -> None:
    parent: Any = snap
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def _get(snap: dict[str, Any], path: Path_) -> Any:
    value: Any = snap
    for step in path:
        value = value[step]
    return value


def _disagreements(path: Path_, cases: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], set[bool]]:
    wrong = []
    verdicts = set()
    for name, snap in cases:
        # Without either of a block's two forms of content, the block is refused for its messages.
        blamed = {path, EITHER[path]} if name == "absent" and path in EITHER else {path}
        by_schema = SCHEMA_VERDICT.is_valid(snap)
        beyond = _beyond_schema(snap)
        out, errors = validate_snapshot(snap)
        by_validator = out is not None
        verdicts.add(by_validator)
        if by_validator != (by_schema and not beyond):
            wrong.append(f"{name}: schema {'accepts' if by_schema else 'refuses'}, validator "
                         f"{'accepts' if by_validator else 'refuses'} ({errors[:2]})")
        elif not by_validator and not beyond and not any(
                tuple(e["loc"][2:2 + len(path)]) in blamed for e in errors):
            wrong.append(f"{name}: refused for other fields: {[e['loc'] for e in errors][:2]}")
    return wrong, verdicts


def _cases(
    base: dict[str, Any], path: Path_, sub: dict[str, Any]
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """BASE without the field at PATH, and the named probes of that field (the absent one first)."""
    absent = copy.deepcopy(base)
    _put(absent, path, None, delete=True)
    cases = [("absent", absent)]
    for name, value in _probes(sub, _get(base, path)):
        snap = copy.deepcopy(base)
        _put(snap, path, value)
        cases.append((name, snap))
    return absent, cases


def test_the_base_snapshot_fills_every_field_and_is_valid() -> None:
    for path, _, _ in FIELDS:
        _get(_base(path), path)  # KeyError names a field the base leaves out
    for base in (every_field_snapshot(), by_hash_snapshot()):
        assert SCHEMA_VERDICT.is_valid(base)
        assert validate_snapshot(base)[1] == []


@pytest.mark.parametrize(("path", "sub", "required"), FIELDS, ids=[".".join(map(str, p)) for p, *_ in FIELDS])
def test_schema_and_validator_judge_every_field_alike(
    path: Path_, sub: dict[str, Any], required: bool
) -> None:
    absent, cases = _cases(_base(path), path, sub)
    wrong, verdicts = _disagreements(path, cases)
    assert not wrong, "\n".join(wrong)
    # Each field is probed both ways: some values pass and some are refused.
    assert verdicts == {True, False}
    assert (validate_snapshot(absent)[0] is None) == required


@pytest.mark.parametrize("field", ["tokens", "estimated", "pinned", "compressed", "refs", "key", "kind"])
def test_schema_and_validator_judge_the_other_fields_of_a_block_by_hash_alike(field: str) -> None:
    path: Path_ = ("blocks", 0, field)
    sub = SCHEMA["properties"]["blocks"]["items"]["properties"][field]
    base = by_hash_snapshot()
    absent, cases = _cases(base, path, sub)
    wrong, verdicts = _disagreements(path, cases)
    assert not wrong, "\n".join(wrong)
    assert verdicts == {True, False}
    # A block by hash needs its token count; its messages would make it two blocks in one.
    assert (validate_snapshot(absent)[0] is None) == (field in ("tokens", "key"))
    both = copy.deepcopy(base)
    both["blocks"][0]["messages"] = []
    assert not SCHEMA_VERDICT.is_valid(both)
    assert [e["loc"] for e in validate_snapshot(both)[1]] == [["snapshots", 0, "blocks", 0, "hash"]]


def test_identifiers_and_only_identifiers_refuse_nul() -> None:
    plain = {".".join(map(str, p)) for p, sub, _ in FIELDS if sub.get("pattern") == NO_NUL}
    assert {"session_id", "agent", "model.name", "model.encoding", "blocks.0.key", "compression.0.strategy",
            "compression.0.block", "recall.0.memory_id", "recall.0.block", "validation.0.check",
            "validation.0.code"} == plain


def test_the_rules_beyond_the_schema_are_the_validators_alone() -> None:
    assert len(RULES_BEYOND_SCHEMA) == 3
    reserve = every_field_snapshot()
    reserve["model"]["reserve_tokens"] = reserve["model"]["context_window"]
    big = every_field_snapshot()
    big["blocks"][0]["messages"] = [{"role": "user", "content": "a" * (LIMITS.max_chars_per_block + 1)}]
    deep = every_field_snapshot()
    nested: Any = {}
    for _ in range(LIMITS.max_depth - 1):  # params is level 2: one level too many
        nested = {"k": nested}
    deep["params"] = nested
    assert SCHEMA["x-ctxobs-max-depth"] == LIMITS.max_depth
    for snap, field in ((reserve, ["model", "reserve_tokens"]), (big, ["blocks", 0, "messages"]),
                        (deep, ["params"])):
        assert SCHEMA_VERDICT.is_valid(snap)
        out, errors = validate_snapshot(snap)
        assert out is None
        assert [e["loc"] for e in errors] == [["snapshots", 0, *field]]


def _keys(td: Any) -> set[str]:
    return set(td.__annotations__)


def test_the_normalised_snapshot_has_the_fields_its_types_declare() -> None:
    out, errors = validate_snapshot(every_field_snapshot())
    assert errors == [] and out is not None
    assert set(out) == _keys(Snapshot)
    assert set(out["model"]) == _keys(Model)
    assert set(out["blocks"][0]) == _keys(Block)
    assert set(out["compression"][0]) == _keys(CompressionEvent)
    assert set(out["recall"][0]) == _keys(RecallItem)
    assert set(out["validation"][0]) == _keys(ValidationOutcome)
    assert out["output"] is not None
    assert set(out["output"]) == _keys(Output)
    assert set(out["output"]["usage"]) == _keys(Usage)
    # The wire and normalised forms name their fields alike; a block adds what validation measured.
    assert set(SCHEMA["properties"]) == _keys(Snapshot)
    assert set(SCHEMA["properties"]["blocks"]["items"]["properties"]) | {"chars", "verbatim"} == _keys(Block)


def test_field_errors_have_the_shape_the_api_documents() -> None:
    snap = every_field_snapshot()
    snap["turn"] = -1
    _, errors = validate_snapshot(snap, 4)
    assert [set(e) for e in errors] == [_keys(FieldError)]
    assert errors[0]["loc"] == ["snapshots", 4, "turn"]
    from ingest.schemas import FieldError as FieldErrorSchema

    assert set(FieldErrorSchema.model_fields) == _keys(FieldError)


def test_the_shipped_schema_file_is_the_generated_one() -> None:
    shipped = (ROOT / "docs" / "snapshot.schema.json").read_text()
    # After a change of the contract: python -m ctxobs.schema > docs/snapshot.schema.json
    assert shipped == schema_text()
    doc = json.loads(shipped)
    assert {k: v for k, v in doc.items() if k not in ("$schema", "title")} == SCHEMA


@pytest.mark.django_db
def test_the_api_publishes_the_generated_schema_and_limits(client: Any) -> None:
    r = client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    post = r.json()["paths"]["/api/v1/snapshots"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == batch_json_schema(
        LIMITS.max_items_per_batch)
    assert post["requestBody"]["content"]["application/json"]["schema"]["properties"]["snapshots"][
        "items"] == SCHEMA
    assert post["x-ctxobs-limits"] == limits_doc()
    errors = r.json()["components"]["schemas"]["FieldError"]
    assert set(errors["properties"]) == _keys(FieldError)
    assert set(errors["required"]) == _keys(FieldError)
