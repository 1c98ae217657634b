"""Drop the changeset table's index on the repository alone (models.Changeset.repository says why).

The unique (repository, commit_id) index serves every lookup by repository. The index is dropped
by its name (the same on SQLite and PostgreSQL) rather than by Django's AlterField, which on
SQLite copies the whole table into a new one: minutes for a long imported history.
"""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "repos_changeset_repository_id_323adcd1"


class Migration(migrations.Migration):
    dependencies = [
        ("repos", "0015_pack_journal"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="changeset",
                    name="repository",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="changesets",
                        to="repos.repository",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {INDEX}",
                    reverse_sql=f"CREATE INDEX {INDEX} ON repos_changeset (repository_id)",
                ),
            ],
        ),
    ]
