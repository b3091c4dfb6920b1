"""The SDK must never import Django (agents install it without the server's dependencies)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sdk_modules_import_without_django_or_openai() -> None:
    code = (
        "import ctxobs, ctxobs.transport, ctxobs.client, ctxobs.instrument, ctxobs.tokens, "
        "ctxobs.wire, ctxobs.validate, ctxobs.hashing, ctxobs.schema, ctxobs.catalog, ctxobs.cli; "
        "import sys; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'ninja', 'openai', 'celery')); "
        "assert not bad, bad; "
        "c = ctxobs.Client(disabled=True); "
        "t = c.turn(session_id='s', model='gpt-4o'); t.block('user', [{'role': 'user', 'content': 'hi'}]); "
        "assert t.tokens() > 0; "
        "assert not any(m.startswith('django') for m in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
