from config.errors import ApplicationError


class IngestError(ApplicationError):
    pass


class AuthError(IngestError):
    status_code = 401

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="ctxobs"'})


class LimitExceeded(IngestError):
    status_code = 413


class Forbidden(IngestError):
    status_code = 403


class RateLimited(IngestError):
    status_code = 429


class NotFound(IngestError):
    status_code = 404
