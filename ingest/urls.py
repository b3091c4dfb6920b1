from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from ingest import views, views_settings
from ingest.routing import session_id_from_segment, session_id_segment


class SessionIdConverter:
    """Any session id as one path segment. Agents name sessions freely (`team/42`, `a/t/5`,
    `x/chart.json`, `..`): `~` escapes the characters a segment cannot hold as themselves, so a
    page URL names exactly one session and one page. Other characters are percent-encoded by
    reverse() as usual; `/` cannot be, since servers decode `%2F` before routing."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return session_id_from_segment(value)

    def to_url(self, value: str) -> str:
        return session_id_segment(value)


register_converter(SessionIdConverter, "sid")

app_name = "ingest"
urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly_js"),
    path("", views.home, name="home"),
    path("p/<int:project_id>/", views.overview, name="overview"),
    path("p/<int:project_id>/sessions/", views.sessions, name="sessions"),
    path("p/<int:project_id>/settings/", views_settings.project_settings, name="settings"),
    path("p/<int:project_id>/settings/keys/", views_settings.key_create, name="key_create"),
    path("p/<int:project_id>/settings/network/", views_settings.project_network, name="network"),
    path(
        "p/<int:project_id>/settings/model-windows/",
        views_settings.project_model_windows,
        name="model_windows",
    ),
    path("p/<int:project_id>/settings/retention/", views_settings.project_retention, name="retention"),
    path(
        "p/<int:project_id>/settings/keys/<int:key_id>/revoke/", views_settings.key_revoke, name="key_revoke"
    ),
    path("p/<int:project_id>/settings/members/", views_settings.member_add, name="member_add"),
    path(
        "p/<int:project_id>/settings/members/<int:membership_id>/role/",
        views_settings.member_role,
        name="member_role",
    ),
    path(
        "p/<int:project_id>/settings/members/<int:membership_id>/remove/",
        views_settings.member_remove,
        name="member_remove",
    ),
    path(
        "p/<int:project_id>/s/<sid:session_id>/t/<int:turn>/b/<int:position>/",
        views.block_content,
        name="block",
    ),
    path("p/<int:project_id>/s/<sid:session_id>/t/<int:turn>/", views.turn_detail, name="turn"),
    path("p/<int:project_id>/s/<sid:session_id>/chart.json", views.chart_data, name="chart_data"),
    path("p/<int:project_id>/s/<sid:session_id>/", views.timeline, name="timeline"),
    # Links made before session ids were escaped carried raw slashes: redirect them.
    path("p/<int:project_id>/s/<path:rest>", views.session_legacy_link, name="session_legacy"),
]
