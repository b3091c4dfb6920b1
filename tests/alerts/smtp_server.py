"""A real local SMTP server (aiosmtpd in a thread) that keeps what it receives and, when given
credentials, refuses senders that do not log in with them."""

from __future__ import annotations

import socket
import threading
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SmtpServer:
    def __init__(self, *, user: str = "", password: str = "") -> None:
        self.user, self.password = user, password
        self.received: list[dict[str, Any]] = []
        self.logins: list[str] = []
        self._lock = threading.Lock()
        self.port = _free_port()
        server = self

        class Handler:
            async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                login = session.auth_data
                with server._lock:
                    server.received.append(
                        {
                            "from": envelope.mail_from,
                            "to": list(envelope.rcpt_tos),
                            "message": message_from_bytes(envelope.original_content),
                            "login": login.decode() if isinstance(login, bytes) else "",
                        }
                    )
                return "250 Message accepted"

        def authenticate(smtp: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            ok = (
                isinstance(data, LoginPassword)
                and data.login.decode() == self.user
                and data.password.decode() == self.password
            )
            if ok:
                self.logins.append(self.user)
            return AuthResult(success=ok, handled=False, auth_data=data.login if ok else None)

        self.controller = Controller(
            Handler(),
            hostname="127.0.0.1",
            port=self.port,
            authenticator=authenticate if user else None,
            auth_required=bool(user),
            auth_require_tls=False,
        )

    def messages(self) -> list[Message]:
        with self._lock:
            return [r["message"] for r in self.received]

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()
