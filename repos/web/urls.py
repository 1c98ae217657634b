"""The web UI's pages. Repository pages live under ``/repos/<repo>/`` so that no repository name
can shadow ``/admin/``, ``/api/`` or the probes. ``<rest>`` is ``<rev>`` or ``<rev>/<path>``:
a revision is a stream name (which may hold '/') or a changeset id, and a URL with a changeset
id is a permalink."""

from django.urls import path

from . import auth, feed, views_browse, views_history, views_proposals, views_search

app_name = "web"

urlpatterns = [
    path("", views_browse.home, name="home"),
    path("login", auth.login, name="login"),
    path("logout", auth.logout, name="logout"),
    path("repos/<str:repo>/", views_browse.repository_home, name="repository"),
    path("repos/<str:repo>/tree/", views_browse.tree, name="tree-root"),
    path("repos/<str:repo>/tree/<path:rest>", views_browse.tree, name="tree"),
    path("repos/<str:repo>/blob/<path:rest>", views_browse.file, name="file"),
    path("repos/<str:repo>/raw/<path:rest>", views_browse.raw, name="raw"),
    path("repos/<str:repo>/find/<path:rest>", views_browse.find, name="find"),
    path("repos/<str:repo>/blame/<path:rest>", views_history.blame, name="blame"),
    path("repos/<str:repo>/search/", views_search.search_page, name="search"),
    path("repos/<str:repo>/log/", views_history.log, name="log-default"),
    path("repos/<str:repo>/log/<path:rest>", views_history.log, name="log"),
    path("repos/<str:repo>/changeset/<str:oid>", views_history.changeset, name="changeset"),
    path("repos/<str:repo>/compare/", views_history.compare, name="compare-form"),
    path("repos/<str:repo>/compare/<path:spec>", views_history.compare, name="compare"),
    path("repos/<str:repo>/proposals/", views_proposals.proposal_list, name="proposals"),
    path("repos/<str:repo>/proposals/<int:number>", views_proposals.proposal_detail, name="proposal"),
    path("repos/<str:repo>/proposals/<int:number>/reviews", views_proposals.review, name="review"),
    path(
        "repos/<str:repo>/proposals/<int:number>/reviews/<int:review_id>/withdraw",
        views_proposals.withdraw_review,
        name="withdraw-review",
    ),
    path("repos/<str:repo>/activity/", views_proposals.activity, name="activity"),
    # Ends in /events: the load-shedding guard never refuses a feed (agentgit_site/guards.py).
    path("repos/<str:repo>/activity/events", feed.activity_events, name="activity-events"),
]
