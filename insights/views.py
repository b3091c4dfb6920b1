"""Pages of the insights app: the project's model prices."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from core.access import page_context, project_access
from core.services import project_price_table_set
from insights import prices

MAX_PRICE_TABLE_CHARS = 200_000


def _rows(project_table: dict[str, object]) -> list[dict[str, object]]:
    table = prices.price_table(project_table)
    own = {prices.model_key(str(k)) for k in project_table}
    return [{"model": name, "own": name in own, **p.as_dict()} for name, p in sorted(table.items())]


@login_required
def price_table(request: HttpRequest, project_id: int) -> HttpResponse:
    """The prices the cache lens uses: the default table with this project's entries over it;
    admins edit the project's entries as JSON."""
    project, membership = project_access(request, project_id, "admin")
    errors: dict[str, str] = {}
    text = json.dumps(project.price_table or {}, indent=2, sort_keys=True)
    status = 200
    if request.method == "POST":
        text = request.POST.get("price_table", "")
        raw: object = None
        if len(text) > MAX_PRICE_TABLE_CHARS:
            errors["price_table"] = f"at most {MAX_PRICE_TABLE_CHARS:,} characters"
        elif not text.strip():
            raw = {}
        else:
            try:
                raw = json.loads(text)
            except ValueError as e:
                errors["price_table"] = f"not valid JSON: {e}"
        if not errors:
            clean, errors = prices.price_table_clean(raw)
            if not errors:
                project_price_table_set(project=project, table=clean)
                messages.success(request, f"Prices saved ({len(clean)} model(s) of this project's own).")
                return redirect("insights:prices", project_id=project.pk)
        status = 400
    ctx = page_context(
        request,
        project,
        membership,
        rows=_rows(project.price_table or {}),
        text=text,
        errors=sorted(errors.items()),
        fields=prices.PRICE_FIELDS,
    )
    return render(request, "insights/prices.html", ctx, status=status)
