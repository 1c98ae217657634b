"""engine/ is framework-free: it imports no web framework, task queue or app layer."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "engine"
FORBIDDEN = frozenset({"django", "rest_framework", "channels", "celery", "repos", "workers", "agentgit_site"})


def forbidden_imports(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """Return (line, module) for every absolute import of a forbidden top-level package."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m.split(".")[0] in FORBIDDEN]
    return sorted(found)


def test_checker_finds_every_form_of_forbidden_import():
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
    assert forbidden_imports(source) == [
        (1, "django.db"),
        (2, "celery"),
        (3, "repos.services"),
        (7, "rest_framework"),
    ]


def test_engine_imports_no_framework_or_app_code():
    files = sorted(ENGINE.rglob("*.py"))
    if ENGINE.is_dir():
        assert files, "engine/ exists but holds no Python files to check"
    violations = [
        f"{path.relative_to(ROOT)}:{line}: import {module}"
        for path in files
        for line, module in forbidden_imports(path.read_text(), str(path))
    ]
    assert violations == []
