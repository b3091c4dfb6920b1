from django.urls import path

from experiments import versions, views

app_name = "experiments"
urlpatterns = [
    path("p/<int:project_id>/experiments/", views.home, name="home"),
    path("p/<int:project_id>/experiments/sets/new", views.set_create, name="set_create"),
    path("p/<int:project_id>/experiments/sets/<int:set_id>/", views.set_detail, name="set"),
    path("p/<int:project_id>/experiments/sets/<int:set_id>/edit", views.set_edit, name="set_edit"),
    path("p/<int:project_id>/experiments/sets/<int:set_id>/export", views.set_export, name="set_export"),
    path("p/<int:project_id>/experiments/strategies/save", views.strategy_save, name="strategy_save"),
    path("p/<int:project_id>/experiments/run", views.experiment_create, name="run"),
    path("p/<int:project_id>/experiments/compare", views.compare, name="compare"),
    path("p/<int:project_id>/experiments/sweeps/new", views.sweep_create, name="sweep_create"),
    path("p/<int:project_id>/experiments/sweeps/<int:sweep_id>/", views.sweep_detail, name="sweep"),
    path("p/<int:project_id>/experiments/versions/", versions.versions_page, name="versions"),
    path(
        "p/<int:project_id>/experiments/compare/<int:a_id>/<int:b_id>/items/<int:item_id>/",
        views.compare_item,
        name="compare_item",
    ),
    path("p/<int:project_id>/experiments/<int:experiment_id>/", views.experiment_detail, name="experiment"),
    path("p/<int:project_id>/experiments/<int:experiment_id>/cancel", views.experiment_cancel, name="cancel"),
    path(
        "p/<int:project_id>/experiments/<int:experiment_id>/items/<int:item_id>/",
        views.experiment_item,
        name="item",
    ),
]
