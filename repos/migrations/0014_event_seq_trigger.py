"""SQLite: the repository's ``event_seq`` follows the events inserted (repos/services/events.py).

An event's statement numbers its rows after ``event_seq`` and advances it in the same statement:
on PostgreSQL with a data-modifying WITH, which SQLite has not; there this trigger advances it
(docs/adr/0024). Nothing on PostgreSQL.
"""

from django.db import migrations

TRIGGER = """
CREATE TRIGGER repos_event_advances_seq AFTER INSERT ON repos_event
BEGIN
    UPDATE repos_repository SET event_seq = NEW.seq WHERE id = NEW.repository_id AND event_seq < NEW.seq;
END
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(TRIGGER)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS repos_event_advances_seq")


class Migration(migrations.Migration):
    dependencies = [
        ("repos", "0013_upkeep_marks"),
    ]

    operations = [migrations.RunPython(create, drop)]
