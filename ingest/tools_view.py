"""How the turn page reads tool definitions and tool calls (no ORM, no Django).

Tool definitions arrive as sent in `params.tools`, in any of the shapes providers take: OpenAI's
`{"type": "function", "function": {name, description, parameters}}`, its Responses API's flat
`{"type": "function", name, parameters}`, Anthropic's `{name, description, input_schema}`, the
legacy `functions` items `{name, description, parameters}`, and built-in or server tools
(`{"type": "web_search_20250305", "name": "web_search"}`) that carry no schema. Each becomes a
`ToolDefinition` with a one-line signature and its tokens, counted with `ctxobs.tokens` (the rule
the SDK and ingest count the tools block with), and tools are grouped by server prefix.

Tool calls (a message's `tool_calls`, the legacy `function_call`, Anthropic `tool_use` content
parts, the output's calls) read as `get_weather(city="Oslo")`. Everything here is untrusted text
for the template to escape; nothing is marked safe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import pgtext
from ctxobs import tokens as tok

# The MCP convention for tools a client exposes from its servers: mcp__<server>__<tool>.
MCP_PREFIX = "mcp__"
# Separators of other namespaced tool names (`github.create_issue`, `fs/read`, `jira__search`);
# such a prefix makes a group only when at least two tools share it.
PREFIX_SEPARATORS = ("__", ".", "/")
ARG_VALUE_CHARS = 60
INVALID_ARGS_CHARS = 200
TYPE_CHARS = 48
ENUM_SHOWN = 6
DESCRIPTION_CHARS = 240
RAW_CHARS = 20_000
NESTING_SHOWN = 3


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One tool as the page lists it; `position` is its place in `params.tools` (from 0)."""

    position: int
    name: str
    prefix: str  # the group's part of the name, separator included ("mcp__github__"), or ""
    kind: str  # "function", "custom", or a built-in/server tool's own type
    description: str
    description_cut: bool
    params: str  # "(city: string, unit?: "c"|"f")"; "" for a tool without parameters to show
    schema: str  # the definition as sent, as indented JSON
    tokens: int
    share: float  # percent of the tool definitions' tokens

    @property
    def short_name(self) -> str:
        return self.name[len(self.prefix) :]

    @property
    def signature(self) -> str:
        return self.name + self.params


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """Tools sharing a server prefix (`name` "mcp__github"); `name` "" holds the tools without one."""

    name: str
    tools: tuple[ToolDefinition, ...]
    tokens: int
    share: float


@dataclass(frozen=True, slots=True)
class ToolsOverview:
    """The tool definitions of a turn, biggest groups and tools first.

    `tokens` is what the tool definitions add to the prompt by the shared counting rule: the sum
    of each tool's own tokens plus `shared_tokens`, the fixed tail OpenAI's rendering adds once per
    request that has functions (`func_end` of `ctxobs.tokens.TOOL_FORMATS`), which belongs to no
    single tool.
    """

    groups: tuple[ToolGroup, ...]
    n_tools: int
    tokens: int
    shared_tokens: int
    encoding: str
    estimated: bool

    @property
    def grouped(self) -> bool:
        return any(g.name for g in self.groups)


@dataclass(frozen=True, slots=True)
class ToolCallView:
    """One tool call: `args` reads as Python keyword arguments (or, when `valid` is False, the
    arguments text as sent, shortened); `raw` is the call as sent, as indented JSON."""

    id: str
    name: str
    args: str
    valid: bool
    raw: str

    @property
    def signature(self) -> str:
        return f"{self.name}({self.args})"


# --- tool definitions ---------------------------------------------------------------------------


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _json(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, indent=1)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= RAW_CHARS else text[:RAW_CHARS] + "\n… (cut)"


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parts(tool: Any) -> tuple[str, str, str, Any]:
    """(name, kind, description, parameters schema) of one definition; the schema is None when
    the shape carries none (built-in and server tools, free-text custom tools)."""
    if not isinstance(tool, Mapping):
        return "?", "invalid", "", None
    ttype = tool.get("type")
    fn = tool.get("function")
    if isinstance(fn, Mapping):
        return (
            _text(fn.get("name")) or "?",
            _text(ttype) or "function",
            _text(fn.get("description")),
            fn.get("parameters"),
        )
    custom = tool.get("custom")
    if ttype == "custom" and isinstance(custom, Mapping):
        return _text(custom.get("name")) or "?", "custom", _text(custom.get("description")), None
    name = _text(tool.get("name"))
    desc = _text(tool.get("description"))
    if "input_schema" in tool and ttype in (None, "custom"):
        return name or "?", "function", desc, tool.get("input_schema")
    if ttype in (None, "function"):
        return name or "?", "function", desc, tool.get("parameters")
    # A built-in or server tool: its type says what it is; a name is optional (OpenAI's
    # `{"type": "web_search"}` has none).
    return name or _text(ttype), _text(ttype), desc, None


def _type_text(spec: Any, depth: int = 0) -> str:
    if not isinstance(spec, Mapping) or depth > NESTING_SHOWN:
        return "any"
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        shown = "|".join(
            _text(v) if not isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            for v in enum[:ENUM_SHOWN]
        )
        return shown + ("|…" if len(enum) > ENUM_SHOWN else "")
    if "const" in spec:
        return json.dumps(spec["const"], ensure_ascii=False, default=str)
    t = spec.get("type")
    if isinstance(t, list):
        return "|".join(_text(x) for x in t)
    if t == "array":
        inner = _type_text(spec.get("items"), depth + 1) if isinstance(spec.get("items"), Mapping) else "any"
        return f"({inner})[]" if "|" in inner else f"{inner}[]"
    if isinstance(t, str) and t:
        return t
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list) and options:
            return "|".join(_type_text(o, depth + 1) for o in options)
    ref = spec.get("$ref")
    if isinstance(ref, str) and ref:
        return ref.rsplit("/", 1)[-1]
    if isinstance(spec.get("properties"), Mapping):
        return "object"
    return "any"


def signature_params(schema: Any) -> str:
    """A parameters JSON schema as `(city: string, unit?: "c"|"f")`: the required parameters first,
    in the order `required` lists them, then the optional ones marked `?`.

    Stored params are jsonb, which keeps no key order, so the declared order of `properties` is
    gone by the time a page reads it; the `required` array keeps its order.
    """
    if schema is None:
        return "()"
    if not isinstance(schema, Mapping):
        return "(…)"
    props = schema.get("properties")
    if props is None:
        return "()"
    if not isinstance(props, Mapping):
        return "(…)"
    required = schema.get("required")
    needed = [r for r in required if isinstance(r, str) and r in props] if isinstance(required, list) else []
    optional = [k for k in props if k not in needed]
    items = [f"{_text(k)}: {_shorten(_type_text(props[k]), TYPE_CHARS)}" for k in dict.fromkeys(needed)]
    items += [f"{_text(k)}?: {_shorten(_type_text(props[k]), TYPE_CHARS)}" for k in optional]
    return "(" + ", ".join(items) + ")"


def _params_shown(kind: str, schema: Any) -> str:
    if kind == "function":
        return signature_params(schema)
    # A custom tool takes free text; built-in and server tools take what their type defines.
    return "(input: text)" if kind == "custom" else ""


def _prefix(name: str) -> tuple[str, str]:
    """(group, prefix with its separator) a tool name suggests; ("", "") for none."""
    if name.startswith(MCP_PREFIX):
        server, sep, tool = name[len(MCP_PREFIX) :].partition("__")
        if server and sep and tool:
            return MCP_PREFIX + server, MCP_PREFIX + server + "__"
        return "", ""
    cuts = [(name.find(s), s) for s in PREFIX_SEPARATORS if name.find(s) > 0]
    if not cuts:
        return "", ""
    at, sep = min(cuts)
    if at + len(sep) >= len(name):
        return "", ""
    return name[:at], name[: at + len(sep)]


def group_names(names: list[str]) -> list[tuple[str, str]]:
    """(group, prefix) of each name: MCP names by their server; other namespaced names by their
    first segment when at least two names share it; ("", "") otherwise."""
    found = [_prefix(n) for n in names]
    shared: dict[str, int] = {}
    for name, (group, _) in zip(names, found, strict=True):
        if group and not name.startswith(MCP_PREFIX):
            shared[group] = shared.get(group, 0) + 1
    return [
        (group, prefix) if group and (name.startswith(MCP_PREFIX) or shared[group] > 1) else ("", "")
        for name, (group, prefix) in zip(names, found, strict=True)
    ]


def tool_tokens(definition: Any, counter: tok.Counter) -> int:
    """What DEFINITION adds to a prompt beside the others, by `ctxobs.tokens.tools_tokens`.

    That formula adds a fixed tail once per request with functions; the difference between a
    list holding the tool twice and once is the tool's own part without it, whatever its shape,
    so the rule stays in ctxobs.tokens alone.
    """
    return tok.tools_tokens([definition, definition], counter) - tok.tools_tokens([definition], counter)


def describe_tools(definitions: list[Any], counter: tok.Counter) -> ToolsOverview:
    """DEFINITIONS (the request's `tools`, as sent) for the page, counted with COUNTER."""
    own = [tool_tokens(d, counter) for d in definitions]
    total = tok.tools_tokens(definitions, counter)
    whole = total or 1
    shown_defs = pgtext.shown(definitions)
    parts = [_parts(d) for d in shown_defs]
    prefixes = group_names([p[0] for p in parts])
    by_group: dict[str, list[ToolDefinition]] = {}
    for i, ((name, kind, desc, schema), (group, prefix), n) in enumerate(
        zip(parts, prefixes, own, strict=True)
    ):
        by_group.setdefault(group, []).append(
            ToolDefinition(
                position=i,
                name=name,
                prefix=prefix,
                kind=kind,
                description=_shorten(desc, DESCRIPTION_CHARS),
                description_cut=len(desc) > DESCRIPTION_CHARS,
                params=_params_shown(kind, schema),
                schema=_json(shown_defs[i]),
                tokens=n,
                share=n / whole * 100,
            )
        )
    groups = [
        ToolGroup(
            name=name,
            tools=tuple(sorted(tools, key=lambda t: (-t.tokens, t.position))),
            tokens=sum(t.tokens for t in tools),
            share=sum(t.tokens for t in tools) / whole * 100,
        )
        for name, tools in by_group.items()
    ]
    groups.sort(key=lambda g: (-g.tokens, g.tools[0].position if g.tools else 0))
    return ToolsOverview(
        groups=tuple(groups),
        n_tools=len(definitions),
        tokens=total,
        shared_tokens=total - sum(own),
        encoding=counter.used,
        estimated=not counter.exact,
    )


def definitions_of(params: Mapping[str, Any] | None) -> list[Any]:
    """The tool definitions a snapshot's PARAMS carry: `tools`, else the legacy `functions`."""
    if not params:
        return []
    for key in ("tools", "functions"):
        value = params.get(key)
        if isinstance(value, list) and value:
            return value
    return []


# --- tool calls ---------------------------------------------------------------------------------


def _value(value: Any, limit: int, depth: int = 0) -> str:
    """VALUE as a Python literal of at most about LIMIT characters (then "…")."""
    if isinstance(value, str):
        return json.dumps(_shorten(value, limit), ensure_ascii=False)
    if value is True:
        return "True"
    if value is False:
        return "False"
    if value is None:
        return "None"
    if isinstance(value, int | float):
        return _shorten(repr(value), limit)
    if depth >= NESTING_SHOWN:
        return "…"
    if isinstance(value, list):
        opening, closing, entries = "[", "]", [(None, v) for v in value]
    elif isinstance(value, dict):
        opening, closing, entries = "{", "}", [(k, v) for k, v in value.items()]
    else:
        return _shorten(repr(value), limit)
    out = opening
    for i, (key, item) in enumerate(entries):
        if len(out) >= limit:
            return out + ("…" if i else "") + closing
        head = ", " if i else ""
        if key is not None:
            head += json.dumps(_text(key), ensure_ascii=False) + ": "
        out += head + _value(item, max(8, limit - len(out) - len(head)), depth + 1)
    if len(out) + len(closing) > limit + 1:
        return out[: limit - 1] + "…" + closing
    return out + closing


def _key(key: str) -> str:
    return key if key.isidentifier() else json.dumps(key, ensure_ascii=False)


def format_arguments(arguments: Any) -> tuple[str, bool]:
    """(arguments as Python keyword arguments, valid). A JSON text is parsed first; one that is
    not JSON comes back as sent, shortened, with valid False."""
    value = arguments
    if isinstance(arguments, str):
        if not arguments.strip():
            return "", True
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return _shorten(arguments, INVALID_ARGS_CHARS), False
    if value is None:
        return "", True
    if isinstance(value, dict):
        return ", ".join(f"{_key(_text(k))}={_value(v, ARG_VALUE_CHARS)}" for k, v in value.items()), True
    return _value(value, ARG_VALUE_CHARS), True


def call_view(item: Any) -> ToolCallView:
    """One call in any provider's shape: OpenAI `{id, type, function: {name, arguments}}` or
    `{type: "custom", custom: {name, input}}`, Anthropic `{type: "tool_use", id, name, input}`,
    a flat `{name, arguments}` (legacy `function_call`, Responses API items)."""
    raw = _json(item)
    if not isinstance(item, Mapping):
        return ToolCallView(
            id="", name="?", args=_shorten(_text(item), INVALID_ARGS_CHARS), valid=False, raw=raw
        )
    call_id = _text(item.get("id") or item.get("call_id"))
    fn = item.get("function")
    custom = item.get("custom")
    if isinstance(fn, Mapping):
        name, arguments = fn.get("name"), fn.get("arguments")
    elif isinstance(custom, Mapping):
        # A custom tool's input is free text, not JSON: shown as one string argument.
        text = _text(custom.get("input"))
        return ToolCallView(
            id=call_id,
            name=_text(custom.get("name")) or "?",
            args=_value(text, INVALID_ARGS_CHARS),
            valid=True,
            raw=raw,
        )
    elif "input" in item:
        name, arguments = item.get("name"), item.get("input")
    else:
        name, arguments = item.get("name"), item.get("arguments")
    args, valid = format_arguments(arguments)
    return ToolCallView(id=call_id, name=_text(name) or "?", args=args, valid=valid, raw=raw)


_CALL_PARTS = ("tool_use", "server_tool_use")


def message_calls(message: Mapping[str, Any]) -> list[ToolCallView]:
    """The tool calls MESSAGE makes: its `tool_calls`, a legacy `function_call`, and Anthropic
    `tool_use` content parts."""
    out: list[ToolCallView] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out += [call_view(c) for c in calls]
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        out.append(call_view(legacy))
    content = message.get("content")
    if isinstance(content, list):
        out += [call_view(p) for p in content if isinstance(p, Mapping) and p.get("type") in _CALL_PARTS]
    return out


def output_calls(calls: Any) -> list[ToolCallView]:
    """The output's tool calls (a list in any of `call_view`'s shapes)."""
    return [call_view(c) for c in calls] if isinstance(calls, list) else []
