"""Endpoints: base URL policy, encrypted keys, test connection, the admin page."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import connection

from core import secrets
from core.models import Project
from replay import endpoints
from replay.errors import EndpointError
from replay.models import ModelEndpoint
from replay.services.model_endpoints import endpoint_create, endpoint_test, local_endpoint_register


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1",
        "http://localhost/v1",
        "http://10.0.0.5/v1",
        "http://192.168.1.2/v1",
        "http://172.16.0.1/v1",
        "http://169.254.169.254/latest",
        "http://[::1]:8000/v1",
        "http://0.0.0.0/v1",
        "http://[::ffff:127.0.0.1]/v1",
    ],
    ids=[
        "loopback",
        "localhost",
        "10/8",
        "192.168/16",
        "172.16/12",
        "link-local-metadata",
        "ipv6-loopback",
        "unspecified",
        "v4-mapped",
    ],
)
def test_private_addresses_are_refused_unless_the_project_allows_them(url: str) -> None:
    with pytest.raises(EndpointError, match="private"):
        endpoints.validate_base_url(url, allow_private=False)
    assert endpoints.validate_base_url(url, allow_private=True) == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/v1",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://",
        "http://user:pw@8.8.8.8/v1",
        "http://8.8.8.8/v1?x=1",
    ],
    ids=["ftp", "file", "javascript", "no-host", "credentials", "query"],
)
def test_only_plain_http_and_https_base_urls_are_accepted(url: str) -> None:
    with pytest.raises(EndpointError):
        endpoints.validate_base_url(url, allow_private=True)


def test_a_public_address_is_accepted_without_the_private_flag() -> None:
    assert endpoints.validate_base_url("https://8.8.8.8/v1/", allow_private=False) == "https://8.8.8.8/v1"


@pytest.mark.django_db
def test_the_api_key_is_stored_encrypted_and_never_logged(project: Project, caplog: Any) -> None:
    Project.objects.filter(pk=project.pk).update(allow_private_endpoints=True)
    project.refresh_from_db()
    secret = "sk-live-abcdefghijklmnop-0123"
    with caplog.at_level(logging.DEBUG):
        ep = endpoint_create(
            project=project, name="prod", base_url="http://127.0.0.1:9/v1", model="m", api_key=secret
        )
    with connection.cursor() as cur:
        cur.execute("SELECT api_key_encrypted, api_key_hint FROM replay_modelendpoint WHERE id = %s", [ep.pk])
        stored, hint = cur.fetchone()
    assert secret not in stored and stored
    assert secrets.decrypt(stored) == secret
    assert hint == "…0123"
    assert secret not in caplog.text


@pytest.mark.django_db
def test_a_project_without_the_private_flag_cannot_register_a_loopback_endpoint(project: Project) -> None:
    with pytest.raises(EndpointError):
        endpoint_create(project=project, name="x", base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(EndpointError):
        local_endpoint_register(project=project, base_url="http://127.0.0.1:9/v1")
    assert not ModelEndpoint.objects.exists()


@pytest.mark.django_db
def test_local_endpoint_register_is_idempotent_and_repoints(private_project: Project) -> None:
    a = local_endpoint_register(project=private_project, base_url="http://127.0.0.1:8011/v1")
    b = local_endpoint_register(project=private_project, base_url="http://127.0.0.1:8012/v1")
    # A base model with no chat template in its weights: the transcript, never another model's template.
    assert a.pk == b.pk and b.is_default and b.mode == "completions" and not b.chat_drops_later_system
    assert "seed" not in b.default_params and "temperature" not in b.default_params
    assert ModelEndpoint.objects.get(pk=a.pk).base_url == "http://127.0.0.1:8012/v1"


@pytest.mark.django_db
def test_the_local_models_served_window_is_the_window_its_turns_are_measured_against(
    private_project: Project,
) -> None:
    from ctxobs.catalog import context_window_for
    from replay import localmodel

    # Served by default at the catalogue's window: nothing to override.
    assert localmodel.DEFAULT_N_CTX == context_window_for("gemma-3-270m") == 32_768
    local_endpoint_register(project=private_project, base_url="http://127.0.0.1:8011/v1",
                            served_window=localmodel.DEFAULT_N_CTX)
    private_project.refresh_from_db()
    assert private_project.model_windows == {}
    # Served smaller (ctxobs_localmodel --n-ctx 4096 --project ...): the project measures against it.
    local_endpoint_register(project=private_project, base_url="http://127.0.0.1:8011/v1", served_window=4096)
    private_project.refresh_from_db()
    assert private_project.model_windows == {"gemma-3-270m": 4096}
    assert context_window_for("gemma-3-270m", overrides=private_project.model_windows) == 4096


@pytest.mark.django_db
def test_test_connection_reports_success_and_failure(stub_endpoint: ModelEndpoint, stub_server: Any) -> None:
    ok, detail = endpoint_test(endpoint=stub_endpoint)
    assert ok and detail.startswith("ok")
    assert stub_server.calls[-1]["body"]["max_tokens"] == 1
    stub_server.script = [(401, {}, 0.0)]
    ok, detail = endpoint_test(endpoint=stub_endpoint)
    assert not ok and "401" in detail
    stub_endpoint.refresh_from_db()
    assert stub_endpoint.last_test_ok is False


@pytest.mark.django_db
def test_admins_add_endpoints_on_the_page_and_the_key_is_never_shown(
    admin_client_: Any, private_project: Project, stub_server: Any
) -> None:
    url = f"/p/{private_project.pk}/endpoints/"
    secret = "sk-page-secret-zyxwvu-9876"
    resp = admin_client_.post(
        url,
        {
            "name": "stub",
            "base_url": stub_server.base_url,
            "model": "m",
            "mode": "chat",
            "api_key": secret,
            "default_params": '{"temperature": 0}',
            "timeout_s": "10",
        },
    )
    assert resp.status_code == 302
    page = admin_client_.get(url).content.decode()
    assert "stub" in page and secret not in page and "…9876" in page
    ep = ModelEndpoint.objects.get(project=private_project, name="stub")
    resp = admin_client_.post(f"/p/{private_project.pk}/endpoints/{ep.pk}/test", HTTP_HX_REQUEST="true")
    assert resp.status_code == 200 and "ok: answered" in resp.content.decode()


@pytest.mark.django_db
def test_a_bad_base_url_is_explained_on_the_page(admin_client_: Any, project: Project) -> None:
    Project.objects.filter(pk=project.pk).update(allow_private_endpoints=False)
    resp = admin_client_.post(
        f"/p/{project.pk}/endpoints/",
        {"name": "x", "base_url": "http://10.1.2.3/v1", "model": "m", "api_key": "sk-should-not-echo"},
    )
    body = resp.content.decode()
    assert resp.status_code == 400 and "private" in body and "sk-should-not-echo" not in body


@pytest.mark.django_db
def test_editors_cannot_manage_endpoints(editor_client: Any, private_project: Project) -> None:
    assert editor_client.get(f"/p/{private_project.pk}/endpoints/").status_code == 403


def test_model_calls_of_one_process_share_one_kept_alive_connection() -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    peers: list[tuple[str, int]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps the connection open unless the client closes it

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            peers.append(self.client_address)
            payload = json.dumps({"choices": [{"text": "ok", "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        for _ in range(3):
            res = endpoints.complete(base_url=base, path="/completions", body={"prompt": "x"}, api_key="",
                                     timeout=5.0, allow_private=True)
            assert res.text == "ok"
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(peers) == 3 and len(set(peers)) == 1, peers
    assert endpoints.shared_client(allow_private=True) is endpoints.shared_client(allow_private=True)
