"""Writes of model endpoints: create one, register the embedded local model, choose the
project's default, and test a connection."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from core import secrets
from core.models import Project
from core.services import project_model_windows_set
from ctxobs.catalog import context_window_for
from replay import endpoints
from replay.errors import EndpointError, ReplayError
from replay.models import ModelEndpoint

logger = logging.getLogger(__name__)

LOCAL_ENDPOINT_NAME = "local gemma-3-270m"
LOCAL_MODEL_NAME = "gemma-3-270m"
# Defaults fill in only what a turn did not save: a bound on the answer's length, for a turn
# saved without one.
LOCAL_DEFAULT_PARAMS: dict[str, Any] = {"max_tokens": 64}


def endpoint_create(
    *,
    project: Project,
    name: str,
    base_url: str,
    model: str,
    api_key: str = "",
    mode: str = "chat",
    default_params: dict[str, Any] | None = None,
    embeddings_model: str = "",
    timeout_s: float = 60.0,
    is_default: bool = False,
    is_local: bool = False,
    chat_drops_later_system: bool = False,
) -> ModelEndpoint:
    """A new endpoint of PROJECT; the base URL is checked against the project's address policy
    and the API key is stored encrypted."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise EndpointError("give the endpoint a name (at most 100 characters)")
    if not (model or "").strip():
        raise EndpointError("give the model name the server expects")
    if mode not in ModelEndpoint.Mode.values:
        raise EndpointError(f"mode must be one of {', '.join(ModelEndpoint.Mode.values)}")
    if default_params is not None and not isinstance(default_params, dict):
        raise EndpointError("default parameters must be a JSON object")
    if not 1 <= float(timeout_s) <= 600:
        raise EndpointError("the timeout must be between 1 and 600 seconds")
    url = endpoints.validate_base_url(base_url, allow_private=project.allow_private_endpoints)
    with transaction.atomic():
        if ModelEndpoint.objects.filter(project=project, name=name).exists():
            raise EndpointError(f"an endpoint named {name[:100]!r} exists already")
        first = not ModelEndpoint.objects.filter(project=project).exists()
        ep = ModelEndpoint.objects.create(
            project=project,
            name=name,
            base_url=url,
            model=model.strip(),
            mode=mode,
            api_key_encrypted=secrets.encrypt(api_key),
            api_key_hint=secrets.hint(api_key) if api_key else "",
            default_params=default_params or {},
            embeddings_model=embeddings_model.strip(),
            timeout_s=float(timeout_s),
            is_default=is_default or first,
            is_local=is_local,
            chat_drops_later_system=chat_drops_later_system,
        )
        if ep.is_default:
            ModelEndpoint.objects.filter(project=project, is_default=True).exclude(pk=ep.pk).update(
                is_default=False
            )
    logger.info("replay.endpoint_created project_id=%s endpoint_id=%s mode=%s", project.pk, ep.pk, mode)
    return ep


def local_endpoint_register(
    *, project: Project, base_url: str, served_window: int | None = None
) -> ModelEndpoint:
    """Register (or point again) the embedded local model server at BASE_URL (e.g.
    "http://127.0.0.1:8011/v1") as PROJECT's default endpoint. The project must allow private
    endpoints (Project.allow_private_endpoints), since the server listens on loopback.

    The endpoint uses the completions API with a transcript ctxobs renders: the model is a base
    model whose weights carry no chat template, and llama-cpp-python would otherwise wrap the
    messages in another model's (Llama 2 `[INST]`) template, whose tokens then leak into the
    answers. SERVED_WINDOW, when the server runs with a context other than the model's catalogued
    window, becomes the project's window for the model, so its turns are measured against what
    the server accepts."""
    if not project.allow_private_endpoints:
        raise EndpointError(
            "the local model listens on loopback: allow private endpoints for this project first"
        )
    url = endpoints.validate_base_url(base_url, allow_private=True)
    with transaction.atomic():
        ep = (
            ModelEndpoint.objects.select_for_update()
            .filter(project=project, name=LOCAL_ENDPOINT_NAME)
            .first()
        )
        if ep is None:
            ep = endpoint_create(
                project=project,
                name=LOCAL_ENDPOINT_NAME,
                base_url=url,
                model=LOCAL_MODEL_NAME,
                mode=ModelEndpoint.Mode.COMPLETIONS,
                default_params=dict(LOCAL_DEFAULT_PARAMS),
                # The embedded server also serves embeddings: the semantic measure, offline.
                embeddings_model=LOCAL_MODEL_NAME,
                timeout_s=60.0,
                is_default=True,
                is_local=True,
            )
        else:
            ep.base_url = url
            ep.is_local = True
            ep.mode = ModelEndpoint.Mode.COMPLETIONS
            ep.chat_drops_later_system = False
            ep.default_params = dict(LOCAL_DEFAULT_PARAMS)
            ep.save(
                update_fields=[
                    "base_url", "is_local", "mode", "chat_drops_later_system", "default_params", "updated_at"
                ]
            )
        if not ModelEndpoint.objects.filter(project=project, is_default=True).exclude(pk=ep.pk).exists():
            ModelEndpoint.objects.filter(pk=ep.pk).update(is_default=True)
            ep.is_default = True
    if served_window is not None and served_window != context_window_for(LOCAL_MODEL_NAME):
        project_model_windows_set(
            project=project, windows={**project.model_windows, LOCAL_MODEL_NAME: served_window}
        )
    logger.info("replay.local_endpoint_registered project_id=%s endpoint_id=%s", project.pk, ep.pk)
    return ep


def endpoint_set_default(*, endpoint: ModelEndpoint) -> None:
    with transaction.atomic():
        ModelEndpoint.objects.filter(project_id=endpoint.project_id).update(is_default=False)
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)


def _api_key(endpoint: ModelEndpoint) -> str:
    try:
        return secrets.decrypt(endpoint.api_key_encrypted, what="the stored API key")
    except ValueError as exc:
        raise EndpointError(str(exc)) from None


def endpoint_test(*, endpoint: ModelEndpoint) -> tuple[bool, str]:
    """Call the endpoint once (one token); remember and return (ok, what happened)."""
    try:
        project = endpoint.project
        # Shape only: the address is checked where the connection is opened (core.net).
        url = endpoints.validate_base_url(
            endpoint.base_url, allow_private=project.allow_private_endpoints, resolve=False
        )
        detail = endpoints.connection_check(
            base_url=url,
            model=endpoint.model,
            mode=endpoint.mode,
            api_key=_api_key(endpoint),
            timeout=min(endpoint.timeout_s, 30.0),
            allow_private=project.allow_private_endpoints,
        )
        ok = True
    except (endpoints.CallError, ReplayError) as exc:
        ok, detail = False, getattr(exc, "reason", None) or str(exc)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(
        last_test_at=timezone.now(), last_test_ok=ok, last_test_detail=detail[:500]
    )
    logger.info("replay.endpoint_tested endpoint_id=%s ok=%s", endpoint.pk, ok)
    return ok, detail
