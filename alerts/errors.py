from core.errors import ApplicationError


class AlertsError(ApplicationError):
    pass


class InvalidRule(AlertsError):
    """Field errors of a rule; `errors` maps each field to what is wrong with it."""

    status_code = 422

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(
            "invalid rule: " + "; ".join(f"{k}: {v}" for k, v in errors.items()), extra={"errors": errors}
        )
        self.errors = errors


class InvalidChannel(AlertsError):
    status_code = 422

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(
            "invalid channel: " + "; ".join(f"{k}: {v}" for k, v in errors.items()), extra={"errors": errors}
        )
        self.errors = errors


class NotFound(AlertsError):
    status_code = 404


class Forbidden(AlertsError):
    status_code = 403


class InvalidIncidentAction(AlertsError):
    """An ack, resolve or mute that the incident's state or the request's values do not allow."""

    status_code = 422
