from django.urls import path

from alerts import views

app_name = "alerts"
urlpatterns = [
    path("p/<int:project_id>/incidents/", views.incident_list, name="incidents"),
    path("p/<int:project_id>/incidents/<int:incident_id>/", views.incident_detail, name="incident"),
    path(
        "p/<int:project_id>/incidents/<int:incident_id>/<str:action>/",
        views.incident_transition,
        name="incident_transition",
    ),
    path("p/<int:project_id>/alerts/", views.alert_list, name="list"),
    path("p/<int:project_id>/alerts/<int:alert_id>/", views.alert_detail, name="detail"),
    path("p/<int:project_id>/alerts/<int:alert_id>/<str:action>/", views.alert_transition, name="transition"),
    path("p/<int:project_id>/alerts/rules/", views.rule_list, name="rules"),
    path("p/<int:project_id>/alerts/rules/new/", views.rule_new, name="rule_new"),
    path("p/<int:project_id>/alerts/rules/preview/", views.rule_preview, name="rule_preview"),
    path("p/<int:project_id>/alerts/rules/<int:rule_id>/", views.rule_edit, name="rule"),
    path("p/<int:project_id>/alerts/rules/<int:rule_id>/delete/", views.rule_delete, name="rule_delete"),
    path("p/<int:project_id>/alerts/channels/", views.channel_list, name="channels"),
    path("p/<int:project_id>/alerts/channels/<int:channel_id>/", views.channel_detail, name="channel"),
    path(
        "p/<int:project_id>/alerts/channels/<int:channel_id>/<str:action>/",
        views.channel_action,
        name="channel_action",
    ),
]
