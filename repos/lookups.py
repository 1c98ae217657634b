"""The lookups every request makes, compiled by the ORM once and then run as plain SQL.

Building and compiling a queryset costs the ORM 200–400 µs; the SQL it produces runs in about
20 µs. A request looks up its credential and its repository, and a cycle of an agent makes five
requests, so those lookups are compiled once per database connection setup (vendor) and then
executed with the new value, their results converted as the ORM would convert them and turned
into model instances with ``Model.from_db``. The SQL is still the ORM's: the lookup is written
as a queryset, not as SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from django.db import connections, models, router
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX as SQLITE_QMARK
from django.db.models.base import ModelState
from django.db.models.constants import OnConflict
from django.db.models.signals import post_init, pre_init

M = TypeVar("M", bound=models.Model)


class Rows:
    """``Rows(lambda stream: Operation.objects.filter(stream=stream).values_list("id"), int)``.

    A ``values_list`` queryset compiled once (per database and vendor, and per ``limit``) and
    then run with new values: ``build`` receives one stand-in per value, of the kind given
    (``int`` or ``str``), and :meth:`all` puts the values in their places in the compiled
    parameters. The rows come back converted as the ORM converts them.
    """

    def __init__(self, build: Callable[..., models.QuerySet], *kinds: type, write: bool = False) -> None:
        self.build = build
        self.write = write
        # Stand-ins for the values while compiling, found again in the compiled parameters.
        self._sentinels = [_sentinel(index, kind) for index, kind in enumerate(kinds)]
        self._compiled: dict[tuple[str, str, int | None], tuple[str, list, list[list[int]], dict]] = {}
        self._lock = threading.Lock()

    def _compile(self, using: str, limit: int | None) -> tuple[str, list, list[list[int]], dict]:
        connection = connections[using]
        key = (using, connection.vendor, limit)
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._lock:
                queryset = self.build(*self._sentinels)
                if limit is not None:
                    queryset = queryset[:limit]
                compiler = queryset.query.get_compiler(using)
                sql, params = compiler.as_sql()
                params = list(params)
                positions = [[i for i, p in enumerate(params) if p == sentinel] for sentinel in self._sentinels]
                if not all(positions):
                    raise ValueError("every value of a compiled query must be a parameter of its SQL")
                columns = [select[0] for select in compiler.select[: compiler.col_count]]
                converters = compiler.get_converters(columns)
                compiled = self._compiled[key] = (sql, params, positions, converters)
        return compiled

    def all(self, *values: Any, model: type[models.Model], limit: int | None = None) -> tuple[str, list[list[Any]]]:
        """The rows for ``values`` (``model``: the one the router places the query with), and
        the database alias they came from."""
        using = router.db_for_write(model) if self.write else router.db_for_read(model)
        sql, params, positions, converters = self._compile(using, limit)
        params = list(params)
        for places, value in zip(positions, values, strict=True):
            for position in places:
                params[position] = value
        connection = connections[using]
        if connection.vendor == "sqlite" and not (connection.queries_logged or connection.execute_wrappers):
            rows = _sqlite_rows(connection, sql, params)
        else:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                rows = [list(row) for row in cursor.fetchall()]
        for row in rows:
            for index, (functions, expression) in converters.items():
                for convert in functions:
                    row[index] = convert(row[index], expression, connection)
        return using, rows


#: The SQLite form ("?" placeholders) of the compiled SQL ("%s"), made once per statement.
_qmark_sql: dict[str, str] = {}


def _sqlite_rows(connection, sql: str, params: list[Any]) -> list[list[Any]]:
    """The rows of ``sql`` straight from the sqlite3 connection under Django's.

    What Django's cursor does around a statement but the per-statement parts: the same
    connection set-up, thread and broken-transaction checks and error wrapping, without the
    two wrapper objects made per cursor and the placeholders rewritten by a regex at every
    execution (a stream read's lookup: 25 -> 20 µs of CPU; docs/adr/0025). Only when nothing watches
    the connection's statements (a test counting queries, ``DEBUG``, an execute wrapper such as
    the statements metric's): those go through Django's cursor.
    """
    qmark = _qmark_sql.get(sql)
    if qmark is None:
        qmark = _qmark_sql[sql] = SQLITE_QMARK.sub("?", sql).replace("%%", "%")
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = connection.connection.execute(qmark, params)
        try:
            return [list(row) for row in cursor.fetchall()]
        finally:
            cursor.close()


def _sentinel(index: int, kind: type) -> object:
    if kind is int:
        return -(2**62) - index
    if kind is str:
        return f"\x00agentgit-lookup-{index}\x00"
    raise TypeError(f"a compiled query's values are int or str, not {kind.__name__}")


def columns(model: type[models.Model], prefix: str = "") -> list[str]:
    """Every column of ``model`` (its attnames), through the relation path ``prefix``."""
    return [prefix + field.attname for field in model._meta.concrete_fields]


def instance(model: type[M], using: str, row: Sequence[Any], start: int = 0) -> M:
    """The ``model`` instance whose :func:`columns` begin at ``row[start]``, as ``from_db`` makes
    it, without ``Model.__init__`` (its per-field descriptors and init signals were 4 % of a
    landing's CPU, for a dozen rows): the attributes set at once, the state marked loaded. Only
    for models that no ``pre_init``/``post_init`` receiver watches (none of ours is)."""
    attnames = _attnames.get(model)
    if attnames is None:
        attnames = _attnames[model] = tuple(field.attname for field in model._meta.concrete_fields)
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db(using, list(attnames), row[start : start + len(attnames)])
    obj = model.__new__(model)
    obj.__dict__.update(zip(attnames, row[start : start + len(attnames)]))
    state = obj._state = ModelState()
    state.adding = False
    state.db = using
    return obj


_attnames: dict[type[models.Model], tuple[str, ...]] = {}


class Lookup(Generic[M]):
    """``Lookup(Credential, "token_hash", extra=("user__is_active",)).get(value)``.

    The one row of ``model`` whose ``fields`` equal the values, as ``(instance, extra values)``,
    or None. A field may be one through relations (``"repository__name"``: a join); ``extra``
    are more values to fetch through relations in the same query.
    """

    def __init__(self, model: type[M], *fields: str, extra: tuple[str, ...] = ()) -> None:
        self.model = model
        self.fields = fields
        self.extra = extra
        self._count = len(columns(model))
        self._rows = Rows(
            lambda *values: (
                model._default_manager.filter(**dict(zip(fields, values)))
                .order_by()
                .values_list(*columns(model), *extra)
            ),
            *(self._kind(name) for name in fields),
        )

    def _kind(self, name: str) -> type:
        model: Any = self.model
        for part in name.split("__"):  # a field, or one through relations: "repository__name"
            field = model._meta.get_field(part)
            model = field.related_model
        # Every relation has a target_field at run time; the stubs declare it on ForeignKey only.
        target = field.target_field if field.is_relation else field  # type: ignore[union-attr]
        return int if isinstance(target, models.IntegerField) else str  # AutoField and BigAutoField too

    def get(self, *values: Any) -> tuple[M, tuple[Any, ...]] | None:
        using, rows = self._rows.all(*values, model=self.model, limit=1)
        if not rows:
            return None
        return instance(self.model, using, rows[0]), tuple(rows[0][self._count :])


def _concrete(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.concrete:
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return field


def _column(connection, field: models.Field) -> str:
    return connection.ops.quote_name(field.column)


class _Statement:
    """A write whose SQL is written from the model's fields once per database and vendor."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self._sql: dict[tuple[str, str], str] = {}

    def _write_sql(self, connection, table: str) -> str:
        raise NotImplementedError

    def _sql_on(self, using: str) -> str:
        connection = connections[using]
        key = (using, connection.vendor)
        sql = self._sql.get(key)
        if sql is None:
            sql = self._sql[key] = self._write_sql(connection, connection.ops.quote_name(self.model._meta.db_table))
        return sql

    def _execute(self, using: str, params: list[Any]):
        """Run the statement on ``using``; its cursor's rowcount and first row."""
        with connections[using].cursor() as cursor:
            cursor.execute(self._sql_on(using), params)
            return cursor.rowcount, cursor.fetchone() if cursor.description else None


class Update(_Statement):
    """``Update(Stream, ("head", "updated"), where=("id", "version"), increment=("version",))``.

    One ``UPDATE`` of ``model``'s table: :meth:`run` sets the ``fields`` to values (prepared
    for the database as ``Model.save`` prepares them), adds 1 to the ``increment`` fields, in
    the rows whose ``where`` fields equal the values that follow, and returns how many rows it
    changed. For the hot writes whose per-call ORM machinery (a queryset, its compiler,
    ``save``'s signals) costs more than the statement.
    """

    def __init__(
        self,
        model: type[models.Model],
        fields: tuple[str, ...],
        *,
        where: tuple[str, ...],
        increment: tuple[str, ...] = (),
    ) -> None:
        super().__init__(model)
        self._fields = [_concrete(model, name) for name in fields]
        self._where = [_concrete(model, name) for name in where]
        self._increment = [_concrete(model, name) for name in increment]

    def _write_sql(self, connection, table: str) -> str:
        assignments = [f"{_column(connection, field)} = %s" for field in self._fields]
        assignments += [f"{_column(connection, f)} = {_column(connection, f)} + 1" for f in self._increment]
        conditions = " AND ".join(f"{_column(connection, field)} = %s" for field in self._where)
        return f"UPDATE {table} SET {', '.join(assignments)} WHERE {conditions}"

    def run(self, *values: Any) -> int:
        using = router.db_for_write(self.model)
        connection = connections[using]
        fields = [*self._fields, *self._where]
        params = [field.get_db_prep_save(value, connection) for field, value in zip(fields, values, strict=True)]
        rowcount, _row = self._execute(using, params)
        return rowcount


class _NewRows(_Statement):
    """An ``INSERT`` of every field but the id, values prepared as ``Model.save`` prepares them
    (``auto_now_add`` included, unless the instance holds its creation time already: a row
    written in its final state was created when it was asked for, docs/adr/0024)."""

    def __init__(self, model: type[models.Model]) -> None:
        super().__init__(model)
        meta = model._meta
        self._fields = [field for field in meta.local_concrete_fields if not field.primary_key and not field.generated]

    def _insert_sql(self, connection, table: str, on_conflict: OnConflict | None = None) -> str:
        names = ", ".join(_column(connection, field) for field in self._fields)
        marks = ", ".join("%s" for _ in self._fields)
        return f"{connection.ops.insert_statement(on_conflict=on_conflict)} {table} ({names}) VALUES ({marks})"

    def _values(self, obj: models.Model, connection) -> list[Any]:
        return [field.get_db_prep_save(_value(field, obj), connection) for field in self._fields]


def _value(field: models.Field, obj: models.Model) -> Any:
    if getattr(field, "auto_now_add", False) and getattr(obj, field.attname) is not None:
        return getattr(obj, field.attname)
    return field.pre_save(obj, True)


class Insert(_NewRows, Generic[M]):
    """``Insert(Event).run(Event(repository=..., seq=..., kind=..., payload=...))``.

    The new instance's one ``INSERT ... RETURNING`` its id; the instance comes back saved, with
    its id. For the hot inserts, where ``save``'s machinery (signals, the insert queryset and
    its compiler) costs more than the statement; a constraint still raises ``IntegrityError``.
    """

    def __init__(self, model: type[M]) -> None:  # (typed here: the instances ``run`` takes and gives)
        super().__init__(model)

    def _write_sql(self, connection, table: str) -> str:
        pk = _column(connection, self.model._meta.pk)  # type: ignore[arg-type]  # every model has one
        return f"{self._insert_sql(connection, table)} RETURNING {pk}"

    def run(self, obj: M) -> M:
        using = router.db_for_write(self.model, instance=obj)
        _rowcount, (pk,) = self._execute(using, self._values(obj, connections[using]))
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = using
        return obj


class InsertUnlessPresent(Insert[M]):
    """``InsertUnlessPresent(Changeset).run(Changeset(...))``: as :class:`Insert`, but a row that
    would break a unique constraint is left out and ``run`` answers None, in the same one
    statement (``ON CONFLICT DO NOTHING``): no savepoint to roll back to, as catching
    ``IntegrityError`` inside a transaction needs."""

    def _write_sql(self, connection, table: str) -> str:
        pk = _column(connection, self.model._meta.pk)  # type: ignore[arg-type]  # every model has one
        insert = self._insert_sql(connection, table, OnConflict.IGNORE)
        suffix = connection.ops.on_conflict_suffix_sql(self._fields, OnConflict.IGNORE, None, None)
        return f"{insert} {suffix} RETURNING {pk}".replace("  ", " ")

    def run(self, obj: M) -> M | None:  # type: ignore[override]  # None: the row was there
        using = router.db_for_write(self.model, instance=obj)
        _rowcount, row = self._execute(using, self._values(obj, connections[using]))
        if row is None:
            return None
        obj.pk = row[0]
        obj._state.adding = False
        obj._state.db = using
        return obj


class InsertMany(_NewRows):
    """``InsertMany(PathChange).run([PathChange(...), ...])``: new rows, one statement run for
    each (``executemany``); a row that would break a unique constraint is left out, as
    ``bulk_create(ignore_conflicts=True)`` leaves it."""

    def _write_sql(self, connection, table: str) -> str:
        suffix = connection.ops.on_conflict_suffix_sql(self._fields, OnConflict.IGNORE, None, None)
        return f"{self._insert_sql(connection, table, OnConflict.IGNORE)} {suffix}".rstrip()

    def run(self, objs: Sequence[models.Model]) -> None:
        if not objs:
            return
        using = router.db_for_write(self.model)
        connection = connections[using]
        self.run_values([self._values(obj, connection) for obj in objs], using)

    def run_values(self, rows: Sequence[Sequence[Any]], using: str | None = None) -> None:
        """The rows as values the database takes as they are (ints, text, booleans: no field
        prepares them), in the order of the model's fields (:attr:`attnames`), with no model
        instance made: an import writes hundreds of thousands of derived rows."""
        if not rows:
            return
        using = using or router.db_for_write(self.model)
        with connections[using].cursor() as cursor:
            cursor.executemany(self._sql_on(using), rows)

    @property
    def attnames(self) -> list[str]:
        return [field.attname for field in self._fields]
