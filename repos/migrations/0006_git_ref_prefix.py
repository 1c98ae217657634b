"""ls-refs ``ref-prefix`` as an index range on PostgreSQL (repos.services.repositories.streams_by_prefix).

Under a collation other than C, PostgreSQL's default btree cannot serve ``LIKE 'prefix%'``;
``varchar_pattern_ops`` can. SQLite answers the same question with a range of the existing
unique index, so nothing is created there.
"""

from django.db import migrations

INDEX = "repos_stream_name_prefix"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON repos_stream (repository_id, name varchar_pattern_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("repos", "0005_web_access")]
    operations = [migrations.RunPython(create, drop)]
