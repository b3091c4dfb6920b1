"""Model prices, in one place: a default table for common models, merged with the project's own
table (`Project.price_table`, edited in the project settings). ORM-free.

Prices are in US dollars per million tokens: `input` (uncached prompt), `cached_input` (a prompt
cache read), `cache_write` (a 5-minute prompt cache write; a 1-hour write costs twice `input`)
and `output`. A model name takes the price of the longest name in the table that it starts
with, so "gpt-4o-2024-08-06" is priced as "gpt-4o" and "gpt-4o-mini-2024-07-18" as "gpt-4o-mini".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")
MAX_PRICE = 100_000.0  # per million tokens; far above any real price, below float trouble
MAX_MODELS = 500
MAX_NAME_CHARS = 200


@dataclass(frozen=True, slots=True)
class Price:
    input: float
    cached_input: float
    cache_write: float
    output: float

    def as_dict(self) -> dict[str, float]:
        return {
            "input": self.input,
            "cached_input": self.cached_input,
            "cache_write": self.cache_write,
            "output": self.output,
        }


def _openai(inp: float, cached: float, out: float) -> Price:
    # OpenAI does not charge for writing its automatic cache.
    return Price(inp, cached, inp, out)


def _anthropic(inp: float, out: float) -> Price:
    # Anthropic: cache reads at 0.1x, 5-minute cache writes at 1.25x the input price.
    return Price(inp, round(inp * 0.1, 6), round(inp * 1.25, 6), out)


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": _openai(2.50, 1.25, 10.00),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "gpt-4.1": _openai(2.00, 0.50, 8.00),
    "gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "o3": _openai(2.00, 0.50, 8.00),
    "o3-mini": _openai(1.10, 0.55, 4.40),
    "o4-mini": _openai(1.10, 0.275, 4.40),
    "gpt-5": _openai(1.25, 0.125, 10.00),
    "gpt-5-mini": _openai(0.25, 0.025, 2.00),
    "gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "claude-3-5-sonnet": _anthropic(3.00, 15.00),
    "claude-3.5-sonnet": _anthropic(3.00, 15.00),
    "claude-3-7-sonnet": _anthropic(3.00, 15.00),
    "claude-3.7-sonnet": _anthropic(3.00, 15.00),
    "claude-sonnet-4": _anthropic(3.00, 15.00),
    "claude-3-5-haiku": _anthropic(0.80, 4.00),
    "claude-3.5-haiku": _anthropic(0.80, 4.00),
    "claude-3-haiku": _anthropic(0.25, 1.25),
    "claude-haiku-4": _anthropic(1.00, 5.00),
    "claude-3-opus": _anthropic(15.00, 75.00),
    "claude-opus-4": _anthropic(15.00, 75.00),
    "claude-opus-4-5": _anthropic(5.00, 25.00),
}


def model_key(name: str) -> str:
    # "openai/gpt-4o" and "GPT-4o" are priced as "gpt-4o".
    name = name.strip().lower()
    return name.rsplit("/", 1)[-1]


def price_table(project_table: Mapping[str, Any] | None) -> dict[str, Price]:
    """The default table with the project's entries over it (a valid project table: see
    `price_table_clean`; a field a project entry leaves out comes from the default price of
    that name, or from its own input price)."""
    out = dict(DEFAULT_PRICES)
    for name, entry in (project_table or {}).items():
        if not isinstance(entry, Mapping):
            continue
        key = model_key(str(name))
        base = out.get(key)
        try:
            inp = float(entry.get("input", base.input if base else 0.0))
            cached = float(entry.get("cached_input", base.cached_input if base else inp))
            write = float(entry.get("cache_write", base.cache_write if base else inp))
            outp = float(entry.get("output", base.output if base else 0.0))
        except (TypeError, ValueError):
            continue
        out[key] = Price(inp, cached, write, outp)
    return out


def price_for(model: str, table: Mapping[str, Price]) -> Price | None:
    """The price of MODEL in TABLE by longest prefix; None when no name in TABLE is a prefix."""
    name = model_key(model)
    best: str | None = None
    for key in table:
        if name.startswith(key) and (best is None or len(key) > len(best)):
            best = key
    return table[best] if best is not None else None


def price_table_clean(raw: Any) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Check a project's price table as a user sent it: (the clean table, {field: error}).
    The table maps model names to {input, cached_input, cache_write, output} in dollars per
    million tokens; `input` is required, each other field optional, every price a number
    from 0 to MAX_PRICE. Error fields are "<model>" or "<model>.<field>"."""
    errors: dict[str, str] = {}
    if not isinstance(raw, Mapping):
        return {}, {"price_table": 'must be a JSON object: {"model name": {"input": 2.5, ...}}'}
    if len(raw) > MAX_MODELS:
        return {}, {"price_table": f"at most {MAX_MODELS} models"}
    clean: dict[str, dict[str, float]] = {}
    for name, entry in raw.items():
        label = str(name)
        key = model_key(label)
        if not key or len(key) > MAX_NAME_CHARS or "\x00" in key:
            errors[label or "price_table"] = f"a model name of 1 to {MAX_NAME_CHARS} characters"
            continue
        if not isinstance(entry, Mapping):
            errors[label] = 'must be an object: {"input": 2.5, "cached_input": 1.25, "output": 10}'
            continue
        unknown = sorted(set(map(str, entry)) - set(PRICE_FIELDS))
        if unknown:
            errors[f"{label}.{unknown[0]}"] = f"unknown field; known: {', '.join(PRICE_FIELDS)}"
            continue
        if "input" not in entry:
            errors[f"{label}.input"] = "required: the price of an uncached prompt token"
            continue
        row: dict[str, float] = {}
        for field in PRICE_FIELDS:
            if field not in entry:
                continue
            value = entry[field]
            if isinstance(value, bool) or not isinstance(value, int | float):
                errors[f"{label}.{field}"] = "must be a number (dollars per million tokens)"
                continue
            num = float(value)
            if not math.isfinite(num) or num < 0 or num > MAX_PRICE:
                errors[f"{label}.{field}"] = f"must be between 0 and {MAX_PRICE:g}"
                continue
            row[field] = num
        if key in clean:
            errors[label] = f"the same model as another entry ({key})"
            continue
        clean[key] = row
    return (clean if not errors else {}), errors
