"""experiments.checks: definitions validated into their normal form, every type and rule passing
and failing with its evidence, repeat questions, consistency against the noise floor, checks
proposed from a saved turn, and the caches that keep evaluation fast. No database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxobs import tokens
from experiments import checks
from experiments.checks import Answer, CheckContext, CheckError, evaluate, validate_check

TRIP = (
    "Great news: flights to Guangzhou from May 1 to May 5 fit your budget of 600 EUR. The cheapest "
    "return fare is 1,200 CNY with China Southern, and the hotel near Tianhe costs 3.5% less if you "
    "book today. The temperature will be around -2 degrees at night in the mountains."
)
ORDER_JSON = '{"order": {"id": "A-17", "items": [{"sku": "KB-2", "qty": 2}], "paid": true}, "total": 59.9}'
FENCED = "Here is the order:\n```json\n" + ORDER_JSON + "\n```\nAnything else?"


def call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": args}}


def run(
    raw: dict[str, Any],
    text: str = TRIP,
    tool_calls: list[dict[str, Any]] | None = None,
    context: CheckContext | None = None,
) -> checks.CheckResult:
    return evaluate(validate_check(raw), Answer(text, tool_calls or []), context)


def spanned(text: str, result: checks.CheckResult) -> str | None:
    return None if result.span is None else text[result.span[0] : result.span[1]]


# --- facts ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "text", "passed", "evidence", "span_text"),
    [
        pytest.param(
            {"type": "fact", "value": "guangzhou"},
            TRIP,
            True,
            'states "guangzhou"',
            "Guangzhou",
            id="text-case-insensitive",
        ),
        pytest.param(
            {"type": "fact", "value": "China   southern"},
            TRIP.replace("China Southern", "China\n Southern"),
            True,
            "states",
            "China\n Southern",
            id="text-whitespace-insensitive",
        ),
        pytest.param(
            {"type": "fact", "value": "Shenzhen"},
            TRIP,
            False,
            'does not state "Shenzhen"',
            None,
            id="text-missing",
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": r"May \d+ to May \d+"},
            TRIP,
            True,
            "states /May",
            "May 1 to May 5",
            id="regex-matches",
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": "china southern"},
            TRIP,
            False,
            "does not state /china southern/",
            None,
            id="regex-is-case-sensitive-by-default",
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": "china southern", "flags": "i"},
            TRIP,
            True,
            "states",
            "China Southern",
            id="regex-flag-i",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": 1200},
            TRIP,
            True,
            "states 1,200",
            "1,200",
            id="number-thousands-separator",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": 600},
            TRIP,
            True,
            "states 600",
            "600",
            id="number-plain",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": 3.5},
            TRIP,
            True,
            "states 3.5",
            "3.5",
            id="number-decimal",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": -2},
            TRIP,
            True,
            "states -2",
            "-2",
            id="number-negative",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": 590, "tolerance": 10},
            TRIP,
            True,
            "states 600",
            "600",
            id="number-within-tolerance",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": 580, "tolerance": 10},
            TRIP,
            False,
            "no number within ± 10 equal to 580 (found: 1, 5, 600, 1,200",
            None,
            id="number-outside-tolerance",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": 200},
            TRIP,
            False,
            "no number",
            None,
            id="number-part-of-a-grouped-number-does-not-count",
        ),
        pytest.param(
            {"type": "fact", "path": "$.order.items[0].sku", "value": "KB-2"},
            ORDER_JSON,
            True,
            "$.order.items[0].sku = KB-2",
            ORDER_JSON,
            id="json-path-equal",
        ),
        pytest.param(
            {"type": "fact", "path": "$['order'][\"paid\"]", "value": True},
            FENCED,
            True,
            "= true",
            ORDER_JSON,
            id="json-path-in-fenced-block-bracket-names",
        ),
        pytest.param(
            {"type": "fact", "path": "$.order.paid", "value": 1},
            ORDER_JSON,
            False,
            "$.order.paid = true, expected 1",
            ORDER_JSON,
            id="json-path-true-is-not-1",
        ),
        pytest.param(
            {"type": "fact", "path": "$.total", "value": 59.9},
            ORDER_JSON,
            True,
            "$.total = 59.9",
            ORDER_JSON,
            id="json-path-number",
        ),
        pytest.param(
            {"type": "fact", "path": "$.order.items[3].sku", "value": "KB-2"},
            ORDER_JSON,
            False,
            "nothing at $.order.items[3]",
            ORDER_JSON,
            id="json-path-missing-index",
        ),
        pytest.param(
            {"type": "fact", "path": "$.order.id", "value": "A-17"},
            TRIP,
            False,
            "no JSON to look up $.order.id in: not JSON",
            "G",
            id="json-path-prose-answer",
        ),
    ],
)
def test_fact_checks_pass_or_fail_with_their_evidence(
    raw: dict[str, Any], text: str, passed: bool, evidence: str, span_text: str | None
) -> None:
    result = run(raw, text)
    assert result.kind == "fact"
    assert result.passed is passed, result.evidence
    assert evidence in result.evidence
    assert spanned(text, result) == span_text


# --- constraints ---------------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "required": ["order", "total"],
    "properties": {
        "total": {"type": "number", "minimum": 0},
        "order": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
    },
}
SEARCH = call("search_flights", {"destination": "Guangzhou", "passengers": 2, "filters": {"direct": True}})


@pytest.mark.parametrize(
    ("raw", "text", "calls", "passed", "evidence"),
    [
        pytest.param({"rule": "valid_json"}, ORDER_JSON, [], True, "valid JSON", id="valid-json"),
        pytest.param({"rule": "valid_json"}, FENCED, [], True, "valid JSON", id="valid-json-fenced"),
        pytest.param(
            {"rule": "valid_json"},
            '{"order": {"id": "A-17",}}',
            [],
            False,
            "not JSON: Expecting property name enclosed in double quotes at line 1 column 25",
            id="invalid-json-says-where",
        ),
        pytest.param(
            {"rule": "valid_json"},
            'Here:\n```json\n{"a": }\n```',
            [],
            False,
            "fenced block is not JSON",
            id="invalid-json-in-fence",
        ),
        pytest.param(
            {"rule": "valid_json"}, "   ", [], False, "the answer is empty", id="empty-answer-is-not-json"
        ),
        pytest.param(
            {"rule": "json_schema", "schema": SCHEMA},
            ORDER_JSON,
            [],
            True,
            "matches the schema",
            id="schema-valid",
        ),
        pytest.param(
            {"rule": "json_schema", "schema": SCHEMA},
            '{"order": {"id": 17}, "total": -1}',
            [],
            False,
            'at /order/id: 17 is not of type "string"',
            id="schema-errors-with-paths",
        ),
        pytest.param(
            {"rule": "json_schema", "schema": SCHEMA},
            '{"order": {}}',
            [],
            False,
            'at /: "total" is a required property',
            id="schema-required",
        ),
        pytest.param(
            {
                "rule": "json_schema",
                "schema": {"type": "object", "properties": {"date": {"type": "string", "format": "date"}}},
            },
            '{"date": "May 1"}',
            [],
            False,
            'is not a "date"',
            id="schema-formats-are-asserted",
        ),
        pytest.param(
            {"rule": "json_schema", "schema": SCHEMA}, TRIP, [], False, "not JSON", id="schema-prose"
        ),
        pytest.param(
            {"rule": "not_contains", "text": "expedia"},
            TRIP,
            [],
            True,
            'does not contain "expedia"',
            id="not-contains-absent",
        ),
        pytest.param(
            {"rule": "not_contains", "text": "CHINA southern"},
            TRIP,
            [],
            False,
            'contains "CHINA southern": …',
            id="not-contains-present-any-case",
        ),
        pytest.param(
            {"rule": "not_contains", "pattern": r"\b\d+(\.\d+)?%"},
            TRIP,
            [],
            False,
            "contains /",
            id="not-contains-pattern",
        ),
        pytest.param(
            {"rule": "max_chars", "limit": 1000},
            TRIP,
            [],
            True,
            f"{len(TRIP)} characters <= 1,000",
            id="max-chars-within",
        ),
        pytest.param(
            {"rule": "max_chars", "limit": 100},
            TRIP,
            [],
            False,
            f"{len(TRIP)} characters > 100",
            id="max-chars-over",
        ),
        pytest.param(
            {"rule": "max_tokens", "limit": 10},
            TRIP,
            [],
            False,
            "tokens (cl100k_base) > 10",
            id="max-tokens-over",
        ),
        pytest.param(
            {"rule": "max_tokens", "limit": 500},
            TRIP,
            [],
            True,
            "tokens (cl100k_base) <= 500",
            id="max-tokens-within",
        ),
        pytest.param(
            {"rule": "calls_tool", "tool": "search_flights"},
            "",
            [SEARCH],
            True,
            "calls search_flights with",
            id="calls-tool",
        ),
        pytest.param(
            {
                "rule": "calls_tool",
                "tool": "search_flights",
                "arguments": {"destination": "Guangzhou", "filters": {"direct": True}},
            },
            "",
            [SEARCH],
            True,
            '"destination": "Guangzhou"',
            id="calls-tool-arguments-subset",
        ),
        pytest.param(
            {"rule": "calls_tool", "tool": "search_flights", "arguments": {"destination": "Shenzhen"}},
            "",
            [SEARCH],
            False,
            'expected {"destination":"Shenzhen"}',
            id="calls-tool-wrong-arguments",
        ),
        pytest.param(
            {"rule": "calls_tool", "tool": "search_flights", "arguments": {"passengers": True}},
            "",
            [call("search_flights", {"passengers": 1})],
            False,
            "expected",
            id="calls-tool-true-is-not-1",
        ),
        pytest.param(
            {"rule": "calls_tool", "tool": "book_hotel"},
            "",
            [SEARCH],
            False,
            "no call of book_hotel (calls: search_flights)",
            id="calls-tool-missing",
        ),
        pytest.param(
            {"rule": "calls_tool", "tool": "search_flights"},
            "",
            [{"name": "search_flights", "arguments": {"destination": "Guangzhou"}}],
            True,
            "calls",
            id="calls-tool-legacy-shape",
        ),
        pytest.param(
            {"rule": "no_tool", "tool": "cancel_booking"},
            "",
            [SEARCH],
            True,
            "does not call cancel_booking",
            id="no-tool-absent",
        ),
        pytest.param(
            {"rule": "no_tool", "tool": "cancel_booking"},
            "",
            [SEARCH, call("cancel_booking", {"id": 7})],
            False,
            'calls cancel_booking with {"id": 7}',
            id="no-tool-called",
        ),
    ],
)
def test_constraint_rules_pass_or_fail_with_their_evidence(
    raw: dict[str, Any], text: str, calls: list[dict[str, Any]], passed: bool, evidence: str
) -> None:
    result = run({"type": "constraint", **raw}, text, calls)
    assert result.kind == "constraint"
    assert result.passed is passed, result.evidence
    assert evidence in result.evidence


def test_not_contains_spans_the_matched_text() -> None:
    result = run({"type": "constraint", "rule": "not_contains", "text": "cheapest return"})
    assert spanned(TRIP, result) == "cheapest return"


def test_max_chars_spans_the_text_over_the_limit() -> None:
    result = run({"type": "constraint", "rule": "max_chars", "limit": 100})
    assert result.span == (100, len(TRIP))


def test_max_tokens_counts_with_the_shared_counter() -> None:
    n = tokens.get_counter("cl100k_base").count_text(TRIP)
    assert run({"type": "constraint", "rule": "max_tokens", "limit": n}).passed is True
    assert run({"type": "constraint", "rule": "max_tokens", "limit": n - 1}).passed is False


def test_invalid_json_span_points_at_the_error() -> None:
    text = '  {"a": 1,, "b": 2}'
    result = run({"type": "constraint", "rule": "valid_json"}, text)
    assert result.span is not None and text[result.span[0]] == ","


# --- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        pytest.param([], "", "must be an object", id="not-an-object"),
        pytest.param({"value": "x"}, "type", "required", id="no-type"),
        pytest.param({"type": "probe"}, "type", "unknown type 'probe'", id="unknown-type"),
        pytest.param(
            {"type": "fact", "match": "fuzzy", "value": "x"}, "match", "unknown match", id="unknown-match"
        ),
        pytest.param({"type": "fact", "match": "text"}, "value", "required", id="text-without-value"),
        pytest.param({"type": "fact", "value": "   "}, "value", "non-empty", id="blank-value"),
        pytest.param({"type": "fact", "value": "x" * 2001}, "value", "at most 2000", id="value-too-long"),
        pytest.param(
            {"type": "fact", "value": "x", "tolerence": 1}, "tolerence", "unknown field", id="misspelt-field"
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": "(unclosed"},
            "pattern",
            "does not compile: missing ), unterminated subpattern",
            id="regex-does-not-compile",
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": "x" * 1001},
            "pattern",
            "at most 1000",
            id="regex-too-long",
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": "a*"},
            "pattern",
            "matches the empty string",
            id="regex-matching-everything",
        ),
        pytest.param(
            {"type": "fact", "match": "regex", "pattern": "a", "flags": "g"},
            "flags",
            "letters of",
            id="regex-unknown-flag",
        ),
        pytest.param(
            {"type": "fact", "match": "number", "value": "600"}, "value", "number", id="number-as-string"
        ),
        pytest.param({"type": "fact", "match": "number", "value": True}, "value", "number", id="number-bool"),
        pytest.param(
            {"type": "fact", "match": "number", "value": 600, "tolerance": -1},
            "tolerance",
            ">= 0",
            id="negative-tolerance",
        ),
        pytest.param(
            {"type": "fact", "match": "json_path", "path": "order.id", "value": 1},
            "path",
            "must start with $",
            id="path-without-root",
        ),
        pytest.param(
            {"type": "fact", "match": "json_path", "path": "$.items[*].sku", "value": 1},
            "path",
            "unsupported at character 8",
            id="path-wildcard",
        ),
        pytest.param(
            {"type": "fact", "match": "json_path", "path": "$.a"},
            "value",
            "required",
            id="path-without-value",
        ),
        pytest.param({"type": "constraint"}, "rule", "required", id="no-rule"),
        pytest.param(
            {"type": "constraint", "rule": "no_emoji"}, "rule", "unknown rule 'no_emoji'", id="unknown-rule"
        ),
        pytest.param(
            {"type": "constraint", "rule": "json_schema", "schema": {"type": "strnig"}},
            "schema",
            "not a valid JSON Schema at /type",
            id="schema-invalid",
        ),
        pytest.param(
            {"type": "constraint", "rule": "json_schema", "schema": {"$ref": "http://127.0.0.1:9/s.json"}},
            "schema",
            "Retrieval is disabled",
            id="schema-remote-ref-not-fetched",
        ),
        pytest.param(
            {"type": "constraint", "rule": "json_schema", "schema": "{}"},
            "schema",
            "must be an object",
            id="schema-as-string",
        ),
        pytest.param(
            {"type": "constraint", "rule": "json_schema", "schema": {"description": "x" * (64 * 1024)}},
            "schema",
            "too large",
            id="schema-too-large",
        ),
        pytest.param(
            {"type": "constraint", "rule": "not_contains"}, "text", "exactly one of", id="not-contains-empty"
        ),
        pytest.param(
            {"type": "constraint", "rule": "not_contains", "text": "a", "pattern": "b"},
            "text",
            "exactly one of",
            id="not-contains-both",
        ),
        pytest.param(
            {"type": "constraint", "rule": "not_contains", "pattern": "[a-"},
            "pattern",
            "does not compile",
            id="not-contains-bad-pattern",
        ),
        pytest.param(
            {"type": "constraint", "rule": "max_chars", "limit": -1}, "limit", ">= 0", id="negative-limit"
        ),
        pytest.param(
            {"type": "constraint", "rule": "max_tokens", "limit": 1.5},
            "limit",
            "integer",
            id="fractional-limit",
        ),
        pytest.param(
            {"type": "constraint", "rule": "calls_tool"}, "tool", "required", id="calls-tool-without-tool"
        ),
        pytest.param(
            {"type": "constraint", "rule": "calls_tool", "tool": "t", "arguments": [1]},
            "arguments",
            "must be an object",
            id="arguments-not-object",
        ),
        pytest.param({"type": "no_repeat_question", "slots": []}, "slots", "non-empty", id="no-slots"),
        pytest.param(
            {"type": "no_repeat_question", "slots": [{"name": f"s{i}", "value": "v"} for i in range(51)]},
            "slots",
            "at most 50",
            id="too-many-slots",
        ),
        pytest.param(
            {"type": "no_repeat_question", "slots": [{"name": "city", "value": "Paris"}, {"name": "budget"}]},
            "slots[1].value",
            "required",
            id="slot-without-value",
        ),
        pytest.param(
            {"type": "no_repeat_question", "slots": [{"name": "city", "value": "x", "alias": ["town"]}]},
            "slots[0].alias",
            "unknown field",
            id="slot-unknown-field",
        ),
        pytest.param(
            {"type": "no_repeat_question", "slots": [{"name": "city", "value": "x", "aliases": [""]}]},
            "slots[0].aliases[0]",
            "non-empty",
            id="slot-empty-alias",
        ),
        pytest.param(
            {
                "type": "no_repeat_question",
                "slots": [{"name": "city", "value": "x"}, {"name": "City", "value": "y"}],
            },
            "slots[1].name",
            "duplicate",
            id="duplicate-slot",
        ),
        pytest.param(
            {"type": "consistent", "measure": "bleu"}, "measure", "unknown measure", id="unknown-measure"
        ),
        pytest.param({"type": "consistent", "id": "has space"}, "id", "letters, digits", id="bad-id"),
        pytest.param({"type": "consistent", "name": ""}, "name", "non-empty", id="empty-name"),
    ],
)
def test_invalid_definitions_name_the_field_and_why(raw: Any, field: str, reason: str) -> None:
    with pytest.raises(CheckError) as err:
        validate_check(raw)
    assert err.value.field == field
    assert reason in err.value.reason
    assert isinstance(err.value, ValueError)


def test_list_errors_name_the_index() -> None:
    with pytest.raises(CheckError) as err:
        checks.validate_checks(
            [
                {"type": "consistent"},
                {"type": "constraint", "rule": "valid_json"},
                {"type": "fact", "match": "regex", "pattern": "("},
            ]
        )
    assert err.value.field == "checks[2].pattern"
    assert str(err.value).startswith("checks[2].pattern: does not compile")


def test_list_errors_name_the_slot_under_the_index() -> None:
    with pytest.raises(CheckError) as err:
        checks.validate_checks(
            [{"type": "no_repeat_question", "slots": [{"name": "a", "value": 1}, {"name": "b"}]}]
        )
    assert err.value.field == "checks[0].slots[1].value"


def test_a_list_may_not_hold_the_same_check_twice() -> None:
    with pytest.raises(CheckError) as err:
        checks.validate_checks(
            [{"type": "fact", "value": "Paris"}, {"type": "fact", "value": "Paris", "name": "b"}]
        )
    assert err.value.field == "checks[1].id"


def test_validate_checks_wants_a_list() -> None:
    with pytest.raises(CheckError) as err:
        checks.validate_checks({"type": "fact"})
    assert err.value.field == "checks"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {"type": "fact", "value": " Guangzhou "},
            {"type": "fact", "match": "text", "value": "Guangzhou", "name": "fact: Guangzhou"},
            id="fact-text-by-default",
        ),
        pytest.param(
            {"type": "fact", "value": 600},
            {"type": "fact", "match": "number", "value": 600, "tolerance": 0, "name": "fact: 600"},
            id="fact-number-inferred",
        ),
        pytest.param(
            {"type": "fact", "pattern": "PNR-\\w+", "flags": "ii"},
            {
                "type": "fact",
                "match": "regex",
                "pattern": "PNR-\\w+",
                "flags": "i",
                "name": "fact: /PNR-\\w+/",
            },
            id="fact-regex-inferred",
        ),
        pytest.param(
            {"type": "constraint", "rule": "calls_tool", "tool": "search", "name": "searches"},
            {
                "type": "constraint",
                "rule": "calls_tool",
                "tool": "search",
                "arguments": {},
                "name": "searches",
            },
            id="calls-tool-arguments-default",
        ),
        pytest.param(
            {"type": "consistent"},
            {"type": "consistent", "measure": "edit", "name": "consistent: edit"},
            id="consistent-edit-by-default",
        ),
    ],
)
def test_definitions_are_normalised(raw: dict[str, Any], expected: dict[str, Any]) -> None:
    check = validate_check(raw)
    assert {k: v for k, v in check.items() if k != "id"} == expected
    assert len(check["id"]) == 12


def test_the_default_id_is_stable_and_follows_the_definition() -> None:
    a = validate_check({"type": "fact", "match": "number", "value": 600})
    assert validate_check({"type": "fact", "value": 600.0, "name": "budget"})["id"] == a["id"]
    assert validate_check({"type": "fact", "match": "number", "value": 601})["id"] != a["id"]
    assert validate_check({"type": "fact", "value": 600, "id": "budget-600"})["id"] == "budget-600"


def test_a_normalised_check_validates_to_itself() -> None:
    for raw in (
        {"type": "fact", "value": "Guangzhou"},
        {"type": "constraint", "rule": "json_schema", "schema": SCHEMA},
        {"type": "no_repeat_question", "slots": [{"name": "budget", "value": 600}]},
    ):
        check = validate_check(raw)
        assert validate_check(json.loads(json.dumps(check))) == check


def test_slots_get_default_aliases_unless_given() -> None:
    check = validate_check(
        {
            "type": "no_repeat_question",
            "slots": [
                {"name": "destination", "value": "Guangzhou"},
                {"name": "budget", "value": 600, "aliases": []},
            ],
        }
    )
    destination, budget = check["slots"]
    assert {"city", "where", "目的地"} <= set(destination["aliases"])
    assert budget == {"name": "budget", "value": "600", "aliases": []}


@pytest.mark.parametrize(
    ("name", "alias"),
    [
        pytest.param("destination", "city", id="destination"),
        pytest.param("city", "destination", id="city"),
        pytest.param("budget", "price", id="budget"),
        pytest.param("max_price", "budget", id="compound-name-by-last-word"),
        pytest.param("travel_date", "when", id="date"),
        pytest.param("name", "full name", id="name"),
        pytest.param("email", "e-mail", id="email"),
        pytest.param("phone", "phone number", id="phone"),
        pytest.param("order_id", "order number", id="order"),
    ],
)
def test_common_slots_have_default_aliases(name: str, alias: str) -> None:
    assert alias in checks.default_aliases(name)


# --- repeat questions ----------------------------------------------------------------------
SLOTS = {
    "type": "no_repeat_question",
    "slots": [
        {"name": "destination", "value": "Guangzhou"},
        {"name": "budget", "value": "600 EUR"},
        {"name": "travel_date", "value": "May 1"},
    ],
}


@pytest.mark.parametrize(
    ("text", "passed", "evidence"),
    [
        pytest.param(
            "Thanks! What is your budget? I can then look for hotels.",
            False,
            "asks for budget, which the context gives (600 EUR): What is your budget?",
            id="asks-budget",
        ),
        pytest.param(
            "Your budget of 600 EUR covers four nights near Tianhe. Shall I book it?",
            True,
            "none for a slot the context gives",
            id="uses-budget",
        ),
        pytest.param(
            "Is 600 still your budget, or has it changed?", True, "none", id="confirms-with-the-value"
        ),
        pytest.param(
            "Which city would you like to fly to?", False, "asks for destination", id="asks-by-alias"
        ),
        pytest.param(
            "Please tell me your budget.", False, "asks for budget", id="request-without-question-mark"
        ),
        pytest.param("When would you like to travel?", False, "asks for travel_date", id="asks-when"),
        pytest.param(
            "When you land in Guangzhou, take line 3. Would you like a taxi instead?",
            True,
            "none",
            id="when-as-a-conjunction",
        ),
        pytest.param("Do you prefer a window or an aisle seat?", True, "none", id="asks-an-undeclared-slot"),
        pytest.param(
            "I found three flights to Guangzhou on May 1 within 600 EUR.",
            True,
            "asks no question",
            id="no-question",
        ),
        pytest.param(
            "好的，我来为您安排行程。请问您的预算是多少？", False, "asks for budget", id="chinese-question"
        ),
        pytest.param("您想去哪个城市呢", False, "asks for destination", id="chinese-without-question-mark"),
        pytest.param("广州的酒店很多，预算600 EUR足够了。", True, "asks no question", id="chinese-statement"),
    ],
)
def test_repeat_questions_are_caught_in_realistic_answers(text: str, passed: bool, evidence: str) -> None:
    result = run(SLOTS, text)
    assert result.kind == "no_repeat_question"
    assert result.passed is passed, result.evidence
    assert evidence in result.evidence


def test_a_repeat_question_is_spanned_and_counted() -> None:
    text = "Sure. Where would you like to go? And what is your budget?"
    result = run(SLOTS, text)
    assert spanned(text, result) == "Where would you like to go?"
    assert result.evidence.endswith("(+1 more)")


def test_slot_names_match_whole_words_only() -> None:
    check = {"type": "no_repeat_question", "slots": [{"name": "age", "value": "34", "aliases": []}]}
    assert run(check, "Which page should I open?").passed is True
    assert run(check, "What is your age?").passed is False


# --- consistency against the noise floor ---------------------------------------------------
REFERENCE = "Flights to Guangzhou on May 1 cost 1,200 CNY with China Southern."


@pytest.mark.parametrize(
    ("measure", "text", "threshold", "passed", "evidence"),
    [
        pytest.param(
            "edit", REFERENCE, 0.0, True, "edit distance 0.000 <= noise floor 0.000", id="edit-same"
        ),
        pytest.param(
            "edit", REFERENCE.replace("1,200", "1,300"), 0.1, True, "<= noise floor 0.100", id="edit-within"
        ),
        pytest.param(
            "edit", "I cannot help with flights.", 0.1, False, "> noise floor 0.100", id="edit-beyond"
        ),
        pytest.param(
            "task",
            "China Southern flies to Guangzhou on May 1 for 1,200 CNY.",
            0.0,
            True,
            "task distance 0.000",
            id="task-reworded-keeps-facts",
        ),
        pytest.param(
            "task", "Flights to Guangzhou cost 1,300 CNY.", 0.2, False, "task distance", id="task-lost-facts"
        ),
    ],
)
def test_consistency_is_judged_against_the_threshold(
    measure: str, text: str, threshold: float, passed: bool, evidence: str
) -> None:
    ctx = CheckContext(reference_text=REFERENCE, threshold=threshold)
    result = run({"type": "consistent", "measure": measure}, text, context=ctx)
    assert result.passed is passed, result.evidence
    assert evidence in result.evidence


def test_semantic_consistency_uses_the_embeddings() -> None:
    near = CheckContext(semantic_threshold=0.05, answer_embedding=[1.0, 0.1], reference_embedding=[1.0, 0.0])
    far = CheckContext(semantic_threshold=0.05, answer_embedding=[0.0, 1.0], reference_embedding=[1.0, 0.0])
    assert run({"type": "consistent", "measure": "semantic"}, context=near).passed is True
    assert run({"type": "consistent", "measure": "semantic"}, context=far).passed is False


@pytest.mark.parametrize(
    ("measure", "context", "reason"),
    [
        pytest.param("edit", None, "no noise floor", id="no-context"),
        pytest.param("edit", CheckContext(reference_text=REFERENCE), "no noise floor", id="no-threshold"),
        pytest.param("edit", CheckContext(threshold=0.1), "no reference answer", id="no-reference"),
        pytest.param(
            "task",
            CheckContext(reference_text="ok, done", threshold=0.1),
            "no tool calls or key facts",
            id="reference-without-facts",
        ),
        pytest.param(
            "semantic",
            CheckContext(reference_text=REFERENCE, threshold=0.1),
            "no embeddings",
            id="no-embeddings",
        ),
        pytest.param(
            "semantic",
            # The edit distance's floor is on another scale: the semantic measure needs its own.
            CheckContext(threshold=0.9, answer_embedding=[1.0, 0.0], reference_embedding=[1.0, 0.0]),
            "no noise floor",
            id="no-semantic-floor",
        ),
    ],
)
def test_consistency_without_what_it_needs_is_not_applicable(
    measure: str, context: CheckContext | None, reason: str
) -> None:
    result = run({"type": "consistent", "measure": measure}, context=context)
    assert result.passed is None
    assert reason in result.evidence


def test_task_consistency_counts_the_reference_tool_calls() -> None:
    ctx = CheckContext(reference_tool_calls=[SEARCH], threshold=0.0)
    assert run({"type": "consistent", "measure": "task"}, "", [SEARCH], ctx).passed is True
    assert (
        run({"type": "consistent", "measure": "task"}, "", [call("search_flights", {})], ctx).passed is False
    )


# --- results, descriptions, answers --------------------------------------------------------
def test_evidence_is_capped_at_500_characters() -> None:
    result = run(
        {"type": "constraint", "rule": "calls_tool", "tool": "t", "arguments": {"k": "v"}},
        "",
        [call("t", {"k": "w" * 2000})],
    )
    assert result.passed is False
    assert len(result.evidence) <= 500


def test_evaluate_all_keeps_order_and_ids() -> None:
    defs = checks.validate_checks(
        [{"type": "fact", "value": "Guangzhou", "id": "city"}, {"type": "constraint", "rule": "valid_json"}]
    )
    results = checks.evaluate_all(defs, Answer(TRIP))
    assert [(r.check_id, r.passed) for r in results] == [("city", True), (defs[1]["id"], False)]


def test_evaluate_rejects_an_unknown_type() -> None:
    with pytest.raises(CheckError):
        evaluate({"type": "vibes"}, Answer(TRIP))


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        pytest.param({"type": "fact", "value": "Guangzhou"}, 'states "Guangzhou"', id="fact-text"),
        pytest.param({"type": "fact", "value": 600, "tolerance": 5}, "states 600 (± 5)", id="fact-number"),
        pytest.param(
            {"type": "fact", "pattern": "PNR-\\w+", "flags": "i"}, "matches /PNR-\\w+/i", id="fact-regex"
        ),
        pytest.param(
            {"type": "fact", "path": "$.order.id", "value": "A-17"},
            "has $.order.id = A-17",
            id="fact-json-path",
        ),
        pytest.param({"type": "constraint", "rule": "valid_json"}, "valid JSON", id="valid-json"),
        pytest.param(
            {"type": "constraint", "rule": "json_schema", "schema": {"title": "Order"}},
            "JSON matching the schema 'Order'",
            id="json-schema",
        ),
        pytest.param(
            {"type": "constraint", "rule": "not_contains", "text": "Expedia"},
            'does not contain "Expedia"',
            id="not-contains",
        ),
        pytest.param(
            {"type": "constraint", "rule": "max_chars", "limit": 2000},
            "at most 2,000 characters",
            id="max-chars",
        ),
        pytest.param(
            {"type": "constraint", "rule": "max_tokens", "limit": 300}, "at most 300 tokens", id="max-tokens"
        ),
        pytest.param(
            {"type": "constraint", "rule": "calls_tool", "tool": "search"}, "calls search", id="calls-tool"
        ),
        pytest.param(
            {"type": "constraint", "rule": "no_tool", "tool": "cancel"}, "does not call cancel", id="no-tool"
        ),
        pytest.param(SLOTS, "does not ask for destination, budget, travel_date", id="no-repeat-question"),
        pytest.param(
            {"type": "consistent", "measure": "task"},
            "stays within the noise floor (task distance)",
            id="consistent",
        ),
    ],
)
def test_describe_says_what_the_check_wants_in_one_line(raw: dict[str, Any], line: str) -> None:
    assert checks.describe(validate_check(raw)) == line


def test_an_answer_is_built_from_a_saved_output() -> None:
    answer = Answer.from_output({"text": None, "tool_calls": [SEARCH, "junk"], "finish_reason": "tool_calls"})
    assert answer.text == "" and answer.tool_calls == [SEARCH]
    assert Answer.from_output(None) == Answer("", [])


# --- caches --------------------------------------------------------------------------------
def test_a_pattern_is_compiled_once() -> None:
    pattern = r"\bPNR-[A-Z0-9]{5}\b-once"
    check = validate_check({"type": "fact", "pattern": pattern})
    before = checks.compile_pattern.cache_info()
    for _ in range(5):
        evaluate(check, Answer(TRIP))
    after = checks.compile_pattern.cache_info()
    assert after.misses == before.misses
    assert after.hits >= before.hits + 5


def test_a_schema_validator_is_built_once_per_schema() -> None:
    schema = {"type": "object", "required": ["cache-probe"]}
    validate_check({"type": "constraint", "rule": "json_schema", "schema": schema})
    before = checks.schema_validator.cache_info()
    # The same schema written with its keys in another order is the same cached validator.
    check = validate_check(
        {
            "type": "constraint",
            "rule": "json_schema",
            "schema": {"required": ["cache-probe"], "type": "object"},
        }
    )
    for _ in range(3):
        assert evaluate(check, Answer("{}")).passed is False
    after = checks.schema_validator.cache_info()
    assert after.misses == before.misses
    assert after.hits == before.hits + 4


# --- suggestions ---------------------------------------------------------------------------
def msg(content: str, role: str = "system") -> dict[str, Any]:
    return {"role": role, "content": content}


def block(key: str, kind: str, *messages: dict[str, Any], pinned: bool = False) -> dict[str, Any]:
    return {"key": key, "kind": kind, "pinned": pinned, "messages": list(messages)}


BLOCKS = [
    block("system", "system", msg("You are TripBot for Acme Travel. Be concise and friendly."), pinned=True),
    block(
        "tools",
        "tools",
        {"type": "function", "function": {"name": "search_flights", "parameters": {}}},
        {"type": "function", "function": {"name": "cancel_booking", "parameters": {}}},
    ),
    block(
        "constraints",
        "constraints",
        msg(
            "- Always respond in JSON.\n"
            '- Never mention competitors such as "Trip.com" or "Expedia".\n'
            "- Do not call cancel_booking unless the user confirms twice.\n"
            "- Keep the answer to at most 120 words.\n"
            "- Do not use emojis.\n"
            "- 不要提及内部折扣。\n"
            "- 回答不超过500字"
        ),
        pinned=True,
    ),
    block(
        "trip",
        "memory",
        msg(
            "Destination: Guangzhou\nBudget: 600 EUR\nTravel dates: May 1-5, 2026\n"
            "Booking reference PNR-7Q2K9"
        ),
        pinned=True,
    ),
    block(
        "history",
        "history",
        msg("I want to go to Guangzhou in May.", "user"),
        msg("Sure, let me look.", "assistant"),
    ),
    block("user", "user", msg("Which flight should I take?", "user")),
]
VALIDATION = [
    {
        "layer": "structure",
        "check": "json_schema",
        "passed": False,
        "code": "missing_field",
        "message": "price is required",
        "attempt": 1,
    },
    {"layer": "structure", "check": "json_schema", "passed": True, "code": "", "message": "", "attempt": 2},
    {"layer": "business", "check": "refund_allowed", "passed": True, "code": "", "message": "", "attempt": 2},
]
RECALL = [
    {
        "memory_id": "m-17",
        "channel": "vector",
        "score": 0.82,
        "rank": 1,
        "injected": True,
        "stale": False,
        "conflicting": False,
        "block": "trip",
        "preview": "The user's preferred airline is China Southern; seat = window",
    },
    {
        "memory_id": "m-3",
        "channel": "keyword",
        "score": 0.31,
        "rank": 2,
        "injected": False,
        "stale": False,
        "conflicting": False,
        "block": "trip",
        "preview": "Hotel: Hilton Shenzhen",
    },
]
OUTPUT = json.dumps(
    {
        "answer": "China Southern CZ346 to Guangzhou on May 1-5, 2026 fits your 600 EUR budget "
        "(booking PNR-7Q2K9).",
        "price": 540,
    }
)


@pytest.fixture(scope="module")
def suggested() -> dict[str, checks.Suggestion]:
    found = checks.suggest_checks(blocks=BLOCKS, validation=VALIDATION, recall=RECALL, output_text=OUTPUT)
    return {checks.describe(s.check): s for s in found}


@pytest.mark.parametrize(
    ("line", "source", "why"),
    [
        pytest.param(
            "valid JSON", "validation", "the schema is not recorded", id="json-schema-row-to-valid-json"
        ),
        pytest.param(
            'does not contain "Trip.com"', "constraints", "Never mention competitors", id="quoted-phrase-1"
        ),
        pytest.param(
            'does not contain "Expedia"', "constraints", "constraints block constraints", id="quoted-phrase-2"
        ),
        pytest.param(
            "does not call cancel_booking", "constraints", "Do not call cancel_booking", id="no-tool"
        ),
        pytest.param("at most 720 characters", "constraints", "at most 120 words", id="words-to-characters"),
        pytest.param(
            'does not contain "内部折扣"', "constraints", "不要提及内部折扣", id="chinese-not-contains"
        ),
        pytest.param("at most 500 characters", "constraints", "回答不超过500字", id="chinese-max-chars"),
        pytest.param('states "Guangzhou"', "pinned", "pinned block trip", id="pinned-value"),
        pytest.param('states "600 EUR"', "pinned", "pinned block trip", id="pinned-amount"),
        pytest.param('states "PNR-7Q2K9"', "pinned", "pinned block trip", id="pinned-code"),
        pytest.param('states "China Southern"', "memory", "injected memory m-17", id="injected-memory-fact"),
        pytest.param(
            "does not ask for preferred airline, seat, destination, budget, travel dates",
            "memory",
            "memory m-17, block trip",
            id="memory-slots",
        ),
    ],
)
def test_checks_are_suggested_from_a_saved_turn(
    suggested: dict[str, checks.Suggestion], line: str, source: str, why: str
) -> None:
    assert line in suggested, sorted(suggested)
    assert suggested[line].source == source
    assert why in suggested[line].why


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('states "Hilton Shenzhen"', id="memory-not-injected"),
        pytest.param('states "Acme Travel"', id="system-block-not-pinned-facts"),
        pytest.param('does not contain "emojis"', id="vague-not-contains-is-not-a-tool"),
        pytest.param("does not call emojis", id="unknown-tool"),
        pytest.param('states "Booking"', id="a-label-is-not-a-fact"),
        pytest.param("states 600", id="a-number-inside-a-proposed-value"),
    ],
)
def test_what_is_not_suggested(suggested: dict[str, checks.Suggestion], line: str) -> None:
    assert line not in suggested


def test_suggested_checks_are_normalised_unique_and_from_known_sources(
    suggested: dict[str, checks.Suggestion],
) -> None:
    found = list(suggested.values())
    assert all(s.check == validate_check(s.check) for s in found)
    assert len({checks.check_key(s.check) for s in found}) == len(found)
    assert {s.source for s in found} <= set(checks.SOURCES)


def test_facts_the_saved_answer_does_not_state_are_not_suggested() -> None:
    found = checks.suggest_checks(
        blocks=BLOCKS[3:4], validation=[], recall=[], output_text="Sorry, try later."
    )
    assert [s.check["type"] for s in found] == ["no_repeat_question"]


def test_a_rule_the_saved_answer_breaks_says_so() -> None:
    constraints = block("c", "constraints", msg("Always call search_flights before quoting prices."))
    found = checks.suggest_checks(
        blocks=[BLOCKS[1], constraints], validation=[], recall=[], output_text="Prices start at 540 EUR."
    )
    assert [(s.check["rule"], s.check["tool"]) for s in found] == [("calls_tool", "search_flights")]
    assert "(the saved answer fails it)" in found[0].why
    passing = checks.suggest_checks(
        blocks=[BLOCKS[1], constraints], validation=[], recall=[], output_text="", output_tool_calls=[SEARCH]
    )
    assert "fails" not in passing[0].why


def test_json_validation_rows_suggest_valid_json_once() -> None:
    rows = [
        {"layer": "structure", "check": name, "passed": True, "code": "", "message": "", "attempt": 1}
        for name in ("json", "json_parse", "valid_json")
    ]
    found = checks.suggest_checks(blocks=[], validation=rows, recall=[], output_text="{}")
    assert [(s.source, s.check["rule"]) for s in found] == [("validation", "valid_json")]
    assert "json (structure layer)" in found[0].why


def test_suggestions_are_capped() -> None:
    texts = ["\n".join(f"Ticket {b}-{i}: ZX{b}{i:03d}" for i in range(10)) for b in range(5)]
    pinned = [block(f"b{b}", "retrieval", msg(t), pinned=True) for b, t in enumerate(texts)]
    found = checks.suggest_checks(blocks=pinned, validation=[], recall=[], output_text="\n".join(texts))
    assert len(found) == checks.MAX_SUGGESTIONS


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        pytest.param(
            "Destination: Guangzhou\n- budget = 600 EUR",
            [("destination", "Guangzhou"), ("budget", "600 EUR")],
            id="colon-and-equals",
        ),
        pytest.param(
            "The user's home city is Lyon. Email: ana@example.com",
            [("home city", "Lyon"), ("email", "ana@example.com")],
            id="is-and-sentences",
        ),
        pytest.param("目的地：广州；预算：600欧元", [("目的地", "广州"), ("预算", "600欧元")], id="chinese"),
        pytest.param("The user is vegetarian and prefers trains", [], id="not-a-slot"),
    ],
)
def test_slot_pairs_are_read_from_memory_text(text: str, pairs: list[tuple[str, str]]) -> None:
    assert checks.slot_pairs(text) == pairs
