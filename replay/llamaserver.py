"""`python -m replay.llamaserver [llama_cpp.server options]`: llama-cpp-python's OpenAI-compatible
server, set up so that a replay measures the context and nothing else:

- every request evaluates its whole prompt. llama-cpp-python keeps the previous request's
  evaluated prompt and re-evaluates only what differs (at least the last token, alone). Those
  logits differ slightly from a whole-prompt evaluation, enough to change a temperature-0 answer:
  the same context would answer differently depending on what was asked before it, which would
  show up as noise in the baseline and as false effects in a leave-one-out.
- llama.cpp's extra weight buffer types are off. They repack weights for AMX and other CPU
  kernels; on CPUs that report AMX, llama-cpp-python 0.3.36's AMX matrix multiply faults on its
  tile configuration (a general protection fault that kills the server on its first request).
  The plain CPU kernels give the same answers.

The server has no option for either, so both are set before it builds its model. Its app is
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


def _model_default_params() -> Any:
    params = _library_default_params()
    if any(name == "use_extra_bufts" for name, *_ in params._fields_):
        params.use_extra_bufts = False
    return params


def _generate_from_scratch(self: Llama, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Iterator[int]:
    # With no tokens kept, generate() finds no prefix to reuse and evaluates the whole prompt.
    self.reset()
    return _library_generate(self, tokens, *args, **kwargs)


def main() -> None:
    llama_lib.llama_model_default_params = _model_default_params
    Llama.generate = _generate_from_scratch  # type: ignore[method-assign,assignment]
    import llama_cpp.server.app as server_app

    from replay.localmodel import ChatAsTranscript

    create_app = server_app.create_app
    # Replaced before the server's entry module imports it by name.
    server_app.create_app = lambda *a, **kw: ChatAsTranscript(create_app(*a, **kw))
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
