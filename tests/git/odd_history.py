"""A history with what real ones hold and generated ones lacked, written byte by byte with git.

Every object is made with git's own plumbing (``hash-object``, ``mktree``), so the history is
one ``git fsck --strict`` accepts; the oracle tests import it and compare every answer with
git's on the same repository. What it holds, commit by commit (``ODD`` names each one):

* ``root``: a README, a CRLF file, a binary file, a file over 1 MiB, an executable, a symlink,
  and a file without a final newline; committed in zone +0530.
* ``latin1``: message and author in ISO-8859-1 with an ``encoding`` header (as git wrote them
  with ``i18n.commitEncoding``); zone -1200.
* ``invalid``: a message and a name that are not valid UTF-8 and have no header; adds a path
  that is not valid UTF-8 and one with a backslash.
* ``empty``: no change at all (the parent's tree); zone +1400.
* ``gitlink``: a submodule entry (a commit of another repository, absent here).
* ``signed``: a ``gpgsig`` header spanning lines, and a mode change (a file made executable).
* ``renamed``: a file moved into a new directory with an edit, a symlink retargeted, the
  submodule moved on, the binary file deleted.
* three side branches merged at once (``octopus``, with a ``mergetag`` header), and a branch
  adding ``MANY_FILES`` files merged in one go (``huge``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

MANY_FILES = 1_200
#: Names as git stores them: one not valid UTF-8, one with a backslash.
LATIN1_NAME = b"caf\xe9.txt"
BACKSLASH_NAME = b"back\\slash.txt"
#: A commit id of another repository, named by the submodule entry and never present here.
SUBMODULE_COMMIT = "1234567890abcdef1234567890abcdef12345678"
SUBMODULE_NEXT = "abcdef1234567890abcdef1234567890abcdef12"

# Multi-line headers: each continuation line starts with a space (a blank one is a lone space).
_SIGNATURE = (
    b"gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEEexampleexampleexampleexampleexampleFAmVmZmZm\n"
    b" =abcd\n -----END PGP SIGNATURE-----"
)
_MERGETAG = (
    b"mergetag object 0000000000000000000000000000000000000000\n type commit\n tag v1.0\n"
    b" tagger Tagger <tagger@example.com> 1700000000 +0000\n \n a tag merged in"
)


def git_bytes(git_dir: Path, *args: str | bytes, stdin: bytes = b"") -> bytes:
    """git run on the repository ``git_dir``: its output's bytes (names and messages as stored)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", HOME=str(git_dir))
    done = subprocess.run(["git", "--git-dir", str(git_dir), *args], input=stdin, capture_output=True, env=env)
    if done.returncode != 0:
        raise AssertionError(f"git {args}: {done.stderr.decode(errors='replace')}")
    return done.stdout


class OddHistory:
    """Builds the history into a new bare repository at ``path``; ``ODD`` maps names to ids."""

    def __init__(self, path: Path) -> None:
        self.git_dir = path
        git_bytes(path, "init", "-q", "--bare", "-b", "main")
        self.blobs: dict[bytes, str] = {}
        self.odd: dict[str, str] = {}

    def blob(self, data: bytes) -> str:
        if data not in self.blobs:
            self.blobs[data] = git_bytes(self.git_dir, "hash-object", "-w", "--stdin", stdin=data).decode().strip()
        return self.blobs[data]

    def tree(self, files: dict[bytes, tuple[str, str]]) -> str:
        """A tree of ``path bytes -> (mode, id)``, subdirectories made from the paths."""
        here: dict[bytes, tuple[str, str]] = {}
        below: dict[bytes, dict[bytes, tuple[str, str]]] = {}
        for path, entry in files.items():
            head, slash, rest = path.partition(b"/")
            if slash:
                below.setdefault(head, {})[rest] = entry
            else:
                here[head] = entry
        for name, subfiles in below.items():
            here[name] = ("040000", self.tree(subfiles))
        kinds = {"040000": "tree", "160000": "commit"}
        listing = b"".join(
            b"%s %s %s\t%s\x00" % (mode.encode(), kinds.get(mode, "blob").encode(), oid.encode(), name)
            for name, (mode, oid) in here.items()
        )
        return git_bytes(self.git_dir, "mktree", "-z", "--missing", stdin=listing).decode().strip()

    def commit(
        self,
        files: dict[bytes, tuple[str, str]],
        parents: list[str],
        message: bytes,
        *,
        when: int,
        zone: bytes = b"+0000",
        author: bytes = b"A U Thor <author@example.com>",
        extra: bytes = b"",
    ) -> str:
        """A commit written as raw bytes (headers git would write, plus ``extra`` ones)."""
        lines = [b"tree " + self.tree(files).encode()]
        lines += [b"parent " + parent.encode() for parent in parents]
        lines.append(b"author %s %d %s" % (author, when, zone))
        lines.append(b"committer C O Mitter <committer@example.com> %d %s" % (when, zone))
        if extra:
            lines.append(extra)
        raw = b"\n".join(lines) + b"\n\n" + message
        return git_bytes(self.git_dir, "hash-object", "-t", "commit", "-w", "--stdin", stdin=raw).decode().strip()

    def branch(self, name: str, commit: str) -> None:
        git_bytes(self.git_dir, "update-ref", f"refs/heads/{name}", commit)


def build(path: Path) -> OddHistory:
    """The whole history: branches ``main`` (everything) and ``side`` (an octopus' arm)."""
    h = OddHistory(path)
    text = h.blob("".join(f"line {n}\n" for n in range(1, 41)).encode())
    files: dict[bytes, tuple[str, str]] = {
        b"README.md": ("100644", h.blob(b"# Odd\n\nA history with odd things.\n")),
        b"win.txt": ("100644", h.blob(b"one\r\ntwo\r\nthree\r\n")),
        b"data.bin": ("100644", h.blob(bytes(range(256)) * 8)),
        b"big.txt": ("100644", h.blob(b"".join(b"big line %07d\n" % n for n in range(90_000)))),
        b"run.sh": ("100755", h.blob(b"#!/bin/sh\necho hi\n")),
        b"link": ("120000", h.blob(b"README.md")),
        b"no-newline.txt": ("100644", h.blob(b"first\nlast without newline")),
        b"src/text.txt": ("100644", text),
    }
    t = 1_700_000_000
    root = h.commit(files, [], b"root: every kind of file\n", when=t, zone=b"+0530")
    files[b"src/text.txt"] = ("100644", h.blob(b"line 0\n" + _blob_text(h, text) + b"line 41\n"))
    latin1 = h.commit(
        files, [root], b"Caf\xe9 cr\xe8me: \xe9dit\xe9\n", when=t + 60, zone=b"-1200",
        author=b"Jos\xe9 Garc\xeda <jose@example.com>", extra=b"encoding ISO-8859-1",
    )  # fmt: skip
    files[LATIN1_NAME] = ("100644", h.blob(b"a name that is not UTF-8\n"))
    files[BACKSLASH_NAME] = ("100644", h.blob(b"a name with a backslash\n"))
    invalid = h.commit(
        files, [latin1], b"bytes \xff\xfe that are not UTF-8\n", when=t + 120,
        author=b"Bad \xff Name <bad@example.com>",
    )  # fmt: skip
    empty = h.commit(files, [invalid], b"empty: nothing changed\n", when=t + 180, zone=b"+1400")
    files[b"vendor/lib"] = ("160000", SUBMODULE_COMMIT)
    gitlink = h.commit(files, [empty], b"add a submodule\n", when=t + 240)
    files[b"src/tool.py"] = ("100755", h.blob(b"print('tool')\n" * 20))
    files[b"run.sh"] = ("100644", files[b"run.sh"][1])
    signed = h.commit(files, [gitlink], b"signed, and run.sh no longer executable\n", when=t + 300, extra=_SIGNATURE)
    moved = files.pop(b"src/text.txt")
    files[b"docs/moved/text.txt"] = ("100644", h.blob(_blob_text(h, moved[1]) + b"one more line\n"))
    files[b"link"] = ("120000", h.blob(b"docs/moved/text.txt"))
    files[b"vendor/lib"] = ("160000", SUBMODULE_NEXT)
    del files[b"data.bin"]
    renamed = h.commit(files, [signed], b"move text.txt, retarget link, bump the submodule\n", when=t + 360)
    arms = []
    for arm in range(3):
        arm_files = dict(files)
        arm_files[b"arms/%d.txt" % arm] = ("100644", h.blob(b"arm %d\n" % arm))
        arms.append(h.commit(arm_files, [renamed], b"arm %d\n" % arm, when=t + 400 + arm))
    for arm in range(3):
        files[b"arms/%d.txt" % arm] = ("100644", h.blob(b"arm %d\n" % arm))
    octopus = h.commit(files, arms, b"octopus: three arms at once\n", when=t + 500, extra=_MERGETAG)
    many_files = dict(files)
    for n in range(MANY_FILES):
        many_files[b"many/%02d/f%04d.txt" % (n % 30, n)] = ("100644", h.blob(b"file %d\n" % n))
    many = h.commit(many_files, [renamed], b"many files on a branch\n", when=t + 550)
    files = many_files
    huge = h.commit(files, [octopus, many], b"huge: merge many files\n", when=t + 600)
    files[b"README.md"] = ("100644", h.blob(b"# Odd\n\nA history with odd things, and a last edit.\n"))
    last = h.commit(files, [huge], b"last edit\n", when=t + 660)
    h.odd.update(
        root=root, latin1=latin1, invalid=invalid, empty=empty, gitlink=gitlink, signed=signed,
        renamed=renamed, octopus=octopus, many=many, huge=huge, last=last,
    )  # fmt: skip
    h.branch("main", last)
    h.branch("side", arms[1])
    return h


def _blob_text(h: OddHistory, oid: str) -> bytes:
    return git_bytes(h.git_dir, "cat-file", "blob", oid)
