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
from typing import Any, Generic, TypeVar

from django.db import connections, models, router

M = TypeVar("M", bound=models.Model)


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
        # Stand-ins for the values while compiling, found again in the compiled parameters.
        self._sentinels = [self._sentinel(index, name) for index, name in enumerate(fields)]
        self._attnames = [f.attname for f in model._meta.concrete_fields]
        self._compiled: dict[tuple[str, str], tuple[str, list, list[int], dict]] = {}
        self._lock = threading.Lock()

    def _sentinel(self, index: int, name: str) -> object:
        model: Any = self.model
        for part in name.split("__"):  # a field, or one through relations: "repository__name"
            field = model._meta.get_field(part)
            model = field.related_model
        # Every relation has a target_field at run time; the stubs declare it on ForeignKey only.
        target = field.target_field if field.is_relation else field  # type: ignore[union-attr]
        if isinstance(target, models.IntegerField):  # AutoField and BigAutoField too
            return -(2**62) - index
        return f"\x00agentgit-lookup-{index}\x00"

    def _compile(self, using: str) -> tuple[str, list, list[int], dict]:
        connection = connections[using]
        key = (using, connection.vendor)
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._lock:
                queryset = (
                    self.model._default_manager.using(using)
                    .filter(**dict(zip(self.fields, self._sentinels)))
                    .order_by()
                    .values_list(*self._attnames, *self.extra)[:1]
                )
                compiler = queryset.query.get_compiler(using)
                sql, params = compiler.as_sql()
                params = list(params)
                positions = [params.index(sentinel) for sentinel in self._sentinels]  # what a call replaces
                columns = [select[0] for select in compiler.select[: compiler.col_count]]
                converters = compiler.get_converters(columns)
                compiled = self._compiled[key] = (sql, params, positions, converters)
        return compiled

    def get(self, *values: Any) -> tuple[M, tuple[Any, ...]] | None:
        using = router.db_for_read(self.model)
        sql, params, positions, converters = self._compile(using)
        params = list(params)
        for position, value in zip(positions, values, strict=True):
            params[position] = value
        connection = connections[using]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        row = list(row)
        for index, (functions, expression) in converters.items():
            for convert in functions:
                row[index] = convert(row[index], expression, connection)
        count = len(self._attnames)
        return self.model.from_db(using, self._attnames, row[:count]), tuple(row[count:])
