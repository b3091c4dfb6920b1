from django.urls import path

from replay import views

app_name = "replay"
urlpatterns = [
    path("p/<int:project_id>/replays/", views.replay_list, name="list"),
    path("p/<int:project_id>/replays/new", views.replay_create, name="create"),
    path("p/<int:project_id>/replays/<int:job_id>/", views.replay_detail, name="detail"),
    path("p/<int:project_id>/replays/<int:job_id>/progress", views.replay_progress, name="progress"),
    path("p/<int:project_id>/replays/<int:job_id>/cancel", views.replay_cancel, name="cancel"),
    path("p/<int:project_id>/replays/<int:job_id>/runs/<int:run_id>/", views.replay_compare, name="compare"),
    path("p/<int:project_id>/settings/triage/", views.triage_settings, name="triage_settings"),
    path("p/<int:project_id>/triage/<int:triage_id>/cancel", views.triage_cancel, name="triage_cancel"),
    path("p/<int:project_id>/endpoints/", views.endpoint_list, name="endpoints"),
    path("p/<int:project_id>/endpoints/<int:endpoint_id>/test", views.endpoint_test, name="endpoint_test"),
    path(
        "p/<int:project_id>/endpoints/<int:endpoint_id>/default",
        views.endpoint_default,
        name="endpoint_default",
    ),
]
