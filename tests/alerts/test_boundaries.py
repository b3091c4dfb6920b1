"""The alerts app meets ingest only through ingest's facade (selectors, services, types)."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from django.apps import apps

from ingest.selectors import TURN_ROW_BLOCK_COLUMNS, TURN_ROW_COLUMNS
from ingest.types import TurnRow

ALERTS = Path(__file__).resolve().parents[2] / "alerts"
# Tenancy, which every app may use.
TENANCY_MODELS = {"Project", "Membership"}


def _sources() -> list[Path]:
    return [p for p in ALERTS.rglob("*.py") if "migrations" not in p.parts]


def test_alerts_sources_name_no_ingest_table() -> None:
    tables = {m._meta.db_table for m in apps.get_app_config("ingest").get_models()}
    assert "ingest_snapshot" in tables
    found = {
        f"{p.relative_to(ALERTS)}: {m}"
        for p in _sources()
        for m in re.findall(r"\b(?:" + "|".join(sorted(tables)) + r")\b", p.read_text())
    }
    assert not found


def test_alerts_imports_no_ingest_model_but_tenancy() -> None:
    found = set()
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "ingest.models":
                names = {a.name for a in node.names} - TENANCY_MODELS
                found |= {f"{p.relative_to(ALERTS)}: {n}" for n in names}
    assert not found


def test_turn_row_fields_follow_the_facade_columns() -> None:
    names = [f.name for f in fields(TurnRow)]
    assert names == ["ref", *TURN_ROW_COLUMNS[1:], *TURN_ROW_BLOCK_COLUMNS]
    assert TURN_ROW_COLUMNS[0] == "id"
