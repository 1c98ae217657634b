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

from .errors import ApiError, Invalid
from .models import (
    Changeset,
    Credential,
    Event,
    Operation,
    Proposal,
    Repository,
    RepositoryAccess,
    ResolverRule,
    Stream,
)
from .services.access import grant_access, revoke_access
from .services.credentials import check_reach, create_credential, revoke_credential
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

    def get_fields(self, request, obj=None):
        return ["name"] if obj is None else ["name", "default_stream", "object_format", "event_seq", "created"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Repository, form: RepositoryForm, change: bool) -> None:
        _become(obj, create_repository(form.cleaned_data["name"]))


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
