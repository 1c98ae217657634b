"""Database models: everything that is not git content (DESIGN.md, "Model").

Content lives in one bare git repository per Repository (engine.store.DiskStore); the database
owns the names that point into it. Constraints make illegal states impossible rather than
relying on callers: one stream name per repository, one head per stream (a column), one open
integration per proposal, one outcome per operation, one event sequence number per repository.

Only ``repos.services.integration`` moves a stream head, by compare-and-swap on
``Stream.version`` inside the transaction that records the operation's outcome and its event.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length

#: A 40-hex SHA-1 object id, stored as text (what git and the API speak).
OBJECT_ID_LENGTH = 40

# ``head__length=40`` in the check constraints below.
models.CharField.register_lookup(Length)


class Repository(models.Model):
    """One AgentGit repository: a bare git repository on disk plus its streams and history."""

    name = models.CharField(max_length=100, unique=True)
    object_format = models.CharField(max_length=10, default="sha1")
    default_stream = models.CharField(max_length=200, default="main")
    #: The last event sequence number handed out (events are numbered 1, 2, 3, … per repository).
    event_seq = models.BigIntegerField(default=0)
    #: The version of the repository's policy in force (``PolicyVersion``); 0: none. Read with the
    #: repository's row, so a landing on a repository without a policy costs no extra query.
    policy_version = models.IntegerField(default=0)
    #: How many webhooks it has (``Webhook``; repos.services.webhooks keeps it): read with the
    #: repository's row, so an event of a repository without webhooks schedules no delivery and
    #: costs no extra query.
    webhooks = models.IntegerField(default=0)
    #: The event sequence the ref mirror was last rebuilt through, and the one the last maintenance
    #: run saw (repos.services.refmirror, repos.services.maintenance): a repository whose
    #: ``event_seq`` is no greater has not changed since, and a start or a periodic run skips it
    #: (docs/adr/0021).
    mirrored_seq = models.BigIntegerField(default=0)
    maintained_seq = models.BigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "repositories"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Stream(models.Model):
    """A named line of history (a git branch); ``head`` moves only by compare-and-swap."""

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="streams")
    name = models.CharField(max_length=200)
    head = models.CharField(max_length=OBJECT_ID_LENGTH, null=True, blank=True)
    #: Incremented by every head move; the compare-and-swap compares it.
    version = models.BigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["repository_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["repository", "name"], name="stream_name_unique_per_repository"),
            models.CheckConstraint(
                condition=Q(head__isnull=True) | Q(head__length=OBJECT_ID_LENGTH), name="stream_head_is_an_object_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.repository.name}:{self.name}"


class Credential(models.Model):
    """An API token of a user: stored as a SHA-256 hash, shown once, scoped, revocable."""

    #: ``metrics`` lets a scraper read /metrics (AGENTGIT_METRICS_ACCESS=scope) and nothing else;
    #: ``review`` writes reviews of proposals; ``checks`` reports check results.
    SCOPES = ("read", "write", "integrate", "review", "checks", "metrics", "admin")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="credentials")
    name = models.CharField(max_length=100, blank=True)
    #: SHA-256 of the token, hex. Tokens are 256-bit random, so a fast hash is enough (no salt or
    #: stretching needed against guessing); it lets a request find its credential by index.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    #: The token's first characters, to tell credentials apart in lists without revealing them.
    token_prefix = models.CharField(max_length=12, editable=False)
    scopes = models.JSONField(default=list)
    #: Per-credential rate limit override (requests per second and burst), None = the default.
    rate = models.FloatField(null=True, blank=True)
    burst = models.IntegerField(null=True, blank=True)
    #: Where the credential reaches (repos.services.credentials): repository names (any other is
    #: 404 to it), stream patterns it may update, path patterns its changes may touch. An empty
    #: list is no limit, so credentials made before these existed keep what they could do.
    repositories = models.JSONField(default=list, blank=True)
    streams = models.JSONField(default=list, blank=True)
    paths = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name or 'credential'} ({self.token_prefix}…)"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


class Changeset(models.Model):
    """A commit plus what git does not record: its operation list and provenance."""

    #: No index of its own: the unique (repository, commit_id) index serves every lookup by
    #: repository. With both, SQLite (no ANALYZE statistics) searched ``repository = ? AND
    #: commit_id IN (...)`` by the repository alone, a scan of every changeset of the repository
    #: for each page of the log (11 ms on Flask's 5 531, growing with the history; issue 35).
    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="changesets", db_index=False)
    commit_id = models.CharField(max_length=OBJECT_ID_LENGTH)
    parents = models.JSONField(default=list)
    tree = models.CharField(max_length=OBJECT_ID_LENGTH)
    message = models.TextField(blank=True)
    #: NULL: not written yet, for a commit that arrived by git push (its list is derived from the
    #: diff against its first parent after the push's answer; reads derive it if that never ran:
    #: content.get_changeset, content.write_pending_operations).
    operations = models.JSONField(default=list, null=True)
    provenance = models.JSONField(default=dict)
    credential = models.ForeignKey(Credential, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The catch-up pass reads only the rows still without operations (few, if any).
            models.Index(
                fields=["repository"], condition=Q(operations__isnull=True), name="changeset_operations_pending"
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["repository", "commit_id"], name="changeset_unique_per_repository"),
            models.CheckConstraint(
                condition=Q(commit_id__length=OBJECT_ID_LENGTH), name="changeset_id_is_an_object_id"
            ),
        ]

    def __str__(self) -> str:
        return self.commit_id[:12]


class Proposal(models.Model):
    """A request to land a changeset on a stream: open → integrated | conflicted | closed."""

    class State(models.TextChoices):
        OPEN = "open"
        INTEGRATED = "integrated"
        CONFLICTED = "conflicted"
        CLOSED = "closed"

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="proposals")
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="proposals")
    head = models.CharField(max_length=OBJECT_ID_LENGTH)
    title = models.CharField(max_length=300, blank=True)
    author = models.ForeignKey(Credential, null=True, blank=True, on_delete=models.SET_NULL)
    state = models.CharField(max_length=12, choices=State.choices, default=State.OPEN)
    #: The integration outcome as the API reports it (fast_forward, merge, conflict, …).
    outcome = models.CharField(max_length=20, blank=True)
    #: The changeset the stream moved to (the head for a fast-forward, the merge changeset).
    result_changeset = models.CharField(max_length=OBJECT_ID_LENGTH, blank=True)
    #: The stream head after the integration (unchanged for a conflict).
    result_head = models.CharField(max_length=OBJECT_ID_LENGTH, blank=True)
    conflicts = models.JSONField(default=list)
    #: The policy decision the landing was judged by (repos.services.policies), written in the
    #: transaction that moved the stream; null where the repository had no policy.
    decision = models.JSONField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["repository", "state"]), models.Index(fields=["stream", "state"])]
        constraints = [
            models.CheckConstraint(condition=Q(head__length=OBJECT_ID_LENGTH), name="proposal_head_is_an_object_id")
        ]

    def __str__(self) -> str:
        return f"proposal {self.pk} → {self.stream.name}"


class ProposalRevision(models.Model):
    """One head a proposal has had (Gerrit's patch set), with the outcome of integrating it.

    Revision 1 is the head it was opened with; each ``revisions`` call and each resolution (a
    merge changeset the server built from an agent's resolutions) adds the next. The proposal's
    ``head`` is its latest revision's, and integrating integrates that one.
    """

    class Kind(models.TextChoices):
        OPENED = "opened"
        REVISED = "revised"
        RESOLVED = "resolved"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="revisions")
    number = models.IntegerField()
    head = models.CharField(max_length=OBJECT_ID_LENGTH)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    #: The integration outcome of this revision (API.md's document), null until it is integrated.
    outcome = models.JSONField(null=True, blank=True)
    author = models.ForeignKey(Credential, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["proposal_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["proposal", "number"], name="revision_number_unique_per_proposal"),
            models.CheckConstraint(condition=Q(head__length=OBJECT_ID_LENGTH), name="revision_head_is_an_object_id"),
        ]

    def __str__(self) -> str:
        return f"proposal {self.proposal_id} revision {self.number}"


class ResolverRule(models.Model):
    """A server-side resolver: paths matching ``pattern`` merge conflicting content by ``rule``.

    ``union`` keeps both sides' lines (git's ``merge=union``), ``ours`` the stream's version,
    ``theirs`` the proposal's. Patterns are gitattributes-style globs: without a '/', they match
    the file name at any depth (``CHANGELOG.md``, ``*.lock``); with one, the whole path.
    """

    class Rule(models.TextChoices):
        UNION = "union"
        OURS = "ours"
        THEIRS = "theirs"

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="resolver_rules")
    pattern = models.CharField(max_length=200)
    rule = models.CharField(max_length=10, choices=Rule.choices)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["repository_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["repository", "pattern"], name="resolver_pattern_unique_per_repository")
        ]

    def __str__(self) -> str:
        return f"{self.pattern} merge={self.rule}"


class Operation(models.Model):
    """One integration of a proposal: queued → done | failed, with exactly one outcome.

    Written when the integration is requested; the landing queue finishes it. Recovery finishes
    or fails every operation a crash left queued, exactly once (repos.services.integration).
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        DONE = "done"
        FAILED = "failed"

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="operations")
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="operations")
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="operations")
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    attempts = models.IntegerField(default=0)
    #: The outcome document of API.md, set once when the operation is done.
    outcome = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    #: An admin's bypass of the policy for this integration: ``{"reason", "by"}`` (null: none).
    bypass = models.JSONField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["stream", "state", "id"]),
            # The landing queue's depth and age for /metrics: reads the queued operations only.
            models.Index(fields=["created"], condition=Q(state="queued"), name="operation_queued_by_age"),
        ]
        constraints = [
            # One pending integration per proposal: asking twice joins the first.
            models.UniqueConstraint(
                fields=["proposal"], condition=Q(state="queued"), name="one_queued_operation_per_proposal"
            ),
            # An outcome exactly when done; an error exactly when failed.
            models.CheckConstraint(
                condition=(Q(state="queued", outcome__isnull=True, error__isnull=True))
                | Q(state="done", outcome__isnull=False)
                | Q(state="failed", error__isnull=False),
                name="operation_outcome_matches_state",
            ),
        ]

    def outcome_document(self) -> dict | None:
        """API.md's outcome document (None until done). The row stores it without the
        operation's own id, which a row written in its final state does not know yet
        (docs/adr/0024): every reader takes it from here, ids in their places."""
        if self.outcome is None:
            return None
        document = {key: value for key, value in self.outcome.items() if key not in ("operation", "proposal")}
        document["operation"] = self.pk
        document["proposal"] = self.proposal_id
        return document

    def __str__(self) -> str:
        return f"operation {self.pk} ({self.state})"


class Event(models.Model):
    """An outbox entry: written in the transaction that caused it, relayed after commit."""

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=50)
    payload = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["repository_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["repository", "seq"], name="event_seq_unique_per_repository")]
        # The newest events of some kinds (the repository page's recent integrations) without
        # walking back through every other event: a push of a million streams writes a million.
        indexes = [models.Index(fields=["repository", "kind", "seq"], name="event_kind_seq")]

    def __str__(self) -> str:
        return f"{self.repository.name}#{self.seq} {self.kind}"


class PackJournal(models.Model):
    """A small pack of objects written without an fsync, kept in the transaction that names its
    objects (engine.store.PackJournal): after a power loss the repository's first store writes
    it back; a checkpoint (repos.services.packs) syncs the file and deletes the row
    (docs/adr/0023)."""

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=80)
    pack = models.BinaryField()

    def __str__(self) -> str:
        return f"{self.name} of repository {self.repository_id}"


# ----------------------------------------------------------------------------- policies and reviews


class PolicyVersion(models.Model):
    """One version of a repository's policy document (engine.policy): who set it, when.

    Versions are never changed: setting a policy adds the next one and points
    ``Repository.policy_version`` at it (repos.services.policies), so every decision names the
    document it was judged by, and the history shows what each change changed from.
    """

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="policy_versions")
    version = models.IntegerField()
    document = models.JSONField()
    #: Who set it: a user's name (a credential's user, or the admin's login).
    changed_by = models.CharField(max_length=150, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["repository_id", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["repository", "version"], name="policy_version_unique_per_repository")
        ]

    def __str__(self) -> str:
        return f"{self.repository.name} policy v{self.version}"


class Review(models.Model):
    """A reviewer's verdict on a proposal, of the tree it saw (a new tree drops an approval).

    A reviewer's standing verdict is their latest approve or reject that is not withdrawn; a
    comment never replaces one.
    """

    class Verdict(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        COMMENT = "comment"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="reviews")
    #: The reviewer (a credential's user, or a person logged in to the web UI).
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    credential = models.ForeignKey(Credential, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    body = models.TextField(blank=True)
    #: The revision and the tree of the proposal's head that the reviewer saw.
    revision = models.IntegerField()
    tree = models.CharField(max_length=OBJECT_ID_LENGTH)
    withdrawn = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["proposal_id", "id"]
        indexes = [models.Index(fields=["proposal", "id"])]

    def __str__(self) -> str:
        return f"{self.verdict} of proposal {self.proposal_id}"


# ----------------------------------------------------------------------------- checks and webhooks


class CheckResult(models.Model):
    """The latest result of one check (``ci/test``) on one tree (repos.services.checks).

    Kept by tree, not by changeset: a rebase or a merge that leaves the tree as it was has the
    results its tree has. A new report of the same name on the same tree replaces the state;
    ``history`` keeps the states it replaced.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        SUCCESS = "success"
        FAILURE = "failure"
        ERROR = "error"

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="check_results")
    tree = models.CharField(max_length=OBJECT_ID_LENGTH)
    name = models.CharField(max_length=100)
    state = models.CharField(max_length=10, choices=State.choices)
    url = models.CharField(max_length=2000, blank=True)
    summary = models.TextField(blank=True)
    #: The changeset the latest report named (empty: it named the tree).
    changeset = models.CharField(max_length=OBJECT_ID_LENGTH, blank=True)
    credential = models.ForeignKey(Credential, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    #: The states this one replaced, oldest first: ``[{"state", "url", "changeset", "reported"}]``.
    history = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["repository_id", "tree", "name"]
        constraints = [
            models.UniqueConstraint(fields=["repository", "tree", "name"], name="check_unique_per_tree_and_name"),
            models.CheckConstraint(condition=Q(tree__length=OBJECT_ID_LENGTH), name="check_tree_is_an_object_id"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.state} on {self.tree[:12]}"


class Webhook(models.Model):
    """An outside URL told of the repository's events of the chosen kinds (repos.services.webhooks).

    ``cursor`` is the last event of the outbox it has been handed: deliveries are made from the
    outbox in order, each event once.
    """

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="+")
    url = models.CharField(max_length=2000)
    #: The HMAC-SHA256 key of its deliveries' signatures; never shown after it is set.
    secret = models.CharField(max_length=256)
    #: Event kinds (``["*"]``: every kind).
    events = models.JSONField(default=list)
    cursor = models.BigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["repository_id", "id"]

    def __str__(self) -> str:
        return f"webhook {self.pk} of {self.repository.name} → {self.url}"


class WebhookDelivery(models.Model):
    """One event sent to one webhook: pending → delivered | failed, with every attempt."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    #: ``X-AgentGit-Delivery``: the same on every attempt and redelivery, so a receiver can
    #: tell a repeat from a new event.
    guid = models.UUIDField(unique=True)
    event_seq = models.BigIntegerField()
    event = models.CharField(max_length=50)
    #: The signed body, as sent: a redelivery sends the same bytes after the outbox is pruned.
    body = models.TextField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.IntegerField(default=0)
    #: The attempt after which a failure is final (a redelivery raises it).
    last_attempt = models.IntegerField()
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["webhook_id", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["webhook", "event_seq"], name="one_delivery_per_webhook_and_event")
        ]
        indexes = [models.Index(fields=["state", "updated"], name="webhook_delivery_by_state")]

    def __str__(self) -> str:
        return f"{self.event} #{self.event_seq} → webhook {self.webhook_id} ({self.state})"


class WebhookAttempt(models.Model):
    """One try at sending a delivery: when, the answer's status code or the error, how long."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.IntegerField()
    #: The HTTP status of the answer; null when none came (refused, timed out, unreachable).
    status_code = models.IntegerField(null=True, blank=True)
    ok = models.BooleanField()
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.IntegerField()
    started = models.DateTimeField()

    class Meta:
        ordering = ["delivery_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="attempt_number_unique_per_delivery")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}"


# ----------------------------------------------------------------------------- derived data
#
# Written by the derive pass (repos.services.derived) in the transaction that lands a head, so
# a head never lacks them for long; everything here can be recomputed from the objects.


class CommitNode(models.Model):
    """A changeset's place in the commit graph: what graph walks need, without reading objects.

    Recorded parents first, so a changeset that has a node has ancestors that have nodes.
    """

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="+")
    commit_id = models.CharField(max_length=OBJECT_ID_LENGTH)
    #: 1 for a root, else 1 + the highest generation of its parents (engine.graph).
    generation = models.IntegerField()
    #: The parents' ids, space-separated (plain text: a cold process reads every row at once,
    #: and decoding JSON would double the cost).
    parents = models.TextField(blank=True)
    #: Committer time, seconds since the epoch (the log's order).
    time = models.BigIntegerField()
    #: Whether its changed paths are in PathChange (False: too many to index; log compares trees).
    indexed = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["repository", "commit_id"], name="commit_node_unique_per_repository")
        ]
        # Each process reads the nodes it has not seen yet: WHERE repository = ? AND id > ?.
        indexes = [models.Index(fields=["repository", "id"], name="commit_node_by_arrival")]


class PathChange(models.Model):
    """A path (file or directory) whose entry a changeset changed relative to its first parent.

    The path is stored as a 64-bit hash (engine.history.path_key): a collision only costs the
    log a tree comparison. The unique index doubles as the lookup index of ``log?path=``:
    WHERE repository = ? AND key = ? AND generation < ? ORDER BY generation DESC.
    """

    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="+")
    key = models.BigIntegerField()
    generation = models.IntegerField()
    commit_id = models.CharField(max_length=OBJECT_ID_LENGTH)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["repository", "key", "generation", "commit_id"], name="path_change_unique_per_repository"
            )
        ]


class IdempotencyKey(models.Model):
    """A credential's ``Idempotency-Key``: the request it was first sent with, and what that did.

    Written in the transaction that does the request's work, so a key exists exactly when its
    work committed; the unique constraint makes a concurrent retry with the same key wait for
    the first and then find its record, never do the work a second time
    (repos.services.idempotency).
    """

    credential = models.ForeignKey(Credential, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    #: SHA-256 of the request's method, path and canonical JSON body: the same key sent with a
    #: different request is refused.
    fingerprint = models.CharField(max_length=64)
    #: What the work recorded, enough to answer again: the answer itself, or the ids it created.
    record = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)
    #: After this the key is forgotten and may be used again.
    expires = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["credential", "key"], name="idempotency_key_unique_per_credential")
        ]
        indexes = [models.Index(fields=["credential", "expires"], name="idempotency_key_by_expiry")]

    def __str__(self) -> str:
        return f"{self.key} ({self.credential_id})"


# ----------------------------------------------------------------------------- web access


class RepositoryAccess(models.Model):
    """A person's read access to one repository in the web UI (superusers need none).

    Granted and revoked only through ``repos.services.access``. Without a row, the repository
    does not exist for that user: its pages answer 404, never 403.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="repository_access")
    repository = models.ForeignKey(Repository, on_delete=models.CASCADE, related_name="access")
    granted = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "repository access"
        verbose_name_plural = "repository access"
        ordering = ["repository_id", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "repository"], name="one_access_per_user_and_repository")
        ]

    def __str__(self) -> str:
        return f"{self.user} reads {self.repository}"
