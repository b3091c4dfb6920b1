"""Ninja schemas of the experiments API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema
from pydantic import ConfigDict, Field

from core.params import FiniteFloat, Id, Instant
from core.schemas import ObjectIn
from ctxobs.schema import json_schema as snapshot_json_schema

CHECKS_DOC = (
    "Checks (probes) evaluated on every answer: `fact` (match text|regex|number|json_path), "
    "`constraint` (rule valid_json|json_schema|not_contains|max_chars|max_tokens|calls_tool|no_tool), "
    "`no_repeat_question` (slots with their values), `consistent` (measure edit|task|semantic). "
    "docs/experiments.md lists every field."
)


class SetFilter(ObjectIn):
    """Turns to take: every condition given must hold. `sample` picks N of them at random."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = Field(None, max_length=256)
    model: str | None = Field(None, max_length=256)
    tag: str | None = Field(
        None, max_length=600, pattern=r"^[^=]+=", description="name=value, e.g. assembly_version=v14"
    )
    failed_validation: bool | None = None
    has_alerts: bool | None = None
    since: Instant | None = None
    until: Instant | None = None
    sample: int | None = Field(None, ge=1, le=2000)
    seed: int | None = Field(None, ge=0, lt=2**31)


# An item in the wire form (what POST /snapshots takes) with its own checks.
ITEM_SCHEMA: dict[str, Any] = {
    **snapshot_json_schema(),
    "properties": {
        **snapshot_json_schema().get("properties", {}),
        "checks": {"type": "array", "maxItems": 50, "items": {"type": "object"}, "description": CHECKS_DOC},
    },
}
# At least one way to name the items; given several, the set holds them all.
ONE_SOURCE: dict[str, Any] = {
    "anyOf": [{"required": ["snapshot_ids"]}, {"required": ["filter"]}, {"required": ["items"]}],
}


class SetIn(Schema):
    """A new evaluation set: its items from stored turns (`snapshot_ids`), from a `filter`, or
    given in the wire form (`items`, each may carry `checks`); given several, it holds them all.
    Items refused by the wire rules are listed in `rejected`; the others are kept."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=ONE_SOURCE)

    name: str = Field(..., min_length=1, max_length=100, pattern=r"^[^\x00]*\S[^\x00]*$")
    description: str = Field("", max_length=5000)
    checks: list[dict[str, Any]] = Field(default_factory=list, description="set-level: " + CHECKS_DOC)
    snapshot_ids: list[str] = Field(default_factory=list, min_length=1, max_length=2000)
    filter: SetFilter = Field(default_factory=lambda: SetFilter.model_validate({}))
    items: list[Any] = Field(
        default_factory=list, min_length=1, max_length=2000, json_schema_extra={"items": ITEM_SCHEMA}
    )


class ItemsIn(Schema):
    """Items to add to a set (a new version), named as SetIn names them."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=ONE_SOURCE)

    snapshot_ids: list[str] = Field(default_factory=list, min_length=1, max_length=2000)
    filter: SetFilter = Field(default_factory=lambda: SetFilter.model_validate({}))
    items: list[Any] = Field(
        default_factory=list, min_length=1, max_length=2000, json_schema_extra={"items": ITEM_SCHEMA}
    )


class RemoveIn(Schema):
    model_config = ConfigDict(extra="forbid")

    item_ids: list[Id] = Field(..., min_length=1, max_length=2000)


class ChecksIn(Schema):
    model_config = ConfigDict(extra="forbid")

    checks: list[dict[str, Any]] = Field(..., description=CHECKS_DOC, max_length=50)


class ItemChecksIn(Schema):
    model_config = ConfigDict(extra="forbid")

    checks: list[dict[str, Any]] | None = Field(None, description=CHECKS_DOC, max_length=50)
    confirm: list[int] = Field(
        default_factory=list, description="indexes of suggestions to confirm", max_length=50
    )


class ItemOut(Schema):
    id: int
    position: int
    snapshot_id: str | None
    session_id: str
    turn: int | None
    agent: str
    source: str
    checks: list[dict[str, Any]]
    suggestions: list[dict[str, Any]]


class VersionOut(Schema):
    number: int
    note: str
    n_items: int
    checks: list[dict[str, Any]]
    created_at: datetime
    items: list[ItemOut] | None = None


class SetOut(Schema):
    id: int
    name: str
    description: str
    latest_version: int
    versions: list[VersionOut]
    rejected: list[dict[str, Any]] = Field(
        default_factory=list, description="items refused, with field-level reasons"
    )
    url: str


class StrategyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=100)
    description: str = Field("", max_length=5000)
    operations: list[dict[str, Any]] = Field(
        ...,
        min_length=1,
        max_length=20,
        description="operations applied in order: remove, move, truncate, replace, keep_only, "
        "keep_sentences, drop_tool_output, summarize, trim_json, keep_last_turns, top_k, pin_to_prefix "
        "(docs/experiments.md)",
    )


class StrategyUpdateIn(Schema):
    model_config = ConfigDict(extra="forbid")

    operations: list[dict[str, Any]] = Field(..., min_length=1, max_length=20)
    description: str | None = Field(None, max_length=5000)


class StrategyOut(Schema):
    id: int
    name: str
    description: str
    version: int
    operations: list[dict[str, Any]]


class ExperimentIn(Schema):
    """Run a strategy (none: the control, "as saved") over a set version on an endpoint."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(..., min_length=1, max_length=100, description="the set's name or id")
    version: int | None = Field(None, ge=1, description="default: the latest")
    strategy: str | None = Field(
        None, max_length=100, description="the strategy's name or id; none: as saved"
    )
    endpoint_id: Id | None = None
    samples: int = Field(3, ge=1, le=10)
    temperature: FiniteFloat | None = Field(None, ge=0, le=2)


class SweepIn(Schema):
    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(..., min_length=1, max_length=100)
    version: int | None = Field(None, ge=1)
    strategy: str = Field(..., min_length=1, max_length=100)
    parameter: str = Field(
        ..., min_length=3, max_length=200, description="<operation index>.<field>, e.g. 0.ratio"
    )
    values: list[Any] = Field(..., min_length=2, max_length=12)
    endpoint_id: Id | None = None
    samples: int = Field(3, ge=1, le=10)


class ExperimentOut(Schema):
    id: int
    title: str
    status: str
    reason: str
    dataset: str
    version: int
    strategy: str
    endpoint: str
    samples: int
    n_items: int
    n_not_applicable: int
    progress: dict[str, Any]
    vs_control: dict[str, Any] | None = None
    figures: list[dict[str, Any]] = Field(
        default_factory=list,
        description="this experiment's own arm: each metric's mean with its 95% interval",
    )
    created_at: datetime
    finished_at: datetime | None
    url: str


class CompareOut(Schema):
    set: str
    version: int
    base: int
    rows: list[dict[str, Any]]
    url: str
