"""A web server process is ready when it has imported its application: the URL configuration
(every app's views and API schemas) is loaded then, not by the first request it serves, and what
it loaded is kept out of the garbage collector's full collections."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT, process_env

PROBE = """
import gc, json, sys
import {module}
MODULES = ("config.urls", "config.api", "ingest.api", "ingest.views")
loaded = {{m: m in sys.modules for m in MODULES}}
print(json.dumps({{"loaded": loaded, "frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}}))
"""


@pytest.mark.django_db
@pytest.mark.parametrize("module", ["config.wsgi", "config.asgi"])
def test_importing_the_application_loads_the_urls_and_freezes_them(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], env=process_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["loaded"] == dict.fromkeys(found["loaded"], True)
    # The modules' objects sit in the permanent generation, which no collection walks.
    assert found["frozen"] > 50_000
    assert found["tracked"] < found["frozen"] / 10
