"""What a notebook cell binds, reads and defines, read with Python's `ast` (IPython's syntax
masked): the facts a cell's migration in its notebook is decided with (which names it needs from
the cells before it, which of their definitions to bring, which old-stack imports it keeps).
"""

from __future__ import annotations

import ast
import builtins
import warnings

from neuron_migrate.core.notebook_cells import cell_magic, mask
from neuron_migrate.core.oldstack import OPTIMUM_NEURON, PACKAGES


def _parsed(text: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _bound(tree: ast.Module) -> set[str]:
    """The names a module binds anywhere (approximately: what a name lookup could find)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(_imported(node))
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [(alias.asname or alias.name).split(".")[0] for alias in node.names]


def free_names(text: str) -> set[str]:
    """The names a cell reads without binding them itself (builtins aside)."""
    tree = _parsed(mask(text).text)
    if tree is None:
        return set()
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - _bound(tree) - set(dir(builtins))


def definitions(source: str) -> dict[str, str]:
    """The imports, functions and classes at the top of a cell, by the names they bind, as written."""
    masked = mask(source).text
    tree = _parsed(masked)
    if tree is None:
        return {}
    lines = masked.splitlines(keepends=True)
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = _imported(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        else:
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        text = "".join(lines[first - 1 : node.end_lineno]).rstrip("\n")
        for name in names:
            found.setdefault(name, text)
    return found


def _old_stack_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        modules = [node.module]
    else:
        return False
    return all(m.split(".")[0] in PACKAGES or m.startswith(OPTIMUM_NEURON) for m in modules)


def without_unused_old_imports(source: str) -> str:
    """`source` without its top-level old-stack imports that it does not use itself. Migrated
    after its notebook's earlier cells, a cell keeps such an import where those cells still use
    the name; but those cells have run, and the cell must run without the old stack."""
    tree = _parsed(mask(source).text)
    if tree is None:
        return source
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    unused = [
        node
        for node in tree.body
        if _old_stack_import(node) and not set(_imported(node)) & read  # type: ignore[arg-type]
    ]
    if not unused:
        return source
    lines = source.splitlines(keepends=True)
    for node in reversed(unused):
        del lines[node.lineno - 1 : node.end_lineno]
    return "".join(lines)


def with_definitions(source: str, definitions: list[str]) -> tuple[str, int]:
    """`source` with the definitions put on top (after a `%%` line), and how many lines that adds."""
    imports = [d for d in definitions if d.startswith(("import ", "from "))]
    helpers = [d for d in definitions if d not in imports]
    block = "\n".join(imports)
    if helpers:
        block += ("\n\n\n" if block else "") + "\n\n\n".join(helpers)
    block += "\n\n\n" if helpers else "\n\n"
    head = ""
    if cell_magic(source) is not None:
        head, _, source = source.partition("\n")
        head += "\n"
    return head + block + source, block.count("\n")
