"""CTXOBS_HTTPS=1, the documented production settings: `manage.py check --deploy` is clean, and
a real process under them redirects plain HTTP (not /healthz), sends HSTS and secure cookies, and
believes the proxy's X-Forwarded-Proto. Each runs in a subprocess: settings are read at start."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
HOST = "ctxobs.example.com"


def production_env(**extra: str) -> dict[str, str]:
    """The production settings README and docker-compose.yml document, on the test database and
    Redis (so that nothing embedded is started)."""
    db = settings.DATABASES["default"]
    host = db["HOST"]
    if host.startswith("/"):
        url = f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={host}"
    else:
        port = f":{db['PORT']}" if db["PORT"] else ""
        url = f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}{port}/{db['NAME']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXOBS_") or k == "CTXOBS_HOME"}
    env.update(
        DATABASE_URL=url,
        REDIS_URL=settings.REDIS_URL,
        CTXOBS_HTTPS="1",
        CTXOBS_SECRET_KEY=secrets.token_urlsafe(50),
        CTXOBS_ALLOWED_HOSTS=HOST,
        CTXOBS_CSRF_TRUSTED_ORIGINS=f"https://{HOST}",
        CTXOBS_TRUSTED_PROXIES="127.0.0.1",
    )
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db
def test_check_deploy_is_clean_under_the_production_settings() -> None:
    done = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], production_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


@pytest.mark.django_db
def test_without_the_https_switch_check_deploy_warns() -> None:
    env = production_env(CTXOBS_HTTPS="0")
    done = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)
    assert done.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in done.stderr + done.stdout, check


PROBE = """
import json, django
django.setup()
from django.test import Client
c = Client()
out = {}
r = c.get("/login/", HTTP_HOST="%(host)s")
out["plain"] = [r.status_code, r.headers.get("Location", "")]
r = c.get("/healthz", HTTP_HOST="%(host)s")
out["healthz"] = r.status_code
r = c.get("/login/", HTTP_HOST="%(host)s", HTTP_X_FORWARDED_PROTO="https")
out["proxied"] = [r.status_code, r.headers.get("Strict-Transport-Security", ""),
                  {k: dict(v) for k, v in r.cookies.items()}]
print(json.dumps(out))
"""


@pytest.mark.django_db(transaction=True)
def test_https_switch_redirects_sets_hsts_and_secure_cookies_but_not_for_healthz() -> None:
    env = production_env(DJANGO_SETTINGS_MODULE="config.settings")
    done = run(["-c", PROBE % {"host": HOST}], env)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["plain"] == [301, f"https://{HOST}/login/"]
    assert out["healthz"] == 200
    status, hsts, cookies = out["proxied"]
    assert status == 200
    assert "max-age=31536000" in hsts and "includeSubDomains" in hsts
    assert cookies["csrftoken"]["secure"] is True


@pytest.mark.django_db
def test_a_garbled_trusted_proxy_stops_the_start_with_the_reason() -> None:
    done = run(["manage.py", "check"], production_env(CTXOBS_TRUSTED_PROXIES="10.0.0.0/8,proxy.local"))
    assert done.returncode != 0
    assert "CTXOBS_TRUSTED_PROXIES: 'proxy.local' is not an address or network" in done.stderr
