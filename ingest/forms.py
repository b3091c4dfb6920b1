"""Forms of the dashboard pages: the sessions filter, keys, members and model windows."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from core import registry
from core.models import RETENTION_DAYS_MAX, Membership, Project
from core.services import MODEL_NAME_MAX_CHARS, MODEL_WINDOWS_MAX_ENTRIES
from ctxobs.wire import LIMITS, TIERS

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Filters other apps add (core.registry.session_filter_add), before the sort.
        sort = self.fields.pop("sort")
        for flt in registry.session_filters():
            self.fields[flt.name] = forms.ChoiceField(
                required=False, choices=[("", "any"), *flt.choices()], label=flt.label)
        self.fields["sort"] = sort

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
        out["extra"] = {f.name: d[f.name] for f in registry.session_filters() if d.get(f.name)}
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


class ModelWindowsForm(forms.Form):
    """A project's context-window overrides, one `model = window` a line."""

    windows = forms.CharField(
        required=False,
        max_length=MODEL_WINDOWS_MAX_ENTRIES * (MODEL_NAME_MAX_CHARS + 16),
        label="model windows",
        widget=forms.Textarea(
            attrs={"rows": 6, "cols": 60, "spellcheck": "false", "placeholder": "my-finetune = 32768"}
        ),
    )

    @classmethod
    def for_project(cls, project: Project) -> ModelWindowsForm:
        text = "\n".join(f"{name} = {window}" for name, window in sorted(project.model_windows.items()))
        return cls(initial={"windows": text})

    def clean_windows(self) -> dict[str, int]:
        windows: dict[str, int] = {}
        errors: list[str] = []
        for n, line in enumerate(self.cleaned_data["windows"].splitlines(), start=1):
            if not line.strip():
                continue
            name, eq, value = line.rpartition("=")
            name, value = name.strip(), value.strip()
            if not eq or not name:
                errors.append(f"line {n}: write it as `model = window`, e.g. `my-finetune = 32768`")
            elif len(name) > MODEL_NAME_MAX_CHARS:
                errors.append(
                    f"line {n}: the model name is {len(name)} characters, at most {MODEL_NAME_MAX_CHARS}"
                )
            elif not (value.isascii() and value.isdigit()) or not 0 < int(value) <= LIMITS.max_int:
                errors.append(
                    f"line {n}: the window of {name[:40]!r} must be a whole number of tokens "
                    f"from 1 to {LIMITS.max_int} (got {value[:20]!r})"
                )
            elif name.lower() in (w.lower() for w in windows):
                # Model names are matched in any case, so two spellings would be one model.
                errors.append(f"line {n}: {name[:40]!r} is listed twice")
            else:
                windows[name] = int(value)
        if len(windows) > MODEL_WINDOWS_MAX_ENTRIES:
            errors.append(f"{len(windows)} models: at most {MODEL_WINDOWS_MAX_ENTRIES}")
        if errors:
            more = [f"and {len(errors) - 10} more"] if len(errors) > 10 else []
            raise forms.ValidationError(errors[:10] + more)
        return windows


# --- retention ----------------------------------------------------------------
class RetentionForm(forms.Form):
    retention_days = forms.IntegerField(
        min_value=1, max_value=RETENTION_DAYS_MAX, label="keep turns for (days)",
        error_messages={"max_value": f"At most {RETENTION_DAYS_MAX} days.",
                        "min_value": "At least 1 day.", "invalid": "A whole number of days."},
    )
