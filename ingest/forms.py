"""Forms of the dashboard pages: the sessions filter, keys and members."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from core.models import RETENTION_DAYS_MAX, Membership
from ctxobs.wire import TIERS

YES_NO = [("", "any"), ("yes", "yes"), ("no", "no")]
SORTS = [
    ("last_seen", "last seen"),
    ("first_seen", "first seen"),
    ("watermark", "max watermark"),
    ("turns", "turns"),
    ("alerts", "alerts"),
    ("session_id", "session id"),
]
RANGES = [
    ("", "any time"),
    ("1h", "last hour"),
    ("24h", "last 24 h"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
]
RANGE_DELTAS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}


class SessionFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=256,
        label="session id",
        widget=forms.TextInput(attrs={"placeholder": "search session id", "type": "search"}),
    )
    agent = forms.CharField(required=False, max_length=256, label="agent")
    model = forms.CharField(required=False, max_length=256, label="model")
    range = forms.ChoiceField(required=False, choices=RANGES, label="seen")
    since = forms.DateField(required=False, label="since", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="until", widget=forms.DateInput(attrs={"type": "date"}))
    tier = forms.ChoiceField(
        required=False, choices=[("", "any"), *[(t, t) for t in TIERS]], label="highest tier"
    )
    alerts = forms.ChoiceField(required=False, choices=YES_NO, label="has alerts")
    failures = forms.ChoiceField(required=False, choices=YES_NO, label="validation failures")
    sort = forms.ChoiceField(required=False, choices=SORTS, label="sort")

    def filters(self) -> dict[str, Any]:
        """Keyword arguments for ingest.selectors.sessions_filter (empty when the form is invalid)."""
        if not self.is_valid():
            return {}
        d = self.cleaned_data
        out: dict[str, Any] = {
            "q": d["q"].strip() or None,
            "agent": d["agent"].strip() or None,
            "model": d["model"].strip() or None,
            "tier": d["tier"] or None,
            "sort": d["sort"] or "last_seen",
        }
        tz = timezone.get_current_timezone()
        since: datetime | None = None
        if d["range"]:
            since = timezone.now() - RANGE_DELTAS[d["range"]]
        if d["since"]:
            since = datetime.combine(d["since"], time.min, tzinfo=tz)
        out["since"] = since
        out["until"] = datetime.combine(d["until"], time.max, tzinfo=tz) if d["until"] else None
        for name, arg in (("alerts", "has_alerts"), ("failures", "has_failures")):
            out[arg] = {"yes": True, "no": False}.get(d[name])
        return out


class KeyCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100, required=False, widget=forms.TextInput(attrs={"placeholder": "e.g. prod"})
    )
    # Off by default: agents need only ingest, and a leaked replay key can spend the provider budget.
    replay = forms.BooleanField(required=False)


class NetworkForm(forms.Form):
    allow_private = forms.BooleanField(required=False)


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.VIEWER)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


# --- retention ----------------------------------------------------------------
class RetentionForm(forms.Form):
    retention_days = forms.IntegerField(
        min_value=1, max_value=RETENTION_DAYS_MAX, label="keep turns for (days)",
        error_messages={"max_value": f"At most {RETENTION_DAYS_MAX} days.",
                        "min_value": "At least 1 day.", "invalid": "A whole number of days."},
    )
