"""Forms of the replay pages: the project's auto-triage settings."""

from __future__ import annotations

from django import forms

from core.models import TRIAGE_DAILY_CALLS_MAX, Project


class TriageForm(forms.Form):
    """Auto-triage of alerted and validation-failed turns (a section of the project settings)."""

    enabled = forms.BooleanField(required=False)
    daily_calls = forms.IntegerField(
        min_value=0,
        max_value=TRIAGE_DAILY_CALLS_MAX,
        error_messages={"required": "give the most model calls triage may make a day (0 stops it)"},
    )

    @classmethod
    def for_project(cls, project: Project) -> TriageForm:
        return cls(initial={"enabled": project.triage_enabled, "daily_calls": project.triage_daily_calls})
