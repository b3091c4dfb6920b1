"""Django's admin, for a superuser: every registered model's list and add pages render (the admin
classes are written ModelAdmin[Model], subscriptable at run time through django_stubs_ext)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


def test_every_registered_models_admin_pages_render(client: Client) -> None:
    user = get_user_model().objects.create_superuser(username="root", password="root-pass-1")
    client.force_login(user)
    models = [m for m in admin.site._registry if m._meta.app_label in {"alerts", "replay"}]
    assert {m.__name__ for m in models} >= {"AlertRule", "Incident", "Channel", "ModelEndpoint", "ReplayJob"}
    for model in models:
        meta = model._meta
        for page in ("", "add/"):
            r = client.get(f"/admin/{meta.app_label}/{meta.model_name}/{page}")
            assert r.status_code == 200, (meta.label, page, r.status_code)
