"""The handlers that map errors (core.errors.ApplicationError, database failures) to
`{"detail": ...}` responses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from core.errors import ApplicationError

if TYPE_CHECKING:
    from ninja import NinjaAPI

logger = logging.getLogger(__name__)


def _is_read(request: HttpRequest) -> bool:
    # A failed read stored nothing either, but saying so would tell a reader its data was lost.
    return request.method in ("GET", "HEAD", "OPTIONS")


def install_exception_handlers(api: NinjaAPI) -> None:
    @api.exception_handler(ApplicationError)
    def _app_error(request: HttpRequest, exc: ApplicationError) -> HttpResponse:
        resp = api.create_response(request, {"detail": exc.detail, **exc.extra}, status=exc.status_code)
        for k, v in exc.headers.items():
            resp[k] = v
        return resp

    def _unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
        # Never a 2xx for data that is not stored, never a bare 500: tell the sender to come back.
        logger.warning("store.unavailable error=%s path=%s", type(exc).__name__, request.path)
        detail = "the database is unreachable; " + (
            "retry later" if _is_read(request) else "nothing was stored, retry later")
        resp = api.create_response(request, {"detail": detail}, status=503)
        resp["Retry-After"] = str(settings.CTXOBS_DB_RETRY_AFTER)
        return resp

    api.exception_handler(OperationalError)(_unavailable)
    api.exception_handler(InterfaceError)(_unavailable)

    @api.exception_handler(DatabaseError)
    def _db_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
        if isinstance(exc, OperationalError | InterfaceError):
            return _unavailable(request, exc)
        logger.exception("store.error path=%s", request.path)
        text = "internal storage error" if _is_read(request) else "internal storage error; nothing was stored"
        detail = {"detail": text}
        return api.create_response(request, detail, status=500)
