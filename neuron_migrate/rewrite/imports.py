"""Imports after the rewrite: drop the ones the migration made dead, add the ones it needs.

An import is removed only when the migration made it unused: an old-stack import nothing refers
to any more, or an import whose binding the original read in its scope and the migrated code no
longer does. Imports the user had left unused stay as they were (minimal diff), and so do
relative imports and imports marked `noqa`, which may be there for their side effect
(registering ops). Each removal counts as a change in the report. A `try: import torch_xla... except ImportError:` guard
whose imports all went away keeps its accelerator branch, since the migrated code now runs
natively on every device; a broader handler (`except Exception:`) goes with it only where
nothing left in the `try` can raise, else it stays around the migrated body. A guard that keeps
an old-stack import, which fails natively, gets a TODO: its fallback branch now always runs. So
does a `try` that only probes (`import torch_xla; return True`, the name never read): it asked
whether the package is installed, and natively it never is.
New imports go next to their kind (standard library first, then `torch`), helpers and set-up
statements right after the import block.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.cst_children import PUNCTUATION, transform
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.core.oldstack import REGISTERS, REGISTRATION_ONLY
from neuron_migrate.core.scopes import ScopeTable
from neuron_migrate.rewrite.codemods.base import (
    MigrationContext,
    Transformer,
    Visitor,
    code_of,
    dotted_name,
)
from neuron_migrate.rewrite.dispatch import (
    STATEMENTS,
    add_todos,
    emptied_if,
    names_read,
    sweep_block,
    without_emptied_if,
)


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def used_names(tree: ast.AST) -> set[str]:
    return {node.id for node in all_nodes(tree) if isinstance(node, ast.Name)}


def _alias_binding(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    name = alias.name
    while isinstance(name, cst.Attribute):
        name = name.value  # type: ignore[assignment]
    assert isinstance(name, cst.Name)
    return name.value


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
_CATCH_ALL = frozenset({"Exception", "BaseException"})


def _caught(handler: cst.ExceptHandler) -> list[str | None]:
    """The names of the exception types a handler catches (None for one that is not a name)."""
    if handler.type is None:
        return ["BaseException"]
    kinds = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    nodes = [kind.value if isinstance(kind, cst.Element) else kind for kind in kinds]
    return [node.value if isinstance(node, cst.Name) else None for node in nodes]


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    return any(kind in _IMPORT_ERRORS | _CATCH_ALL for kind in _caught(handler))


def _only_import_errors(handler: cst.ExceptHandler) -> bool:
    return all(kind in _IMPORT_ERRORS for kind in _caught(handler))


# Native calls a guard's body may keep and still not raise: the device lookup and its parts.
_SAFE_CALLS = frozenset({
    "torch.device",
    "torch.accelerator.current_accelerator",
    "torch.accelerator.is_available",
    "torch.accelerator.device_count",
})


def _cannot_raise(statement: cst.CSTNode, resolve: Callable[[str], str | None]) -> bool:
    """A statement that raises nothing once native: `pass`, `name = <literal, name or the device
    lookup>`, a `print` of such values. What a broad `except` around it can only have caught
    was the old-stack import."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Pass):
            continue
        if isinstance(small, cst.Assign) and all(_is_names(t.target) for t in small.targets):
            if _safe_value(small.value, resolve):
                continue
        elif isinstance(small, cst.AnnAssign) and _is_names(small.target):
            if small.value is None or _safe_value(small.value, resolve):
                continue
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            if dotted_name(call.func) == "print" and all(not a.star and _safe_value(a.value, resolve) for a in call.args):
                continue
        return False
    return True


def _is_names(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Tuple | cst.List):
        return all(isinstance(e, cst.Element) and _is_names(e.value) for e in target.elements)
    return isinstance(target, cst.Name)


def _safe_value(node: cst.BaseExpression, resolve: Callable[[str], str | None]) -> bool:
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString | cst.Integer | cst.Float | cst.Name):
        return True
    if isinstance(node, cst.Attribute):
        dotted = dotted_name(node)
        return dotted is not None and resolve(dotted) is not None  # an attribute of a module
    if isinstance(node, cst.Tuple | cst.List):
        return all(isinstance(e, cst.Element) and _safe_value(e.value, resolve) for e in node.elements)
    if isinstance(node, cst.BooleanOperation):
        return _safe_value(node.left, resolve) and _safe_value(node.right, resolve)
    if isinstance(node, cst.Call):
        dotted = dotted_name(node.func)
        return (
            dotted is not None
            and (resolve(dotted) or dotted) in _SAFE_CALLS
            and all(not a.star and _safe_value(a.value, resolve) for a in node.args)
        )
    return False


class _Bindings(Visitor):
    """The names a block binds (`HAVE_XLA = True`, `xm = None`) and the imports it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, None] = {}
        self.imports: list[cst.Import | cst.ImportFrom] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.names[target.target.value] = None

    def visit_Import(self, node: cst.Import) -> bool:
        self.imports.append(node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self.imports.append(node)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


def _is_todo(line: cst.EmptyLine) -> bool:
    return line.comment is not None and line.comment.value.startswith("# TODO(neuron-migrate NM")


def _bindings(*nodes: cst.CSTNode) -> _Bindings:
    found = _Bindings()
    for node in nodes:
        found.scan(node)
    return found


class _ImportRemover(Transformer):
    """Removes dead import aliases; only descends into statements that can hold imports.

    Liveness is per scope: an import inside a function is dead when that function no longer
    uses the name, whatever other functions do.
    """

    def __init__(
        self,
        ctx: MigrationContext,
        is_dead: Callable[[str, int | None], bool],
        old: frozenset[str],
        was_read: Callable[[str, int | None], bool] = lambda name, scope: True,
        registrations: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.is_dead = is_dead
        self.registrations = registrations  # dotted imports that go whatever their root's uses
        self.old = old  # the names old-stack imports bind
        self.was_read = was_read  # did the original read this binding of the name in that scope?
        self._elifs: set[int] = set()
        self._guard_removed: list[bool] = []
        # Per `try` being left: the old-stack imports it keeps because the block only probes them.
        self._probed: list[list[str]] = []
        self._functions = 0  # pre-order index of the next function
        self._scopes: list[int] = []
        self.placeholders: dict[int, cst.CSTNode] = {}
        self.dropped: dict[str, None] = {}  # the bindings of the aliases removed, in source order
        # A statement nothing in changed comes back as the very node it was (see `printing`).
        self._replaced = 0
        self._open: list[tuple[int, ...]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in STATEMENTS:
            self._open.append(self._edits())
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result = super().on_leave(original_node, updated_node)
        if result is not updated_node:
            self._replaced += 1
        if type(original_node) in STATEMENTS and self._open.pop() == self._edits():
            return original_node
        return result

    def _edits(self) -> tuple[int, ...]:
        return (self._replaced, len(self.ctx.removed), len(self.placeholders), len(self.ctx.changes))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._scopes.append(self._functions)
        self._functions += 1
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self._scopes.pop()
        return updated_node

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        scope = self._scopes[-1] if self._scopes else None
        body: list[cst.BaseSmallStatement] = []
        changed = False
        comment = updated_node.trailing_whitespace.comment
        marked = comment is not None and "noqa" in comment.value  # kept on purpose, it says
        for small in updated_node.body:
            if isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(
                small.names, cst.ImportStar
            ):
                names = list(small.names)
                # A relative or `noqa` import may be there for its side effect: only old stack goes.
                own = marked or (isinstance(small, cst.ImportFrom) and bool(small.relative))
                probing = self._probed[-1] if self._probed else None  # in a `try` that probes
                kept = [
                    a
                    for a in names
                    if (
                        not self.is_dead(_alias_binding(a), scope)
                        or (own and _alias_binding(a) not in self.old)
                        or self._probes(a, small, scope)
                    )
                    and not (probing is None and isinstance(small, cst.Import) and _EMPTY.code_for_node(a.name) in self.registrations)
                ]
                self.dropped.update(dict.fromkeys(_alias_binding(a) for a in names if a not in kept))
                if len(kept) != len(names):
                    changed = True
                    if self._guard_removed:
                        self._guard_removed[-1] = True
                    if not kept:
                        continue
                    # The last name ends the list as the old last one did: in a parenthesized
                    # list one name a line, its trailing comma and the line break before `)`.
                    parenthesized = isinstance(small, cst.ImportFrom) and small.lpar is not None and len(kept) > 1
                    end = names[-1].comma if parenthesized and kept[-1] is not names[-1] else cst.MaybeSentinel.DEFAULT
                    kept[-1] = kept[-1].with_changes(comma=end)
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

    def _probes(self, alias: cst.ImportAlias, statement: cst.Import | cst.ImportFrom, scope: int | None) -> bool:
        """Is this old-stack import, never read, in a `try` block that only asks whether it is installed?"""
        binding = _alias_binding(alias)
        # A registration-only module is never read itself: its root read elsewhere says nothing.
        registers = isinstance(statement, cst.Import) and alias.asname is None and _EMPTY.code_for_node(alias.name) in REGISTRATION_ONLY
        if not self._probed or self._probed[-1] is None or binding not in self.old or (self.was_read(binding, scope) and not registers):
            return False
        self._probed[-1].append(_import_text(statement, alias))
        return True

    def visit_Try(self, node: cst.Try) -> bool:
        self._guard_removed.append(False)
        probe = any(_catches_import_error(h) for h in node.handlers) and _only_probes(node.body.body)
        self._probed.append([] if probe else None)  # type: ignore[arg-type]
        return True

    def leave_Try(self, original_node: cst.Try, updated_node: cst.Try) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        probed = self._probed.pop()
        if probed:
            # Natively the package is never there: the `except` branch runs, as on any machine
            # without it. Whether the question meant "an accelerator?" only a person can say.
            unique = list(dict.fromkeys(probed))
            names = f"`{unique[0]}`" + (f" (+{len(unique) - 1})" if len(unique) > 1 else "")
            verb = "is" if len(unique) == 1 else "are"
            message = f"{names} {verb} absent natively, so `except` runs; for an accelerator ask `torch.accelerator.is_available()`"
            self._guard_removed.pop()
            return add_todos(updated_node, [("NM015", message)])  # type: ignore[return-value]
        removed_import = self._guard_removed.pop()
        if self._guard_removed and removed_import:
            self._guard_removed[-1] = True
        if not any(_catches_import_error(h) for h in updated_node.handlers):
            return updated_node
        kept: list[Any] = [
            s
            for s in updated_node.body.body
            if id(s) not in self.ctx.removed and id(s) not in self.placeholders
        ]
        inside = _bindings(*kept)
        if inside.imports:
            return self._still_guarding(updated_node, inside)
        if not removed_import:
            return updated_node
        if not all(_only_import_errors(h) for h in updated_node.handlers) and not all(
            _cannot_raise(s, self.ctx.resolve_dotted) for s in kept
        ):
            return updated_node  # the handler also caught what the rest of the block may raise
        # The old stack's availability guard: keep the accelerator branch, now native.
        kept = self._labels_marked(kept, updated_node.handlers)
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

    def _labels_marked(self, kept: list[Any], handlers: Sequence[cst.ExceptHandler]) -> list[Any]:
        """`accelerator = "trn1"` in the accelerator branch named the hardware where the `except`
        branch names another (`"gpu"`): natively the accelerator branch always runs, so every host
        gets the Trainium label. The first such statement gets a TODO. (A flag such as
        `HAS_XLA = True` gates code that is native now, and runs anywhere.)"""
        fallback = {
            code_of(target.target): code_of(small.value)
            for handler in handlers
            for line in handler.body.body
            if isinstance(line, cst.SimpleStatementLine)
            for small in line.body
            if isinstance(small, cst.Assign)
            for target in small.targets
        }
        for index, statement in enumerate(kept):
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                name, value = code_of(small.targets[0].target), code_of(small.value)
                other = fallback.get(name)
                if isinstance(small.value, cst.SimpleString) and other is not None and value != other:
                    otherwise = f", else `{other}`" if len(other) <= 16 else ""
                    message = f"`{name} = {value}` where torch_xla imported{otherwise}: every host runs this now: set it from `torch.accelerator`"
                    kept[index] = add_todos(statement, [("NM012", message)])
                    return kept
        return kept

    def _still_guarding(self, node: cst.Try, inside: _Bindings) -> cst.Try:
        """A guard that keeps an import: of another optional package, it guards that one still; of
        the old stack, the import now always fails and the fallback branch always runs."""
        old = [
            name
            for statement in inside.imports
            if not isinstance(statement.names, cst.ImportStar)
            for name in map(_alias_binding, statement.names)
            if name in self.old
        ]
        flags = list(_bindings(*node.handlers).names)  # `HAVE_XLA = False`, `xm = None`: what code tests
        if not old:
            return node
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(old))
        if not flags:  # the handler stops or falls back itself (`raise SystemExit(...)`)
            message = f"{names} is still used, so its old-stack import stays and fails natively: `except` always runs until those uses are migrated"
            return add_todos(node, [("NM012", message)])  # type: ignore[return-value]
        tested = ", ".join(f"`{name}`" for name in flags)
        message = (
            f"{names} stays imported, fails natively, so its fallback runs: finish its TODOs, or set it from `torch.accelerator`"
            if tested == names
            else f"{names} stays imported and fails natively, so {tested} is false: finish their TODOs, or set it from `torch.accelerator`"
        )
        return add_todos(node, [("NM012", message)])  # type: ignore[return-value]

    def visit_If(self, node: cst.If) -> bool:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))
        return True

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> Any:
        """An `if` whose block only held what went (`if on_xla: import torch_xla ...; xm.mark_step()`)
        goes with it, as the dispatcher does for a block its codemods emptied."""
        if id(original_node) in self._elifs or not emptied_if(updated_node, self.placeholders):
            return updated_node
        # Its TODOs were about its test, which goes with it.
        lines = [line for line in updated_node.leading_lines if not _is_todo(line)]
        return without_emptied_if(updated_node.with_changes(leading_lines=lines), self.ctx)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        return sweep_block(updated_node, self.ctx.removed, self.placeholders)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return sweep_block(updated_node, self.ctx.removed)


def _names_read(table: ScopeTable) -> tuple[set[str], list[set[str]], list[tuple[str, int]]]:
    """The names whose module-level (or class-level) binding is read, and for each function in
    source order (as LibCST visits them), the names whose binding in that function is read, and
    which function it is (its qualified name, and how many functions before it share that name)."""
    functions = [s for s in table.scopes if s.kind == "FunctionDef"]
    number = {scope: i for i, scope in enumerate(functions)}
    outside: set[str] = set()
    inside: list[set[str]] = [set() for _ in functions]
    for owner, name in table.read_bindings():
        if owner in number:
            inside[number[owner]].add(name)
        elif owner.kind in ("Module", "ClassDef"):
            outside.add(name)
    seen: Counter[str] = Counter()
    keys = []
    for scope in functions:
        keys.append((scope.qualified_name, seen[scope.qualified_name]))
        seen[scope.qualified_name] += 1
    return outside, inside, keys


def _only_probes(body: Sequence[Any]) -> bool:
    """Does this `try` block do nothing but import, say so (`print("found")`, a log line), and set
    or return constants (`return True`, `HAVE_XLA = True`)? Then it asks whether its imports are
    installed, and uses none of them."""
    for statement in body:
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            if isinstance(small, cst.Import | cst.ImportFrom | cst.Pass):
                continue
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                continue  # a message; what it reads, the imports' bindings aside, is checked where they are
            value = small.value if isinstance(small, cst.Return | cst.Assign) else ...
            if value is ... or (value is not None and not _constant(value)):
                return False
            if isinstance(small, cst.Assign) and not all(isinstance(t.target, cst.Name) for t in small.targets):
                return False
    return any(isinstance(small, cst.Import | cst.ImportFrom) for s in body for small in s.body)


def _constant(node: cst.BaseExpression) -> bool:
    return (isinstance(node, cst.Name) and node.value in ("True", "False", "None")) or isinstance(node, cst.BaseNumber | cst.SimpleString)


def _import_text(statement: cst.Import | cst.ImportFrom, alias: cst.ImportAlias) -> str:
    """The module an import probes (`torch_xla.core.xla_model`): what the TODO names."""
    if isinstance(statement, cst.ImportFrom) and statement.module is not None:
        return code_of(statement.module)
    return code_of(alias.name)


def remove_dead_imports(
    module: cst.Module,
    ctx: MigrationContext,
    before: ScopeTable,
    after: ast.AST,
    old_stack_names: Iterable[str],
    code: str,
) -> cst.Module:
    """Drop imports the migration left unused: old-stack ones, and any whose binding the original
    read where the migrated code no longer does. `before` is the original's scope table; `after`
    and `code` are `module` parsed and printed. The same module comes back when no import is dead.

    Used means read where the import's binding is seen: a parameter or local variable that
    shares the import's name keeps nothing alive, and an import the original never read (one kept
    for its side effect) is never the migration's to remove.
    """
    assert isinstance(after, ast.Module)
    read_before, in_function_before, functions_before = _names_read(before)
    used_after, in_function, functions = _names_read(ScopeTable.from_ast(after, code))
    by_key = dict(zip(functions_before, in_function_before, strict=True))
    old = set(old_stack_names)

    # `import torch_neuron` is what makes `torch.neuron.trace` exist: alive while that is there.
    registering = {name for name, reached in REGISTERS.items() if reached in code}

    def reads(scope: int | None) -> tuple[set[str], set[str]]:
        """What the original and the migrated code read of the bindings in this scope."""
        if scope is None or scope >= len(in_function):
            return read_before, used_after
        return by_key.get(functions[scope], set()), in_function[scope]

    def is_dead(name: str, scope: int | None) -> bool:
        if name in registering:
            return False
        read, used = reads(scope)
        return (name in old or name in read) and name not in used

    bound_after: set[str] = set()
    for node in all_nodes(after):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound_after.add(alias.asname or alias.name.split(".")[0])
    read_anywhere = read_before.union(*in_function_before)
    registrations = _dead_registrations(after, used_after)
    if not registrations and not any(name in old or name in read_anywhere for name in bound_after):
        return module
    remover = _ImportRemover(ctx, is_dead, frozenset(old), lambda name, scope: name in reads(scope)[0], registrations)
    result = transform(module, remover, PUNCTUATION)
    assert isinstance(result, cst.Module)
    if remover.dropped:
        names = ", ".join(f"`{name}`" for name in remover.dropped)
        ctx.changed("NM012", f"removed imports the migration left unused: {names}")
    return result


def _dead_registrations(after: ast.AST, used: set[str]) -> frozenset[str]:
    """The registration-only modules imported by their dotted name (`import
    torch_xla.distributed.xla_backend`) whose module nothing reads: their root name stays bound
    by another import where the code still reads it."""
    imported: list[str] = []
    binders: set[str] = set()  # roots other imports bind
    # In a `try` it is part of what the block probes for, which its TODO names: it stays.
    probed = {id(n) for t in all_nodes(after) if isinstance(t, ast.Try) for s in t.body for n in ast.walk(s)}
    for node in all_nodes(after):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in REGISTRATION_ONLY and alias.asname is None and id(node) not in probed:
                    imported.append(alias.name)
                else:
                    binders.add(alias.asname or alias.name.split(".")[0])
    if not imported:
        return frozenset()
    paths = {ast_dotted_name(n) or "" for n in all_nodes(after) if isinstance(n, ast.Attribute)}
    return frozenset(
        name
        for name in imported
        if not any(p == name or p.startswith(f"{name}.") for p in paths)
        and (name.split(".")[0] in binders or name.split(".")[0] not in used)
    )


# -- adding imports, helpers and set-up statements -------------------------------------------


_EMPTY = cst.Module(body=[])


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body
    )


def _starts_group(statement: cst.CSTNode) -> bool:
    """The import follows a blank line: the first of a group."""
    return any(line.comment is None for line in getattr(statement, "leading_lines", ()))


def _is_future_or_docstring(statement: cst.CSTNode, index: int) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    if index == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString | cst.ConcatenatedString):
        return True
    return isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and small.module.value == "__future__"


def _is_from(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.ImportFrom)


def _import_source(module: str, asname: str | None) -> str:
    return f"import {module} as {asname}" if asname else f"import {module}"


def _module_of(statement: cst.SimpleStatementLine) -> str:
    small = statement.body[0]
    assert isinstance(small, cst.Import)
    return _EMPTY.code_for_node(small.names[0].name)


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
    imports: Sequence[tuple[str, str | None]],
    existing: set[tuple[str, str | None]],
    blocks: Sequence[str],
    local: frozenset[str] = frozenset(),
) -> cst.Module:
    """Add imports next to their kind, then `blocks` (helpers, set-up) after the import block.
    Modules in `local` are the folder's own: they go last, in the file's own group of such
    imports if its import block ends with one (a group after a blank line), else in a new one."""
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
    additions = [(m, a) for m, a in dict.fromkeys(imports) if (m, a) not in existing]
    # Never below the first statement that needs them (a notebook imports cell by cell).
    needed = {a or m.split(".")[0] for m, a in additions} | _defined_by(blocks)
    anchor = max(min(anchor, _first_reader(body, needed)), first_code)

    for module_name, asname in sorted(additions, key=lambda ma: (not _is_stdlib(ma[0]), ma[0])):
        line = cst.parse_statement(_import_source(module_name, asname))
        top = module_name.split(".")[0]
        imports_at = [i for i in range(first_code, anchor) if _is_import(body[i])]
        same_kind = [i for i in imports_at if _top_module(body[i]) == top]
        stdlib = [i for i in imports_at if _is_stdlib(_top_module(body[i]))]
        if module_name in local:
            group = [i for i in imports_at if i > imports_at[0] and _starts_group(body[i])] if imports_at else []
            ours = [i for i in imports_at if group and i >= group[-1] and not _is_stdlib(_top_module(body[group[-1]]))]
            # As isort orders a group: `import` lines first, then the `from` imports.
            later = [i for i in ours if _is_from(body[i]) or _module_of(body[i]) > module_name]
            position = later[0] if later else anchor
            if later:
                line = line.with_changes(leading_lines=body[position].leading_lines)
                body[position] = body[position].with_changes(leading_lines=[])
            elif imports_at and not ours:
                line = line.with_changes(leading_lines=[cst.EmptyLine()])
        elif same_kind:
            # As isort orders a group: `import` lines by module, then the `from` imports.
            plain = [i for i in same_kind if not _is_from(body[i])]
            before = [i for i in plain if _module_of(body[i]) <= module_name]
            if before:
                position = before[-1] + 1
            else:
                position = (plain or same_kind)[0]
                line = line.with_changes(leading_lines=body[position].leading_lines)
                body[position] = body[position].with_changes(leading_lines=[])
        elif _is_stdlib(module_name) and stdlib:
            # As isort orders them: `import x` lines alphabetically, then the `from` imports.
            later = [i for i in stdlib if _is_from(body[i]) or _top_module(body[i]) > top]
            position = later[0] if later else stdlib[-1] + 1
            if later:
                line = line.with_changes(leading_lines=body[position].leading_lines)
                body[position] = body[position].with_changes(leading_lines=[])
        elif _is_stdlib(module_name) and imports_at:
            # A new standard-library group above the others, separated by a blank line.
            position = imports_at[0]
            line = line.with_changes(leading_lines=body[position].leading_lines)
            body[position] = body[position].with_changes(leading_lines=[cst.EmptyLine()])
        else:
            # Third-party: alphabetical among the other third-party imports, or after them all.
            others = [i for i in imports_at if not _is_stdlib(_top_module(body[i])) and _top_module(body[i]) != "__future__"]
            later = [i for i in others if _top_module(body[i]) > top]
            position = later[0] if later else anchor
            if later:
                line = line.with_changes(leading_lines=body[position].leading_lines)
                body[position] = body[position].with_changes(leading_lines=[])
            elif not others and position > first_code and _is_import(body[position - 1]) and _is_stdlib(_top_module(body[position - 1])):
                # The first third-party import, right below the standard library: a group of its own.
                line = line.with_changes(leading_lines=[cst.EmptyLine()])
        if not imports_at and position == first_code > 0 and not line.leading_lines:
            line = line.with_changes(leading_lines=[cst.EmptyLine()])  # below the docstring, as the block was
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
                own = list(following.leading_lines)
                blanks = 0
                while blanks < len(own) and own[blanks].comment is None:
                    blanks += 1
                if blanks < 2:  # two blank lines after a definition, as PEP 8 has it
                    body[anchor] = following.with_changes(leading_lines=[blank] * (2 - blanks) + own)
            body[anchor:anchor] = insert
    return module.with_changes(body=body)


# -- from-imports at module level ---------------------------------------------------------------


def _from_module(statement: cst.CSTNode) -> tuple[str, cst.ImportFrom] | None:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None:
        return None
    if isinstance(small.names, cst.ImportStar):
        return None
    module = dotted_name(small.module)
    return (module, small) if module else None


def _top(module: str) -> str:
    return module.split(".")[0]


def _defined_by(blocks: Sequence[str]) -> set[str]:
    """The names module-level `blocks` define (helpers, set-up statements)."""
    names: set[str] = set()
    for source in blocks:
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _first_reader(body: Sequence[cst.CSTNode], names: set[str]) -> int:
    """The index of the first statement, imports aside, that mentions one of `names`."""
    for index, statement in enumerate(body):
        if not _is_import(statement) and names & names_read([statement]):
            return index
    return len(body)


def add_from_imports(module: cst.Module, ctx: MigrationContext) -> cst.Module:
    """Merge the names the codemods asked for into existing `from module import ...` lines, or
    add new lines."""
    migrated = add_from_lines(module, ctx.from_imports)
    ctx.from_imports.clear()
    return migrated


def add_from_lines(module: cst.Module, needed: dict[str, dict[str, None]]) -> cst.Module:
    """Merge `needed` (module -> names) into existing `from module import ...` lines, or add new lines."""
    if not needed:
        return module
    body = list(module.body)
    for module_name in sorted(needed):
        names = list(needed[module_name])
        first_use = _first_reader(body, set(names))
        merged = False
        for i, statement in enumerate(body[:first_use]):
            found = _from_module(statement)
            if found is None or found[0] != module_name:
                continue
            _, small = found
            assert not isinstance(small.names, cst.ImportStar)
            have = {code_of(a.name) for a in small.names if a.asname is None}
            new = [n for n in names if n not in have]
            if new:
                body[i] = _merged_import(statement, small, module_name, new)  # type: ignore[arg-type]
            merged = True
            break
        if merged:
            continue
        line = cst.parse_statement(_from_line(module_name, sorted(names)))
        # After the last import of the same package (`import torch` or `from torch...`), else
        # after the last import.
        position = same = -1
        for i, statement in enumerate(body):
            if isinstance(statement, cst.FunctionDef | cst.ClassDef):
                break
            if _is_import(statement):
                position = i
                if _top_module(statement) == _top(module_name):
                    same = i
        if same >= 0:
            position = same
        if position < 0:
            position = _after_docstring(body) - 1
        position = max(min(position, first_use - 1), _after_docstring(body) - 1)
        body.insert(position + 1, line)
    return module.with_changes(body=body)


def _from_line(module: str, entries: Sequence[str]) -> str:
    """`from module import a, b`, one name a line in parentheses when longer than 100 characters."""
    one_line = f"from {module} import {', '.join(entries)}"
    if len(one_line) <= 100:
        return one_line + "\n"
    return f"from {module} import (\n" + "".join(f"    {e},\n" for e in entries) + ")\n"


def _merged_import(
    statement: cst.SimpleStatementLine, small: cst.ImportFrom, module: str, new: list[str]
) -> cst.SimpleStatementLine:
    assert not isinstance(small.names, cst.ImportStar)
    entries = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for a in small.names]
    if entries == sorted(entries):
        entries = sorted([*entries, *new])
    else:
        entries += new
    parsed = cst.parse_statement(_from_line(module, entries))
    assert isinstance(parsed, cst.SimpleStatementLine)
    return parsed.with_changes(
        leading_lines=statement.leading_lines, trailing_whitespace=statement.trailing_whitespace
    )


def _after_docstring(body: Sequence[cst.CSTNode]) -> int:
    index = 0
    while index < len(body):
        statement = body[index]
        if not isinstance(statement, cst.SimpleStatementLine):
            break
        small = statement.body[0]
        is_doc = (
            index == 0
            and isinstance(small, cst.Expr)
            and isinstance(small.value, cst.SimpleString | cst.ConcatenatedString)
        )
        is_future = (
            isinstance(small, cst.ImportFrom)
            and code_of(small.module or cst.Name("")) == "__future__"
        )
        if not (is_doc or is_future):
            break
        index += 1
    return index


def drop_later_duplicates(module: cst.Module, hoisted: set[tuple[str, str | None]]) -> cst.Module:
    """`import torch.distributed as dist` further down, once the same import was added at the top
    because code above it may run first: the later one only binds the name again. Kept when a
    comment other than `# noqa` rides on it; comment lines above it stay, on the next statement."""
    body = list(module.body)
    seen: set[tuple[str, str | None]] = set()
    kept: list[cst.CSTNode] = []
    carried: list[cst.EmptyLine] = []
    for index, statement in enumerate(body):
        binding = _single_import(statement)
        later = binding in hoisted and binding in seen and index + 1 < len(body)
        if later and isinstance(statement, cst.SimpleStatementLine) and _only_noqa(statement):
            carried.extend(line for line in statement.leading_lines if line.comment is not None)
            continue
        if binding is not None:
            seen.add(binding)
        if carried:
            statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])
            carried = []
        kept.append(statement)
    return module if len(kept) == len(body) else module.with_changes(body=kept)


def _single_import(statement: cst.CSTNode) -> tuple[str, str | None] | None:
    """`(module, alias)` of a statement that is just `import module [as alias]`."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.Import) or len(small.names) != 1:
        return None
    alias = small.names[0]
    asname = alias.asname.name if alias.asname is not None else None
    return _module_of(statement), asname.value if isinstance(asname, cst.Name) else None


def _only_noqa(statement: cst.SimpleStatementLine) -> bool:
    comment = statement.trailing_whitespace.comment
    return comment is None or comment.value.lstrip("# ").lower().startswith("noqa")
