"""The one NinjaAPI, mounted at /api/v1/. Optional apps add their routers when installed."""

from importlib import import_module
from importlib.util import find_spec
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.parser import Parser

from config.errors import install_exception_handlers
from config.openapi import add_error_responses
from core import jsonbody
from ingest.api import router as ingest_router
from ingest.otlp.api import router as otlp_router


class BoundedParser(Parser):
    """JSON bodies of every endpoint with their nesting bounded (LIMITS.max_body_depth): ninja
    answers 400 to a body it cannot parse, and a deep one is refused before the parser recurses."""

    def parse_body(self, request: HttpRequest) -> Any:
        return jsonbody.loads(request.body)


class CtxobsAPI(NinjaAPI):
    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        add_error_responses(self, schema)
        return schema


api = CtxobsAPI(
    title="ctxobs API",
    version="1",
    description="Context snapshots in, sessions and timelines out. Limits are listed on POST /snapshots.",
    urls_namespace="api",
    parser=BoundedParser(),
)
install_exception_handlers(api)
api.add_router("", ingest_router)
api.add_router("", otlp_router)
for app in ("replay", "alerts", "experiments"):
    if app in settings.INSTALLED_APPS and find_spec(f"{app}.api") is not None:
        api.add_router("", import_module(f"{app}.api").router)
