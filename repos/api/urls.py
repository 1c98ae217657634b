"""REST routes, mounted at /api/v1/ (API.md). URL names are in the ``api`` namespace.

``{rev}`` may be a stream name, and stream names may contain '/': routes that take a revision
and then a path use two ``path`` converters, and the view finds where the revision ends.
"""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView
from rest_framework.permissions import AllowAny

from . import (
    views,
    views_checks,
    views_content,
    views_credentials,
    views_history,
    views_landing,
    views_policies,
    views_proposals,
    views_search,
)
from .events import EventsView
from .schema import BearerTokenScheme, TokenBasicScheme

app_name = "api"

#: drf-spectacular registers extensions on import: these describe the token schemes in the schema.
AUTH_SCHEMES = (BearerTokenScheme, TokenBasicScheme)

#: The schema and its docs page are public, like /healthz.
PUBLIC = {"authentication_classes": [], "permission_classes": [AllowAny]}

urlpatterns = [
    path("repos", views.ReposView.as_view(), name="repos"),
    path("repos/<str:repo>", views.RepoView.as_view(), name="repo"),
    path("repos/<str:repo>/streams", views.StreamsView.as_view(), name="streams"),
    path("repos/<str:repo>/streams/<path:stream>/land", views_landing.LandView.as_view(), name="land"),
    path("repos/<str:repo>/streams/<path:stream>", views.StreamView.as_view(), name="stream"),
    path("repos/<str:repo>/blobs", views_content.BlobsView.as_view(), name="blobs"),
    path("repos/<str:repo>/blobs/batch", views_content.BlobBatchView.as_view(), name="blob-batch"),
    path("repos/<str:repo>/blobs/<str:blob_id>", views_content.BlobView.as_view(), name="blob"),
    path("repos/<str:repo>/changesets", views_content.ChangesetsView.as_view(), name="changesets"),
    path("repos/<str:repo>/changesets/<str:changeset_id>", views_content.ChangesetView.as_view(), name="changeset"),
    path("repos/<str:repo>/tree/<path:rev>", views_content.TreeView.as_view(), name="tree"),
    path("repos/<str:repo>/files/<path:rev>/<path:path>", views_content.FileView.as_view(), name="file"),
    path("repos/<str:repo>/proposals", views.ProposalsView.as_view(), name="proposals"),
    path("repos/<str:repo>/proposals/<str:proposal_id>", views.ProposalView.as_view(), name="proposal"),
    path("repos/<str:repo>/proposals/<str:proposal_id>/integrate", views.IntegrateView.as_view(), name="integrate"),
    path(
        "repos/<str:repo>/proposals/<str:proposal_id>/conflicts",
        views_proposals.ConflictsView.as_view(),
        name="proposal-conflicts",
    ),
    path("repos/<str:repo>/proposals/<str:proposal_id>/resolve", views_proposals.ResolveView.as_view(), name="resolve"),
    path(
        "repos/<str:repo>/proposals/<str:proposal_id>/revisions",
        views_proposals.RevisionsView.as_view(),
        name="revisions",
    ),
    path("repos/<str:repo>/proposals/<str:proposal_id>/close", views_proposals.CloseView.as_view(), name="close"),
    path("repos/<str:repo>/proposals/<str:proposal_id>/reopen", views_proposals.ReopenView.as_view(), name="reopen"),
    path("repos/<str:repo>/proposals/<str:proposal_id>/reviews", views_policies.ReviewsView.as_view(), name="reviews"),
    path(
        "repos/<str:repo>/proposals/<str:proposal_id>/reviews/<str:review_id>",
        views_policies.ReviewView.as_view(),
        name="review",
    ),
    path("repos/<str:repo>/proposals/<str:proposal_id>/policy", views_policies.ExplainView.as_view(), name="explain"),
    path("repos/<str:repo>/policy", views_policies.PolicyView.as_view(), name="policy"),
    path("repos/<str:repo>/resolvers", views_proposals.ResolversView.as_view(), name="resolvers"),
    path("repos/<str:repo>/resolvers/<str:rule_id>", views_proposals.ResolverView.as_view(), name="resolver"),
    path("repos/<str:repo>/operations/<str:operation_id>", views.OperationView.as_view(), name="operation"),
    path("repos/<str:repo>/diff", views_history.DiffView.as_view(), name="diff"),
    path("repos/<str:repo>/blame/<path:rev>/<path:path>", views_history.BlameView.as_view(), name="blame"),
    path("repos/<str:repo>/log", views_history.LogView.as_view(), name="log"),
    path("repos/<str:repo>/search", views_search.SearchView.as_view(), name="search"),
    path("repos/<str:repo>/events", EventsView.as_view(), name="events"),
    path("repos/<str:repo>/checks", views_checks.ChecksView.as_view(), name="checks"),
    path("repos/<str:repo>/webhooks", views_checks.WebhooksView.as_view(), name="webhooks"),
    path("repos/<str:repo>/webhooks/<str:webhook_id>", views_checks.WebhookView.as_view(), name="webhook"),
    path(
        "repos/<str:repo>/webhooks/<str:webhook_id>/deliveries",
        views_checks.DeliveriesView.as_view(),
        name="webhook-deliveries",
    ),
    path(
        "repos/<str:repo>/webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/redeliver",
        views_checks.RedeliverView.as_view(),
        name="webhook-redeliver",
    ),
    path("credentials", views_credentials.CredentialsView.as_view(), name="credentials"),
    path("credentials/<str:credential_id>", views_credentials.CredentialView.as_view(), name="credential"),
    path("schema", SpectacularAPIView.as_view(**PUBLIC), name="schema"),
    # Redoc from drf-spectacular-sidecar's static files (WhiteNoise), never from a CDN.
    path(
        "docs",
        SpectacularRedocView.as_view(url_name="api:schema", template_name="repos/api_docs.html", **PUBLIC),
        name="docs",
    ),
]
