from core.errors import ApplicationError


class ReplayError(ApplicationError):
    pass


class EndpointError(ReplayError):
    """A model endpoint that is misconfigured or not allowed for its project."""


class VariantError(ReplayError):
    """An operation that does not fit the saved block list (unknown key, bad position...)."""


class NotApplicable(VariantError):
    """An operation that has nothing to act on in this context (no such block, nothing old
    enough, nothing to cut): an evaluation set skips the item rather than failing."""


class NotFound(ReplayError):
    status_code = 404


class PreconditionFailed(ReplayError):
    """The request is well formed but the project is not ready for it (it has no model endpoint):
    409, with the reason and what to do first."""

    status_code = 409


class Forbidden(ReplayError):
    status_code = 403


def turn_expired(retention_days: int) -> str:
    """Why a replay or triage of a turn that retention removed cannot run: the words the run,
    the job page and the triage show."""
    return f"turn expired: this project keeps turns {retention_days} days after they arrive"


class TurnGone(NotFound):
    """A turn named to replay is not stored. EXPIRED: retention removed it (known for sessions);
    None: it cannot be told (a snapshot id leaves no trace once removed)."""

    def __init__(self, what: str, retention_days: int, *, expired: bool | None = None) -> None:
        if expired:
            detail = f"no such {what} in this project: {turn_expired(retention_days)}"
        elif expired is None:
            detail = (f"no such {what} in this project: it was never sent, or it is older than the "
                      f"{retention_days} days this project keeps turns")
        else:
            detail = f"no such {what} in this project: none with this id was sent to it"
        super().__init__(detail)
