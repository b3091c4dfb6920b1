"""Who is calling: an ingest key (agents, scripts) or a logged-in member (the dashboard)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware

from core.errors import AuthError, Forbidden, NotFound
from core.models import IngestKey, Membership, Project
from core.params import MAX_ID
from core.services import ingest_key_authenticate


@dataclass(frozen=True)
class Caller:
    project: Project
    key: IngestKey | None = None
    membership: Membership | None = None

    @property
    def bucket(self) -> str:
        return self.key.prefix if self.key else f"user{self.membership.user_id if self.membership else 0}"


def request_caller(request: HttpRequest) -> Caller:
    """Who is calling REQUEST, as the API's authentication (django-ninja's `request.auth`) found
    them; an AuthError when the route has none (a programming error: every API route has one)."""
    found = getattr(request, "auth", None)
    if not isinstance(found, Caller):
        raise AuthError("authentication required")
    return found


def bearer_token(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class IngestKeyAuth:
    """Ingest keys only (the write path)."""

    def __call__(self, request: HttpRequest) -> Caller:
        key = ingest_key_authenticate(raw=bearer_token(request))
        return Caller(project=key.project, key=key)


def _csrf_ok(request: HttpRequest) -> bool:
    # A session cookie rides along on cross-site requests: unsafe methods need the CSRF token.
    reason = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})  # type: ignore[arg-type]
    return reason is None


class ProjectReadAuth:
    """An ingest key, or a session login that is a member of `?project=<id>` (or of one project)
    with at least ROLE; a session caller's unsafe methods also need the CSRF token.
    With KEYS_REFUSED set, only members may call, and an ingest key gets 403 with that reason;
    with KEY_SCOPE set, a key without that scope gets 403 (members are checked by ROLE)."""

    def __init__(self, role: str = "viewer", *, keys_refused: str | None = None,
                 key_scope: str | None = None) -> None:
        self.role = role
        self.keys_refused = keys_refused
        self.key_scope = key_scope

    def __call__(self, request: HttpRequest) -> Caller:
        token = bearer_token(request)
        if self.keys_refused is not None:
            if token is not None:
                raise Forbidden(self.keys_refused)
            if not request.user.is_authenticated:
                raise AuthError(f"sign in as a project {self.role}")
        if token is not None or not request.user.is_authenticated:
            key = ingest_key_authenticate(raw=token)
            if self.key_scope is not None and not key.has_scope(self.key_scope):
                raise Forbidden(
                    f"this key ({key.prefix}…) lacks the {self.key_scope} scope; its scopes: "
                    f"{', '.join(key.scopes)}. Create a key with the {self.key_scope} scope in the "
                    "project settings or with `ctxobs_project newkey PROJECT --replay`"
                )
            return Caller(project=key.project, key=key)
        memberships = Membership.objects.select_related("project").filter(user=request.user)
        wanted = request.GET.get("project")
        if wanted:
            # isdigit() alone also takes "²" and other digits int() refuses.
            if not (wanted.isascii() and wanted.isdigit()) or int(wanted) > MAX_ID:
                raise NotFound("no such project")
            memberships = memberships.filter(project_id=int(wanted))
        found = list(memberships[:2])
        if not found:
            raise NotFound("no such project")
        if len(found) > 1:
            raise AuthError("you belong to several projects: pass ?project=<id>")
        m = found[0]
        if not m.at_least(self.role):
            raise Forbidden(f"this needs the {self.role} role")
        if request.method not in ("GET", "HEAD", "OPTIONS") and not _csrf_ok(request):
            raise Forbidden("CSRF check failed: send the X-CSRFToken header")
        return Caller(project=m.project, membership=m)
