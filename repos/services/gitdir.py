"""A repository directory as git sees it: git run in it, and its config kept as ours.

Here, below both, so that the object stores (repos.services.stores: each store configures its
directory when it opens it) and the ref mirror (repos.services.refmirror) import it and
neither imports the other."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: git's own automatic maintenance, off: it would run without the database's knowledge (and
#: receive-pack and many other commands trigger it). Ours is repos.services.maintenance.
GIT_CONFIG = {
    "gc.auto": "0",
    "gc.autoPackLimit": "0",
    "gc.autoDetach": "false",
    "receive.autogc": "false",
    "maintenance.auto": "false",
    "fetch.writeCommitGraph": "false",
    "core.logAllRefUpdates": "false",
    # A pushed pack is kept as a pack, never exploded into loose objects (audit F7).
    "transfer.unpackLimit": "1",
    "receive.unpackLimit": "1",
    "fetch.unpackLimit": "1",
}


def git(path: Path | str, *args: str, input: str | None = None, check: bool = True) -> str:
    """Run git in the repository directory ``path``; its stdout (CalledProcessError on failure)."""
    done = subprocess.run(
        ["git", "--git-dir", os.fspath(path), *args],
        input=input,
        capture_output=True,
        text=True,
        check=False,
        env=git_env(),
    )
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done.stdout


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env.setdefault("HOME", "/nonexistent")
    return env


# ----------------------------------------------------------------------------- configuration


def configure(path: Path | str) -> None:
    """Turn git's automatic gc off in the repository's config (only what differs is written)."""
    import pygit2

    config = pygit2.Config(os.path.join(os.fspath(path), "config"))
    for key, value in GIT_CONFIG.items():
        try:
            current = config[key]
        except KeyError:
            current = None
        if current != value:
            config[key] = value
