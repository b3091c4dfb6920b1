from importlib.util import find_spec

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.contrib.staticfiles.views import serve as static_serve
from django.urls import URLPattern, URLResolver, include, path, re_path

from config.api import api

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
if settings.CTXOBS_SERVE_STATIC:
    # A single-machine install serves its own static files (plotly.js, htmx, css): no CDN, no proxy.
    urlpatterns.append(
        re_path(r"^static/(?P<path>.*)$", login_not_required(static_serve), {"insecure": True})
    )
for app in ("replay", "alerts", "insights", "experiments"):
    if app in settings.INSTALLED_APPS and find_spec(f"{app}.urls") is not None:
        urlpatterns.append(path("", include(f"{app}.urls")))
urlpatterns.append(path("", include("ingest.urls")))
