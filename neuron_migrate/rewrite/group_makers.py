"""Modules whose code runs in processes that another script of the same run gives a process group.

torch_xla's launchers (`xmp.spawn`, `torch_xla.launch`) gave a training loop kept in a module of
its own (`trainer.py`) its processes without a process group; migrated, the launching script
creates the group before it calls into that module. The module alone cannot tell: on its own it
creates no group, and its rewrites would say so. Found here, for the files one run migrates, from
the scripts that launch or create the group and the sibling modules they import, directly or not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from neuron_migrate.core.names import ImportTable, qualified_names_used, unconditional_calls
from neuron_migrate.rewrite.codemods.base import FileFacts
from neuron_migrate.rewrite.codemods.nxd_program import sibling_modules

# Cheap test before parsing: only such files can launch processes or create the group.
MAY_MAKE_GROUP = re.compile(r"\bspawn\b|\btorch_xla\b.*\blaunch\b|\binit_process_group\b")


def group_made_for(paths: list[Path]) -> dict[Path, str]:
    """The `.py` files among `paths` that a script among them imports (directly or through other
    modules of its folder) and gives a process group: file -> that script's name."""
    given = {path.resolve() for path in paths if path.suffix == ".py"}
    found: dict[Path, str] = {}
    for path in sorted(given):
        tree = _group_maker(path)
        if tree is None:
            continue
        stack = [file for _, file in sibling_modules(tree, path.parent)]
        while stack:
            module = stack.pop().resolve()
            if module == path or module in found or module not in given:
                continue
            found[module] = path.name
            module_tree = _parsed(module)
            if module_tree is not None:
                stack.extend(file for _, file in sibling_modules(module_tree, module.parent))
    return found


def _group_maker(path: Path) -> ast.Module | None:
    """The tree of `path` where it creates the process group on every run, or will once migrated."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if not MAY_MAKE_GROUP.search(text):
        return None
    tree = _parsed(path, text)
    if tree is None:
        return None
    table = ImportTable.from_ast(tree)
    facts = FileFacts(used=qualified_names_used(tree, table), always_called=unconditional_calls(tree, table))
    return tree if facts.distributed else None


def _parsed(path: Path, text: str | None = None) -> ast.Module | None:
    try:
        return ast.parse(text if text is not None else path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
