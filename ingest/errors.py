from core.errors import ApplicationError


class IngestError(ApplicationError):
    pass


class LimitExceeded(IngestError):
    status_code = 413


class RateLimited(IngestError):
    status_code = 429
