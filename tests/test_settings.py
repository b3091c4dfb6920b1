"""Every knob is read from the environment by config/settings.py (through core/env.py) and
documented in the README's table; nothing reads an optional setting with a silent default."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
APP_PACKAGES = ("ctxobs", "config", "ingest", "replay", "alerts")


def _run_with_env(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    # The test's own servers: settings must not start embedded ones for this process.
    base = {**os.environ, "DATABASE_URL": settings.DATABASE_URL, "REDIS_URL": settings.REDIS_URL}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_knobs_are_set_from_the_environment() -> None:
    code = (
        "import json\n"
        "from django.conf import settings as s\n"
        "from alerts import channels\n"
        "from alerts.services.delivery import _backoff\n"
        "from alerts.services.evaluation import _lateness\n"
        "from replay.services.runs import _max_attempts, _retry_base_s\n"
        "print(json.dumps({'link': channels.base_url() + channels.turn_path(3, 'a/b', 4),"
        " 'replay': [_max_attempts(), _retry_base_s()], 'lateness': _lateness(),"
        " 'alert_backoff': _backoff(1, None), 'burst': s.CTXOBS_INGEST_RATE_BURST,"
        " 'rate': s.CTXOBS_INGEST_RATE_LIMIT}))\n"
    )
    proc = _run_with_env(
        code,
        CTXOBS_BASE_URL="https://ctxobs.example.com/obs/",
        CTXOBS_REPLAY_MAX_ATTEMPTS="7",
        CTXOBS_REPLAY_RETRY_BASE_S="0.25",
        CTXOBS_ALERT_LATENESS_SECONDS="12",
        CTXOBS_ALERT_RETRY_BASE_SECONDS="3",
        CTXOBS_INGEST_RATE_LIMIT="50",
        CTXOBS_INGEST_RATE_BURST="9",
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["link"] == "https://ctxobs.example.com/obs/p/3/s/a~2Fb/t/4/"
    assert got["replay"] == [7, 0.25]
    assert got["lateness"] == 12.0
    assert got["alert_backoff"] == 3.0
    assert (got["rate"], got["burst"]) == (50.0, 9)


def test_a_malformed_base_url_stops_the_process_naming_the_variable() -> None:
    proc = _run_with_env("", CTXOBS_BASE_URL="ctxobs.example.com")
    assert proc.returncode != 0
    assert "CTXOBS_BASE_URL='ctxobs.example.com'" in proc.stderr and "absolute http(s) URL" in proc.stderr


def _env_names_read() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "config" / "settings.py", ROOT / "core" / "env.py"):
        text = path.read_text()
        names |= set(re.findall(r"env_\w+\(\s*\"([A-Z][A-Z0-9_]+)\"", text))
        names |= set(re.findall(r"os\.environ(?:\.get)?[\[(]\s*\"([A-Z][A-Z0-9_]+)\"", text))
    return names


def test_every_variable_the_settings_read_is_in_the_readme_table() -> None:
    names = _env_names_read()
    assert {"CTXOBS_BASE_URL", "CTXOBS_INGEST_RATE_BURST", "CTXOBS_HOME", "DATABASE_URL"} <= names
    readme = (ROOT / "README.md").read_text().splitlines()
    table = "\n".join(line for line in readme if line.startswith("| `"))
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    assert sorted(names - documented) == []


def test_settings_are_read_only_through_the_settings_module() -> None:
    offenders = []
    for package in APP_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            text = path.read_text()
            if re.search(r"getattr\(\s*settings\s*,", text):
                offenders.append(f"{rel}: getattr(settings, ...) hides a setting the env reader never sets")
            if package != "ctxobs" and rel not in ("core/env.py", "config/embedded.py") and re.search(
                r"os\.(?:environ\b(?!\))|getenv)\s*(?:\.get\s*)?[\[(]\s*\"CTXOBS_", text
            ):
                offenders.append(f"{rel}: reads a CTXOBS_ variable itself")
    assert offenders == []
