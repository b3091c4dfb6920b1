"""Whether a retrieved document or tool result instructs the model, or only talks about such
instructions. ORM-free; `insights.lint.prompt_injection` reads tool and retrieval messages with it.

A text is an injection when it addresses the model (a vocative such as "AI assistant:", "Note to
the LLM reading this:", "the assistant must now ..." followed by something to do), asks to send
the user's data somewhere, opens a fake turn with a chat-template token or a role label, or uses
an override phrase ("ignore previous instructions", "you are now DAN", "reveal your system
prompt", "New instructions:") as a command. The override phrases and template tokens are the
words security articles, papers and model docs quote, so they count only when they are used:
not inside quotes or code, not reported ("telling the model to ignore ..."), not in a sentence
that discusses them ("such as", "e.g.", "attackers", "payload", "formatted as"), and not in an
article-like text on the topic the user asked about. Addressing the model and exfiltration asks
count wherever they are outside quotes and code, since an article has no reason to talk to its
reader's model.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator

_F = re.IGNORECASE | re.MULTILINE

# Where words are mentioned, not used: code (fenced, inline, <code>/<pre>) and quotations.
_CODE = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|<(pre|code)\b[^>]*>.*?(?:</\1>|\Z)|`[^`\n]+`",
                   re.IGNORECASE | re.DOTALL)
_QUOTE = re.compile(
    r"\"[^\"\n]{1,400}\"|\u201c[^\u201d\n]{1,400}\u201d|\u2018[^\u2019\n]{1,400}\u2019|\u00ab[^\u00bb\n]{1,400}\u00bb"
    # An apostrophe inside a word (don't, user's) neither opens nor closes a quotation.
    r"|(?<!\w)'(?=\S)[^'\n]{1,400}?(?<=\S)'(?!\w)"
)

_MODEL = (r"(?:ai|a\.i\.|assistant|llm|language\s+model|ai\s+model|chatbot|bot|agent|gpt|chatgpt|claude"
          r"|copilot|gemini|model)")
# Names that address a model without a "dear"/"note to" before them ("Agent:", "The model," and
# "Bot:" also open estate listings, prose and chat logs).
_NAMED = (r"(?:ai|a\.i\.|assistant|llm|language\s+model|chatbot|gpt|chatgpt|claude|copilot|gemini)"
          r"(?:\s+(?:agent|model|assistant|coding\s+assistant))?")
# The model addressed: prefixed vocatives, "If you are an AI ...", "As the assistant,", an @mention,
# "the assistant must ...", and a bare vocative that opens a clause ("Assistant, ...", "ChatGPT: ...").
_ADDRESS = re.compile(
    r"(?:\b(?:dear|hey|hi|hello|attention|(?:note|reminder|notice|message|memo|warning|instructions?)\s+(?:to|for)"
    r"|p\.?\s?s\.?\s+to|to\s+(?:whatever|any|every|all))\s+(?:the\s+|any\s+|all\s+|every\s+)?(?:\w+\s+){0,2}?"
    + _MODEL + r"s?(?:\s+(?:agent|model|assistant|crawler|system)s?)?"
    r"(?:\s+(?:reading|reads|processing|processes|summari[sz]ing|parsing|parses|seeing|sees|crawling|that|who"
    r"|which)\b[^.:,\n]{0,40}?)?\s*[:,\n]"
    r"|\bto\s+the\s+" + _MODEL + r"\s+(?:reading|processing|summari[sz]ing|analy[sz]ing|parsing|viewing)\b"
    r"[^.:,\n]{0,40}?[:,]"
    r"|\bif\s+you(?:\s+are|'re|\u2019re)\s+(?:an?\s+)?(?:\w+\s+)?" + _MODEL + r"s?\b"
    r"|\bas\s+(?:the|an?)\s+" + _MODEL + r",\s"
    r"|@" + _MODEL + r"\b"
    r"|\bthe\s+" + _MODEL + r"\s+(?:must|should|shall|is\s+to|has\s+to|needs\s+to)\s+"
    r"(?:now\s+|first\s+|also\s+)?(?=[a-z])"
    r"|(?:^|(?<=[.!?:;,>#(\[\-*])\s*|(?<=<!--)\s*)" + _NAMED + r"s?\s*(?:[:,]|\s[-\u2013\u2014])(?=\s))",
    _F,
)
# Words to the model, or something for it to do, read within the addressed stretch of text.
_YOU = re.compile(r"\b(?:you|your|the\s+user|user's)\b", re.IGNORECASE)
_ACTION = re.compile(
    r"\b(?:ignore|disregard|forget|override|reveal|print|output|repeat|show|tell|say|reply|respond|answer"
    r"|recommend|push|promote|send|forward|e-?mail|post|upload|include|append|add|insert|visit|navigate"
    r"|call|run|execute|delete|cancel|accept|approve|grant|reset|ask|obtain|return|write|stop|do\s+not"
    r"|don't|never|summari[sz]e|link|exfiltrate|leak|share|give|provide|disclose|rate|list|describe|mention"
    r"|praise|install|download|click|use)\b",
    re.IGNORECASE,
)
# A command sending the user's data to an address: the data and the destination in one sentence.
_DATA = (r"(?:the\s+user's|user's|your\s+user's|the\s+user|conversation|chat\s+history|api\s+keys?|passwords?"
         r"|credentials|passport|credit\s+card|memories|e-?mails?\s+in\s+this\s+inbox)")
_DEST = r"(?:[\w.+-]+@[\w-]+\.[\w.]+|https?://\S+)"
_EXFIL = re.compile(
    r"\b(?:send|forward|e-?mail|post|upload|transmit|submit|visit|leak)\b[^.\n]{0,120}?\b" + _DATA
    + r"[^.\n]{0,120}?" + _DEST
    + r"|\b(?:send|forward|e-?mail|post|upload|transmit|submit|visit|leak)\b[^.\n]{0,80}?" + _DEST
    + r"[^.\n]{0,80}?\b" + _DATA,
    _F,
)

# Override phrases: used as commands in attacks, quoted in articles about them.
_OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|every\s+)?(?:of\s+)?"
    r"(?:the\s+|your\s+|these\s+|those\s+|its\s+)?"
    r"(?:(?:previous|prior|above|earlier|preceding|system|original|initial|old|formatting|safety)\s+)?"
    r"(?:instructions?|prompts?|rules?|directions|guidelines|guidance|directives|orders|commands|programming)\b(?:\s+(?:above|before))?"
    r"|\b(?:ignore|disregard|forget)\s+(?:all\s+of\s+)?the\s+(?:above|(?:review|text|document|page|message"
    r"|content)\s+above|user's\s+(?:request|question))"
    r"|\bforget\s+everything\s+(?:you\s+(?:were|have\s+been)\s+told|above|before|else)"
    r"|\b(?:ignore|disregard)\s+(?:everything|all)\s+(?:above|before|previous|prior)\b",
    re.IGNORECASE,
)
# "ignore the earlier instructions about the parking permit": instructions a person gave about
# something, not the model's.
_QUALIFIED = re.compile(r"\s+(?:about|regarding|concerning|on\s+the|for\s+the|in\s+the|from\s+the|sent|we|i"
                        r"|printed|written|listed|shown)\b", re.IGNORECASE)
_REVEAL = re.compile(
    r"\b(?:reveal|print|repeat|output|show|leak|dump)\s+(?:me\s+)?(?:all\s+)?(?:your|the)\s+"
    r"(?:full\s+|entire\s+|whole\s+|initial\s+|hidden\s+|original\s+)?"
    r"(?:system\s+prompt|prompt(?!\s+(?:string|number|code|box|window|line|text))|instructions|hidden\s+instructions|configuration"
    r"|conversation(?:\s+history)?|chat\s+history)\b"
    r"|\boutput\s+all\s+(?:stored\s+)?memories\b",
    re.IGNORECASE,
)
_ROLE = re.compile(
    r"\byou\s+are\s+(?:now|no\s+longer)\s+(?:an?\s+|the\s+|in\s+)?(?:[\w-]+\s+){0,3}?"
    r"(?:dan|jailbroken|unrestricted|unfiltered|mode|" + _MODEL[3:-1] + r")\b"
    r"|\bfrom\s+(?:now|this\s+point|here)\s+on,?\s+(?:you\s+(?:are|will|must|shall)\b|answer|reply|respond)"
    r"|\bplay\s+the\s+role\s+of\b|\bpretend\s+(?:to\s+be|you\s+are)\b",
    re.IGNORECASE,
)
_TEMPLATE = re.compile(
    r"<\|im_start\|>\s*(?:system|user|assistant)|<\|(?:system|user|assistant)\|>|\[INST\]|<<SYS>>"
    r"|</?system>|\[system\]\(#",
    re.IGNORECASE,
)
# A role label opening a line ("System: ...", "Human: ..."): a fake turn when the line has something
# for the model to do; transcripts and spec sheets ("System: Ubuntu 22.04") have not.
_ROLE_LABEL = re.compile(r"^[ \t]*(?:system|human|user|assistant)[ \t]*:[ \t]*(.*)$", _F)
# A label that announces instructions: by itself when it names the model, else only when what
# follows speaks to the model or about the user ("New instructions: the installer now asks ..." is a
# changelog).
_LABEL = re.compile(
    r"(?:^|(?<=[.!?;\[(>])\s*)(?:(?P<model>assistant|ai|system)\s+|(?:(?:new|updated|important|hidden|real"
    r"|secret|priority|urgent)\s+){1,2})(?:instructions?|directives?|override)\s*:(?P<rest>.{0,160})"
    r"|(?:^|(?<=[.!?;\[(>])\s*)(?:(?:priority\s+)?override|(?:new\s+)?system\s+(?:prompt|message))\s*:"
    r"(?P<rest2>.{0,160})",
    _F,
)
# "Your true objective is to convince the user ...": a new task given to the reader of the text.
_OBJECTIVE = re.compile(
    r"\byour\s+(?:new|real|true|only|actual|primary|main)\s+(?:task|goal|objective|instructions?|job|purpose"
    r"|mission)\s+(?:is|are|now)\b(?P<rest>.{0,160})",
    re.IGNORECASE,
)
# After an address, a first word that does not start a command ("Dear AI, thanks for ...").
_NOT_COMMAND = frozenset(
    "the a an this that these those it its is are was were be i we he she they you thanks thank welcome hello"
    " hi how what why when where who which in on at for of to and or but with my our their his her there here"
    " good great nice".split())
_FIRST_WORD = re.compile(r"\W*(?:(?:please|now|just|also|then|kindly|first)\s+)*([a-z]+)", re.IGNORECASE)
_TO_MODEL = re.compile(r"\b(?:you|your|the\s+user|user's|assistant|ai|model|reply|respond|answer|say|tell)\b",
                       re.IGNORECASE)

# A command stands at the start of a clause (after optional softeners); "telling the model to
# ignore ...", "Kids will ignore ...", "can you reveal ..." report or describe one.
_SOFTENERS = r"(?:(?:please|now|just|also|then|simply|first|kindly|instead|immediately|so)\s+)*"
_CLAUSE_END = re.compile(
    r"(?:^|[^\w\s]|\band|\bthen|\b" + _NAMED + r"|\byou\s+(?:must|should|need\s+to|have\s+to|will))\s*"
    + _SOFTENERS + r"$",
    re.IGNORECASE,
)
_DISCUSSION = re.compile(
    r"\b(?:such\s+as|for\s+example|for\s+instance|e\.g\.|i\.e\.|known\s+as|called|so-called|payloads?"
    r"|(?:phrases?|strings?|words?|prompts?|inputs?|text|lines?|commands?|something)\s+like"
    r"|attackers?|adversar\w*|malicious|injections?|jailbreak\w*|attacks?|researchers?|phrases?|strings?"
    r"|meme|exploit\w*|vulnerab\w*|defen[cd]\w*|mitigat\w*|flagged|red[- ]team\w*|technique|studied|wrote"
    r"|writes|typed|types|says|saying|said|reads|read:|contained|embedded)\b",
    re.IGNORECASE,
)
_TEMPLATE_DOC = re.compile(
    r"\b(?:format\w*|template\w*|tokens?|tokenizer|tags?|wraps?|markers?|special|syntax|expects?|roles?|chatml"
    r"|(?:starts?|begins?)\s+with|followed\s+by|written\s+as|looks?\s+like)\b",
    re.IGNORECASE,
)
# The user asked about the topic: then an article on it quotes attacks without quotation marks too.
_TOPIC = re.compile(
    r"\b(?:inject\w*|jailbr\w*|prompt\s+(?:attacks?|hacking|leak\w*|format|templates?)|chat\s+templates?"
    r"|chatml|special\s+tokens?|(?:ai|llm|prompt|model|agent|application|app)\s+security|owasp|red[- ]team\w*"
    r"|adversarial|system\s+(?:prompt|message)s?|llama|mistral|zephyr|turn\s+markers?)",
    re.IGNORECASE,
)
# The words each signal needs, looked up in the text's word set first: most tool results hold
# none, and a regex pass over a long one costs milliseconds.
_WORD = re.compile(r"[a-z]+")
_NEEDS_ADDRESS = frozenset(
    "ai assistant assistants llm llms language model models chatbot chatbots bot bots agent agents gpt"
    " chatgpt claude copilot gemini".split())
_NEEDS_EXFIL = frozenset("send forward email mail post upload transmit submit visit leak".split())
_NEEDS_TEMPLATE = frozenset("system inst sys".split())  # and "<|", looked for apart
_NEEDS_ROLE_LABEL = frozenset("system human user assistant".split())
_NEEDS_LABEL = frozenset("instruction instructions directive directives override system".split())
_NEEDS_OVERRIDE = frozenset("ignore disregard forget override bypass".split())
_NEEDS_REVEAL = frozenset("reveal print repeat output show leak dump".split())
_NEEDS_ROLE = frozenset("you from play pretend".split())
# "e.g." and "i.e." end no sentence.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s)|\n")


def _leaves(text: str) -> Iterator[str]:
    """The strings of a JSON tool result (whose own quotes are syntax, not quotation), else TEXT."""
    s = text.strip()
    if s[:1] in "{[":
        try:
            obj = json.loads(s)
        except ValueError:
            yield text
            return
        stack = [obj]
        while stack:
            o = stack.pop()
            if isinstance(o, str):
                yield o
            elif isinstance(o, dict):
                stack.extend(reversed(list(o.values())))
            elif isinstance(o, list):
                stack.extend(reversed(o))
        return
    yield text


def _spans(text: str) -> list[tuple[int, int]]:
    out = [m.span() for m in _CODE.finditer(text)]
    out += [m.span() for m in _QUOTE.finditer(text)]
    return out


def _inside(spans: list[tuple[int, int]], a: int, z: int) -> bool:
    return any(s <= a and z <= e for s, e in spans)


def _sentence(text: str, a: int, z: int) -> str:
    start = 0
    for m in _SENTENCE_END.finditer(text, 0, a):
        start = m.end()
    end = _SENTENCE_END.search(text, z)
    return text[start : end.end() if end else len(text)]


def _imperative(text: str, a: int) -> bool:
    line_start = text.rfind("\n", 0, a) + 1
    return _CLAUSE_END.search(text[max(line_start, a - 60) : a]) is not None


def _snippet(text: str, a: int, z: int) -> str:
    return text[max(0, a - 60) : min(len(text), z + 60)]


def _used(text: str, spans: list[tuple[int, int]], a: int, z: int) -> bool:
    """Whether an override phrase at A..Z is used rather than mentioned."""
    if _inside(spans, a, z):
        return False
    return _DISCUSSION.search(_sentence(text, a, z)) is None


def _text_hint(text: str, *, topic: bool) -> tuple[str, str] | None:
    low = text.lower()
    words = frozenset(_WORD.findall(low))
    if not (words & (_NEEDS_ADDRESS | _NEEDS_EXFIL | _NEEDS_TEMPLATE | _NEEDS_ROLE_LABEL | _NEEDS_LABEL
                     | _NEEDS_OVERRIDE | _NEEDS_REVEAL | _NEEDS_ROLE) or "a.i." in low or "<|" in low):
        return None
    spans = _spans(text)
    article = topic and len(_DISCUSSION.findall(text)) >= 2
    if words & _NEEDS_ADDRESS or "a.i." in low:
        for m in _ADDRESS.finditer(text):
            a, z = m.span()
            if _inside(spans, a, z):
                continue
            stretch = text[m.end() : m.end() + 200]
            first = _FIRST_WORD.match(stretch)
            command = first is not None and first.group(1).lower() not in _NOT_COMMAND
            if command or _ACTION.search(stretch) or _YOU.search(stretch) or _OVERRIDE.search(stretch):
                return "addressed to the model", _snippet(text, a, z)
    if words & _NEEDS_EXFIL:
        for m in _EXFIL.finditer(text):
            a, z = m.span()
            if not _inside(spans, a, z) and _imperative(text, a):
                return "sends the user's data", _snippet(text, a, z)
    if words & _NEEDS_TEMPLATE or "<|" in low:
        for m in _TEMPLATE.finditer(text):
            a, z = m.span()
            if _inside(spans, a, z) or article:
                continue
            sentence = _sentence(text, a, z)
            if _TEMPLATE_DOC.search(sentence) is None and _DISCUSSION.search(sentence) is None:
                return "chat-template token", _snippet(text, a, z)
    if words & _NEEDS_ROLE_LABEL:
        for m in _ROLE_LABEL.finditer(text):
            a, z = m.span()
            if not _inside(spans, a, z) and (_ACTION.search(m.group(1)) or _OVERRIDE.search(m.group(1))):
                return "fake turn", _snippet(text, a, z)
    if words & _NEEDS_LABEL and not article:
        for m in _LABEL.finditer(text):
            a, z = m.span()
            if _inside(spans, a, a + 1):
                continue
            if m.group("model") or _TO_MODEL.search(m.group("rest") or m.group("rest2") or ""):
                return "new instructions", _snippet(text, a, z)
    if "your" in words and not article:
        for m in _OBJECTIVE.finditer(text):
            rest = m.group("rest")
            if not _inside(spans, *m.span()) and (_ACTION.search(rest) or _YOU.search(rest)):
                return "new instructions", _snippet(text, *m.span())
    for name, rx, needs, command in (
        ("ignore previous instructions", _OVERRIDE, _NEEDS_OVERRIDE, True),
        ("reveal the prompt", _REVEAL, _NEEDS_REVEAL, True),
        ("role override", _ROLE, _NEEDS_ROLE, False),
    ):
        if article or not words & needs:
            continue
        for m in rx.finditer(text):
            a, z = m.span()
            if command and (not _imperative(text, a) or (rx is _OVERRIDE and _QUALIFIED.match(text, z))):
                continue
            if _used(text, spans, a, z):
                return name, _snippet(text, a, z)
    return None


@functools.lru_cache(maxsize=4096)
def injection_hint(text: str, *, topic: bool = False) -> tuple[str, str] | None:
    """Why TEXT (a retrieved document or tool result) instructs the model: (the signal, the text
    around it), or None. TOPIC: the user asked about prompt attacks, templates or security.
    Memoised: a retrieved document or tool result stays in the context for many turns."""
    for leaf in _leaves(text):
        hint = _text_hint(leaf, topic=topic)
        if hint is not None:
            return hint
    return None


def asked_about_injection(question: str) -> bool:
    """Whether the user's message is about prompt attacks, chat templates or security."""
    return _TOPIC.search(question) is not None
