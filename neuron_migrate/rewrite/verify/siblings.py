"""Modules beside a migrated file that it imports and that still import the old stack.

A script runs with the modules of its folder (`from fsdp_utils import apply_fsdp`): migrated
alone, it fails at start-up where such a module still imports torch_xla. A module this run
migrates too is fine; any other that still imports the old stack gets a TODO at the import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.oldstack import imports_old_stack
from neuron_migrate.rewrite.verify.checks import Problem

LEVELS = 4  # the file's folder and the folders above it a script may import from


def old_stack_siblings(tree: ast.Module, path: Path, migrated: frozenset[str]) -> list[Problem]:
    """A problem at each import of a module beside `path` that still imports the old stack and is
    not among the files this run `migrated` (resolved paths)."""
    if not path.is_file():
        return []
    statements = statement_starts(tree)
    problems = []
    for node, module, found in _local_imports(tree, path):
        if str(found.resolve()) in migrated:
            continue
        try:
            text = found.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if imports_old_stack(text):
            line = statements.get(node.lineno, node.lineno)
            message = f"`{module}` ({found.name}) still imports the old stack, and this run did not migrate it: migrate it too"
            problems.append(Problem(line, message, module))
    return problems


def _local_imports(tree: ast.Module, path: Path) -> Iterator[tuple[ast.stmt, str, Path]]:
    """Each import of a module found beside `path`, with the file that holds it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _find(alias.name, [path.parent, *path.parent.parents][:LEVELS])
                if found is not None:
                    yield node, alias.name, found
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parents[node.level - 1] if node.level - 1 < len(path.parents) else None
                folders = [base] if base is not None else []
            else:
                folders = [path.parent, *path.parent.parents][:LEVELS]
            names = [node.module] if node.module else [alias.name for alias in node.names]
            for name in names:
                found = _find(name, folders)
                if found is not None:
                    yield node, ("." * node.level) + name, found


def _find(module: str, folders: list[Path]) -> Path | None:
    """The file of `module` in the first folder that holds it."""
    relative = Path(*module.split("."))
    for folder in folders:
        for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None
