"""The one NinjaAPI, mounted at /api/v1/. Optional apps add their routers when installed."""

from importlib import import_module
from importlib.util import find_spec

from django.conf import settings
from ninja import NinjaAPI

from config.errors import install_exception_handlers
from ingest.api import router as ingest_router

api = NinjaAPI(
    title="ctxobs API",
    version="1",
    description="Context snapshots in, sessions and timelines out. Limits are listed on POST /snapshots.",
    urls_namespace="api",
)
install_exception_handlers(api)
api.add_router("", ingest_router)
for app in ("replay", "alerts"):
    if app in settings.INSTALLED_APPS and find_spec(f"{app}.api") is not None:
        api.add_router("", import_module(f"{app}.api").router)
