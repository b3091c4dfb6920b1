"""`manage.py ctxobs_project create | keys | newkey | revoke | adduser`."""

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from core.models import IngestKey, Membership, Project, hash_key

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


def test_create_makes_an_ingest_only_key_and_replay_needs_the_flag():
    out = run("create", "shop")
    assert "ingest-only key" in out
    assert IngestKey.objects.get(project__name="shop").scopes == ["ingest"]
    out = run("newkey", "shop", "--label", "ci", "--replay")
    assert "ingest+replay key" in out
    assert IngestKey.objects.get(name="ci").scopes == ["ingest", "replay"]
    out = run("create", "bench", "--replay")
    assert IngestKey.objects.get(project__name="bench").scopes == ["ingest", "replay"]
    listing = run("keys", "shop").splitlines()
    assert [("replay" in line) for line in listing] == [False, True]


def test_adduser_creates_a_ui_user_with_a_password_from_stdin(monkeypatch, client):
    run("create", "shop")
    monkeypatch.setattr("sys.stdin", StringIO("correct horse battery\n"))
    out = run("adduser", "shop", "ana", "--role", "admin", "--password-stdin")
    assert "ana created and added to shop as admin" in out
    m = Membership.objects.get(user__username="ana")
    assert (m.project.name, m.role) == ("shop", "admin")
    assert client.login(username="ana", password="correct horse battery")
    assert client.get(f"/p/{m.project_id}/settings/").status_code == 200


def test_adduser_adds_an_existing_user_without_touching_the_password():
    run("create", "shop")
    run("create", "other")
    get_user_model().objects.create_user("bo", password="first password 1")
    out = run("adduser", "other", "bo", "--role", "viewer")
    assert "existing user, password unchanged" in out
    assert get_user_model().objects.get(username="bo").check_password("first password 1")
    with pytest.raises(CommandError, match="already a member"):
        run("adduser", "other", "bo", "--role", "editor")


def test_adduser_without_a_password_source_explains_itself(monkeypatch):
    run("create", "shop")
    monkeypatch.setattr("sys.stdin", StringIO(""))
    with pytest.raises(CommandError, match="--password-stdin"):
        run("adduser", "shop", "cy")
    assert not get_user_model().objects.filter(username="cy").exists()


def test_the_demo_project_allows_its_loopback_model_and_its_key_may_replay(tmp_path):
    from core.management.commands.ctxobs_up import DEMO_PROJECT, Command

    project, raw, _ = Command()._demo_project(tmp_path)
    assert project.name == DEMO_PROJECT and project.allow_private_endpoints
    assert IngestKey.objects.get(key_hash=hash_key(raw)).scopes == ["ingest", "replay"]
