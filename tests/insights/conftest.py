"""Fixtures of the insights tests: the headless Chromium of the dashboard's browser tests."""

from __future__ import annotations

from tests.ingest.test_browser import browser_page  # noqa: F401 - a fixture, shared
