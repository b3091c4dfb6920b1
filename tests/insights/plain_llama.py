"""`python -m tests.insights.plain_llama [llama_cpp.server options]`: llama-cpp-python's server with
its chat formats as they ship (no `replay.localmodel.ChatAsTranscript` in front), so that a format that
keeps only the first system message (`--chat_format chatml`) drops the others, as an agent's
server would. The CPU kernels are set as in replay.llamaserver."""

from __future__ import annotations

import llama_cpp.llama_cpp as llama_lib

from replay import llamaserver


def main() -> None:
    llama_lib.llama_model_default_params = llamaserver._model_default_params
    from llama_cpp.server.__main__ import main as server_main

    server_main()


if __name__ == "__main__":
    main()
