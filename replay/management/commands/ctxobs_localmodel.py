"""Run the embedded local model server and (optionally) register it as a project's endpoint."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.models import Project
from replay import localmodel
from replay.errors import ReplayError
from replay.extensions import STOP_TIMEOUT_S
from replay.services.model_endpoints import local_endpoint_register


class _Stopped(Exception):
    """SIGTERM arrived."""


class Command(BaseCommand):
    help = (
        "Start Gemma 3 270M behind an OpenAI-compatible server on loopback (llama-cpp-python), wait "
        "until it answers, register it for --project, and keep it running until interrupted."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--port", type=int, default=localmodel.DEFAULT_PORT)
        parser.add_argument("--host", default=localmodel.DEFAULT_HOST)
        parser.add_argument("--n-ctx", type=int, default=localmodel.DEFAULT_N_CTX)
        parser.add_argument("--threads", type=int, default=localmodel.DEFAULT_THREADS)
        parser.add_argument("--project", help="register the server as this project's endpoint (name)")
        parser.add_argument("--log", help="write the server's output to this file")
        parser.add_argument("--assemble-only", action="store_true", help="only write the model file and exit")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["assemble_only"]:
            self.stdout.write(str(localmodel.model_path()))
            return
        project = None
        if opts["project"]:
            project = Project.objects.filter(name=opts["project"]).first()
            if project is None:
                raise CommandError(f"no project named {opts['project']!r}")
        server = localmodel.start(
            port=opts["port"],
            host=opts["host"],
            n_ctx=opts["n_ctx"],
            n_threads=opts["threads"],
            log_path=opts["log"],
        )

        # SIGTERM interrupts whatever the main thread waits on (the server process, most of the
        # time): the handler only raises, and the stop runs below once that wait has let go. (Stopping
        # inside the handler waited on the process the interrupted wait still held: 20 s, then a
        # traceback.)
        def _stop(*_: Any) -> None:
            raise _Stopped

        signal.signal(signal.SIGTERM, _stop)
        try:
            localmodel.wait_ready(server.base_url, timeout=120, process=server.process)
            self.stdout.write(f"local model ready at {server.base_url}")
            if project is not None:
                try:
                    ep = local_endpoint_register(
                        project=project, base_url=server.base_url, served_window=opts["n_ctx"]
                    )
                except ReplayError as exc:
                    raise CommandError(exc.detail) from None
                self.stdout.write(f"registered as endpoint {ep.name!r} of project {project.name!r}")
            server.process.wait()
        except (KeyboardInterrupt, _Stopped):
            pass
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            localmodel.stop(server, timeout=STOP_TIMEOUT_S)
