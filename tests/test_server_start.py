"""A web server process is ready when it has imported its application: the URL configuration
(every app's views and API schemas) is loaded then, not by the first request it serves."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT, process_env

PROBE = """
import json, sys
import {module}
MODULES = ("config.urls", "config.api", "ingest.api", "ingest.views")
print(json.dumps({{m: m in sys.modules for m in MODULES}}))
"""


@pytest.mark.django_db
@pytest.mark.parametrize("module", ["config.wsgi", "config.asgi"])
def test_importing_the_application_loads_the_url_configuration(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], env=process_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == dict.fromkeys(loaded, True)
