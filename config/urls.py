from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from config.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
for app in ("replay", "alerts"):
    if app in settings.INSTALLED_APPS:
        urlpatterns.append(path("", include(f"{app}.urls")))
urlpatterns.append(path("", include("ingest.urls")))
