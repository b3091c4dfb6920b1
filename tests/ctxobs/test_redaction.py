"""Client(redact=fn): prompt and reply text is masked before it leaves the process."""

from __future__ import annotations

import json
import re

import ctxobs
from tests.ctxobs.conftest import spool_lines

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")


def mask_emails(text: str) -> str:
    return EMAIL.sub("<email>", text)


def test_emails_are_masked_everywhere_text_leaves_the_process(ingest, make_client) -> None:
    obs = make_client(ingest.url, redact=mask_emails)
    user_msg = {"role": "user", "content": "Mail the ticket to ann.lee@example.com"}
    with obs.turn(session_id="s", model="gpt-4o-mini") as t:
        t.block("system", [{"role": "system", "content": "Support: help@corp.example"}])
        t.block(
            "memory", [{"role": "system", "content": [{"type": "text", "text": "bob@example.org likes tea"}]}]
        )
        t.block(
            "history",
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "send", "arguments": '{"to": "ann.lee@example.com"}'},
                        }
                    ],
                }
            ],
        )
        t.block("user", [user_msg])
        t.recall("m1", preview="ann.lee@example.com prefers aisle")
        t.validation("semantic", "no_pii", passed=False, message="reply leaks ann.lee@example.com")
        t.output("Sent to ann.lee@example.com")
        counted = t.tokens()
    assert obs.flush(timeout=5)
    snap = ingest.stored[t.snapshot_id]
    text = json.dumps(snap)
    assert "@example" not in text and "@corp" not in text
    assert text.count("<email>") == 7
    # Counts describe what the model saw, not the masked copy.
    assert sum(b["tokens"] for b in snap["blocks"]) + 3 == counted
    # The agent's own data is untouched.
    assert user_msg["content"].endswith("ann.lee@example.com")
    assert t.messages()[-1]["content"].endswith("ann.lee@example.com")


def test_a_failing_redactor_drops_the_snapshot_instead_of_sending_it_unmasked(ingest, make_client) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("regex bug")

    errors: list[ctxobs.CtxobsDeliveryError] = []
    obs = make_client(ingest.url, redact=broken, on_error=errors.append)
    with obs.turn(session_id="s", model="gpt-4o") as t:
        t.block("user", [{"role": "user", "content": "secret@example.com"}])
    assert obs.flush(timeout=5)
    assert ingest.posts == []
    assert [e.kind for e in errors] == ["prepare"] and errors[0].snapshot_ids == [t.snapshot_id]
    assert obs.stats()["failed"] == 1


def test_spooled_snapshots_are_redacted_too(ingest_down, make_client, tmp_path) -> None:
    spool = tmp_path / "spool"
    obs = make_client(ingest_down.url, redact=mask_emails, spool=spool, max_retries=0)
    with obs.turn(session_id="s", model="gpt-4o") as t:
        t.block("user", [{"role": "user", "content": "me@example.com"}])
    obs.close(timeout=3)
    text = b"\n".join(spool_lines(spool))
    assert b"me@example.com" not in text and b"<email>" in text
