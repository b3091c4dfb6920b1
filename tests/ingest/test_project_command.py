"""`manage.py ctxobs_project create | keys | revoke`."""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ingest.models import IngestKey, Project, hash_key

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("ctxobs_project", *args, stdout=out)
    return out.getvalue()


def test_create_prints_the_key_once_and_stores_only_its_hash():
    out = run("create", "shop")
    raw = re.search(r"(cx_\S+)", out).group(1)
    key = IngestKey.objects.get(project__name="shop")
    assert key.key_hash == hash_key(raw)
    assert raw not in run("keys", "shop")
    assert key.prefix in run("keys", "shop")


def test_revoke_by_prefix_marks_the_key_revoked():
    run("create", "shop")
    prefix = IngestKey.objects.get().prefix
    assert "revoked" in run("revoke", prefix)
    assert IngestKey.objects.get().revoked_at is not None
    assert "revoked" in run("keys", "shop")
    with pytest.raises(CommandError):
        run("revoke", prefix)


def test_create_twice_is_an_error():
    run("create", "shop")
    with pytest.raises(CommandError):
        run("create", "shop")
    assert Project.objects.count() == 1
