from django.urls import path

from insights import views

app_name = "insights"
urlpatterns = [
    path("p/<int:project_id>/settings/prices/", views.price_table, name="prices"),
]
