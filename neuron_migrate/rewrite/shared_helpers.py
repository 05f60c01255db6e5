"""`rewrite --helpers-module NAME`: one module of helpers per folder, which its scripts import.

The migration writes small helpers (`DeviceLoader`, `average_gradients`, `master_print`, ...) into
each file that needs them. For a folder of scripts that is the same class pasted into every one;
with this option the functions and classes go into `NAME.py` next to the scripts, once, and each
script imports what it uses (`from NAME import DeviceLoader`). A script run as `python dir/x.py`
or `torchrun dir/x.py` finds the module: Python puts the script's folder first on `sys.path`.

A helper stays in its file when it reads a module constant of that file (`LOCAL_RANK`), and a
file keeps its own copies when another file of the folder needs different code under the same
name (see `merge`).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping

from neuron_migrate.rewrite.codemods.base import names_in
from neuron_migrate.rewrite.results import Helper

HEADER = '"""Helpers shared by the migrated scripts of this folder (written by `neuron-migrate rewrite --helpers-module`)."""\n'


def shareable(helpers: Mapping[str, str], spelled: Mapping[str, tuple[str, str, str | None]]) -> dict[str, Helper]:
    """The helpers (name -> source) that can live in a module of their own: functions and classes
    that read nothing of their file but imports and each other."""
    definitions = {
        name
        for name, source in helpers.items()
        if all(isinstance(s, ast.FunctionDef | ast.ClassDef) for s in ast.parse(source).body)
    }
    local = set(helpers) - definitions
    found: dict[str, Helper] = {}
    for name in definitions:
        names = names_in(helpers[name])
        if not names & local:
            imports = (_import_line(spelled[written]) for written in sorted(names & spelled.keys()))
            found[name] = Helper(helpers[name].strip("\n") + "\n", tuple(dict.fromkeys(imports)))
    return found


def _import_line(how: tuple[str, str, str | None]) -> str:
    kind, module, alias = how
    if kind == "from":
        return f"from {module} import {alias}"
    return f"import {module} as {alias}" if alias else f"import {module}"


def merge(existing: Mapping[str, Helper], files: Iterable[Mapping[str, Helper]]) -> tuple[dict[str, Helper], list[int]]:
    """All helpers of a folder by name, and the positions of the files whose helpers clash with
    one already taken (the same name for different code): those keep their own copies."""
    taken = dict(existing)
    clashing = []
    for position, helpers in enumerate(files):
        if any(name in taken and not taken[name].same_code(helper) for name, helper in helpers.items()):
            clashing.append(position)
            continue
        for name, helper in helpers.items():
            taken.setdefault(name, helper)
    return taken, clashing


def module_text(helpers: Mapping[str, Helper]) -> str:
    """The module: its docstring, every import once (standard library first), then the helpers."""
    lines = sorted(
        {line for helper in helpers.values() for line in helper.imports},
        key=lambda line: (not _standard(line), line.startswith("from "), line),
    )
    groups = [[line for line in lines if _standard(line)], [line for line in lines if not _standard(line)]]
    head = "\n\n".join("\n".join(group) for group in groups if group)
    return HEADER + (f"\n{head}\n" if head else "") + "".join(f"\n\n{h.source}" for h in helpers.values())


def read_module(text: str) -> dict[str, Helper] | None:
    """The helpers of a module this option wrote; None for a file it did not write, which it
    must not touch."""
    if not text.startswith(HEADER):
        return None
    tree = ast.parse(text)
    imports = [ast.get_source_segment(text, s) or "" for s in tree.body if isinstance(s, ast.Import | ast.ImportFrom)]
    lines = text.splitlines(keepends=True)
    found = {}
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.ClassDef):
            start = statement.decorator_list[0].lineno if statement.decorator_list else statement.lineno
            source = "".join(lines[start - 1 : statement.end_lineno]).strip("\n") + "\n"
            used = names_in(source)
            needed = tuple(line for line in imports if _binds(line) & used)
            found[statement.name] = Helper(source, needed)
    return found


def _binds(line: str) -> set[str]:
    statement = ast.parse(line).body[0]
    assert isinstance(statement, ast.Import | ast.ImportFrom)
    return {(alias.asname or alias.name).split(".")[0] for alias in statement.names}


def _standard(line: str) -> bool:
    return line.split()[1].split(".")[0] in sys.stdlib_module_names
