"""A project's context-window overrides: set on the settings page, used by OTLP ingest, on the
real database."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from core.models import Membership, Project
from core.services import (
    MODEL_NAME_MAX_CHARS,
    MODEL_WINDOWS_MAX_ENTRIES,
    model_windows_problems,
    project_model_windows_set,
)
from ctxobs.wire import LIMITS
from tests.otlp.helpers import genai_chat_attributes, recorded_spans, traces_protobuf
from tests.otlp.test_api import TRACES, post, stored

pytestmark = pytest.mark.django_db


def member(project: Project, name: str, role: str) -> Client:
    user = get_user_model().objects.create_user(username=name, password="pw-" + name)
    Membership.objects.create(project=project, user=user, role=role)
    c = Client()
    c.force_login(user)
    return c


def settings_url(project: Project) -> str:
    return reverse("ingest:settings", args=[project.pk])


def windows_url(project: Project) -> str:
    return reverse("ingest:model_windows", args=[project.pk])


def export(client: Client, key: str, model: str, **extra: Any) -> dict[str, Any]:
    """One chat span for MODEL exported to the real endpoint; its stored snapshot."""
    attrs = genai_chat_attributes() | {"gen_ai.request.model": model, **extra}
    spans = recorded_spans(("chat", attrs))
    assert post(client, TRACES, traces_protobuf(spans), key).status_code == 200
    return stored(project_of(key), spans[0])


def project_of(key: str) -> Project:
    from core.services import ingest_key_authenticate

    return ingest_key_authenticate(raw=key).project


def test_otlp_ingest_uses_the_projects_window_over_the_registry(
    client: Client, project: Project, ingest_key: str
) -> None:
    project_model_windows_set(project=project, windows={"acme-finetune": 24_000, "gpt-4o-mini": 64_000})
    unknown = export(client, ingest_key, "acme-finetune-v3")
    assert unknown["model"]["context_window"] == 24_000
    assert "ctxobs.window" not in unknown["tags"]
    known = export(client, ingest_key, "gpt-4o-mini")
    assert known["model"]["context_window"] == 64_000
    # The watermark is derived against the overridden window.
    assert known["derived"]["usable_tokens"] == 64_000 - known["model"]["reserve_tokens"]


def test_the_window_size_attribute_still_wins_over_the_project(
    client: Client, project: Project, ingest_key: str
) -> None:
    project_model_windows_set(project=project, windows={"acme-finetune": 24_000})
    snap = export(client, ingest_key, "acme-finetune", **{"ctxobs.context.window_size": 4096})
    assert snap["model"]["context_window"] == 4096


def test_without_an_override_the_registry_decides(client: Client, project: Project, ingest_key: str) -> None:
    assert export(client, ingest_key, "gpt-4o-mini")["model"]["context_window"] == 128_000
    assumed = export(client, ingest_key, "acme-finetune")
    assert assumed["model"]["context_window"] == 8192
    assert assumed["tags"]["ctxobs.window"] == "assumed"


def test_admin_sets_windows_on_the_settings_page(project: Project) -> None:
    admin = member(project, "alice", "admin")
    page = admin.get(settings_url(project)).content.decode()
    assert 'id="model-windows"' in page and "the model registry decides" in page
    r = admin.post(windows_url(project), {"windows": "acme-finetune = 24000\n\n  gpt-4o-mini=64000  \n"})
    assert r.status_code == 302 and r["Location"].endswith("#model-windows")
    project.refresh_from_db()
    assert project.model_windows == {"acme-finetune": 24_000, "gpt-4o-mini": 64_000}
    page = admin.get(settings_url(project)).content.decode()
    assert "Context windows set for 2 models." in page
    assert '<td class="mono">acme-finetune</td><td>24,000</td>' in page
    # The form shows what is stored, ready to edit.
    assert "acme-finetune = 24000\ngpt-4o-mini = 64000" in page
    r = admin.post(windows_url(project), {"windows": ""})
    project.refresh_from_db()
    assert project.model_windows == {}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("acme-finetune 24000", "line 1: write it as `model = window`"),
        ("ok = 10\nacme = 0", "line 2: the window of &#x27;acme&#x27; must be a whole number of tokens"),
        ("acme = -5", "must be a whole number of tokens"),
        ("acme = 1.5", "must be a whole number of tokens"),
        ("acme = lots", "(got &#x27;lots&#x27;)"),
        (f"acme = {LIMITS.max_int + 1}", f"from 1 to {LIMITS.max_int}"),
        (" = 100", "line 1: write it as"),
        ("x" * (MODEL_NAME_MAX_CHARS + 1) + " = 100", f"at most {MODEL_NAME_MAX_CHARS}"),
        ("acme = 100\nACME = 200", "line 2: &#x27;ACME&#x27; is listed twice"),
        (
            "\n".join(f"m{i} = 100" for i in range(MODEL_WINDOWS_MAX_ENTRIES + 1)),
            f"{MODEL_WINDOWS_MAX_ENTRIES + 1} models: at most {MODEL_WINDOWS_MAX_ENTRIES}",
        ),
    ],
    ids=[
        "no-equals",
        "zero",
        "negative",
        "fraction",
        "not-a-number",
        "too-big",
        "no-name",
        "long-name",
        "duplicate-any-case",
        "too-many",
    ],
)
def test_bad_windows_are_refused_with_the_line_and_the_reason(
    project: Project, text: str, error: str
) -> None:
    project_model_windows_set(project=project, windows={"kept": 1000})
    admin = member(project, "alice", "admin")
    r = admin.post(windows_url(project), {"windows": text})
    assert r.status_code == 400
    page = r.content.decode()
    assert 'id="model-windows-errors"' in page and error in page
    project.refresh_from_db()
    assert project.model_windows == {"kept": 1000}


def test_model_names_are_escaped_on_the_page(project: Project) -> None:
    admin = member(project, "alice", "admin")
    admin.post(windows_url(project), {"windows": "<script>alert(1)</script> = 100"})
    project.refresh_from_db()
    assert project.model_windows == {"<script>alert(1)</script>": 100}
    page = admin.get(settings_url(project)).content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_only_admins_change_the_windows(project: Project) -> None:
    editor = member(project, "ed", "editor")
    assert editor.post(windows_url(project), {"windows": "acme = 100"}).status_code == 403
    project.refresh_from_db()
    assert project.model_windows == {}


def test_the_service_refuses_what_the_form_would(project: Project) -> None:
    assert model_windows_problems({"acme": 100}) == []
    assert model_windows_problems({"acme": 0}) and model_windows_problems({"": 100})
    assert model_windows_problems({"acme": True}) and model_windows_problems({"a" * 201: 1})
    with pytest.raises(ValueError, match="acme"):
        project_model_windows_set(project=project, windows={"acme": -1})
    project.refresh_from_db()
    assert project.model_windows == {}
