"""The real local model server (Gemma 3 270M behind llama-cpp-python) for the example agent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from replay import localmodel

ARTIFACTS = Path(os.environ.get("CTXOBS_TEST_ARTIFACTS", "artifacts"))


@pytest.fixture(scope="module")
def local_model() -> Iterator[localmodel.LocalModelServer]:
    server = localmodel.start(
        port=localmodel.free_port(), n_ctx=2048, log_path=ARTIFACTS / "localmodel-examples.log"
    )
    try:
        localmodel.wait_ready(server.base_url, timeout=120, process=server.process)
        yield server
    finally:
        localmodel.stop(server)
