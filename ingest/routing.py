"""How a session id is written into one URL path segment, and read back.

`~` is the escape character: `~7E` is `~`, `~2F` is `/`, and a segment that is only dots (which
browsers collapse as `.`/`..`) has each dot written `~2E`. Everything else stays as it is, so
ordinary ids (`support-7431`) read the same in the address bar.
"""

from __future__ import annotations

import re

_ESCAPED = re.compile(r"~(7[Ee]|2[Ff]|2[Ee])")


def session_id_segment(session_id: str) -> str:
    """SESSION_ID as one path segment (no `/`, never `.` or `..`)."""
    out = session_id.replace("~", "~7E").replace("/", "~2F")
    if out.strip(".") == "":
        out = out.replace(".", "~2E")
    return out


def session_id_from_segment(segment: str) -> str:
    """The session id a segment made by session_id_segment stands for. Any other `~` is kept as
    it is, so links made before the escaping still name their session."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), segment)


# Page suffixes of the links made before the escaping, most specific first, as they were routed:
# the raw session id (slashes and all) came before them.
_LEGACY_PAGES = (
    (re.compile(r"^(?P<sid>.+)/t/(?P<turn>\d+)/b/(?P<position>\d+)/$", re.S), "ingest:block"),
    (re.compile(r"^(?P<sid>.+)/t/(?P<turn>\d+)/$", re.S), "ingest:turn"),
    (re.compile(r"^(?P<sid>.+)/chart\.json$", re.S), "ingest:chart_data"),
    (re.compile(r"^(?P<sid>.+?)/?$", re.S), "ingest:timeline"),
)


def legacy_session_paths(rest: str) -> list[tuple[str, str, dict[str, int]]]:
    """Every reading of REST (what followed `/s/` in an old link) as (session id, URL name, other
    URL arguments), in the order the old routes tried them."""
    out = []
    for pattern, name in _LEGACY_PAGES:
        m = pattern.match(rest)
        if m:
            groups = m.groupdict()
            sid = groups.pop("sid")
            out.append((sid, name, {k: int(v) for k, v in groups.items()}))
    return out
