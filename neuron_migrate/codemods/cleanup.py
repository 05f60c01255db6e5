"""Imports after the rewrite: drop the ones the migration made dead, add the ones it needs.

An import is removed only when the migration made it unused: an old-stack import nothing refers
to any more, or any import whose last use the codemods rewrote away. Imports the user had left
unused stay as they were (minimal diff). A `try: import torch_xla... except ImportError:` guard
whose imports all went away keeps its accelerator branch, since the migrated code now runs
natively on every device. New imports go next to their kind (standard library first, then
`torch`), helpers and set-up statements right after the import block.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from typing import Any

import libcst as cst

from neuron_migrate.codemods.base import MigrationContext
from neuron_migrate.codemods.dispatch import sweep_block

STDLIB_FIRST = frozenset({"os", "sys", "time", "math", "functools", "itertools"})


def used_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _alias_binding(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    name = alias.name
    while isinstance(name, cst.Attribute):
        name = name.value  # type: ignore[assignment]
    assert isinstance(name, cst.Name)
    return name.value


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for kind in kinds:
        node = kind.value if isinstance(kind, cst.Element) else kind
        if isinstance(node, cst.Name) and node.value in _IMPORT_ERRORS:
            return True
    return False


class _ImportRemover(cst.CSTTransformer):
    """Removes dead import aliases; only descends into statements that can hold imports."""

    def __init__(self, ctx: MigrationContext, dead: frozenset[str]) -> None:
        super().__init__()
        self.ctx = ctx
        self.dead = dead
        self._guard_removed: list[bool] = []

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        body: list[cst.BaseSmallStatement] = []
        changed = False
        for small in updated_node.body:
            if isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(
                small.names, cst.ImportStar
            ):
                names = list(small.names)
                kept = [a for a in names if _alias_binding(a) not in self.dead]
                if len(kept) != len(names):
                    changed = True
                    if self._guard_removed:
                        self._guard_removed[-1] = True
                    if not kept:
                        continue
                    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    small = small.with_changes(names=kept)
                    if isinstance(small, cst.ImportFrom) and small.lpar is not None and len(kept) == 1:
                        small = small.with_changes(lpar=None, rpar=None)
            body.append(small)
        if not changed:
            return updated_node
        if not body:
            return self.ctx.remove(updated_node)
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(body=body)

    def visit_Try(self, node: cst.Try) -> bool:
        self._guard_removed.append(False)
        return True

    def leave_Try(self, original_node: cst.Try, updated_node: cst.Try) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        removed_import = self._guard_removed.pop()
        if self._guard_removed and removed_import:
            self._guard_removed[-1] = True
        if not removed_import or not any(_catches_import_error(h) for h in updated_node.handlers):
            return updated_node
        # The old stack's availability guard: keep the accelerator branch, now native.
        kept: list[Any] = [s for s in updated_node.body.body if id(s) not in self.ctx.removed]
        if updated_node.orelse is not None:
            kept += list(updated_node.orelse.body.body)
        if updated_node.finalbody is not None:
            kept += list(updated_node.finalbody.body.body)
        self.ctx.changed("NM012", "resolved a torch_xla import guard to its accelerator branch")
        if not kept:
            return self.ctx.remove(updated_node)
        kept[0] = kept[0].with_changes(
            leading_lines=[*updated_node.leading_lines, *kept[0].leading_lines]
        )
        return cst.FlattenSentinel(kept)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        return sweep_block(updated_node, self.ctx.removed)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return sweep_block(updated_node, self.ctx.removed)


def remove_dead_imports(
    module: cst.Module,
    ctx: MigrationContext,
    before: ast.AST,
    after: ast.AST,
    old_stack_names: Iterable[str],
) -> cst.Module:
    """Drop imports the migration left unused (old-stack ones, and any whose uses it rewrote)."""
    used_before = used_names(before)
    used_after = used_names(after)
    bound_after: set[str] = set()
    for node in ast.walk(after):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound_after.add(alias.asname or alias.name.split(".")[0])
    old = set(old_stack_names)
    dead = {
        name
        for name in bound_after
        if name not in used_after and (name in old or name in used_before)
    }
    if not dead:
        return module
    return module.visit(_ImportRemover(ctx, frozenset(dead)))


# -- adding imports, helpers and set-up statements -------------------------------------------


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body
    )


def _is_future_or_docstring(statement: cst.CSTNode, index: int) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    if index == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString | cst.ConcatenatedString):
        return True
    return isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and small.module.value == "__future__"


def _import_source(module: str, asname: str | None) -> str:
    return f"import {module} as {asname}" if asname else f"import {module}"


def _top_module(statement: cst.CSTNode) -> str:
    assert isinstance(statement, cst.SimpleStatementLine)
    small = statement.body[0]
    if isinstance(small, cst.Import):
        node: cst.CSTNode = small.names[0].name
    elif isinstance(small, cst.ImportFrom) and small.module is not None:
        node = small.module
    else:
        return ""
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else ""


def add_module_level(
    module: cst.Module,
    imports: dict[str, str | None],
    existing: set[tuple[str, str | None]],
    blocks: Sequence[str],
) -> cst.Module:
    """Add imports next to their kind, then `blocks` (helpers, set-up) after the import block."""
    body: list[Any] = list(module.body)
    # The import block: from the first import to the last import before any def/class/if/for.
    first_code = 0
    while first_code < len(body) and _is_future_or_docstring(body[first_code], first_code):
        first_code += 1
    last_import = -1
    for i, statement in enumerate(body):
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            break
        if _is_import(statement):
            last_import = i
    anchor = max(last_import + 1, first_code)

    additions = [(m, a) for m, a in imports.items() if (m, a) not in existing]
    for module_name, asname in sorted(additions, key=lambda ma: (ma[0] not in STDLIB_FIRST, ma[0])):
        line = cst.parse_statement(_import_source(module_name, asname))
        top = module_name.split(".")[0]
        same_kind = [i for i in range(first_code, anchor) if _is_import(body[i]) and _top_module(body[i]) == top]
        if same_kind:
            position = same_kind[-1] + 1
        elif module_name in STDLIB_FIRST:
            position = next((i for i in range(first_code, anchor) if _is_import(body[i])), anchor)
            if position < len(body) and position < anchor:
                # Take over the blank lines that separated the block from the docstring.
                line = line.with_changes(leading_lines=body[position].leading_lines)
                body[position] = body[position].with_changes(leading_lines=[])
        else:
            position = anchor
        body.insert(position, line)
        anchor += 1
    if blocks:
        insert: list[Any] = []
        for source in blocks:
            parsed = cst.parse_module(source)
            statements = list(parsed.body)
            # A leading comment parses as the module header: keep it on the first statement.
            statements[0] = statements[0].with_changes(
                leading_lines=[*parsed.header, *statements[0].leading_lines]
            )
            insert.extend(statements)
        if insert:
            blank = cst.EmptyLine()
            for j, statement in enumerate(insert):
                is_def = isinstance(statement, cst.FunctionDef | cst.ClassDef)
                prev_def = j > 0 and isinstance(insert[j - 1], cst.FunctionDef | cst.ClassDef)
                lines = [blank, blank] if (is_def or prev_def or j == 0) else []
                if j == 0 and not is_def:
                    lines = [blank]
                insert[j] = statement.with_changes(leading_lines=[*lines, *statement.leading_lines])
            if anchor < len(body) and isinstance(insert[-1], cst.FunctionDef | cst.ClassDef):
                following = body[anchor]
                if len([x for x in following.leading_lines if x.comment is None]) < 2:
                    body[anchor] = following.with_changes(leading_lines=[blank, blank, *following.leading_lines])
            body[anchor:anchor] = insert
    return module.with_changes(body=body)
