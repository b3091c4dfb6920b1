"""Dashboard pages: projects, sessions, the session timeline, a turn and the overview (the
project settings pages are in ingest.views_settings).

Every page view resolves its project with core.access.project_access (404 for non-members,
403 for a role too low) and reads through selectors, with a query count that does not depend
on the number of sessions or turns shown.

A little over the usual size: the session list, timeline, chart and turn pages share the
project and session lookups and the redirect of legacy session links defined here.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import plotly
import redis
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.core.paginator import Paginator
from django.db import DatabaseError, connection
from django.db.models import QuerySet
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.http import http_date
from django.views.decorators.http import require_GET

from core import registry, signin
from core.access import is_htmx, page_context, project_access, user_projects
from core.models import Membership, Project
from core.redis_client import redis_client
from ctxobs.wire import usable_window
from ingest import charts, dashboard, selectors
from ingest.forms import SessionFilterForm
from ingest.models import AgentSession, Snapshot
from ingest.routing import legacy_session_paths
from ingest.turn_page import drift_view, present_messages, turn_page
from ingest.types import TurnTableRow

logger = logging.getLogger(__name__)

SESSIONS_PER_PAGE = 50
# The sessions list counts its matches only this far past the page shown: an exact count of a
# project's 100,000 sessions cost more than the rest of the page (bench/scale.py). Past it, the
# page says "10,000+" and paging on still works.
SESSIONS_COUNT_AHEAD = 10_000


class AheadPaginator(Paginator):  # type: ignore[type-arg]  # pages of any rows
    """A paginator that counts at most AHEAD rows past the start of the page asked for; `capped`
    says the count stopped there (the list goes on)."""

    def __init__(self, object_list: QuerySet[AgentSession], per_page: int, *, page: str | None,
                 ahead: int) -> None:
        super().__init__(object_list, per_page)
        self.queryset = object_list
        try:
            start = (max(1, int(page or 1)) - 1) * per_page
        except ValueError:
            start = 0
        self.limit = min(start, 10**9) + ahead

    @cached_property
    def count(self) -> int:
        return int(self.queryset[: self.limit + 1].count())

    @property
    def capped(self) -> bool:
        return self.count > self.limit
TURNS_PER_PAGE = 100


class SignInView(auth_views.LoginView):
    """Django's login page; a throttled sign-in (core.signin) says how long to wait, with 429."""

    redirect_authenticated_user = True

    def form_invalid(self, form: Any) -> HttpResponse:
        wait = getattr(self.request, "signin_wait", None)
        if wait is None:
            return super().form_invalid(form)
        ctx = self.get_context_data(form=form, throttle_message=signin.wait_message(wait))
        resp = self.render_to_response(ctx, status=429)
        resp["Retry-After"] = str(wait)
        return resp


def _database_up() -> bool:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except DatabaseError as exc:
        logger.warning("healthz.database_down error=%s", type(exc).__name__)
        return False
    return True


def _redis_up() -> bool:
    try:
        redis_client().ping()
    except (redis.RedisError, OSError) as exc:
        logger.warning("healthz.redis_down error=%s", type(exc).__name__)
        return False
    return True


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 `{"status": "ok"}` when PostgreSQL and Redis (the Celery broker) answer, else 503 with
    `checks` naming what is down: load balancers and orchestrators read the status code."""
    checks = {"database": _database_up(), "redis": _redis_up()}
    up = all(checks.values())
    status = {name: "ok" if ok else "down" for name, ok in checks.items()}
    body = {"status": "ok" if up else "unavailable", "checks": status}
    resp = JsonResponse(body, status=200 if up else 503)
    resp["Cache-Control"] = "no-store"
    if not up:
        resp["Retry-After"] = str(settings.CTXOBS_DB_RETRY_AFTER)
    return resp


# --- plotly.js, served by the dashboard itself (no CDN, works offline) -------------------
# Every figure the dashboard draws is bars and scatter traces: plotly.js's "basic" bundle (1.2 MB,
# vendored from npm's plotly.js-basic-dist-min) has them all, and a browser without a cached copy
# compiles and runs it in a quarter of the time of the package's full bundle (4.8 MB, about 1.5 s
# of the first view of a session). It is served only when it is the very plotly.js version the
# installed plotly package ships; after an upgrade of the package, the full bundle until the
# vendored one is updated to match.
PLOTLY_PACKAGE_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
PLOTLY_BASIC_JS = Path(settings.STATIC_DIR) / "vendor" / "plotly-basic.min.js"
PLOTLY_VERSION = plotly.__version__
_JS_VERSION = re.compile(rb"plotly\.js[^\n]{0,40} v(\d+\.\d+\.\d+)")


def plotly_js_version(path: Path) -> str | None:
    """The plotly.js version in the header comment of a bundle; None when unreadable."""
    try:
        with path.open("rb") as fh:
            m = _JS_VERSION.search(fh.read(300))
    except OSError:
        return None
    return m.group(1).decode() if m else None


def _plotly_bundle() -> tuple[Path, str]:
    package_version = plotly_js_version(PLOTLY_PACKAGE_JS)
    if package_version is not None and plotly_js_version(PLOTLY_BASIC_JS) == package_version:
        return PLOTLY_BASIC_JS, "basic"
    return PLOTLY_PACKAGE_JS, "full"


PLOTLY_JS, PLOTLY_BUNDLE = _plotly_bundle()


@login_not_required
@require_GET
def plotly_js(request: HttpRequest, version: str) -> HttpResponseBase:
    """plotly.js (see PLOTLY_JS); the URL carries the package version, so it is cacheable for a
    year."""
    if not PLOTLY_JS.exists():
        raise Http404("plotly.js is missing")
    etag = f'"plotly-{PLOTLY_VERSION}-{PLOTLY_BUNDLE}"'
    if request.headers.get("If-None-Match") == etag:
        resp: HttpResponseBase = HttpResponse(status=304)
    else:
        resp = FileResponse(PLOTLY_JS.open("rb"), content_type="text/javascript; charset=utf-8")
    resp["ETag"] = etag
    resp["Cache-Control"] = "public, max-age=31536000, immutable" if version == PLOTLY_VERSION else "no-cache"
    resp["Last-Modified"] = http_date(PLOTLY_JS.stat().st_mtime)
    return resp


# --- helpers ------------------------------------------------------------------------
def _page(request: HttpRequest, project: Project, membership: Membership, **extra: Any) -> dict[str, Any]:
    return page_context(request, project, membership, **{"palette": charts.KIND_COLOURS, **extra})


def _session_or_404(project: Project, session_id: str, turn: int | None = None) -> AgentSession:
    """The session, or a 404 saying whether retention removed it (or TURN of it) or it was never sent."""
    session = selectors.session_get(project=project, session_id=session_id)
    if session is None:
        if turn is not None and selectors.session_expired(project=project, session_id=session_id, turn=turn):
            raise Http404(f"Turn {turn} of session {session_id} has expired: this project keeps turns "
                          f"{project.retention_days} days after they arrive.")
        if selectors.session_expired(project=project, session_id=session_id):
            raise Http404(f"Session {session_id} has expired: this project keeps turns "
                          f"{project.retention_days} days after they arrive, and its last turn has gone.")
        raise Http404(f"Session {session_id} not found: no session with this id was sent to this project.")
    return session


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default


def _legacy_redirect(request: HttpRequest, project: Project, rest: str) -> HttpResponse | None:
    """Where an old link with a raw session id (REST: what followed `/s/`) points: the first
    reading, in the order the old routes tried them, whose session exists and that is not the
    page already requested; None when there is none."""
    readings = legacy_session_paths(rest)
    known = selectors.session_ids_existing(project=project, session_ids=[sid for sid, _, _ in readings])
    for sid, name, args in readings:
        if sid in known:
            url = reverse(name, kwargs={"project_id": project.pk, "session_id": sid, **args})
            if url == request.path:
                continue
            query = request.META.get("QUERY_STRING", "")
            return redirect(f"{url}?{query}" if query else url)
    return None


def legacy_links(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Session pages: a link made before session ids were escaped can look like another page of
    another session (`/s/a/t/5/` was the timeline of "a/t/5"); when the page it routes to does not
    exist, send it to the page it named."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, project_id: int, session_id: str, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, project_id, session_id, **kwargs)
        except Http404:
            prefix = f"/p/{project_id}/s/"
            if prefix not in request.path_info:
                raise
            project, _ = project_access(request, project_id)
            resp = _legacy_redirect(request, project, request.path_info.split(prefix, 1)[1])
            if resp is None:
                raise
            return resp

    return wrapper


# --- projects -------------------------------------------------------------------------
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The caller's projects; straight to the overview when there is only one."""
    mships = user_projects(request.user)
    if len(mships) == 1:
        return redirect("ingest:overview", project_id=mships[0].project_id)
    return render(request, "ingest/project_list.html", {"memberships": mships})


@login_required
def overview(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id)
    days = request.GET.get("days", "30")
    if days not in dashboard.OVERVIEW_RANGES:
        days = "30"
    # Whole days, the rollup's grain: "7 days" is today and the six before it.
    stats = dashboard.project_overview(project=project, period=days)
    since = stats["since"]
    th = project.thresholds
    figures = {
        "fig-activity": charts.activity_figure(
            days=stats["days"], sessions=stats["sessions"], turns=stats["turns"]
        ),
        "fig-watermarks": charts.watermark_histogram_figure(
            buckets=stats["wm_buckets"], thresholds=th, width=dashboard.WM_BUCKET
        ),
        "fig-tiers": charts.tier_time_figure(tiers=stats["tiers"]),
        "fig-compression": charts.compression_figure(rows=stats["compression"]),
        "fig-failures": charts.failure_rate_figure(bands=stats["bands"], thresholds=th, width=dashboard.BAND),
        "fig-recall": charts.recall_figure(
            days=stats["days"], recalled=stats["recalled"], injected=stats["injected"]
        ),
    }
    t = stats["totals"]
    # Panels other apps add to the overview (the prompt-cache lens), each with its own context.
    panels = registry.overview_panels()
    panel_context: dict[str, Any] = {}
    for panel in panels:
        if panel.context is not None:
            panel_context.update(panel.context(request=request, project=project, membership=membership,
                                               since=since))
    return render(
        request,
        "ingest/overview.html",
        _page(
            request,
            project,
            membership,
            **panel_context,
            overview_panels=[p.template for p in panels],
            stats=stats,
            totals=t,
            days=days,
            day_choices=[
                ("1", "today"),
                ("7", "7 days"),
                ("30", "30 days"),
                ("90", "90 days"),
                ("all", "all time"),
            ],
            figures={k: charts.figure_json(f) for k, f in figures.items()},
            failure_rate=(t["failed"] / t["validated"]) if t["validated"] else None,
            injection_rate=(t["injected"] / t["recalled"]) if t["recalled"] else None,
        ),
    )


# --- sessions ---------------------------------------------------------------------------
@login_required
def sessions(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id)
    form = SessionFilterForm(request.GET or None)
    filters = form.filters() if request.GET else {}
    qs = selectors.sessions_filter(project=project, **filters)
    number = request.GET.get("page")
    page = AheadPaginator(qs, SESSIONS_PER_PAGE, page=number, ahead=SESSIONS_COUNT_AHEAD).get_page(number)
    rows: list[AgentSession] = list(page.object_list)
    sparks = dashboard.sessions_sparklines(project_id=project.pk, sessions=rows)
    th = project.thresholds
    for s in rows:
        values = sparks.get(s.id, [])
        s.spark = {  # type: ignore[attr-defined]  # the sessions table reads it off the row
            "points": charts.sparkline_points(values),
            "warn_y": charts.sparkline_y(th[1], values=values),
            "colour": charts.TIER_COLOURS.get(s.max_tier, "#1b1f24"),
        }
    params = request.GET.copy()
    params.pop("page", None)
    ctx = _page(request, project, membership, form=form, page=page, rows=rows, query=params.urlencode())
    template = "ingest/_sessions_table.html" if is_htmx(request) else "ingest/sessions.html"
    return render(request, template, ctx)


# --- the session timeline -------------------------------------------------------------------
def _decorate_turn(
    row: TurnTableRow, alerts_by_turn: dict[int, int], drifts: Mapping[int, registry.CountDrift] | None = None
) -> TurnTableRow:
    # Class names and widths are made here, not by template filters: a page shows 100 turns of
    # up to 10 kinds each, and filter calls dominate the render time.
    usable = usable_window(row["context_window"], row["reserve_tokens"])
    kinds = row["kind_tokens"] or {}
    order = charts.ordered_kinds(kinds)
    row["segments"] = [
        {"cls": charts.kind_css_class(k), "width": f"{max(0.0, min(100.0, kinds[k] / usable * 100)):.2f}%"}
        for k in order
    ]
    row["segments_title"] = " · ".join(f"{k} {kinds[k]:,}" for k in order)
    row["alerts"] = alerts_by_turn.get(row["turn"], 0)
    row["drift_shown"], row["drift_flag"], row["drift_title"] = drift_view(
        row.get("count_drift"), (drifts or {}).get(row.get("id", -1)))
    return row


@login_required
@legacy_links
def timeline(request: HttpRequest, project_id: int, session_id: str) -> HttpResponse:
    project, membership = project_access(request, project_id)
    session = _session_or_404(project, session_id)
    if "compare" in request.GET and "turn" in request.GET:
        # The "compare turn A with turn B" form: B's page with the diff against A.
        b, a = _int(request.GET["turn"], -1), _int(request.GET["compare"], -1)
        if b >= 0 and a >= 0:
            url = reverse(
                "ingest:turn", kwargs={"project_id": project.pk, "session_id": session.session_id, "turn": b}
            )
            return redirect(f"{url}?compare={a}")
    turns = dashboard.turns_page(
        project=project, session=session, page=_int(request.GET.get("page"), 1), per_page=TURNS_PER_PAGE
    )
    markers, findings = dashboard.session_markers_split(project_id=project.pk, session_ref=session.id)
    by_turn: dict[int, int] = {}
    for m in markers:
        by_turn[m["turn"]] = by_turn.get(m["turn"], 0) + 1
    drifts = registry.count_drifts(project_id=project.pk, snapshot_refs=[r["id"] for r in turns["rows"]])
    for row in turns["rows"]:
        _decorate_turn(row, by_turn, drifts)
    ctx = _page(
        request,
        project,
        membership,
        session=session,
        turns=turns,
        alerts=markers[:50],
        n_alerts=len(markers),
        n_findings=len(findings),
        turn_url_prefix=reverse(
            "ingest:timeline", kwargs={"project_id": project.pk, "session_id": session.session_id}
        )
        + "t/",
        selection_actions=[
            {"label": a.label, "url": a.url(project.pk), "input_label": a.input_label}
            for a in registry.turn_selection_actions()
            if membership.at_least(a.role)
        ],
    )
    template = "ingest/_turns_table.html" if is_htmx(request) else "ingest/timeline.html"
    return render(request, template, ctx)


@login_required
@legacy_links
def chart_data(request: HttpRequest, project_id: int, session_id: str) -> HttpResponse:
    """The timeline figure as plotly JSON (typed arrays), for Plotly.newPlot."""
    project, _ = project_access(request, project_id)
    session = _session_or_404(project, session_id)
    rows = dashboard.timeline_rows(project=project, session=session)
    markers, findings = dashboard.session_markers_split(project_id=project.pk, session_ref=session.id)
    overlays = registry.timeline_overlays(project_id=project.pk, session_ref=session.id)
    fig = charts.timeline_figure(
        rows=rows, thresholds=project.thresholds, alerts=markers, findings=findings, overlays=overlays
    )
    return HttpResponse(fig.to_json(engine="json"), content_type="application/json")


# --- one turn ---------------------------------------------------------------------------
def _turn_or_404(project: Project, session: AgentSession, turn: int) -> Snapshot:
    snap = selectors.snapshot_by_turn(project=project, session=session, turn=turn)
    if snap is None:
        if selectors.turn_expired(project=project, session=session, turn=turn):
            raise Http404(f"Turn {turn} of session {session.session_id} has expired: this project keeps "
                          f"turns {project.retention_days} days after they arrive.")
        raise Http404(f"Turn {turn} of session {session.session_id} not found: the session has no turn "
                      f"{turn}.")
    return snap


@login_required
@legacy_links
def turn_detail(request: HttpRequest, project_id: int, session_id: str, turn: int) -> HttpResponse:
    """One turn (ingest.turn_page reads it), with the partials other apps add to its page."""
    project, membership = project_access(request, project_id)
    session = _session_or_404(project, session_id, turn)
    snapshot = _turn_or_404(project, session, turn)
    page = turn_page(
        project=project, session=session, snapshot=snapshot, compare=request.GET.get("compare", "")
    )
    # Partials other apps add to this page (replay's buttons), rendered with this page's context.
    extensions = registry.turn_page_extensions()
    extension_context: dict[str, Any] = {}
    for ext in extensions:
        if ext.context is not None:
            extension_context.update(ext.context(request=request, project=project, membership=membership,
                                                 snapshot=snapshot, blocks=page.blocks))
    ctx = _page(request, project, membership, turn_extensions=[ext.template for ext in extensions],
                **page.context())
    for name, value in extension_context.items():
        ctx.setdefault(name, value)  # the page's own names win
    if is_htmx(request) and request.GET.get("part") == "diff":
        return render(request, "ingest/_turn_diff.html", ctx)
    return render(request, "ingest/turn.html", ctx)


@login_required
@legacy_links
def block_content(
    request: HttpRequest, project_id: int, session_id: str, turn: int, position: int
) -> HttpResponse:
    """All messages of one block, uncut (the 'show all' of the turn page)."""
    project, membership = project_access(request, project_id)
    session = _session_or_404(project, session_id, turn)
    snapshot = _turn_or_404(project, session, turn)
    blocks = selectors.snapshot_blocks(project_id=project.pk, snapshot_ref=snapshot.id)
    block = next((b for b in blocks if b["position"] == position), None)
    if block is None:
        raise Http404("no such block")
    msgs, _ = present_messages(block["messages"], full=True)
    ctx = _page(request, project, membership, session=session, snapshot=snapshot, block=block, shown=msgs)
    template = "ingest/_block_messages.html" if is_htmx(request) else "ingest/block.html"
    return render(request, template, ctx)


@login_required
def session_legacy_link(request: HttpRequest, project_id: int, rest: str) -> HttpResponse:
    """A session page link with raw slashes in the session id (made before ids were escaped)."""
    project, _ = project_access(request, project_id)
    resp = _legacy_redirect(request, project, rest)
    if resp is None:
        raise Http404("no such session")
    return resp
