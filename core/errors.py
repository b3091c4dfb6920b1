from config.errors import ApplicationError


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
