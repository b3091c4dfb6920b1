"""JSON Schema of a wire snapshot, generated from the typed structures of `ctxobs.wire`.

The ingest API publishes it in its OpenAPI document and `docs/snapshot.schema.json` ships it;
`python -m ctxobs.schema > docs/snapshot.schema.json` writes that file again after a change of
the contract. An optional field is typed `[type, "null"]`: null stands for an absent field.
Three rules cannot be stated in JSON Schema (`ctxobs.wire.RULES_BEYOND_SCHEMA`): the validator
alone checks them (the nesting bound is stated in the schema's description and as `x-ctxobs-max-depth`).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
import types
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin, is_typeddict

from ctxobs.wire import BLOCK_ONE_OF, LIMITS, WIRE_VERSION, Spec, WireBlock, WireSnapshot

JSONSchema = dict[str, Any]

# Identifiers hold no U+0000; content may (it is stored escaped).
NO_NUL = "^[^\\u0000]*$"

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                            type(None): "null"}
_SPEC_KEYWORDS = (
    ("min_chars", "minLength"), ("max_chars", "maxLength"), ("minimum", "minimum"), ("maximum", "maximum"),
    ("min_items", "minItems"), ("max_items", "maxItems"), ("max_props", "maxProperties"),
    ("pattern", "pattern"), ("format", "format"), ("doc", "description"),
)
# What a structure must hold beyond its fields' own schemas: which of them go together.
_ONE_OF: dict[Any, list[JSONSchema]] = {WireBlock: BLOCK_ONE_OF}


def _unwrap(tp: Any) -> tuple[Any, Spec | None]:
    """The bare type of a field and its Spec, without Required/NotRequired/Annotated."""
    spec: Spec | None = None
    while True:
        origin = get_origin(tp)
        if origin in (Required, NotRequired):
            tp = get_args(tp)[0]
        elif origin is Annotated:
            tp, *meta = get_args(tp)
            spec = next((m for m in meta if isinstance(m, Spec)), spec)
        else:
            return tp, spec


def _alternatives(tp: Any) -> list[Any]:
    if get_origin(tp) in (Union, types.UnionType):
        return [alt for arg in get_args(tp) for alt in _alternatives(_unwrap(arg)[0])]
    return [tp]


def _object(td: Any) -> JSONSchema:
    out: JSONSchema = {"type": "object"}
    required = [k for k in td.__annotations__ if k in td.__required_keys__]
    if required:
        out["required"] = required
    out["properties"] = {k: field_schema(tp) for k, tp in td.__annotations__.items()}
    if td in _ONE_OF:
        out["oneOf"] = copy.deepcopy(_ONE_OF[td])
    return out


def field_schema(tp: Any) -> JSONSchema:
    """The JSON Schema of one annotated field type of the contract."""
    bare, spec = _unwrap(tp)
    alts = _alternatives(bare)
    literals = [a for a in alts if get_origin(a) is Literal]
    out: JSONSchema
    if literals:
        enum: list[Any] = [v for lit in literals for v in get_args(lit)]
        if type(None) in alts:
            enum.append(None)
        out = {"enum": enum}
    else:
        names: list[str] = []
        out = {}
        for a in alts:
            origin = get_origin(a) or a
            if is_typeddict(a):
                names.append("object")
                out.update({k: v for k, v in _object(a).items() if k != "type"})
            elif origin is list:
                names.append("array")
                (item,) = get_args(a) or (Any,)
                if item is not Any:
                    out["items"] = field_schema(item)
            elif origin is dict:
                names.append("object")
                args = get_args(a)
                if args and args[1] is not Any:
                    out["additionalProperties"] = field_schema(args[1])
            else:
                names.append(_SCALARS[a])
        if "integer" in names and "number" in names:
            names.remove("integer")  # an integer is a number
        out = {"type": names[0] if len(names) == 1 else names, **out}
    if spec is not None:
        for attr, keyword in _SPEC_KEYWORDS:
            value = getattr(spec, attr)
            if value is not None:
                out[keyword] = value
        if spec.plain and spec.pattern is None:
            out["pattern"] = NO_NUL
    return out


@functools.cache
def _snapshot_schema() -> JSONSchema:
    # JSON Schema has no keyword for nesting depth: the bound is stated in words and as an
    # extension keyword (which validators ignore), and the validator enforces it.
    return {
        "description": (
            f"One context snapshot. Arrays and objects nest at most max_depth={LIMITS.max_depth} levels "
            "in it, the snapshot itself being level 1 (params, message content and tool calls are free-form "
            "JSON): a deeper snapshot is rejected."
        ),
        "x-ctxobs-max-depth": LIMITS.max_depth,
        **_object(WireSnapshot),
    }


def json_schema() -> JSONSchema:
    """The JSON Schema of one snapshot on the wire (a fresh copy: callers may change it)."""
    return copy.deepcopy(_snapshot_schema())


def batch_json_schema(max_items: int) -> JSONSchema:
    """The JSON Schema of an ingest request body: {"snapshots": [at most MAX_ITEMS snapshots]}."""
    return {
        "type": "object",
        "description": (
            f"A batch of snapshots. The body's arrays and objects nest at most "
            f"max_body_depth={LIMITS.max_body_depth} levels: a deeper body is refused whole (400)."
        ),
        "x-ctxobs-max-depth": LIMITS.max_body_depth,
        "required": ["snapshots"],
        "properties": {"snapshots": {"type": "array", "maxItems": max_items, "items": json_schema()}},
    }


def schema_document() -> JSONSchema:
    """The schema as shipped in docs/snapshot.schema.json."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"ctxobs snapshot, wire version {WIRE_VERSION}",
        **json_schema(),
    }


def schema_text() -> str:
    return json.dumps(schema_document(), indent=2, ensure_ascii=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
