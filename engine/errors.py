"""The engine's error tree: one place, each error with a stable machine ``code``.

Exceptions mean "cannot proceed". Expected outcomes of version-control work —
a merge conflict, a compare-and-swap that lost — are return values, never errors.

    EngineError                    code               what happened
    ├── InvalidInput               invalid            the caller's input is malformed or contradictory
    │   ├── InvalidObjectId        invalid_id         not a 40-hex SHA-1 object id
    │   ├── UnsafePath             unsafe_path        absolute, '..', '.git', empty segment, NUL, …
    │   └── InvalidOperation       invalid_operation  contradictory or impossible operations
    ├── ObjectMissing              object_missing     a named object is not in the store
    ├── WrongObjectType            wrong_type         the object exists but is not the kind asked for
    ├── PathNotFound               path_not_found     no such path in the tree
    └── CorruptObject              corrupt            stored bytes do not parse as their kind

The HTTP status for each code is chosen in exactly one place outside the engine
(the API's exception handler); the engine knows nothing of HTTP.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code = "engine_error"

    def __init__(self, message: str, *, details: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Per-item problems (e.g. one entry per bad operation), each a small dict.
        self.details = details or []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidInput(EngineError):
    """The caller's input is malformed or contradicts itself."""

    code = "invalid"


class InvalidObjectId(InvalidInput):
    """A string that should be a 40-hex SHA-1 object id is not one."""

    code = "invalid_id"


class UnsafePath(InvalidInput):
    """A path that must never be written: absolute, '..', '.git', empty segment, NUL."""

    code = "unsafe_path"


class InvalidOperation(InvalidInput):
    """An operation list that contradicts itself or the parent tree."""

    code = "invalid_operation"


class ObjectMissing(EngineError):
    """A named object is not in the store."""

    code = "object_missing"

    def __init__(self, message: str, *, oid: str | None = None, details: list[dict[str, object]] | None = None) -> None:
        super().__init__(message, details=details)
        self.oid = oid

    @classmethod
    def for_id(cls, oid: str) -> ObjectMissing:
        return cls(f"object {oid} is not in the store", oid=oid)


class WrongObjectType(EngineError):
    """The object exists but is a blob where a commit was expected, or similar."""

    code = "wrong_type"


class PathNotFound(EngineError):
    """The path does not exist in the tree it was looked up in."""

    code = "path_not_found"


class CorruptObject(EngineError):
    """Stored bytes do not parse as the object they claim to be."""

    code = "corrupt"
