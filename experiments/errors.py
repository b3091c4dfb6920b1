from core.errors import ApplicationError


class ExperimentError(ApplicationError):
    """A request about sets, strategies or experiments that cannot be done as asked."""


class NotFound(ExperimentError):
    status_code = 404


class Conflict(ExperimentError):
    """The request is well formed but the state forbids it (e.g. no model endpoint yet)."""

    status_code = 409
