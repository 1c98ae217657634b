"""AgentGit's Python client: ``Client`` (blocking) and ``AsyncClient`` (``await``), sharing one core.

    from agentgit import Client, write, delete
    with Client() as ag:                       # AGENTGIT_URL / AGENTGIT_TOKEN, or arguments
        landed = ag.land("demo", "main", [write("a.txt", "hello\\n"), delete("old.txt")], message="edit")
        if landed.conflicted:
            print([(c.path, c.kind) for c in landed.conflicts])

Errors are :mod:`agentgit.errors` (one class per error code); results are the dataclasses of
:mod:`agentgit.types`. The command line is :mod:`agentgit.cli`, the MCP server
:mod:`agentgit.mcp_server` (extra ``agentgit[mcp]``).
"""

from ._async import AsyncClient
from ._core import Config
from ._sync import Client
from .errors import (
    Aborted,
    AgentGitError,
    AlreadyExists,
    ApiError,
    Forbidden,
    InternalError,
    Invalid,
    NotFound,
    OperationPending,
    PolicyDenied,
    RateLimited,
    TooLarge,
    TransportError,
    Unauthenticated,
    Unavailable,
    WrongState,
)
from .types import (
    BlameLine,
    Change,
    Changeset,
    Conflict,
    Diff,
    Event,
    Explanation,
    Landing,
    LogEntry,
    Operation,
    Outcome,
    Page,
    Policy,
    Proposal,
    Repository,
    Requirement,
    Review,
    Stream,
    TreeEntry,
    delete,
    rename,
    write,
)

__all__ = [
    "Aborted",
    "AgentGitError",
    "AlreadyExists",
    "ApiError",
    "AsyncClient",
    "BlameLine",
    "Change",
    "Changeset",
    "Client",
    "Config",
    "Conflict",
    "Diff",
    "Event",
    "Explanation",
    "Forbidden",
    "InternalError",
    "Invalid",
    "Landing",
    "LogEntry",
    "NotFound",
    "Operation",
    "OperationPending",
    "Outcome",
    "Page",
    "Policy",
    "PolicyDenied",
    "Proposal",
    "RateLimited",
    "Repository",
    "Requirement",
    "Review",
    "Stream",
    "TooLarge",
    "TransportError",
    "TreeEntry",
    "Unauthenticated",
    "Unavailable",
    "WrongState",
    "delete",
    "rename",
    "write",
]
