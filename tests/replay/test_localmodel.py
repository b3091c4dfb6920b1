"""The embedded model server (Gemma 3 270M behind llama-cpp-python): every block a replay sends
reaches the model, which the server's own prompt-token count shows."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from replay import ablation, endpoints
from replay.services.model_endpoints import LOCAL_MODEL_NAME
from tests import factories as f
from tests.replay.helpers import PLANTED_MEMORY, PLANTED_QUESTION, PLANTED_SYSTEM

pytestmark = pytest.mark.e2e


def _blocks(*, with_memory: bool) -> list[dict[str, Any]]:
    blocks = [
        f.block("system", "system", PLANTED_SYSTEM, pinned=True),
        f.block("memory", "memory", PLANTED_MEMORY),
        f.block("user", "user", PLANTED_QUESTION),
    ]
    return blocks if with_memory else [b for b in blocks if b["key"] != "memory"]


def _prompt_tokens(base_url: str, mode: str, *, with_memory: bool) -> int:
    request = ablation.render_request(_blocks(with_memory=with_memory), {"temperature": 0, "max_tokens": 1})
    path, body = ablation.call_body(request=request, model=LOCAL_MODEL_NAME, mode=mode)
    # The local model listens on loopback.
    res = endpoints.complete(
        base_url=base_url, path=path, body=body, api_key="", timeout=60.0, allow_private=True
    )
    assert res.prompt_tokens is not None
    return res.prompt_tokens


def _server_tokens(base_url: str, text: str) -> int:
    resp = httpx.post(base_url.removesuffix("/v1") + "/extras/tokenize", json={"input": text}, timeout=30.0)
    return len(resp.json()["tokens"]) - 1  # minus BOS


def test_a_second_system_message_reaches_the_model_in_chat_and_in_the_rendered_transcript(
    local_model: Any,
) -> None:
    url = local_model.base_url
    memory_tokens = _server_tokens(url, f"System: {PLANTED_MEMORY}\n")
    assert memory_tokens > 5

    # llama.cpp's chat formats keep the first system message only; the embedded server joins the
    # memory block (a second system message) into it rather than dropping it.
    chat_with = _prompt_tokens(url, "chat", with_memory=True)
    chat_without = _prompt_tokens(url, "chat", with_memory=False)
    assert chat_with - chat_without >= memory_tokens - 4, (chat_with, chat_without, memory_tokens)

    # The transcript ctxobs renders (the local endpoint's completions mode) carries it: the
    # server counts exactly the block's tokens more.
    text_with = _prompt_tokens(url, "completions", with_memory=True)
    text_without = _prompt_tokens(url, "completions", with_memory=False)
    assert abs((text_with - text_without) - memory_tokens) <= 2, (text_with, text_without, memory_tokens)


def _answer(base_url: str, blocks: list[dict[str, Any]]) -> str:
    request = ablation.render_request(blocks, {"temperature": 0, "max_tokens": 24})
    path, body = ablation.call_body(request=request, model=LOCAL_MODEL_NAME, mode="completions")
    return endpoints.complete(
        base_url=base_url, path=path, body=body, api_key="", timeout=60.0, allow_private=True
    ).text


def test_the_same_context_gets_the_same_answer_whatever_the_server_answered_before(local_model: Any) -> None:
    # The demo turn's context; its answer at temperature 0 flips if the server reuses the
    # previous request's evaluated prompt instead of evaluating it whole.
    blocks = f.snapshot(turn=3)["blocks"]
    url = local_model.base_url
    first = _answer(url, blocks)
    again = _answer(url, blocks)  # the whole prompt is what the server evaluated last
    _answer(url, blocks[:-1])  # a shared prefix, as the next leave-one-out variant would send
    after_variant = _answer(url, blocks)
    assert first and first == again == after_variant, (first, again, after_variant)


def test_a_completion_decodes_only_its_last_position_and_embeddings_still_answer(local_model: Any) -> None:
    """The server is built for /v1/embeddings, which needs an output at every position; a
    completion needs the last one only, and computing the vocabulary's logits at every position
    of its prompt made it about 1.8 times as slow. llama.cpp logs when it has to produce every
    position for a batch whose positions were not all asked for: a completion must not."""
    url = local_model.base_url
    log = local_model.log_path
    assert log is not None

    def embedding(text: str) -> list[float]:
        return endpoints.embed(
            base_url=url, model=LOCAL_MODEL_NAME, text=text, api_key="", timeout=60.0, allow_private=True
        )

    before = embedding("The launch code is 7291.")
    start = log.stat().st_size
    first = _answer(url, f.snapshot(turn=3)["blocks"])
    between = embedding("The launch code is 7291.")
    again = _answer(url, f.snapshot(turn=3)["blocks"])
    written = log.read_bytes()[start:].decode(errors="replace")
    assert "POST /v1/completions" in written  # the log is the server's own
    assert "not marked as outputs" not in written, written[-2000:]
    assert first and first == again
    assert len(before) == 640 and before == between


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_local_model_command_stops_within_3_s_of_sigterm_without_a_traceback(tmp_path: Any) -> None:
    """`manage.py ctxobs_localmodel` waits on its server process; SIGTERM then stops both at once."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from tests.processes import ROOT, free_port, process_env
    from tests.waiting import wait_until

    out = tmp_path / "out.log"
    port = free_port()
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "ctxobs_localmodel", "--port", str(port), "--n-ctx", "512",
             "--log", str(tmp_path / "model.log")],
            cwd=ROOT, env=process_env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_until(lambda: "local model ready" in out.read_text(errors="replace") or proc.poll() is not None,
                   180, "the local model to be ready")
        assert proc.poll() is None, out.read_text(errors="replace")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "no server process"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - started
        text = out.read_text(errors="replace")
        assert took < 3.0, (took, text[-2000:])
        assert "Traceback" not in text, text[-2000:]
        assert proc.returncode == 0, (proc.returncode, text[-2000:])
        gone, alive = psutil.wait_procs(children, timeout=1)
        assert not alive, alive
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_embedded_model_takes_a_prompt_as_long_as_the_window_its_turns_are_measured_against(
    tmp_path: Any,
) -> None:
    from ctxobs.catalog import context_window_for
    from replay import localmodel

    # Started as scripts/up starts it: its defaults.
    server = localmodel.start(log_path=tmp_path / "model.log")
    try:
        localmodel.wait_ready(server.base_url, timeout=180, process=server.process)
        window = context_window_for(LOCAL_MODEL_NAME)
        assert window is not None and window >= 8192
        # Past the 4,096 tokens it used to be served with; a turn at 15% of the catalogued window.
        prompt = "word " * 5000
        r = httpx.post(
            f"{server.base_url}/completions",
            json={"model": LOCAL_MODEL_NAME, "prompt": prompt, "max_tokens": 1, "temperature": 0},
            timeout=300,
        )
        assert r.status_code == 200, r.text[:500]
        assert 4096 < r.json()["usage"]["prompt_tokens"] < window
    finally:
        localmodel.stop(server, timeout=5)
