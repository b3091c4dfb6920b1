"""Alert pages: the incidents (list, page, ack/resolve/mute), the alerts list and detail, the rule
editor with a preview, the channels.

Every view starts with `project_access`: viewers read, editors acknowledge/resolve and edit
rules, admins manage channels.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypedDict

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from alerts import charts, selectors
from alerts import kinds as K
from alerts.errors import InvalidChannel, InvalidIncidentAction, InvalidRule
from alerts.models import Alert, AlertRule, Channel, Incident
from alerts.services import channels as channel_services
from alerts.services import episodes
from alerts.services import incidents as incident_services
from alerts.services import rules as rule_services
from core import registry
from core.access import is_htmx, page_context, project_access
from core.models import Membership, Project
from ingest import selectors as ingest_selectors

PAGE_SIZE = 50


_page = page_context


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


# --- alerts ------------------------------------------------------------------
@login_required
def alert_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    state = request.GET.get("state") or ""
    if state not in Alert.State.values:
        state = ""
    rule_id = _int(request.GET.get("rule"))
    session_id = (request.GET.get("session") or "").strip()
    qs = selectors.alerts_filter(
        project_id=project.pk, state=state or None, rule_id=rule_id, session_id=session_id or None
    )
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    ctx = _page(
        request,
        project,
        membership,
        page=page,
        alerts=list(page.object_list),
        state=state,
        rule_id=rule_id,
        session_id=session_id,
        rules=selectors.rules_list(project_id=project.pk),
        states=Alert.State.values,
        counts=selectors.alert_state_counts(project_id=project.pk),
    )
    if is_htmx(request):
        return render(request, "alerts/_alerts_table.html", ctx)
    return render(request, "alerts/alert_list.html", ctx)


@login_required
def alert_detail(request: HttpRequest, project_id: int, alert_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    alert = selectors.alert_get(project_id=project.pk, alert_id=alert_id)
    if alert is None:
        raise Http404("no such alert")
    deliveries = selectors.alert_deliveries(alert=alert) if membership.at_least("admin") else []
    # Partials other apps add to this page (replay's triage of the alert's turn).
    extensions = registry.alert_page_extensions()
    ctx = _page(
        request,
        project,
        membership,
        alert=alert,
        deliveries=deliveries,
        alert_extensions=[ext.template for ext in extensions],
        turn_expired=not ingest_selectors.snapshots_existing(
            project_id=project.pk, snapshot_refs=[alert.snapshot_ref]),
    )
    for ext in extensions:
        if ext.context is not None:
            extra = ext.context(request=request, project=project, membership=membership, alert=alert)
            for name, value in extra.items():
                ctx.setdefault(name, value)  # the page's own names win
    return render(request, "alerts/alert_detail.html", ctx)


@login_required
@require_POST
def alert_transition(request: HttpRequest, project_id: int, alert_id: int, action: str) -> HttpResponse:
    project, membership = project_access(request, project_id, "editor")
    alert = selectors.alert_get(project_id=project.pk, alert_id=alert_id)
    if alert is None:
        raise Http404("no such alert")
    fn = {"ack": episodes.alert_acknowledge, "resolve": episodes.alert_resolve}.get(action)
    if fn is None:
        raise Http404("no such action")
    fn(alert=alert, user=request.user)
    alert = selectors.alert_get(project_id=project.pk, alert_id=alert_id)
    if is_htmx(request):
        return render(request, "alerts/_alert_row.html", _page(request, project, membership, a=alert))
    nxt = request.POST.get("next") or ""
    if nxt.startswith(f"/p/{project.pk}/alerts/") and "//" not in nxt:
        return redirect(nxt)
    return redirect("alerts:list", project_id=project.pk)


# --- incidents -----------------------------------------------------------------
# The status filter: "unresolved" (open, acknowledged or muted) by default, or one status, or all.
# Pending incidents (not confirmed yet) and transient ones (resolved before they were confirmed)
# page nobody, so they are a tab away rather than in the default list.
INCIDENT_STATUSES = ("unresolved", "open", "acknowledged", "muted", "resolved", "pending", "transient", "all")
INCIDENT_SINCE: dict[str, tuple[str, timedelta]] = {
    "1h": ("last hour", timedelta(hours=1)),
    "24h": ("last 24 hours", timedelta(hours=24)),
    "7d": ("last 7 days", timedelta(days=7)),
    "30d": ("last 30 days", timedelta(days=30)),
}
MUTE_CHOICES: tuple[tuple[int, str], ...] = ((30, "30 min"), (120, "2 h"), (1440, "1 day"))
# The agents offered by the filter's select (the most a project is expected to run).
AGENT_CHOICES_MAX = 200


def _incident_agents(project_id: int) -> list[str]:
    """The agents the project's incidents are about, for the filter (one query)."""
    return list(
        Incident.objects.filter(project_id=project_id)
        .exclude(agent="")
        .order_by("agent")
        .values_list("agent", flat=True)
        .distinct()[:AGENT_CHOICES_MAX]
    )


@login_required
def incident_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    status = request.GET.get("status") or "unresolved"
    if status not in INCIDENT_STATUSES:
        status = "unresolved"
    severity = request.GET.get("severity") or ""
    if severity not in K.SEVERITIES:
        severity = ""
    agent = (request.GET.get("agent") or "").strip()
    since = request.GET.get("since") or ""
    if since not in INCIDENT_SINCE:
        since = ""
    qs = selectors.incidents_filter(
        project_id=project.pk,
        status=None if status == "all" else status,
        severity=severity or None,
        agent=agent or None,
        since=timezone.now() - INCIDENT_SINCE[since][1] if since else None,
    )
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    counts: dict[str, int] = dict(selectors.incident_status_counts(project_id=project.pk))
    counts["unresolved"] = sum(counts[s] for s in ("open", "acknowledged", "muted"))
    counts["all"] = sum(counts[s] for s in ("unresolved", "resolved", "pending", "transient"))
    filters = {"status": status, "severity": severity, "agent": agent, "since": since}
    ctx = _page(
        request,
        project,
        membership,
        page=page,
        incidents=list(page.object_list),
        status=status,
        severity=severity,
        agent=agent,
        since=since,
        filter_query=urlencode({k: v for k, v in filters.items() if v}),
        # Each status tab keeps the other filters.
        statuses=[
            (s, counts[s], urlencode({k: v for k, v in {**filters, "status": s}.items() if v}))
            for s in INCIDENT_STATUSES
        ],
        severities=K.SEVERITIES,
        agents=_incident_agents(project.pk),
        since_choices=[(k, label) for k, (label, _) in INCIDENT_SINCE.items()],
        counts=counts,
    )
    if is_htmx(request):
        return render(request, "alerts/_incidents_table.html", ctx)
    return render(request, "alerts/incident_list.html", ctx)


def _incident_status_context(
    request: HttpRequest, project: Project, membership: Membership, incident: Incident, **extra: Any
) -> dict[str, Any]:
    return _page(request, project, membership, incident=incident, mute_choices=MUTE_CHOICES, **extra)


@login_required
def incident_detail(request: HttpRequest, project_id: int, incident_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    incident = selectors.incident_get(project_id=project.pk, incident_id=incident_id)
    if incident is None:
        raise Http404("no such incident")
    if is_htmx(request) and request.GET.get("partial") == "status":
        return render(
            request,
            "alerts/_incident_status.html",
            _incident_status_context(request, project, membership, incident),
        )
    alerts = selectors.incident_alerts(incident=incident)
    anchor = alerts[0] if alerts else None
    culprit = selectors.incident_culprit(incident=incident)
    figure = charts.incident_timeline_figure(
        [
            charts.AlertPoint(
                ts=a.ts, session_id=a.session_id, turn=a.turn, severity=a.severity, title=a.title
            )
            for a in alerts
        ]
    )
    # Partials other apps add to this page (replay's triage of the first alert's turn).
    extensions = registry.incident_page_extensions()
    ctx = _incident_status_context(
        request,
        project,
        membership,
        incident,
        alerts=alerts,
        alerts_more=max(0, incident.alert_count - len(alerts)),
        anchor=anchor,
        culprit=culprit,
        sessions=selectors.incident_sessions(incident=incident),
        deliveries=selectors.incident_deliveries(incident=incident) if membership.at_least("admin") else [],
        figure=figure,
        incident_extensions=[ext.template for ext in extensions],
        # Where a partial's "Run triage" button posts: this page's own transition.
        incident_triage_url=reverse("alerts:incident_transition", args=[project.pk, incident.pk, "triage"]),
    )
    for ext in extensions:
        if ext.context is not None:
            extra = ext.context(
                request=request, project=project, membership=membership, incident=incident, anchor=anchor
            )
            for name, value in extra.items():
                ctx.setdefault(name, value)  # the page's own names win
    return render(request, "alerts/incident_detail.html", ctx)


def _incident_triage_request(project: Project, incident: Incident) -> str:
    """Ask the app that triages (through core.registry's flagged turns) for a triage of the
    incident's first alert's turn; it runs within the project's daily triage budget."""
    if not project.triage_enabled:
        raise InvalidIncidentAction("auto-triage is off for this project")
    anchor = next(iter(selectors.incident_alerts(incident=incident, limit=1)), None)
    if anchor is None:
        raise InvalidIncidentAction("this incident has no alerts left to triage")
    with transaction.atomic():  # the listener queues the triage when this commits
        registry.turns_flagged(
            [
                registry.TurnFlagged(
                    project_id=project.pk,
                    snapshot_ref=anchor.snapshot_ref,
                    reason="alert",
                    alert_id=anchor.pk,
                    project=project,
                )
            ]
        )
    return f"Triage of turn {anchor.turn} of {anchor.session_id} requested."


@login_required
@require_POST
def incident_transition(request: HttpRequest, project_id: int, incident_id: int, action: str) -> HttpResponse:
    project, membership = project_access(request, project_id, "editor")
    incident = selectors.incident_get(project_id=project.pk, incident_id=incident_id)
    if incident is None:
        raise Http404("no such incident")
    if action not in ("ack", "resolve", "mute", "triage"):
        raise Http404("no such action")
    done, error = "", ""
    try:
        if action == "ack":
            incident = incident_services.incident_acknowledge(incident=incident, user=request.user)
        elif action == "resolve":
            incident = incident_services.incident_resolve(incident=incident, user=request.user)
        elif action == "mute":
            minutes = _int(request.POST.get("minutes"))
            if minutes is None or minutes not in dict(MUTE_CHOICES):
                raise InvalidIncidentAction("mute for 30 minutes, 2 hours or 1 day")
            incident = incident_services.incident_mute(incident=incident, user=request.user, minutes=minutes)
        else:
            done = _incident_triage_request(project, incident)
    except InvalidIncidentAction as exc:
        error = exc.detail
    if is_htmx(request) and action != "triage":
        return render(
            request,
            "alerts/_incident_status.html",
            _incident_status_context(request, project, membership, incident, action_error=error),
            status=422 if error else 200,
        )
    if error:
        messages.error(request, f"Not done: {error}.")
    elif done:
        messages.success(request, done)
    nxt = request.POST.get("next") or ""
    if nxt.startswith((f"/p/{project.pk}/incidents/", f"/p/{project.pk}/alerts/")) and "//" not in nxt:
        return redirect(nxt)
    return redirect("alerts:incident", project_id=project.pk, incident_id=incident.pk)


# --- rules -------------------------------------------------------------------
@login_required
def rule_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    rules = selectors.rules_with_counts(project_id=project.pk)
    return render(
        request, "alerts/rule_list.html", _page(request, project, membership, rules=rules, kinds=K.KINDS)
    )


def _form_data(post: Any, kind: str) -> dict[str, Any]:
    params = {}
    for p in K.PARAMS.get(kind, ()):
        if p.type is list:
            params[p.name] = post.getlist(f"p_{p.name}")
        else:
            params[p.name] = post.get(f"p_{p.name}", "")
    return {
        "name": post.get("name", ""),
        "kind": kind,
        "severity": post.get("severity", "warning"),
        "enabled": post.get("enabled") == "on",
        "params": params,
        "agent": post.get("agent", ""),
        "model": post.get("model", ""),
        "cooldown_turns": post.get("cooldown_turns", ""),
        "cooldown_seconds": post.get("cooldown_seconds", ""),
    }


class ParamField(TypedDict):
    """One parameter input of the rule form."""

    name: str
    label: str
    type: str
    value: Any
    choices: tuple[str, ...]
    help: str
    min: float | None
    max: float | None
    error: str


def _param_fields(kind: str, values: dict[str, Any], errors: dict[str, str]) -> list[ParamField]:
    out: list[ParamField] = []
    for p in K.PARAMS.get(kind, ()):
        v = values.get(p.name, p.default)
        out.append(
            {
                "name": p.name,
                "label": p.label,
                "type": p.type.__name__,
                "value": v,
                "choices": p.choices,
                "help": p.help,
                "min": p.minimum,
                "max": p.maximum,
                "error": errors.get(f"params.{p.name}", ""),
            }
        )
    return out


def _rule_form(
    request: HttpRequest,
    project: Project,
    membership: Membership,
    *,
    rule: AlertRule | None,
    data: dict[str, Any],
    errors: dict[str, str],
    status: int = 200,
) -> HttpResponse:
    kind = data["kind"] if data.get("kind") in K.KINDS else K.TIER_CROSSING
    ctx = _page(
        request,
        project,
        membership,
        rule=rule,
        data=data,
        errors=errors,
        kind=kind,
        kinds=K.KINDS,
        severities=K.SEVERITIES,
        params=_param_fields(kind, data.get("params") or {}, errors),
    )
    partial = is_htmx(request) and request.GET.get("partial")
    template = "alerts/_rule_form.html" if partial else "alerts/rule_form.html"
    return render(request, template, ctx, status=status)


def _rule_initial(rule: AlertRule | None, kind: str) -> dict[str, Any]:
    if rule is None:
        return {
            "name": "",
            "kind": kind,
            "severity": "warning",
            "enabled": True,
            "params": K.default_params(kind),
            "agent": "",
            "model": "",
            "cooldown_turns": K.DEFAULT_COOLDOWN_TURNS,
            "cooldown_seconds": K.DEFAULT_COOLDOWN_SECONDS,
        }
    data = {f: getattr(rule, f) for f in rule_services.RULE_FIELDS}
    if kind != rule.kind:
        data["kind"], data["params"] = kind, K.default_params(kind)
    return data


def _rule_submit(
    request: HttpRequest, project: Project, membership: Membership, *, rule: AlertRule | None, kind: str
) -> HttpResponse:
    """Create RULE (None) or update it from the posted form; the form again with errors on 422."""
    data = _form_data(request.POST, kind)
    try:
        if rule is None:
            saved, verb = rule_services.rule_create(project=project, data=data), "created"
        else:
            rule_services.rule_update(rule=rule, data=data)
            saved, verb = rule, "saved"
    except InvalidRule as exc:
        return _rule_form(request, project, membership, rule=rule, data=data, errors=exc.errors, status=422)
    messages.success(request, f"Rule “{saved.name}” {verb}.")
    return redirect("alerts:rules", project_id=project.pk)


@login_required
def rule_new(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "editor")
    kind = request.POST.get("kind") or request.GET.get("kind") or K.TIER_CROSSING
    if kind not in K.KINDS:
        kind = K.TIER_CROSSING
    if request.method == "POST":
        return _rule_submit(request, project, membership, rule=None, kind=kind)
    return _rule_form(request, project, membership, rule=None, data=_rule_initial(None, kind), errors={})


@login_required
def rule_edit(request: HttpRequest, project_id: int, rule_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    rule = selectors.rule_get(project_id=project.pk, rule_id=rule_id)
    if rule is None:
        raise Http404("no such rule")
    kind = request.POST.get("kind") or request.GET.get("kind") or rule.kind
    if kind not in K.KINDS:
        kind = rule.kind
    if request.method == "POST":
        project, membership = project_access(request, project_id, "editor")
        return _rule_submit(request, project, membership, rule=rule, kind=kind)
    return _rule_form(request, project, membership, rule=rule, data=_rule_initial(rule, kind), errors={})


@login_required
@require_POST
def rule_delete(request: HttpRequest, project_id: int, rule_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "editor")
    rule = selectors.rule_get(project_id=project.pk, rule_id=rule_id)
    if rule is None:
        raise Http404("no such rule")
    name = rule.name
    rule_services.rule_delete(rule=rule)
    messages.success(request, f"Rule “{name}” and its alerts deleted.")
    return redirect("alerts:rules", project_id=project.pk)


@login_required
@require_POST
def rule_preview(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    kind = request.POST.get("kind") or K.TIER_CROSSING
    data = _form_data(request.POST, kind)
    try:
        preview = rule_services.rule_preview(project=project, data=data)
        errors: dict[str, str] = {}
    except InvalidRule as exc:
        preview, errors = None, exc.errors
    return render(
        request,
        "alerts/_rule_preview.html",
        _page(request, project, membership, preview=preview, errors=errors),
    )


# --- channels ----------------------------------------------------------------
@login_required
def channel_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    kind = request.POST.get("kind") or request.GET.get("kind") or Channel.Kind.WEBHOOK
    if kind not in Channel.Kind.values:
        kind = Channel.Kind.WEBHOOK
    errors: dict[str, str] = {}
    data: dict[str, Any] = {
        "name": "",
        "url": "",
        "recipients": "",
        "min_severity": "info",
        "timeout_seconds": 5,
        "max_attempts": 5,
        "max_per_hour": K.DEFAULT_CHANNEL_MAX_PER_HOUR,
    }
    status = 200
    if request.method == "POST":
        data = {
            k: request.POST.get(k, "")
            for k in (
                "name", "url", "recipients", "min_severity", "timeout_seconds", "max_attempts", "max_per_hour"
            )
        }
        try:
            channel, secret = channel_services.channel_create(project=project, kind=kind, data=data)
        except InvalidChannel as exc:
            errors, status = exc.errors, 422
        else:
            return _channel_created(request, project, membership, channel, secret)
    return render(
        request,
        "alerts/channel_list.html",
        _page(
            request,
            project,
            membership,
            channels=selectors.channels_list(project_id=project.pk),
            kind=kind,
            data=data,
            errors=errors,
            severities=K.SEVERITIES,
            kinds=Channel.Kind.choices,
        ),
        status=status,
    )


def _channel_created(
    request: HttpRequest, project: Project, membership: Membership, channel: Channel, secret: str | None
) -> HttpResponse:
    # The secret is shown on this one response only; it is stored encrypted for signing.
    resp = render(
        request,
        "alerts/channel_detail.html",
        _page(
            request,
            project,
            membership,
            channel=channel,
            secret=secret,
            deliveries=selectors.channel_deliveries(channel=channel),
            severities=K.SEVERITIES,
        ),
        status=201,
    )
    resp["Cache-Control"] = "no-store"
    return resp


@login_required
def channel_detail(request: HttpRequest, project_id: int, channel_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    channel = selectors.channel_get(project_id=project.pk, channel_id=channel_id)
    if channel is None:
        raise Http404("no such channel")
    ctx = _page(
        request,
        project,
        membership,
        channel=channel,
        secret=None,
        severities=K.SEVERITIES,
        deliveries=selectors.channel_deliveries(channel=channel),
    )
    if is_htmx(request) and request.GET.get("partial") == "log":
        return render(request, "alerts/_delivery_log.html", ctx)
    return render(request, "alerts/channel_detail.html", ctx)


@login_required
@require_POST
def channel_action(request: HttpRequest, project_id: int, channel_id: int, action: str) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    channel = selectors.channel_get(project_id=project.pk, channel_id=channel_id)
    if channel is None:
        raise Http404("no such channel")
    if action == "test":
        channel_services.channel_test_send(channel=channel)
        messages.success(request, "Test message queued; its result appears in the delivery log below.")
    elif action == "rotate":
        secret = channel_services.channel_secret_rotate(channel=channel)
        resp = render(
            request,
            "alerts/channel_detail.html",
            _page(
                request,
                project,
                membership,
                channel=channel,
                secret=secret,
                severities=K.SEVERITIES,
                deliveries=selectors.channel_deliveries(channel=channel),
            ),
        )
        resp["Cache-Control"] = "no-store"
        return resp
    elif action == "toggle":
        channel_services.channel_update(channel=channel, data={"enabled": not channel.enabled})
        messages.success(request, f"Channel {'enabled' if channel.enabled else 'disabled'}.")
    elif action == "limit":
        try:
            channel_services.channel_update(
                channel=channel, data={"max_per_hour": request.POST.get("max_per_hour", "")}
            )
        except InvalidChannel as exc:
            messages.error(request, "; ".join(f"{k}: {v}" for k, v in exc.errors.items()))
        else:
            messages.success(request, f"At most {channel.max_per_hour} messages an hour.")
    elif action == "delete":
        channel_services.channel_delete(channel=channel)
        messages.success(request, "Channel deleted.")
        return redirect("alerts:channels", project_id=project.pk)
    else:
        raise Http404("no such action")
    return redirect("alerts:channel", project_id=project.pk, channel_id=channel.pk)
