"""`python -m replay.llamaserver [llama_cpp.server options]`: llama-cpp-python's OpenAI-compatible
server, set up so that a replay measures the context and nothing else:

- every request evaluates its whole prompt. llama-cpp-python keeps the previous request's
  evaluated prompt and re-evaluates only what differs (at least the last token, alone). Those
  logits differ slightly from a whole-prompt evaluation, enough to change a temperature-0 answer:
  the same context would answer differently depending on what was asked before it, which would
  show up as noise in the baseline and as false effects in a leave-one-out.
- a completion computes the logits of its last position only. A model built for /v1/embeddings
  (`--embedding true`) produces an output for every position of every batch it decodes; for a
  completion that means the vocabulary's logits (262,144 of them, more weights than the rest of
  Gemma 3 270M) at every position of the prompt, which made completions about 1.8 times as slow.
  Embedding mode is switched on for an embedding and off for a completion (the server answers one
  request at a time); the answers are the same.
- an embedding empties the model's memory cells without zeroing their bytes. llama-cpp-python
  clears the whole KV buffer before and after each embedding, a memset of the full window (about
  120 ms at 32,768 positions, most of a short answer's embedding); the next decode writes every
  position it reads, and the vectors are the same.
- llama.cpp's extra weight buffer types are off. They repack weights for AMX and other CPU
  kernels; on CPUs that report AMX, llama-cpp-python 0.3.36's AMX matrix multiply faults on its
  tile configuration (a general protection fault that kills the server on its first request).
  The plain CPU kernels give the same answers.

The server has no option for any of these, so they are set before it builds its model. Its app is
wrapped in `replay.localmodel.ChatAsTranscript`: chat requests, in any OpenAI message shape, are
answered from a transcript, since the model's weights carry no chat template.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import llama_cpp.llama_cpp as llama_lib
from llama_cpp import Llama

_library_default_params = llama_lib.llama_model_default_params
_library_generate = Llama.generate
_library_embed = Llama.embed


def _model_default_params() -> Any:
    params = _library_default_params()
    if any(name == "use_extra_bufts" for name, *_ in params._fields_):
        params.use_extra_bufts = False
    return params


def _embedding_mode(model: Llama, on: bool) -> None:
    if model.context_params.embeddings:
        llama_lib.llama_set_embeddings(model.ctx, on)


def _generate_from_scratch(self: Llama, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Iterator[int]:
    # With no tokens kept, generate() finds no prefix to reuse and evaluates the whole prompt.
    self.reset()
    _embedding_mode(self, False)
    return _library_generate(self, tokens, *args, **kwargs)


def _clear_cells(ctx: Any) -> None:
    # The cells are emptied and their bytes left: the next decode writes every position it reads.
    if ctx.memory is not None:
        llama_lib.llama_memory_clear(ctx.memory, False)


def _embed(self: Llama, *args: Any, **kwargs: Any) -> Any:
    _embedding_mode(self, True)
    ctx = self._ctx
    ctx.kv_cache_clear = lambda: _clear_cells(ctx)  # type: ignore[method-assign]
    try:
        return _library_embed(self, *args, **kwargs)
    finally:
        del ctx.kv_cache_clear


def main() -> None:
    llama_lib.llama_model_default_params = _model_default_params
    Llama.generate = _generate_from_scratch  # type: ignore[method-assign,assignment]
    Llama.embed = _embed  # type: ignore[method-assign]
    import llama_cpp.server.app as server_app

    from replay.localmodel import ChatAsTranscript

    create_app = server_app.create_app
    # Replaced before the server's entry module imports it by name.
    server_app.create_app = lambda *a, **kw: ChatAsTranscript(create_app(*a, **kw))
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
