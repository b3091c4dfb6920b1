"""The fast lane (`scripts/test -m "not e2e and not browser"`) leaves out every test that starts the
local model server or Celery workers, however indirectly it uses them (tests/conftest.py marks
them)."""

from __future__ import annotations

import pytest

from tests.conftest import E2E_FIXTURES


def test_every_test_using_the_model_server_or_workers_is_marked_e2e(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    unmarked = [
        item.nodeid
        for item in items
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("e2e") is None
    ]
    assert unmarked == []
    # The model server reached through another fixture (tests/replay/test_chat_shapes.py's `chat`).
    through = (
        "tests/replay/test_chat_shapes.py::"
        "test_the_local_server_answers_a_tool_exchange_with_every_message_in_the_prompt"
    )
    collected = {i.nodeid: i for i in items}
    if through in collected:
        assert collected[through].get_closest_marker("e2e") is not None
