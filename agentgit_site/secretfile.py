"""Secrets generated once and kept in a private file under the data directory."""

import contextlib
import os
import secrets
from pathlib import Path


def read_or_create_secret(path: Path, nbytes: int = 32) -> str:
    """Return the secret stored at ``path``, creating it (mode 0600) on first use.

    Several processes may start at once (uvicorn workers, pytest-xdist): the new
    secret is written to a private temporary file and hard-linked into place, so
    exactly one candidate wins and nobody reads a half-written file.
    """
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    candidate = _private_file(path, secrets.token_urlsafe(nbytes))
    try:
        with contextlib.suppress(FileExistsError):  # another process won the race: read its key
            os.link(candidate, path)
    finally:
        candidate.unlink()
    return path.read_text().strip()


def write_secret(path: Path, text: str) -> None:
    """Replace the secret at ``path`` with ``text`` atomically (mode 0600)."""
    os.replace(_private_file(path, text), path)


def _private_file(path: Path, text: str) -> Path:
    """A durable 0600 file beside ``path`` holding ``text``, under a name private to this process."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    candidate = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    return candidate
