from config.errors import ApplicationError


class ReplayError(ApplicationError):
    pass


class EndpointError(ReplayError):
    """A model endpoint that is misconfigured or not allowed for its project."""


class VariantError(ReplayError):
    """An operation that does not fit the saved block list (unknown key, bad position...)."""


class NotFound(ReplayError):
    status_code = 404


class Forbidden(ReplayError):
    status_code = 403
