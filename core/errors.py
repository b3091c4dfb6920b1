"""The error base every app raises: a status code and a message safe to show to the caller
(config.errors maps it to a `{"detail": ...}` response)."""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """An error with a status code and a message safe to show to the caller."""

    status_code = 400

    def __init__(self, detail: str, *, status_code: int | None = None, headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if status_code is not None:
            self.status_code = status_code
        self.headers = headers or {}
        self.extra = extra or {}



class AccessError(ApplicationError):
    pass


class AuthError(AccessError):
    status_code = 401

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="ctxobs"'})


class Forbidden(AccessError):
    status_code = 403


class NotFound(AccessError):
    status_code = 404
