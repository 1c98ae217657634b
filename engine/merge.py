"""Three-way merge: of text (line level) and of trees (rename-aware, along changed paths only).

A merge never resolves a disagreement silently. When both sides change one path in ways that
cannot be combined, the result carries a :class:`Conflict` for that path and no tree; nothing is
written to the store. The conflict kinds:

=================  =============================================================================
``content``        both sides changed the same lines of a text file (or a symlink differently)
``add/add``        both sides created the same path with different content
``modify/delete``  one side changed a file the other deleted
``rename/rename``  both sides renamed one file to different paths
``rename/delete``  one side renamed a file the other deleted
``binary``         both sides changed a binary file differently
``mode``           both sides changed a file's mode differently
``file/directory`` one side puts a file where the other puts a directory
=================  =============================================================================

The tree merge works from the two change lists (base→ours, base→theirs), with renames detected
on each; identical subtrees are never opened, so its cost follows the change, not the repository.

Differences from git's ``ort`` merge, on purpose: directory renames are not inferred (a file one
side adds to a directory the other side moved stays where its author put it, as with git's
``merge.directoryRenames=false``), and a rename onto a path the other side added is a conflict
even where git resolves it with an inner merge that leaves conflict markers in a "clean" file.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import merge3
import patiencediff

from .changeset import apply_changes
from .objects import BLOB, MODE_TREE, Entry, ObjectId, Tree, is_binary, split_lines
from .renames import detect_renames
from .store import ObjectBatch
from .trees import Added, Deleted, FileChange, Modified, Renamed, diff_trees, iter_files, lookup

CONTENT = "content"
ADD_ADD = "add/add"
MODIFY_DELETE = "modify/delete"
RENAME_RENAME = "rename/rename"
RENAME_DELETE = "rename/delete"
BINARY = "binary"
MODE = "mode"
FILE_DIRECTORY = "file/directory"

_FORMAT_MASK = 0o170000  # the file-type bits of a mode: regular file, symlink, gitlink
_REGULAR = 0o100000


#: The server-side resolver rules a merge may apply (git's ``merge=union`` and ``-X ours/theirs``).
UNION = "union"
OURS = "ours"
THEIRS = "theirs"
RULES = (UNION, OURS, THEIRS)


@dataclass(frozen=True)
class Version:
    """One side of a conflict: where that side has the file, with which mode and blob."""

    path: str
    mode: int
    blob: ObjectId

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "mode": f"{self.mode:06o}", "blob": self.blob}


@dataclass(frozen=True)
class Rule:
    """A resolver rule: paths matching ``pattern`` (gitattributes style: a pattern without '/'
    matches the file name at any depth) merge their conflicting content by ``rule``."""

    pattern: str
    rule: str

    def matches(self, path: str) -> bool:
        if "/" not in self.pattern:
            return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], self.pattern)
        return fnmatch.fnmatchcase(path, self.pattern.lstrip("/"))


@dataclass(frozen=True)
class Resolved:
    """A path a rule resolved during the merge (never silently: the outcome names the rule)."""

    path: str
    rule: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule}


@dataclass(frozen=True)
class Conflict:
    """One path that could not be merged, with its kind and, for renames, where it came from.

    ``base``, ``ours`` and ``theirs`` are the three versions of the file (None where that side
    has none: a deleted file, an added one's base); they do not take part in equality.
    """

    path: str
    kind: str
    old_path: str | None = None
    base: Version | None = field(default=None, compare=False)
    ours: Version | None = field(default=None, compare=False)
    theirs: Version | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, str]:
        data = {"path": self.path, "kind": self.kind}
        if self.old_path is not None:
            data["old_path"] = self.old_path
        return data


@dataclass
class TreeMerge:
    """The result of :func:`merge_trees`: a tree when clean, else the conflicts (and no tree)."""

    tree: ObjectId | None
    conflicts: list[Conflict] = field(default_factory=list)
    #: Paths a resolver rule merged (in the tree, not conflicts).
    resolved: list[Resolved] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.conflicts


# --------------------------------------------------------------------------- text


@dataclass(frozen=True)
class TextMerge:
    """A merged text; ``conflicted`` when it holds conflict markers."""

    content: bytes
    conflicted: bool


#: patiencediff declares its matcher a difflib.SequenceMatcher, whose typed __init__ merge3's
#: protocol does not accept (the two libraries' annotations disagree); at run time it is one.
_PATIENCE = cast("type[merge3.SequenceMatcherProtocol[bytes]]", patiencediff.PatienceSequenceMatcher)


def merge_text(
    base: bytes,
    ours: bytes,
    theirs: bytes,
    *,
    labels: tuple[str, str] = ("ours", "theirs"),
    base_label: str | None = None,
    union: bool = False,
) -> TextMerge:
    """Line-level three-way merge. Conflicting regions get git-style markers in ``content``, with
    the base's lines too (diff3 style) when ``base_label`` is given; with ``union`` they get both
    sides' lines instead, ours first (git's ``merge=union``)."""
    m3 = merge3.Merge3(split_lines(base), split_lines(ours), split_lines(theirs), sequence_matcher=_PATIENCE)
    out: list[bytes] = []
    conflicted = False
    for region in m3.merge_regions():
        if region[0] == "unchanged":
            out.extend(m3.base[region[1] : region[2]])
        elif region[0] in ("a", "same"):
            out.extend(m3.a[region[1] : region[2]])
        elif region[0] == "b":
            out.extend(m3.b[region[1] : region[2]])
        elif len(region) == 7:  # ("conflict", base_start, base_end, a_start, a_end, b_start, b_end)
            conflicted = True
            _, base_start, base_end, a_start, a_end, b_start, b_end = region
            if union:
                out.extend(_terminated(m3.a[a_start:a_end]))
                out.extend(m3.b[b_start:b_end])
                continue
            out.append(b"<<<<<<< " + labels[0].encode() + b"\n")
            out.extend(_terminated(m3.a[a_start:a_end]))
            if base_label is not None:
                out.append(b"||||||| " + base_label.encode() + b"\n")
                out.extend(_terminated(m3.base[base_start:base_end]))
            out.append(b"=======\n")
            out.extend(_terminated(m3.b[b_start:b_end]))
            out.append(b">>>>>>> " + labels[1].encode() + b"\n")
    return TextMerge(b"".join(out), conflicted)


def _terminated(lines: Sequence[bytes]) -> list[bytes]:
    """Lines inside conflict markers must end in a newline or the marker joins the last line."""
    if lines and not lines[-1].endswith(b"\n"):
        return [*lines[:-1], lines[-1] + b"\n"]
    return list(lines)


# --------------------------------------------------------------------------- trees


def _version(path: str, entry: Entry | None) -> Version | None:
    return None if entry is None else Version(path, entry.mode, entry.id)


class _Paths:
    """The entries of one tree by path, each directory read once: a merge asks for every path a
    side changed, most of them under a few directories."""

    def __init__(self, batch: ObjectBatch, tree_id: ObjectId | None) -> None:
        self.batch = batch
        self.tree_id = tree_id
        self._dirs: dict[str, Tree | None] = {}

    def __call__(self, path: str) -> Entry | None:
        directory, _, name = path.rpartition("/")
        tree = self._dir(directory)
        return None if tree is None else tree.get(name)

    def _dir(self, path: str) -> Tree | None:
        if path in self._dirs:
            return self._dirs[path]
        if not path:
            entry = None if self.tree_id is None else Entry(MODE_TREE, self.tree_id)
        else:
            entry = self(path)
        tree = self.batch.read_tree(entry.id) if entry is not None and entry.mode == MODE_TREE else None
        self._dirs[path] = tree
        return tree


class _Side:
    """One side's changes against the base, indexed for the merge."""

    def __init__(self, changes: list[FileChange]) -> None:
        #: base path -> change (modified, deleted, or renamed away from that path)
        self.by_base: dict[str, Modified | Deleted | Renamed] = {}
        #: new path -> change (added here, or the destination of a rename)
        self.created: dict[str, Added | Renamed] = {}
        for change in changes:
            if isinstance(change, Added):
                self.created[change.path] = change
            elif isinstance(change, Renamed):
                self.by_base[change.old_path] = change
                self.created[change.path] = change
            else:
                self.by_base[change.path] = change

    def outcome(self, base_path: str, base_entry: Entry) -> tuple[str, Entry] | None:
        """Where the base file ends up on this side, and as what; None when this side deleted it."""
        change = self.by_base.get(base_path)
        if change is None:
            return base_path, base_entry
        if isinstance(change, Deleted):
            return None
        return change.path, change.new


def merge_trees(
    batch: ObjectBatch,
    base: ObjectId | None,
    ours: ObjectId,
    theirs: ObjectId,
    *,
    labels: tuple[str, str] = ("ours", "theirs"),
    favor_ours: bool = False,
    rules: Sequence[Rule] = (),
) -> TreeMerge:
    """Merge two trees against their base; new objects go into ``batch`` (not yet flushed).

    ``favor_ours`` builds a *virtual* merge base (for criss-cross histories): conflicting text
    keeps its markers and other conflicts take our side, so the result is always a tree.
    ``rules`` resolve content, binary and mode conflicts of the paths they match (the first
    matching rule wins), before anything is reported as a conflict.
    """
    if ours == theirs or base == theirs:
        return TreeMerge(ours)
    if base == ours:
        return TreeMerge(theirs)
    ours_side = _Side(detect_renames(batch, diff_trees(batch, base, ours)))
    theirs_side = _Side(detect_renames(batch, diff_trees(batch, base, theirs)))
    merger = _TreeMerger(batch, base, (ours, theirs), labels, favor_ours, tuple(rules))
    return merger.run(ours_side, theirs_side)


class _TreeMerger:
    """The state of one tree merge: the result's changes against the base, and the conflicts."""

    def __init__(
        self,
        batch: ObjectBatch,
        base: ObjectId | None,
        heads: tuple[ObjectId, ObjectId],
        labels: tuple[str, str],
        favor_ours: bool,
        rules: tuple[Rule, ...],
    ) -> None:
        self.batch = batch
        self.base = base
        self.heads = heads  # our tree, their tree
        self.labels = labels
        self.favor_ours = favor_ours
        self.rules = rules
        self.changes: dict[str, Entry | None] = {}  # result path -> entry (None: removed)
        self.created: dict[str, Entry] = {}  # files created at new paths (adds, rename targets)
        self.conflicts: list[Conflict] = []
        self.resolved: list[Resolved] = []
        self.sides: tuple[_Side, _Side] | None = None
        self.in_base = _Paths(batch, base)

    def conflict(
        self,
        path: str,
        kind: str,
        old_path: str | None = None,
        versions: tuple[Version | None, Version | None, Version | None] | None = None,
    ) -> None:
        if any(c.path == path and c.kind == kind for c in self.conflicts) or self.favor_ours:
            return
        base, ours, theirs = versions if versions is not None else self.versions(old_path or path)
        self.conflicts.append(Conflict(path, kind, old_path, base, ours, theirs))

    def versions(self, key: str) -> tuple[Version | None, Version | None, Version | None]:
        """The base's file at ``key`` and where each side has it (following its renames)."""
        assert self.sides is not None
        base = _version(key, self.in_base(key))
        found: list[Version | None] = []
        for side, tree in zip(self.sides, self.heads, strict=True):
            change = side.by_base.get(key)
            if isinstance(change, Deleted):
                found.append(None)
            elif isinstance(change, Renamed):
                found.append(_version(change.path, change.new))
            else:
                found.append(_version(key, lookup(self.batch, tree, key)))
        return base, found[0], found[1]

    def run(self, ours: _Side, theirs: _Side) -> TreeMerge:
        self.sides = (ours, theirs)
        for base_path in sorted(set(ours.by_base) | set(theirs.by_base)):
            self.merge_base_path(base_path, ours, theirs)
        for side in (ours, theirs):
            for path, change in side.created.items():
                if isinstance(change, Added):
                    self.place(path, change.new)
        self.check_file_directory()
        if self.conflicts and not self.favor_ours:
            return TreeMerge(None, sorted(self.conflicts, key=lambda c: (c.path, c.kind)), self.resolved)
        return TreeMerge(self.result_tree(), [], self.resolved)

    def result_tree(self) -> ObjectId:
        """The merged tree, written into the batch.

        Every path our side changed is among the result's changes, so the result is our tree
        with the changes it does not have yet: the directories only our side touched stay ours
        as they are, not rebuilt and written again (git's merge-ort likewise takes a directory
        that one side alone changed). A virtual base (``favor_ours``) may drop one of our paths
        to settle a file/directory clash; there, and wherever a path of ours is not among the
        changes, the result is the base with every change applied."""
        assert self.sides is not None
        ours_tree, ours = self.heads[0], self.sides[0]
        if self.favor_ours or any(path not in self.changes for path in (*ours.by_base, *ours.created)):
            return apply_changes(self.batch, self.base, self.changes)
        in_ours = _Paths(self.batch, ours_tree)
        missing: dict[str, Entry | None] = {}
        for path, entry in self.changes.items():
            present = in_ours(path)
            if entry is None:
                if present is not None and present.mode != MODE_TREE:
                    missing[path] = None
            elif present != entry:
                missing[path] = entry
        return apply_changes(self.batch, ours_tree, missing) if missing else ours_tree

    def merge_base_path(self, base_path: str, ours: _Side, theirs: _Side) -> None:
        """Decide where a file of the base ends up and with what content."""
        change = ours.by_base.get(base_path) or theirs.by_base[base_path]
        base_entry = change.old
        ours_at = ours.outcome(base_path, base_entry)
        theirs_at = theirs.outcome(base_path, base_entry)
        if ours_at is None:
            if theirs_at is None:
                self.changes[base_path] = None
            else:
                self.deleted_by_one(base_path, base_entry, theirs_at, ours_kept=False)
            return
        if theirs_at is None:
            self.deleted_by_one(base_path, base_entry, ours_at, ours_kept=True)
            return
        our_path, our_entry = ours_at
        their_path, their_entry = theirs_at
        if our_path != their_path and base_path not in (our_path, their_path):
            if not self.favor_ours:
                # Like git, name the source and both destinations: all three need a decision.
                self.conflict(base_path, RENAME_RENAME)
                self.conflict(our_path, RENAME_RENAME, base_path)
                self.conflict(their_path, RENAME_RENAME, base_path)
                return
            their_path = our_path
        destination = their_path if our_path == base_path else our_path
        versions = (
            _version(base_path, base_entry),
            _version(our_path, our_entry),
            _version(their_path, their_entry),
        )
        merged = self.merge_entries(destination, base_entry, our_entry, their_entry, versions)
        if destination == base_path:
            if merged is not None:
                self.changes[base_path] = merged
            return
        self.changes.setdefault(base_path, None)
        if merged is not None:
            self.place(destination, merged)

    def deleted_by_one(self, base_path: str, base_entry: Entry, kept: tuple[str, Entry], *, ours_kept: bool) -> None:
        """A base file one side deleted; ``kept`` is where and what the other side left of it."""
        kept_path, kept_entry = kept
        if kept_path == base_path and kept_entry == base_entry:
            self.changes[base_path] = None  # deleted on one side, untouched on the other
        elif self.favor_ours:
            self.changes[base_path] = kept_entry if ours_kept else None
        elif kept_path == base_path:
            self.conflict(base_path, MODIFY_DELETE)
        else:
            self.conflict(kept_path, RENAME_DELETE, base_path)

    def place(self, path: str, entry: Entry) -> None:
        """Put a file at a path the base did not use for it (an add or a rename destination)."""
        previous = self.created.get(path)
        if previous is not None:
            if previous != entry and not self.favor_ours:
                self.conflict(path, ADD_ADD)
            return
        base_entry = self.in_base(path)
        placed_onto_base_file = (
            base_entry is not None and base_entry.mode != MODE_TREE and self.changes.get(path, base_entry) is not None
        )
        if placed_onto_base_file and not self.favor_ours:
            self.conflict(path, ADD_ADD)
            return
        self.created[path] = entry
        self.changes[path] = entry

    def merge_entries(
        self,
        path: str,
        base: Entry,
        ours: Entry,
        theirs: Entry,
        versions: tuple[Version | None, Version | None, Version | None],
    ) -> Entry | None:
        """Combine one file's two versions; None (with a conflict recorded) when they disagree."""
        if ours == theirs or theirs == base:
            return ours
        if ours == base:
            return theirs
        rule = next((r.rule for r in self.rules if r.matches(path)), None)
        if ours.mode == base.mode or ours.mode == theirs.mode:
            mode = theirs.mode
        elif theirs.mode == base.mode or self.favor_ours:
            mode = ours.mode
        elif rule in (OURS, THEIRS):
            self.resolved.append(Resolved(path, rule))
            return ours if rule == OURS else theirs
        else:
            self.conflict(path, MODE, versions=versions)
            return None
        if ours.id == theirs.id or theirs.id == base.id:
            return Entry(mode, ours.id)
        if ours.id == base.id:
            return Entry(mode, theirs.id)
        # Both sides changed the content.
        if (ours.mode & _FORMAT_MASK) != _REGULAR or (theirs.mode & _FORMAT_MASK) != _REGULAR:
            return self.refuse(path, CONTENT, ours, theirs, rule, versions)  # symlinks, gitlinks: no lines
        texts = [self.batch.read_blob(oid) for oid in (base.id, ours.id, theirs.id)]
        if any(is_binary(text) for text in texts):
            return self.refuse(path, BINARY, ours, theirs, rule, versions)
        result = merge_text(*texts, labels=self.labels)
        if result.conflicted and not self.favor_ours:
            if rule is None:
                self.conflict(path, CONTENT, versions=versions)
                return None
            self.resolved.append(Resolved(path, rule))
            if rule != UNION:
                return Entry(mode, (ours if rule == OURS else theirs).id)
            result = merge_text(*texts, union=True)
        return Entry(mode, self.batch.add(BLOB, result.content))

    def refuse(
        self,
        path: str,
        kind: str,
        ours: Entry,
        theirs: Entry,
        rule: str | None,
        versions: tuple[Version | None, Version | None, Version | None],
    ) -> Entry | None:
        """A conflict of contents that have no lines to merge: our side in a virtual base, the
        side an ``ours``/``theirs`` rule names, else a conflict."""
        if self.favor_ours:
            return ours
        if rule in (OURS, THEIRS):
            self.resolved.append(Resolved(path, rule))
            return ours if rule == OURS else theirs
        self.conflict(path, kind, versions=versions)
        return None

    def check_file_directory(self) -> None:
        """A file in the result may not sit where the result also has a directory."""
        written = {path for path, entry in self.changes.items() if entry is not None}
        for path in sorted(written):
            parts = path.split("/")
            for depth in range(1, len(parts)):
                prefix = "/".join(parts[:depth])
                if prefix in written:
                    self.file_directory(prefix)
                    break
                if prefix in self.changes:
                    continue  # removed in the result
                # Nothing here in the base does not end the search: the result may write a file
                # at a deeper prefix of this path, inside a directory both sides created.
                entry = self.in_base(prefix)
                if entry is not None and entry.mode != MODE_TREE:
                    self.file_directory(prefix)
                    break
            base_entry = self.in_base(path)
            if base_entry is not None and base_entry.mode == MODE_TREE and self.keeps_files_under(path, base_entry):
                self.file_directory(path)

    def keeps_files_under(self, directory: str, base_entry: Entry) -> bool:
        """Whether a file of the base's ``directory`` is still there in the result: a file written
        at that path clashes with it, but not with a directory the merge empties (git's rule)."""
        return any(
            self.changes.get(path, entry) is not None
            for path, entry in iter_files(self.batch, base_entry.id, directory + "/")
        )

    def file_directory(self, path: str) -> None:
        if self.favor_ours:
            self.changes.pop(path, None)
        else:
            self.conflict(path, FILE_DIRECTORY)
