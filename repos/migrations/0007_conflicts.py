"""Proposal revisions and server-side resolver rules (issue 11); every existing proposal gets its
revision 1 (the head it was opened with, and its outcome if it has one)."""

import django.db.models.deletion
from django.db import migrations, models


def first_revisions(apps, schema_editor):
    Proposal = apps.get_model("repos", "Proposal")
    ProposalRevision = apps.get_model("repos", "ProposalRevision")
    Operation = apps.get_model("repos", "Operation")
    for proposal in Proposal.objects.all().iterator():
        done = Operation.objects.filter(proposal=proposal, state="done").order_by("-id").first()
        ProposalRevision.objects.create(
            proposal=proposal,
            number=1,
            head=proposal.head,
            kind="opened",
            outcome=done.outcome if done is not None else None,
            author_id=proposal.author_id,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("repos", "0006_git_ref_prefix"),
    ]

    operations = [
        migrations.CreateModel(
            name="ProposalRevision",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.IntegerField()),
                ("head", models.CharField(max_length=40)),
                (
                    "kind",
                    models.CharField(
                        choices=[("opened", "Opened"), ("revised", "Revised"), ("resolved", "Resolved")], max_length=10
                    ),
                ),
                ("outcome", models.JSONField(blank=True, null=True)),
                ("created", models.DateTimeField(auto_now_add=True)),
                (
                    "author",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to="repos.credential"
                    ),
                ),
                (
                    "proposal",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="revisions", to="repos.proposal"
                    ),
                ),
            ],
            options={
                "ordering": ["proposal_id", "number"],
                "constraints": [
                    models.UniqueConstraint(fields=("proposal", "number"), name="revision_number_unique_per_proposal"),
                    models.CheckConstraint(
                        condition=models.Q(("head__length", 40)), name="revision_head_is_an_object_id"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ResolverRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pattern", models.CharField(max_length=200)),
                (
                    "rule",
                    models.CharField(
                        choices=[("union", "Union"), ("ours", "Ours"), ("theirs", "Theirs")], max_length=10
                    ),
                ),
                ("created", models.DateTimeField(auto_now_add=True)),
                (
                    "repository",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="resolver_rules",
                        to="repos.repository",
                    ),
                ),
            ],
            options={
                "ordering": ["repository_id", "id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("repository", "pattern"), name="resolver_pattern_unique_per_repository"
                    )
                ],
            },
        ),
        migrations.RunPython(first_revisions, migrations.RunPython.noop),
    ]
