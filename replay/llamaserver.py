"""`python -m replay.llamaserver [llama_cpp.server options]`: llama-cpp-python's OpenAI-compatible
server with llama.cpp's extra weight buffer types turned off.

The extra buffer types repack weights for AMX and other CPU kernels. On CPUs that report AMX,
llama-cpp-python 0.3.36's AMX matrix multiply faults on its tile configuration (a general
protection fault in libggml-cpu that kills the server on its first request); the plain CPU
kernels give the same answers. The server exposes no option for this, so the model parameters'
default is changed before the server builds its model.
"""

from __future__ import annotations

from typing import Any

import llama_cpp.llama_cpp as llama_lib

_library_default_params = llama_lib.llama_model_default_params


def _model_default_params() -> Any:
    params = _library_default_params()
    if any(name == "use_extra_bufts" for name, *_ in params._fields_):
        params.use_extra_bufts = False
    return params


def main() -> None:
    llama_lib.llama_model_default_params = _model_default_params
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
