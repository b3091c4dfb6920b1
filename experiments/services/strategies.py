"""Strategies: named, versioned lists of operations on a context (replay.ablation's operations
and the compression toolbox of replay.compression), applied to every item of a set."""

from __future__ import annotations

import copy
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from core.models import Project
from experiments.errors import Conflict, ExperimentError
from experiments.models import Strategy, StrategyVersion
from replay import ablation
from replay.errors import VariantError

MAX_OPERATIONS = 20
MAX_NAME = 100

# What a newcomer starts from (the demo runs the first two against "as saved").
PRESETS: dict[str, dict[str, Any]] = {
    "drop tool outputs": {
        "description": (
            "Tool results older than the last turn replaced by a one-line summary and a reference."
        ),
        "operations": [{"op": "drop_tool_output", "older_than": 1}],
    },
    "summarise history to 30%": {
        "description": "The history before the last turn rewritten by the model to 30% of its tokens.",
        "operations": [{"op": "summarize", "before_last_turns": 1, "ratio": 0.3}],
    },
    "keep the last 2 turns": {
        "description": "Only the last two turns of the history, verbatim.",
        "operations": [{"op": "keep_last_turns", "n": 2}],
    },
    "constraints after system": {
        "description": "The constraints block pinned right after the system prompt and tools.",
        "operations": [{"op": "pin_to_prefix", "key": "constraints"}],
    },
    "without memory": {
        "description": "The injected memory block removed.",
        "operations": [{"op": "remove", "key": "memory"}],
    },
}


def operations_validate(raw: Any) -> list[dict[str, Any]]:
    """The operations RAW as clean dicts, or ExperimentError naming the operation and the field."""
    if not isinstance(raw, list) or not raw:
        raise ExperimentError("operations: a non-empty list of operations")
    if len(raw) > MAX_OPERATIONS:
        raise ExperimentError(f"operations: at most {MAX_OPERATIONS}, got {len(raw)}")
    out: list[dict[str, Any]] = []
    for i, op in enumerate(raw):
        try:
            out.append(dict(ablation.validate_operation(op)))
        except VariantError as exc:
            raise ExperimentError(f"operations[{i}]: {exc.detail}") from exc
    return out


def strategy_create(*, project: Project, name: Any, operations: Any, description: str = "") -> Strategy:
    """A new strategy NAME with its first version holding OPERATIONS."""
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME or "\x00" in name:
        raise ExperimentError(f"name: required, at most {MAX_NAME} characters")
    ops = operations_validate(operations)
    try:
        with transaction.atomic():
            strategy = Strategy.objects.create(
                project=project, name=name.strip(), description=str(description or "")[:5000]
            )
            StrategyVersion.objects.create(strategy=strategy, number=1, operations=ops)
    except IntegrityError as exc:
        raise Conflict(f"a strategy named {name.strip()!r} exists already in this project") from exc
    return strategy


def strategy_update(
    *, strategy: Strategy, operations: Any, description: str | None = None
) -> StrategyVersion:
    """A new version of STRATEGY with OPERATIONS (earlier experiments keep theirs)."""
    ops = operations_validate(operations)
    with transaction.atomic():
        Strategy.objects.select_for_update().get(pk=strategy.pk)
        latest = strategy.versions.order_by("-number").first()
        if latest is not None and latest.operations == ops:
            if description is not None:
                strategy.description = description[:5000]
                strategy.save(update_fields=["description"])
            return latest
        number = (strategy.versions.aggregate(m=Max("number"))["m"] or 0) + 1
        version = StrategyVersion.objects.create(strategy=strategy, number=number, operations=ops)
        if description is not None:
            strategy.description = description[:5000]
            strategy.save(update_fields=["description"])
    return version


def strategy_latest(strategy: Strategy) -> StrategyVersion:
    v = strategy.versions.order_by("-number").first()
    assert v is not None  # created with its first version
    return v


def preset_ensure(*, project: Project, name: str) -> Strategy:
    """The project's strategy NAME, created from PRESETS when it does not exist yet."""
    found = Strategy.objects.filter(project=project, name=name).first()
    if found is not None:
        return found
    preset = PRESETS[name]
    try:
        return strategy_create(
            project=project,
            name=name,
            operations=copy.deepcopy(preset["operations"]),
            description=preset["description"],
        )
    except Conflict:
        return Strategy.objects.get(project=project, name=name)


def sweep_operations(operations: list[dict[str, Any]], parameter: str, value: Any) -> list[dict[str, Any]]:
    """OPERATIONS with PARAMETER ("<operation index>.<field>", e.g. "0.ratio") set to VALUE."""
    index, sep, fieldname = parameter.partition(".")
    if not sep or not index.isdigit() or not fieldname:
        raise ExperimentError("parameter: '<operation index>.<field>', e.g. 0.ratio")
    i = int(index)
    if i >= len(operations):
        raise ExperimentError(f"parameter: the strategy has no operation {i}")
    ops = copy.deepcopy(operations)
    ops[i][fieldname] = value
    return operations_validate(ops)
