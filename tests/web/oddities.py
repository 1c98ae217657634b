"""Git histories with what real repositories hold and generated ones lack, written by git itself
(``git fast-import`` into a bare repository) for the import and every page to be tried on.

:func:`odd_history` holds a submodule (gitlink), a symbolic link, binary, very large and CRLF
files, an empty commit, a merge of thousands of files and an octopus merge. :func:`encoded_history`
holds what needs decoding: ISO-8859-1 messages and names behind git's ``encoding`` header, a
message that is not valid UTF-8 at all, paths that are not valid UTF-8 (or hold a backslash),
and a symbolic link to one.
Each returns the source directory and the commit ids, read back from git.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: A commit of another repository: what the submodule entry points at (never in this one).
SUBMODULE_COMMIT = "0123456789abcdef0123456789abcdefdeadbeef"
#: Files in the merge that changes thousands.
WIDE_FILES = 2_500
APP = 'def greet(name):\n    """Say hello."""\n    return "hello " + name\n'
CRLF = "first line\r\nsecond line\r\nthird line\r\n"
LATIN1_NAME = "Jürgen Ångström"
LATIN1_SUMMARY = "Größe: schön geändert"
#: A path whose bytes are not UTF-8 (Latin-1 "café.txt"), and its name in the escaped form.
RAW_PATH = b"caf\xe9.txt"
ESCAPED_PATH = "caf\\xe9.txt"
#: A name holding a backslash, and its escaped form (the backslash doubled).
BACKSLASH_PATH = b"back\\slash.txt"
ESCAPED_BACKSLASH_PATH = "back\\\\slash.txt"


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)})
    done = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, env=env, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{done.stderr.decode(errors='replace')}")
    return done.stdout.decode("utf-8", "replace")


class _Stream:
    """A ``git fast-import`` stream under construction."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.clock = 1_700_000_000
        self.marks = 0

    def blob(self, data: bytes) -> str:
        self.marks += 1
        self.parts.append(b"blob\nmark :%d\ndata %d\n%s\n" % (self.marks, len(data), data))
        return f":{self.marks}"

    def commit(
        self,
        branch: str,
        message: bytes,
        files: list[bytes] = (),  # type: ignore[assignment]
        *,
        parents: list[str] = (),  # type: ignore[assignment]
        author: bytes = b"Ada Source <ada@example.com>",
        zone: bytes = b"+0000",
        encoding: bytes | None = None,
    ) -> str:
        self.marks += 1
        self.clock += 60
        out = [b"commit refs/heads/%s\nmark :%d\n" % (branch.encode(), self.marks)]
        out.append(b"author %s %d %s\n" % (author, self.clock, zone))
        out.append(b"committer %s %d %s\n" % (author, self.clock, zone))
        if encoding:
            out.append(b"encoding %s\n" % encoding)
        out.append(b"data %d\n%s\n" % (len(message), message))
        if parents:
            out.append(b"from %s\n" % parents[0].encode())
            out.extend(b"merge %s\n" % parent.encode() for parent in parents[1:])
        out.extend(line + b"\n" for line in files)
        self.parts.append(b"".join(out) + b"\n")
        return f":{self.marks}"

    def run(self, path: Path) -> dict[str, str]:
        """Import into a new bare repository at ``path``; the marks as commit ids."""
        path.mkdir(parents=True)
        git(path, "init", "-q", "--bare", "-b", "main")
        marks = path / "marks"
        git(path, "fast-import", "--quiet", f"--export-marks={marks}", stdin=b"".join(self.parts) + b"done\n")
        ids = dict(line.split() for line in marks.read_text().splitlines())
        marks.unlink()
        return ids


def _quoted(path: bytes) -> bytes:
    """A path as fast-import reads it: C-style quoted, any byte as an octal escape."""
    return b'"' + b"".join(bytes([c]) if 32 < c < 127 and c not in b'"\\' else b"\\%03o" % c for c in path) + b'"'


@dataclass
class OddHistory:
    path: Path
    base: str
    edit: str
    empty: str
    swap: str
    wide_merge: str
    octopus: str
    octopus_parents: list[str]


def odd_history(path: Path) -> OddHistory:
    """``main``: base → edit → an empty commit → a merge adding thousands of files → an octopus."""
    s = _Stream()
    app, crlf = s.blob(APP.encode()), s.blob(CRLF.encode())
    binary = s.blob(bytes(range(256)) * 8)
    big = s.blob(b"".join(b"row %07d of a very large file\n" % n for n in range(40_000)))  # 1.3 MB
    link = s.blob(b"src/app.py")
    base = s.commit(
        "main",
        b"base: code, a submodule, a link, binary, large and CRLF files\n",
        [
            b"M 100644 %s src/app.py" % app.encode(),
            b"M 100644 %s crlf.txt" % crlf.encode(),
            b"M 100644 %s data.bin" % binary.encode(),
            b"M 100644 %s big.txt" % big.encode(),
            b"M 120000 %s link" % link.encode(),
            b"M 160000 %s vendor/lib" % SUBMODULE_COMMIT.encode(),
            b"M 160000 %s README" % SUBMODULE_COMMIT.encode(),  # a submodule where a README would be
        ],
        zone=b"+1345",
    )
    edited_app = s.blob(APP.replace('"hello "', '"hello, "').encode())
    edited_crlf = s.blob(CRLF.replace("second", "2nd").encode())
    edit = s.commit(
        "main",
        b"edit code and the CRLF file, move the submodule's commit\n",
        [
            b"M 100644 %s src/app.py" % edited_app.encode(),
            b"M 100644 %s crlf.txt" % edited_crlf.encode(),
            b"M 160000 %s vendor/lib" % SUBMODULE_COMMIT.replace("deadbeef", "cafebabe").encode(),
        ],
        parents=[base],
        zone=b"-0930",
    )
    empty = s.commit("main", b"an empty commit: no file changes\n", parents=[edit])
    # A file removed as a submodule is added: rename detection must not read the submodule.
    swap = s.commit(
        "swap",
        b"a file out, a submodule in\n",
        [b"D crlf.txt", b"M 160000 %s vendor/crlf" % SUBMODULE_COMMIT.encode()],
        parents=[empty],
    )
    wide_files = [
        b"M 100644 %s wide/d%d/f%d.txt" % (s.blob(b"%d\n" % n).encode(), n % 50, n) for n in range(WIDE_FILES)
    ]
    wide = s.commit("wide", b"thousands of files\n", wide_files, parents=[empty])
    side = s.commit("side", b"a side change\n", [b"M 100644 %s side.txt" % s.blob(b"side\n").encode()], parents=[empty])
    # fast-import keeps the first parent's tree: a merge names what it takes from the others.
    wide_merge = s.commit("main", b"merge thousands of files\n", wide_files, parents=[side, wide])
    branches, legs = [], []
    for n in range(3):
        legs.append(b"M 100644 %s leg%d.txt" % (s.blob(b"%d\n" % n).encode(), n))
        branches.append(s.commit(f"leg{n}", b"leg %d\n" % n, [legs[-1]], parents=[wide_merge]))
    octopus = s.commit("main", b"octopus: three legs at once\n", legs, parents=[wide_merge, *branches])
    ids = s.run(path)
    return OddHistory(
        path,
        ids[base],
        ids[edit],
        ids[empty],
        ids[swap],
        ids[wide_merge],
        ids[octopus],
        [ids[m] for m in [wide_merge, *branches]],
    )


@dataclass
class EncodedHistory:
    path: Path
    latin1: str
    invalid: str
    paths: str


def encoded_history(path: Path) -> EncodedHistory:
    """``main``: an ISO-8859-1 commit (``encoding`` header) → a message of invalid UTF-8 → odd paths."""
    s = _Stream()
    latin1 = s.commit(
        "main",
        f"{LATIN1_SUMMARY}\n\nMit Umlauten: äöü.\n".encode("latin-1"),
        [b"M 100644 %s notes.txt" % s.blob(b"notes\n").encode()],
        author=f"{LATIN1_NAME} <j@example.com>".encode("latin-1"),
        encoding=b"ISO-8859-1",
    )
    invalid = s.commit(
        "main",
        b"bytes \xff\xfe that are not UTF-8\n",
        [b"M 100644 %s notes.txt" % s.blob(b"more\n").encode()],
        parents=[latin1],
    )
    odd = s.commit(
        "main",
        b"paths that are not UTF-8\n",
        [
            b"M 100644 %s %s" % (s.blob(b"latin-1 name\n").encode(), _quoted(RAW_PATH)),
            b"M 100644 %s %s" % (s.blob(b"a backslash\n").encode(), _quoted(BACKSLASH_PATH)),
            b"M 100644 %s %s" % (s.blob(b"in an odd directory\n").encode(), _quoted(b"dir\xff/inner.txt")),
            b"M 120000 %s to-cafe" % s.blob(RAW_PATH).encode(),  # a link whose target is not UTF-8
        ],
        parents=[invalid],
    )
    ids = s.run(path)
    return EncodedHistory(path, ids[latin1], ids[invalid], ids[odd])
