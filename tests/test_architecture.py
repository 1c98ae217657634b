"""The layers import downwards only.

    engine/          imports no framework, task queue or app layer
    repos/services/  imports neither the workers (they import services) nor the API (it calls services)
    repos/api/       imports no engine module: what it needs of the engine comes through services
    repos/web/       (to come) imports nothing of the API: both are surfaces over the same services
    repos/, agentgit_site/, workers/  import nothing of benchmarks/ (the benchmarks import them)

And no two modules of engine/, repos/ or benchmarks/ import each other, directly or round a
loop (an import made only for type checking or inside a function counts too): what both sides
need lives in a module both import. Two loops are known and listed (:data:`KNOWN_CYCLES`).

Relative imports count: ``from ..api import views`` inside repos/services/ is repos.api.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: (directory, the top-level packages or modules its files must not import).
RULES: list[tuple[str, frozenset[str]]] = [
    ("engine", frozenset({"django", "rest_framework", "channels", "celery", "repos", "workers", "agentgit_site"})),
    ("repos/services", frozenset({"workers", "repos.api"})),
    ("repos/api", frozenset({"engine"})),
    ("repos/web", frozenset({"repos.api"})),
    ("repos", frozenset({"benchmarks"})),
    ("agentgit_site", frozenset({"benchmarks"})),
    ("workers", frozenset({"benchmarks"})),
]

#: Where import loops are looked for.
CYCLE_DIRECTORIES = ("engine", "repos", "benchmarks", "agentgit_site", "workers")
#: The import loops left as they are for now, each as its sorted modules (issue 25 took the git
#: bridge's, the ref mirror's, the graph's and the events' relay apart). Left: the outbox hands a
#: repository's new events to its webhooks (a deferred import in events.append_event), and the
#: webhooks read the outbox's kinds and wire format from events.
KNOWN_CYCLES = [["repos.services.events", "repos.services.webhooks"]]


def module_name(path: Path, root: Path) -> str:
    """The dotted module name of a file under ``root`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str = "", is_package: bool = False, filename: str = "<string>"):
    """(line, absolute module) for every import in ``source``, relative ones resolved against
    ``module``. ``from X import a`` yields X and X.a (``a`` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def forbidden_imports(
    source: str, forbidden: frozenset[str], module: str = "", is_package: bool = False, filename: str = "<string>"
) -> list[tuple[int, str]]:
    """(line, module) for every import of a forbidden module or anything inside it."""
    found = {
        (line, name)
        for line, name in imported_modules(source, module, is_package, filename)
        if any(name == banned or name.startswith(banned + ".") for banned in forbidden)
    }
    return sorted(found)


def violations(root: Path) -> list[str]:
    """Every import under ``root`` that breaks a rule, as ``path:line: import module``."""
    found = []
    for directory, forbidden in RULES:
        for path in sorted((root / directory).rglob("*.py")):
            module = module_name(path, root)
            is_package = path.name == "__init__.py"
            for line, name in forbidden_imports(path.read_text(), forbidden, module, is_package, str(path)):
                found.append(f"{path.relative_to(root)}:{line}: import {name}")
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of the tree it imports (``from package import name`` is the submodule
    when there is one, else the package)."""
    files = {}
    for directory in CYCLE_DIRECTORIES:
        for path in sorted((root / directory).rglob("*.py")):
            if "migrations" not in path.parts:
                files[module_name(path, root)] = path
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for _line, name in imported_modules(path.read_text(), module, path.name == "__init__.py", str(path)):
            if name in files:
                targets.add(name)
            elif name.rpartition(".")[0] in files and name.rpartition(".")[0] != module:
                targets.add(name.rpartition(".")[0])  # ``from package import a_function``
        graph[module] = targets - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(start: str) -> None:  # iterative: the tree's import chains are long
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_modules_import_each_other_round_a_loop():
    assert import_cycles(import_graph(ROOT)) == KNOWN_CYCLES


def test_the_loop_finder_finds_loops_and_only_loops():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"x": {"y"}, "y": set()}) == []


def test_a_planted_loop_fails_the_check(tmp_path):
    for directory in CYCLE_DIRECTORIES:
        if (ROOT / directory).is_dir():
            shutil.copytree(ROOT / directory, tmp_path / directory, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "engine" / "objects.py").write_text(
        (ROOT / "engine" / "objects.py").read_text() + "\nif TYPE_CHECKING:\n    from .graph import graph_node\n"
    )
    loops = import_cycles(import_graph(tmp_path))
    assert any({"engine.graph", "engine.objects"} <= set(loop) for loop in loops), loops


def test_the_checker_finds_every_form_of_forbidden_import():
    source = (
        "import os, django.db\n"
        "from celery import shared_task\n"
        "from repos.services import land\n"
        "from . import trees\n"
        "from .workers import x\n"
        "def f():\n"
        "    import rest_framework\n"
        "import djangoish\n"
    )
    engine = RULES[0][1]
    assert forbidden_imports(source, engine, "engine.merge") == [
        (1, "django.db"),
        (2, "celery"),
        (2, "celery.shared_task"),
        (3, "repos.services"),
        (3, "repos.services.land"),
        (7, "rest_framework"),
    ]


def test_the_checker_resolves_relative_imports():
    services = frozenset({"workers", "repos.api"})
    source = "from ..api import views\nfrom .. import api\nfrom ..errors import Invalid\nfrom . import events\n"
    assert forbidden_imports(source, services, "repos.services.content") == [
        (1, "repos.api"),
        (1, "repos.api.views"),
        (2, "repos.api"),
    ]
    # In a package's __init__, "." is the package itself.
    assert forbidden_imports("from .api import x\n", services, "repos", is_package=True) == [
        (1, "repos.api"),
        (1, "repos.api.x"),
    ]
    assert forbidden_imports("from repos.apiary import x\n", services, "repos.services.content") == []


def test_the_layers_import_downwards_only():
    assert violations(ROOT) == []


@pytest.mark.parametrize(
    "planted_file, line",
    [
        ("engine/planted.py", "from django.db import models\n"),
        ("repos/services/planted.py", "from workers import tasks\n"),
        ("repos/services/planted.py", "def later():\n    from ..api import views\n"),
        ("repos/api/planted.py", "from engine.errors import EngineError\n"),
        ("repos/web/views.py", "from repos.api.serializers import ErrorSerializer\n"),
        ("repos/management/commands/planted.py", "from benchmarks.suites import SUITES\n"),
    ],
)
def test_a_planted_forbidden_import_fails_the_check(tmp_path, planted_file, line):
    for directory in {directory.split("/")[0] for directory, _ in RULES}:
        if (ROOT / directory).is_dir():
            shutil.copytree(ROOT / directory, tmp_path / directory, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(tmp_path) == []  # the copy is as clean as the tree

    planted = tmp_path / planted_file
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text('"""Planted by the test."""\n' + line)

    found = violations(tmp_path)
    assert found and all(entry.startswith(planted_file + ":") for entry in found), found
