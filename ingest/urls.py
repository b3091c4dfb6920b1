from django.urls import path

from ingest import views

app_name = "ingest"
urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
]
