"""Django admin: admins manage credentials and repositories here and browse everything else.

Whatever has a service goes through it (credentials, repositories), so the admin cannot create
a row the API would not have created. The history (streams, changesets, proposals,
operations, events) is read-only here: only the services move it.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from engine.errors import EngineError
from engine.policy import parse_policy

from .errors import ApiError, Invalid
from .models import (
    Changeset,
    CheckResult,
    Credential,
    Event,
    Operation,
    PolicyVersion,
    Proposal,
    Repository,
    RepositoryAccess,
    ResolverRule,
    Review,
    Stream,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from .services import search, webhooks
from .services.access import grant_access, revoke_access
from .services.credentials import check_reach, create_credential, revoke_credential
from .services.events import KINDS
from .services.policies import set_policy
from .services.repositories import check_repository_name, create_repository
from .services.resolution import add_rule

admin.site.site_header = "AgentGit administration"
admin.site.site_title = "AgentGit admin"


def _become(obj: models.Model, saved: models.Model) -> None:
    """Turn the admin's unsaved form instance into the row a service created.

    The rest of the admin's add flow (log entry, redirect to the change page) then refers to
    the saved row, although ``obj.save()`` was never called.
    """
    for field in type(saved)._meta.concrete_fields:
        setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding = False
    obj._state.db = saved._state.db


# Credentials ---------------------------------------------------------------------------------


#: The lists a credential is held to (its reach), one entry per line in the form.
REACH_FIELDS = ("repositories", "streams", "paths")


def _reach_field(help_text: str) -> forms.CharField:
    return forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"{help_text} One per line; empty: no limit.",
    )


class CredentialForm(forms.ModelForm):
    """Scopes as checkboxes; rate and burst checked as the service checks them; the reach as
    lines of text, checked by the service (``check_reach``) as every other way of making one."""

    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in Credential.SCOPES],
        widget=forms.CheckboxSelectMultiple,
        help_text="admin implies every other scope.",
    )
    repositories = _reach_field("Repository names it reaches (any other is 404 to it).")
    streams = _reach_field("Stream patterns it may update, e.g. agent/*.")
    paths = _reach_field("gitignore-style path patterns its changes may touch, e.g. src/**.")

    class Meta:
        model = Credential
        fields = ["user", "name", "scopes", "rate", "burst", *REACH_FIELDS]
        help_texts = {
            "rate": "Requests per second; empty = the default.",
            "burst": "Token bucket size; empty = the default.",
        }

    def clean_scopes(self) -> list[str]:
        chosen = self.cleaned_data["scopes"]
        return [scope for scope in Credential.SCOPES if scope in chosen]  # canonical order

    def clean_rate(self) -> float | None:
        rate = self.cleaned_data["rate"]
        if rate is not None and rate <= 0:
            raise ValidationError("The rate must be more than 0.")
        return rate

    def clean_burst(self) -> int | None:
        burst = self.cleaned_data["burst"]
        if burst is not None and burst < 1:
            raise ValidationError("The burst must be at least 1.")
        return burst

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        lists = {
            name: [line.strip() for line in data.get(name, "").splitlines() if line.strip()] for name in REACH_FIELDS
        }
        try:
            data.update(check_reach(**lists)._asdict())
        except Invalid as refused:
            for detail in refused.details:
                self.add_error(detail["field"].split(".")[0], detail["message"])
        return data


class CredentialStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", "active"), ("revoked", "revoked")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(revoked__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked__isnull=False)
        return queryset


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    """Tokens are created by the service and shown once, in a message after saving; revoked by
    the service (the action). A credential is never edited: its page is read-only."""

    form = CredentialForm
    list_display = ["user", "name", "token_prefix", "scope_list", "reach", "created", "last_used", "revoked"]
    list_filter = [CredentialStatusFilter]
    list_select_related = ["user"]
    search_fields = ["user__username", "name", "token_prefix"]
    actions = ["revoke"]

    @admin.display(description="scopes")
    def scope_list(self, obj: Credential) -> str:
        return ", ".join(obj.scopes) if isinstance(obj.scopes, list) else str(obj.scopes)

    @admin.display(description="held to")
    def reach(self, obj: Credential) -> str:
        held = [f"{name}: {', '.join(getattr(obj, name))}" for name in REACH_FIELDS if getattr(obj, name)]
        return "; ".join(held) or "everything"

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["user", "name", "scopes", "rate", "burst", *REACH_FIELDS]
        return [
            "user",
            "name",
            "token_prefix",
            "scope_list",
            "reach",
            "rate",
            "burst",
            "created",
            "last_used",
            "revoked",
        ]

    def get_readonly_fields(self, request, obj=None):
        # The hash is not a form field at all (editable=False); an existing credential is shown,
        # never edited: other scopes or limits make a new credential, and revoking is the service's.
        return [] if obj is None else self.get_fields(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Credential, form: CredentialForm, change: bool) -> None:
        data = form.cleaned_data
        credential, token = create_credential(
            data["user"],
            data["scopes"],
            name=data["name"],
            rate=data["rate"],
            burst=data["burst"],
            **{name: data[name] for name in REACH_FIELDS},
        )
        _become(obj, credential)
        # The one time the token exists outside the client: the message is rendered on the
        # next page and then discarded.
        messages.success(
            request,
            f"The token of {credential} is {token} — copy it now: it is stored only as a hash"
            " and will not be shown again.",
        )

    @admin.action(description="Revoke selected credentials")
    def revoke(self, request: HttpRequest, queryset: QuerySet[Credential]) -> None:
        live = list(queryset.filter(revoked__isnull=True))
        for credential in live:
            revoke_credential(credential)
        self.message_user(request, f"Revoked {len(live)} credential(s).", messages.SUCCESS)


# Repositories --------------------------------------------------------------------------------


class RepositoryForm(forms.ModelForm):
    class Meta:
        model = Repository
        fields = ["name"]

    def clean_name(self) -> str:
        try:
            return check_repository_name(self.cleaned_data["name"])
        except Invalid as error:
            raise ValidationError(error.message) from None


@admin.register(Repository)
class RepositoryAdmin(admin.ModelAdmin):
    """Created through the repository service (which also creates the bare git repository and
    the default stream); then read-only. No delete: it would leave the git repository on disk."""

    form = RepositoryForm
    list_display = ["name", "default_stream", "object_format", "event_seq", "created"]
    search_fields = ["name"]

    readonly_fields = ["search_index"]
    actions = ["index_for_search"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["name"]
        return ["name", "default_stream", "object_format", "event_seq", "created", "search_index"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Repository, form: RepositoryForm, change: bool) -> None:
        _become(obj, create_repository(form.cleaned_data["name"]))

    @admin.display(description="Code search index")
    def search_index(self, obj: Repository) -> str:
        """What the index holds, and what the default stream's head holds that it does not."""
        state = search.index_state(obj)
        stats = state.stats
        text = (
            f"{stats.blobs} blob(s) indexed ({stats.blob_bytes / 1e6:.1f} MB of content; {stats.too_large} too large "
            f"to index, read by each search), index file {stats.file_bytes / 1e6:.1f} MB"
        )
        if state.files_at_default is not None:
            text += (
                f"; at {obj.default_stream}: {state.files_at_default} file(s), "
                f"{state.missing_at_default} blob(s) not indexed yet (searched by reading them)"
            )
        return text

    @admin.action(description="Index the selected repositories for code search (in the background)")
    def index_for_search(self, request: HttpRequest, queryset) -> None:
        search.index_missing_later([repository.name for repository in queryset])
        self.message_user(request, "Indexing started: the index's state shows its progress.", messages.SUCCESS)


# Web UI access ------------------------------------------------------------------------------


@admin.register(RepositoryAccess)
class RepositoryAccessAdmin(admin.ModelAdmin):
    """Who may read which repository in the web UI. Granted and revoked through the access
    service; a grant is never edited, only revoked (deleted) and granted again."""

    list_display = ["user", "repository", "granted"]
    list_filter = ["repository"]
    list_select_related = ["user", "repository"]
    search_fields = ["user__username", "user__email", "repository__name"]
    autocomplete_fields = ["user", "repository"]
    fields = ["user", "repository"]
    actions = ["revoke"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # "revoke" goes through the service instead
        return actions

    def save_model(self, request: HttpRequest, obj: RepositoryAccess, form, change: bool) -> None:
        _become(obj, grant_access(form.cleaned_data["user"], form.cleaned_data["repository"]))

    def delete_model(self, request: HttpRequest, obj: RepositoryAccess) -> None:
        revoke_access(obj.user, obj.repository)

    @admin.action(description="Revoke selected access")
    def revoke(self, request: HttpRequest, queryset: QuerySet[RepositoryAccess]) -> None:
        revoked = sum(revoke_access(access.user, access.repository) for access in queryset.select_related("user"))
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)


# History: read-only --------------------------------------------------------------------------


class ReadOnlyAdmin(admin.ModelAdmin):
    """Browse only: these rows change only through the services."""

    # These tables grow without bound; skip the extra COUNT(*) over the whole table.
    show_full_result_count = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Stream)
class StreamAdmin(ReadOnlyAdmin):
    list_display = ["name", "repository", "head", "version", "updated"]
    list_filter = ["repository"]
    search_fields = ["name", "repository__name", "head"]


@admin.register(Changeset)
class ChangesetAdmin(ReadOnlyAdmin):
    list_display = ["commit_id", "repository", "summary", "credential", "created"]
    list_filter = ["repository"]
    search_fields = ["commit_id", "message"]

    @admin.display(description="message")
    def summary(self, obj: Changeset) -> str:
        return obj.message.splitlines()[0][:80] if obj.message else ""


@admin.register(Proposal)
class ProposalAdmin(ReadOnlyAdmin):
    list_display = ["id", "repository", "stream", "title", "state", "outcome", "author", "created", "updated"]
    list_filter = ["state", "outcome", "repository"]
    list_select_related = ["repository", "stream__repository", "author"]
    search_fields = ["title", "head"]


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ["id", "repository", "stream", "proposal", "state", "attempts", "created", "finished"]
    list_filter = ["state", "repository"]
    list_select_related = ["repository", "stream__repository", "proposal__stream"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["repository", "seq", "kind", "created"]
    list_filter = ["kind", "repository"]
    search_fields = ["kind"]


# Resolver rules ------------------------------------------------------------------------------


class ResolverRuleForm(forms.ModelForm):
    class Meta:
        model = ResolverRule
        fields = ["repository", "pattern", "rule"]


@admin.register(ResolverRule)
class ResolverRuleAdmin(admin.ModelAdmin):
    """Server-side resolvers per repository: created through the resolution service (the API's
    checks), removed here freely; a rule is not edited in place (delete it and add another)."""

    form = ResolverRuleForm
    list_display = ["repository", "pattern", "rule", "created"]
    list_filter = ["rule", "repository"]
    search_fields = ["pattern", "repository__name"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None

    def save_model(self, request: HttpRequest, obj: ResolverRule, form: ResolverRuleForm, change: bool) -> None:
        data = form.cleaned_data
        try:
            saved = add_rule(data["repository"], {"pattern": data["pattern"], "rule": data["rule"]})
        except ApiError as error:
            # The form validated it already; the service refuses only a concurrent duplicate.
            messages.error(request, error.message)
            return
        _become(obj, saved)


# Policies and reviews ------------------------------------------------------------------------


class PolicyVersionForm(forms.ModelForm):
    """A repository's next policy document (JSON), checked by the policy service."""

    document = forms.JSONField(
        widget=forms.Textarea(attrs={"rows": 20, "cols": 100}),
        help_text='{"rules": [{"streams": ["main"], "required_approvals": 1, "code_owners": true, '
        '"deny_paths": [".ci/**"], "direct_update": "admins"}]} (README, "Policies and reviews").',
    )

    class Meta:
        model = PolicyVersion
        fields = ["repository", "document"]

    def clean_document(self) -> object:
        document = self.cleaned_data["document"]
        try:
            parse_policy(document)
        except EngineError as error:
            raise ValidationError([f"{d.get('field') or 'document'}: {d['message']}" for d in error.details]) from None
        return document


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    """A repository's policy and its history: who changed it, when, and from what. A version is
    never edited; "add" stores the next one through the policy service (which validates it),
    starting from the document in force (``?repository=<id>``)."""

    form = PolicyVersionForm
    list_display = ["repository", "version", "in_force", "changed_by", "created"]
    list_filter = ["repository"]
    list_select_related = ["repository"]
    search_fields = ["repository__name", "changed_by"]

    def get_fields(self, request, obj=None):
        return (
            ["repository", "document"]
            if obj is None
            else ["repository", "version", "changed_by", "created", "document", "previous"]
        )

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["repository", "version", "changed_by", "created", "document", "previous"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_changeform_initial_data(self, request: HttpRequest):  # type: ignore[override]
        initial: dict[str, object] = dict(super().get_changeform_initial_data(request))
        repository = request.GET.get("repository", "")
        current = (
            PolicyVersion.objects.filter(repository_id=int(repository))
            .order_by("-version")
            .values_list("document", flat=True)
            .first()
            if repository.isdigit()
            else None
        )
        initial["document"] = current if current is not None else {"rules": []}
        return initial

    @admin.display(boolean=True, description="in force")
    def in_force(self, obj: PolicyVersion) -> bool:
        return obj.repository.policy_version == obj.version

    @admin.display(description="changed from")
    def previous(self, obj: PolicyVersion) -> object:
        before = PolicyVersion.objects.filter(repository=obj.repository, version=obj.version - 1).first()
        return before.document if before is not None else "(no policy)"

    def save_model(self, request: HttpRequest, obj: PolicyVersion, form: PolicyVersionForm, change: bool) -> None:
        data = form.cleaned_data
        _become(obj, set_policy(data["repository"], data["document"], by=request.user.get_username()))


@admin.register(Review)
class ReviewAdmin(ReadOnlyAdmin):
    list_display = ["proposal", "user", "verdict", "revision", "withdrawn", "created"]
    list_filter = ["verdict"]
    list_select_related = ["proposal", "user"]
    search_fields = ["user__username", "body"]


# Check results and webhooks ------------------------------------------------------------------


@admin.register(CheckResult)
class CheckResultAdmin(ReadOnlyAdmin):
    list_display = ["name", "state", "repository", "tree", "changeset", "updated"]
    list_filter = ["state", "repository"]
    list_select_related = ["repository"]
    search_fields = ["name", "tree", "changeset"]


class WebhookForm(forms.ModelForm):
    """The API's fields, checked by the webhook service; the secret is asked for, never shown."""

    secret = forms.CharField(
        widget=forms.PasswordInput, max_length=webhooks.SECRET_MAX_LENGTH, help_text="The HMAC-SHA256 key."
    )
    events = forms.MultipleChoiceField(
        choices=[(webhooks.ALL_EVENTS, "every kind"), *[(kind, kind) for kind in KINDS]],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = Webhook
        fields = ["repository", "url", "secret", "events"]

    def clean(self):
        data = super().clean()
        if not self.errors:
            try:  # the service's own checks, without making it yet
                webhooks.check_url(data.get("url"), "url")
            except Invalid as error:
                self.add_error("url", error.message)
        return data


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """Added and removed through the webhook service (which keeps the repository's count); a
    webhook is never edited: remove it and add another. Its secret is never shown."""

    form = WebhookForm
    list_display = ["id", "repository", "url", "events", "cursor", "created"]
    list_filter = ["repository"]
    list_select_related = ["repository"]
    search_fields = ["url", "repository__name"]

    def get_fields(self, request, obj=None):
        return ["repository", "url", "secret", "events"] if obj is None else ["repository", "url", "events", "cursor"]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else self.get_fields(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Webhook, form: WebhookForm, change: bool) -> None:
        data = form.cleaned_data
        body = {"url": data["url"], "secret": data["secret"], "events": list(data["events"])}
        _become(obj, webhooks.create_webhook(data["repository"], body))

    def delete_model(self, request: HttpRequest, obj: Webhook) -> None:
        webhooks.delete_webhook(obj.repository, obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Webhook]) -> None:
        for hook in queryset.select_related("repository"):
            webhooks.delete_webhook(hook.repository, hook.pk)


class WebhookAttemptInline(admin.TabularInline):
    model = WebhookAttempt
    fields = readonly_fields = ("number", "started", "status_code", "ok", "error", "duration_ms")
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """The delivery log, each delivery with its attempts; "Redeliver" sends it again."""

    list_display = ["id", "webhook", "event", "event_seq", "state", "attempts", "created", "updated"]
    list_filter = ["state", "event"]
    list_select_related = ["webhook__repository"]
    search_fields = ["guid", "event"]
    inlines = [WebhookAttemptInline]
    actions = ["redeliver"]

    @admin.action(description="Redeliver selected deliveries")
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        sent, pending = 0, 0
        for delivery in queryset.select_related("webhook"):
            try:
                webhooks.redeliver(delivery)
                sent += 1
            except ApiError:  # still pending: it is being delivered
                pending += 1
        self.message_user(request, f"Redelivering {sent}; {pending} still pending.", messages.SUCCESS)
