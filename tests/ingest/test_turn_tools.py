"""The turn page's tools block and tool calls: definitions in every provider shape read as
signatures with their tokens (the ingest counting rule, split per tool), grouped by server prefix;
calls read as `name(arg="value")` with the raw JSON a click away; all of it escaped."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.models import Membership, Project
from ctxobs import tokens as tok
from ingest import tools_view
from ingest.models import Snapshot
from tests.factories import SYSTEM_PROMPT, block, message, snapshot
from tests.ingest.dashboard_factories import HOSTILE, ingest

ESCAPED_HOSTILE = "&lt;script&gt;window.__pwned=1&lt;/script&gt;"

# The cookbook's weather tool ("How to count tokens with tiktoken"): 101 prompt tokens under
# o200k_base for the whole example request.
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
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


def mcp_tool(
    server: str, name: str, description: str, props: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"mcp__{server}__{name}",
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


GITHUB_CREATE = mcp_tool(
    "github",
    "create_issue",
    "Create a new issue in a GitHub repository. Use it when the user asks to file a bug, with a title "
    "and a markdown body; labels and assignees are optional and must already exist in the repository. "
    "Never file duplicates: search the open issues first.",
    {
        "owner": {"type": "string", "description": "Repository owner"},
        "repo": {"type": "string", "description": "Repository name"},
        "title": {"type": "string", "description": "Issue title"},
        "body": {"type": "string", "description": "Issue body in markdown"},
        "labels": {"type": "array", "items": {"type": "string"}, "description": "Labels to add"},
    },
    ["owner", "repo", "title"],
)
GITHUB_LIST = mcp_tool(
    "github",
    "list_pull_requests",
    "List pull requests of a repository",
    {
        "owner": {"type": "string"},
        "repo": {"type": "string"},
        "state": {"type": "string", "enum": ["open", "closed", "all"]},
    },
    ["owner", "repo"],
)
FS_READ = mcp_tool("filesystem", "read_file", "Read a file", {"path": {"type": "string"}}, ["path"])
MCP_TOOLS = [WEATHER, GITHUB_CREATE, GITHUB_LIST, FS_READ]


# --- signatures, grouping, counting (no database) --------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            WEATHER["function"]["parameters"],
            '(location: string, unit?: "celsius"|"fahrenheit")',
            id="required-and-enum",
        ),
        pytest.param(
            {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
            "(tags?: string[])",
            id="array-of-strings",
        ),
        pytest.param(
            {"properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "required": ["n"]},
            "(n: integer|null)",
            id="any-of",
        ),
        pytest.param(
            {"properties": {"n": {"type": ["integer", "null"]}}}, "(n?: integer|null)", id="type-list"
        ),
        pytest.param({"properties": {"a": {"$ref": "#/$defs/Address"}}}, "(a?: Address)", id="ref"),
        pytest.param({"properties": {"x": {}}}, "(x?: any)", id="untyped"),
        pytest.param(
            {
                "properties": {"b": {"type": "string"}, "z": {"type": "integer"}, "a": {"type": "number"}},
                "required": ["z", "a", "gone"],
            },
            "(z: integer, a: number, b?: string)",
            id="required-first-in-their-listed-order",
        ),
        pytest.param({"type": "object", "properties": {}}, "()", id="no-properties"),
        pytest.param(None, "()", id="no-schema"),
        pytest.param("not a schema", "(…)", id="schema-not-an-object"),
        pytest.param({"properties": ["a"]}, "(…)", id="properties-not-an-object"),
    ],
)
def test_signature_reads_like_a_typed_call(schema: Any, expected: str) -> None:
    assert tools_view.signature_params(schema) == expected


def test_long_enums_and_types_are_shortened() -> None:
    sig = tools_view.signature_params({"properties": {"c": {"enum": [f"v{i}" for i in range(20)]}}})
    assert sig == '(c?: "v0"|"v1"|"v2"|"v3"|"v4"|"v5"|…)'


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param(
            ["mcp__github__create_issue", "mcp__github__list_prs", "mcp__fs__read"],
            [("mcp__github", "mcp__github__"), ("mcp__github", "mcp__github__"), ("mcp__fs", "mcp__fs__")],
            id="mcp-servers-even-alone",
        ),
        pytest.param(
            ["github.create_issue", "github.list", "search"],
            [("github", "github."), ("github", "github."), ("", "")],
            id="dotted-shared",
        ),
        pytest.param(["fs/read", "fs/write"], [("fs", "fs/"), ("fs", "fs/")], id="slash-shared"),
        pytest.param(["web.search", "get_weather"], [("", ""), ("", "")], id="dotted-alone-is-no-group"),
        pytest.param(
            ["mcp__github", "mcp__", "get_weather"],
            [("", ""), ("", ""), ("", "")],
            id="mcp-without-tool-part",
        ),
    ],
)
def test_tools_are_grouped_by_server_prefix(names: list[str], expected: list[tuple[str, str]]) -> None:
    assert tools_view.group_names(names) == expected


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_per_tool_tokens_and_the_shared_tail_add_up_to_the_tools_count(encoding: str) -> None:
    counter = tok.get_counter(encoding)
    overview = tools_view.describe_tools(MCP_TOOLS, counter)
    per_tool = [t.tokens for g in overview.groups for t in g.tools]
    assert overview.tokens == tok.tools_tokens(MCP_TOOLS, counter)
    assert sum(per_tool) + overview.shared_tokens == overview.tokens
    # The fixed tail of the function-definition format belongs to the request, not to a tool.
    assert overview.shared_tokens == tok.TOOL_FORMATS[encoding].func_end
    assert all(n > 0 for n in per_tool)


def test_the_cookbook_weather_tool_owns_its_tokens_less_the_request_tail() -> None:
    counter = tok.get_counter("o200k_base")
    assert tok.tools_tokens([WEATHER], counter) == 68
    assert tools_view.tool_tokens(WEATHER, counter) == 56


def test_groups_and_tools_come_biggest_first_with_their_declared_place() -> None:
    overview = tools_view.describe_tools(MCP_TOOLS, tok.get_counter("o200k_base"))
    assert [g.name for g in overview.groups] == ["mcp__github", "", "mcp__filesystem"]
    github = overview.groups[0]
    assert [t.name for t in github.tools] == ["mcp__github__create_issue", "mcp__github__list_pull_requests"]
    assert [t.position for t in github.tools] == [1, 2]
    assert github.tokens == sum(t.tokens for t in github.tools)
    assert github.tools[0].short_name == "create_issue" and github.tools[0].prefix == "mcp__github__"
    assert overview.grouped
    shares = [g.share for g in overview.groups]
    assert shares == sorted(shares, reverse=True) and sum(shares) < 100  # the shared tail is the rest


@pytest.mark.parametrize(
    ("definition", "name", "kind", "params"),
    [
        pytest.param(
            WEATHER,
            "get_current_weather",
            "function",
            '(location: string, unit?: "celsius"|"fahrenheit")',
            id="openai-chat",
        ),
        pytest.param(
            {
                "type": "function",
                "name": "lookup",
                "parameters": {"properties": {"q": {"type": "string"}}, "required": ["q"]},
            },
            "lookup",
            "function",
            "(q: string)",
            id="openai-responses",
        ),
        pytest.param(
            {
                "name": "get_stock_price",
                "description": "Price of a ticker",
                "input_schema": {
                    "type": "object",
                    "properties": {"ticker": {"type": "string"}},
                    "required": ["ticker"],
                },
            },
            "get_stock_price",
            "function",
            "(ticker: string)",
            id="anthropic",
        ),
        pytest.param(
            {"name": "old_style", "parameters": {"properties": {"n": {"type": "integer"}}}},
            "old_style",
            "function",
            "(n?: integer)",
            id="legacy-functions",
        ),
        pytest.param(
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            "web_search",
            "web_search_20250305",
            "",
            id="anthropic-server-tool",
        ),
        pytest.param(
            {"type": "custom", "custom": {"name": "grep", "description": "free text"}},
            "grep",
            "custom",
            "(input: text)",
            id="openai-custom",
        ),
        pytest.param(
            {"type": "file_search", "vector_store_ids": ["vs_1"]},
            "file_search",
            "file_search",
            "",
            id="built-in-without-name",
        ),
        pytest.param(["not", "a", "tool"], "?", "invalid", "", id="not-an-object"),
    ],
)
def test_every_definition_shape_is_read(definition: Any, name: str, kind: str, params: str) -> None:
    overview = tools_view.describe_tools([definition], tok.get_counter("o200k_base"))
    (tool,) = overview.groups[0].tools
    assert (tool.name, tool.kind, tool.params) == (name, kind, params)
    assert json.loads(tool.schema) == definition


def test_definitions_come_from_tools_or_legacy_functions() -> None:
    legacy = [{"name": "f", "parameters": {}}]
    assert tools_view.definitions_of({"tools": [WEATHER], "functions": legacy}) == [WEATHER]
    assert tools_view.definitions_of({"functions": legacy}) == legacy
    assert tools_view.definitions_of({"temperature": 0}) == []
    assert tools_view.definitions_of({"tools": "nonsense"}) == []


@pytest.mark.parametrize(
    ("arguments", "expected", "valid"),
    [
        pytest.param('{"city": "Oslo"}', 'city="Oslo"', True, id="string-argument"),
        pytest.param(
            '{"city": "Oslo", "days": 3, "metric": true, "hint": null}',
            'city="Oslo", days=3, metric=True, hint=None',
            True,
            id="python-literals",
        ),
        pytest.param({"city": "Oslo"}, 'city="Oslo"', True, id="already-an-object"),
        pytest.param('{"a": [1, 2, {"b": "c"}]}', 'a=[1, 2, {"b": "c"}]', True, id="nested"),
        pytest.param('{"my-key": 1.5}', '"my-key"=1.5', True, id="key-not-an-identifier"),
        pytest.param("", "", True, id="empty"),
        pytest.param("{}", "", True, id="no-arguments"),
        pytest.param('["x", 1]', '["x", 1]', True, id="not-an-object"),
        pytest.param('{"city": "Oslo"', '{"city": "Oslo"', False, id="cut-json"),
        pytest.param("city=Oslo", "city=Oslo", False, id="not-json"),
    ],
)
def test_arguments_read_as_keyword_arguments(arguments: Any, expected: str, valid: bool) -> None:
    assert tools_view.format_arguments(arguments) == (expected, valid)


def test_long_argument_values_are_shortened_with_an_ellipsis() -> None:
    args, valid = tools_view.format_arguments(json.dumps({"query": "flights " * 50, "ids": list(range(200))}))
    assert valid
    query, ids = args.split(", ids=")
    assert query.startswith('query="flights flights') and query.endswith('…"')
    assert len(query) < 80
    assert ids.startswith("[0, 1, 2") and ids.endswith("…]") and len(ids) < 80


def test_hostile_arguments_never_raise() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    args, valid = tools_view.format_arguments(deep)
    assert not valid and args.startswith("[[[") and args.endswith("…")
    nested: Any = "x"
    for _ in range(50):
        nested = {"k": nested}
    args, valid = tools_view.format_arguments(nested)
    assert valid and "…" in args


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        pytest.param(
            message(
                "assistant",
                None,
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            ),
            ['get_weather(city="Oslo")'],
            id="openai-tool-calls",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            ['get_weather(city="Oslo")'],
            id="anthropic-tool-use",
        ),
        pytest.param(
            message("assistant", None, function_call={"name": "f", "arguments": '{"x": 1}'}),
            ["f(x=1)"],
            id="legacy-function-call",
        ),
        pytest.param(
            message(
                "assistant",
                None,
                tool_calls=[{"id": "c", "type": "custom", "custom": {"name": "grep", "input": "TODO"}}],
            ),
            ['grep("TODO")'],
            id="openai-custom-call",
        ),
        pytest.param(message("user", "hello"), [], id="no-calls"),
    ],
)
def test_message_calls_read_as_python_calls(msg: dict[str, Any], expected: list[str]) -> None:
    calls = tools_view.message_calls(msg)
    assert [c.signature for c in calls] == expected
    for c in calls:
        assert json.loads(c.raw)  # the call as sent, one click away


# --- the page, on the real database -----------------------------------------------------------------


@pytest.fixture
def viewer(project: Project) -> Client:
    user = get_user_model().objects.create_user(username="vera", password="pw-vera")
    Membership.objects.create(project=project, user=user, role="viewer")
    c = Client()
    c.force_login(user)
    return c


def tools_turn(
    *,
    session_id: str = "mcp",
    turn: int = 0,
    tools: list[Any] | None = None,
    params_key: str = "tools",
    tools_block: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """A turn of an agent with MCP tools: the definitions in params.tools, a message-less tools
    block counted by the server, a history with a tool call and its result."""
    blocks = [block("system", "system", SYSTEM_PROMPT, pinned=True)]
    if tools_block:
        blocks.append({"key": "tools", "kind": "tools", "messages": []})
    blocks += [
        block(
            "history",
            "history",
            messages=[
                message("user", "Is it raining in Oslo?"),
                message(
                    "assistant",
                    None,
                    tool_calls=[
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "get_current_weather",
                                "arguments": '{"location": "Oslo", "unit": "celsius"}',
                            },
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {
                                "name": "mcp__github__create_issue",
                                "arguments": '{"title": "rain", ',
                            },
                        },
                    ],
                ),
                message("tool", '{"temp": 4, "rain": true}', tool_call_id="call_1"),
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_01",
                            "name": "mcp__filesystem__read_file",
                            "input": {"path": "/etc/motd"},
                        }
                    ],
                },
            ],
        ),
        block("user", "user", "And tomorrow?"),
    ]
    snap = snapshot(session_id=session_id, turn=turn, blocks=blocks, context_window=128_000, **extra)
    snap["params"] = {"temperature": 0, params_key: tools if tools is not None else MCP_TOOLS}
    return snap


def _turn(client: Client, project: Project, session_id: str = "mcp", turn: int = 0) -> Any:
    r = client.get(reverse("ingest:turn", args=[project.pk, session_id, turn]))
    assert r.status_code == 200
    return r


def test_tools_block_lists_each_tool_grouped_with_tokens_that_add_up_to_the_block(
    viewer: Client, project: Project
) -> None:
    ingest(
        project,
        [
            tools_turn(
                output={
                    "text": "",
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {
                                "name": "mcp__github__list_pull_requests",
                                "arguments": '{"owner": "acme", "repo": "ctxobs"}',
                            },
                        }
                    ],
                    "finish_reason": "tool_calls",
                }
            )
        ],
    )
    r = _turn(viewer, project)
    body = r.content.decode()
    stored = Snapshot.objects.get(project=project, session_id="mcp")
    tools_block = next(b for b in r.context["blocks"] if b["kind"] == "tools")
    overview = r.context["tools"]
    # The block's count is the server's, by the same rule: the page's split adds up to it.
    assert (
        tools_block["tokens"]
        == overview.tokens
        == tok.tools_tokens(MCP_TOOLS, tok.get_counter(stored.encoding))
    )
    assert (
        sum(t.tokens for g in overview.groups for t in g.tools) + overview.shared_tokens
        == tools_block["tokens"]
    )
    assert "No messages." not in body.split('id="diff"')[0]

    assert 'data-group="mcp__github"' in body
    github = body.split('data-group="mcp__github"')[1].split("</tbody>")[0]
    assert '<span class="mono group-name">mcp__github</span>' in github
    assert "2 tools" in github
    group = next(g for g in overview.groups if g.name == "mcp__github")
    assert f'<td class="r group-tokens">{group.tokens}</td>' in github
    for t in group.tools:
        assert f'id="tool-{t.position}"' in github
        row = github.split(f'id="tool-{t.position}"')[1].split("</tr>")[0]
        assert f'<td class="r tool-tokens">{t.tokens}</td>' in row
    create = github.split('id="tool-1"')[1].split("</tr>")[0]
    assert (
        '<span class="muted">mcp__github__</span><b class="tool-name">create_issue</b>'
        "(owner: string, repo: string, title: string, body?: string, labels?: string[])"
    ) in create
    assert "Create a new issue in a GitHub repository." in create and "…" in create  # long description cut
    assert "<summary>JSON schema</summary>" in create and "&quot;Issue body in markdown&quot;" in create
    weather = body.split('id="tool-0"')[1].split("</tr>")[0]
    assert "(location: string, unit?: &quot;celsius&quot;|&quot;fahrenheit&quot;)" in weather
    assert f'plus <span class="tools-shared">{overview.shared_tokens}</span>' in body

    # Calls of the history and of the output read as Python calls, the raw JSON in a <details>.
    assert (
        'get_current_weather</b>(<span class="call-args">location=&quot;Oslo&quot;, unit=&quot;celsius&quot;'
        in body
    )
    assert 'mcp__filesystem__read_file</b>(<span class="call-args">path=&quot;/etc/motd&quot;' in body
    out = body.split('class="output-calls"')[1]
    assert (
        'mcp__github__list_pull_requests</b>(<span class="call-args">'
        "owner=&quot;acme&quot;, repo=&quot;ctxobs&quot;" in out
    )
    assert "<summary>raw JSON</summary>" in out and "call_9" in out


def test_invalid_call_arguments_are_shown_as_sent_and_marked(viewer: Client, project: Project) -> None:
    ingest(project, [tools_turn()])
    body = _turn(viewer, project).content.decode()
    call = body.split("mcp__github__create_issue</b>(")[1].split("</div>")[0]
    assert '<span class="call-args">{&quot;title&quot;: &quot;rain&quot;, </span>)' in call
    assert "invalid JSON" in call


def test_untrusted_tool_text_is_escaped(viewer: Client, project: Project) -> None:
    hostile_tool = {
        "type": "function",
        "function": {
            "name": "mcp__evil__run",
            "description": f"Runs {HOSTILE}",
            "parameters": {"type": "object", "properties": {HOSTILE: {"type": "string", "enum": [HOSTILE]}}},
        },
    }
    snap = tools_turn(
        tools=[hostile_tool],
        output={
            "text": "",
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "mcp__evil__run", "arguments": json.dumps({"cmd": HOSTILE})},
                },
                {"id": "d", "type": "function", "function": {"name": HOSTILE, "arguments": HOSTILE}},
            ],
        },
    )
    ingest(project, [snap])
    body = _turn(viewer, project).content.decode()
    assert HOSTILE not in body
    assert "__pwned" in body  # shown, as text
    assert f"Runs {ESCAPED_HOSTILE}" in body  # description
    assert "cmd=&quot;&lt;script&gt;window.__pwned=1&lt;/script&gt;&quot;" in body  # argument
    assert f'<span class="call-args">{ESCAPED_HOSTILE}</span>' in body  # invalid arguments as sent
    assert f'<b class="call-name">{ESCAPED_HOSTILE}</b>' in body  # a call's name


def test_anthropic_and_legacy_definitions_are_listed(viewer: Client, project: Project) -> None:
    anthropic = [
        {
            "name": "mcp__jira__search",
            "description": "Search issues",
            "input_schema": {
                "type": "object",
                "properties": {"jql": {"type": "string"}},
                "required": ["jql"],
            },
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    ]
    ingest(project, [tools_turn(session_id="claude", tools=anthropic, model="claude-sonnet-4-5")])
    ingest(
        project,
        [
            tools_turn(
                session_id="legacy",
                params_key="functions",
                tools=[{"name": "lookup", "description": "Look up", "parameters": {}}],
            )
        ],
    )
    claude = _turn(viewer, project, "claude").content.decode()
    assert '<b class="tool-name">search</b>(jql: string)' in claude
    assert '<b class="tool-name">web_search</b></code> <span class="flag"' in claude
    assert "web_search_20250305" in claude
    legacy = _turn(viewer, project, "legacy").content.decode()
    assert '<b class="tool-name">lookup</b>()' in legacy


def test_a_sender_count_that_differs_is_said_and_unstorable_text_is_shown(
    viewer: Client, project: Project
) -> None:
    odd = {"type": "function", "function": {"name": "read", "description": "bytes a\x00b \udcff end"}}
    snap = tools_turn(session_id="sender", tools=[odd, WEATHER])
    snap["blocks"][1]["tokens"] = 999
    ingest(project, [json.loads(json.dumps(snap))])
    r = _turn(viewer, project, "sender")
    body = r.content.decode()
    assert r.context["tools"].tokens != 999
    assert "The block's count, 999, is the sender's." in body
    assert "bytes a\u2400b \ufffd end" in body and "\x00" not in body


def test_definitions_without_a_tools_block_get_their_own_card(viewer: Client, project: Project) -> None:
    ingest(project, [tools_turn(session_id="no-block", tools_block=False)])
    body = _turn(viewer, project, "no-block").content.decode()
    card = body.split('<section class="card" id="tools">')[1].split("</section>")[0]
    assert "no message-less tools block carries them" in card
    assert 'data-group="mcp__github"' in card


def test_a_turn_without_tools_has_no_tools_listing(viewer: Client, project: Project) -> None:
    ingest(project, [snapshot(session_id="plain")])
    r = _turn(viewer, project, "plain")
    assert r.context["tools"] is None
    assert "tools-table" not in r.content.decode()


def test_show_all_of_a_block_reads_its_calls_too(viewer: Client, project: Project) -> None:
    ingest(project, [tools_turn()])
    r = viewer.get(reverse("ingest:block", args=[project.pk, "mcp", 0, 2]), HTTP_HX_REQUEST="true")
    body = r.content.decode()
    assert 'get_current_weather</b>(<span class="call-args">location=&quot;Oslo&quot;' in body
    assert "<summary>raw JSON</summary>" in body


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_query_count_does_not_grow_with_the_number_of_tools(
    viewer: Client, project: Project, django_assert_max_num_queries: Any
) -> None:
    many = [
        mcp_tool(f"s{i % 7}", f"tool_{i}", f"Tool number {i}", {"x": {"type": "string"}}, ["x"])
        for i in range(120)
    ]
    ingest(
        project, [tools_turn(session_id="few", tools=MCP_TOOLS), tools_turn(session_id="many", tools=many)]
    )
    few_url = reverse("ingest:turn", args=[project.pk, "few", 0])
    many_url = reverse("ingest:turn", args=[project.pk, "many", 0])
    _queries(viewer, few_url)  # warm per-process caches
    with django_assert_max_num_queries(19):
        body = viewer.get(many_url).content.decode()
    assert len(re.findall(r'<tr class="tool" id="tool-\d+"', body)) == 120
    assert _queries(viewer, many_url) == _queries(viewer, few_url)
