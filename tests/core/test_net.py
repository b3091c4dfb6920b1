"""The one URL/SSRF policy (core.net), through both of its users: webhook channels and model
endpoints, when they are saved and again when a connection is opened (DNS rebinding).

A name that resolves differently later cannot be set up in real DNS from a test, so the
rebinding tests stand in for the resolver (socket.getaddrinfo, the operating system's, not our
code) and let everything else run for real: our policy, httpx, a real server on loopback."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from alerts.errors import InvalidChannel
from alerts.models import Delivery
from alerts.services import channels as alert_channels
from alerts.services import delivery as alert_delivery
from core import net
from core.models import Project
from replay.errors import EndpointError
from replay.services.model_endpoints import endpoint_create, endpoint_test
from tests.alerts.receiver import Receiver
from tests.replay.conftest import StubServer

PUBLIC = "93.184.215.14"

# (host as written in the URL, why it is refused); the name of the test machine resolves
# through /etc/hosts to a loopback or private address (a name resolving to a private address).
REFUSED = [
    pytest.param("127.0.0.1", "loopback", id="ipv4-loopback"),
    pytest.param("[::1]", "loopback", id="ipv6-loopback"),
    pytest.param("[::ffff:127.0.0.1]", "loopback", id="v4-mapped-loopback"),
    pytest.param("[::ffff:10.0.0.1]", "private", id="v4-mapped-private"),
    pytest.param("10.1.2.3", "private", id="10/8"),
    pytest.param("192.168.1.2", "private", id="192.168/16"),
    pytest.param("169.254.169.254", "link-local", id="cloud-metadata"),
    pytest.param("224.0.0.1", "multicast", id="ipv4-multicast"),
    pytest.param("[ff02::1]", "multicast", id="ipv6-multicast"),
    pytest.param("0.0.0.0", "unspecified", id="unspecified"),  # noqa: S104
    pytest.param("localhost", "local name", id="localhost"),
    pytest.param("foo.localhost", "local name", id="sub-localhost"),
    pytest.param(socket.gethostname(), "private", id="name-resolving-private"),
    pytest.param("2130706433", "dotted decimal", id="decimal-number"),
    pytest.param("0177.0.0.1", "dotted decimal", id="octal-dotted"),
    pytest.param("0x7f.1", "dotted decimal", id="hex-short"),
]
ALLOWED = [
    pytest.param("8.8.8.8", id="public-ipv4"),
    pytest.param("[2001:4860:4860::8888]", id="public-ipv6"),
    pytest.param("1.1.1.1", id="public-ipv4-b"),
]


def _why(host: str, expected: str) -> str:
    # The test machine's name may resolve to loopback or to a private container address.
    named = not host[0].isdigit() and host[0] != "["
    return "loopback|private" if expected == "private" and named else expected


def _save_webhook(project: Project, url: str) -> None:
    alert_channels.channel_create(
        project=project, kind="webhook", data={"name": "hook", "url": url, "timeout_seconds": 2}
    )


def _save_endpoint(project: Project, url: str) -> None:
    endpoint_create(project=project, name="ep", base_url=url, model="m", mode="completions")


SAVERS: list[Any] = [
    pytest.param(_save_webhook, InvalidChannel, id="webhook"),
    pytest.param(_save_endpoint, EndpointError, id="model-endpoint"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("save", "error"), SAVERS)
@pytest.mark.parametrize(("host", "why"), REFUSED)
def test_non_public_hosts_are_refused_when_saved(
    project: Project, save: Callable[[Project, str], None], error: type[Exception], host: str, why: str
) -> None:
    with pytest.raises(error, match=_why(host, why)):
        save(project, f"http://{host}:8080/v1")


@pytest.mark.django_db
@pytest.mark.parametrize(("save", "error"), SAVERS)
@pytest.mark.parametrize("host", ALLOWED)
def test_public_addresses_are_saved(
    project: Project, save: Callable[[Project, str], None], error: type[Exception], host: str
) -> None:
    save(project, f"https://{host}/v1")


@pytest.mark.django_db
@pytest.mark.parametrize(("save", "error"), SAVERS)
@pytest.mark.parametrize(
    "host", [pytest.param(p.values[0], id=p.id) for p in REFUSED if p.values[1] != "dotted decimal"]
)
def test_a_project_that_allows_private_endpoints_may_save_them(
    project: Project, save: Callable[[Project, str], None], error: type[Exception], host: str
) -> None:
    Project.objects.filter(pk=project.pk).update(allow_private_endpoints=True)
    project.refresh_from_db()
    save(project, f"http://{host}:8080/v1")


def test_numbers_in_other_forms_are_refused_even_where_private_is_allowed() -> None:
    for host in ("2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1"):
        with pytest.raises(net.AddressRefused, match="dotted decimal"):
            net.url_check(f"http://{host}/", allow_private=True)


@pytest.mark.parametrize(("host", "why"), REFUSED)
def test_the_connection_itself_refuses_non_public_addresses(host: str, why: str) -> None:
    """Past the save-time check (a row written before the policy, or by hand), the client
    still refuses to open the connection."""
    with Receiver() as receiver, net.guarded_client(allow_private=False, timeout=2) as client:
        port = receiver.server.server_address[1]
        if why == "dotted decimal":
            # httpx itself refuses some of these forms (0177.0.0.1) before we see them.
            with pytest.raises((net.AddressRefused, httpx.InvalidURL)):
                client.post(f"http://{host}:{port}/hook", content=b"{}")
        else:
            with pytest.raises(net.AddressRefused, match=_why(host, why)):
                client.post(f"http://{host}:{port}/hook", content=b"{}")
    assert receiver.requests == []


def test_the_guarded_client_reaches_loopback_when_private_is_allowed() -> None:
    with Receiver() as receiver, net.guarded_client(allow_private=True, timeout=5) as client:
        resp = client.post(receiver.url, content=b"{}")
    assert resp.status_code == 401  # unsigned, but it arrived
    assert len(receiver.requests) == 1


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """`rebind.example` resolves to whatever ANSWER['addr'] says at the time of the lookup."""
    answer = {"addr": PUBLIC}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.example":
            return real(answer["addr"], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield answer


@pytest.mark.django_db
def test_a_webhook_name_rebound_to_loopback_after_saving_is_not_reached(
    project: Project, rebinding: dict[str, str]
) -> None:
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        channel, _ = alert_channels.channel_create(
            project=project,
            kind="webhook",
            data={"name": "hook", "url": f"http://rebind.example:{port}/hook", "timeout_seconds": 2},
        )
        rebinding["addr"] = "127.0.0.1"
        d = Delivery.objects.create(project=project, channel=channel, is_test=True)
        alert_delivery.delivery_attempt(delivery_id=d.pk)
        d.refresh_from_db()
        assert receiver.requests == []
    assert d.status == "failed", d.status
    assert "loopback" in d.last_error


@pytest.mark.django_db
def test_a_model_endpoint_rebound_to_loopback_after_saving_is_not_called(
    project: Project, rebinding: dict[str, str]
) -> None:
    stub = StubServer()
    try:
        port = stub.httpd.server_address[1]
        ep = endpoint_create(
            project=project, name="ep", base_url=f"http://rebind.example:{port}/v1", model="m",
            mode="completions",
        )
        rebinding["addr"] = "127.0.0.1"
        ok, detail = endpoint_test(endpoint=ep)
        assert stub.calls == []
    finally:
        stub.close()
    assert not ok
    assert "loopback" in detail and "allow private endpoints" in detail


@pytest.mark.django_db
def test_a_replay_run_against_a_rebound_endpoint_fails_at_once_without_calling_it(
    api: Any, project: Project, rebinding: dict[str, str]
) -> None:
    from replay.services.jobs import replay_job_create
    from replay.services.runs import replay_run_execute
    from tests.replay.helpers import planted_fact_snapshot, post

    wire = planted_fact_snapshot()
    post(api, wire)
    stub = StubServer()
    try:
        port = stub.httpd.server_address[1]
        ep = endpoint_create(
            project=project, name="ep", base_url=f"http://rebind.example:{port}/v1", model="m",
            mode="completions",
        )
        spec = {"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1}
        job = replay_job_create(project=project, endpoint=ep, spec=spec)
        rebinding["addr"] = "127.0.0.1"
        run = job.runs.get()
        # Refused, not retried: no later attempt can make the address acceptable.
        assert replay_run_execute(run_id=run.pk).state == "failed"
        assert stub.calls == []
    finally:
        stub.close()
    run.refresh_from_db()
    assert run.status == "failed" and "loopback" in run.error
