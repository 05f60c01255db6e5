"""Which local names stand for which modules: alias resolution with the stdlib `ast`, for every tool.

It answers "what does `xm.mark_step` mean here?" for every import form seen in real scripts:
`import a.b as x`, `from a import b as x`, `from a.b import f`, imports inside functions and
inside `try` blocks. Built from a whole tree (`from_ast`, about a millisecond a file) or filled
while a tree is walked (`add`), so that a single-pass checker needs no extra pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from neuron_migrate.core.ast_nodes import all_nodes


@dataclass(frozen=True)
class Binding:
    """A name bound by an import statement."""

    local: str  # the name bound in the file ("xm", "torch_xla", "mark_step")
    qualified: str  # what it stands for ("torch_xla.core.xla_model", "torch_xla")
    line: int


@dataclass
class ImportTable:
    bindings: dict[str, str] = field(default_factory=dict)  # local -> qualified (last one wins)
    all_bindings: list[Binding] = field(default_factory=list)
    # Names read as modules even where the file does not import them (a checker's guess for
    # snippets: `np` is numpy); empty for rewriting, which must never guess.
    conventions: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_ast(cls, tree: ast.AST) -> ImportTable:
        table = cls()
        for node in all_nodes(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                table.add(node)
        return table

    def add(self, node: ast.Import | ast.ImportFrom) -> None:
        """Record the names one import statement binds."""
        if node.__class__ is ast.Import:
            for alias in node.names:
                if alias.asname:
                    self._bind(alias.asname, alias.name, node.lineno)
                else:
                    top = alias.name.split(".")[0]
                    self._bind(top, top, node.lineno)
        elif node.module and not node.level:  # type: ignore[union-attr]
            for alias in node.names:
                if alias.name != "*":
                    self._bind(alias.asname or alias.name, f"{node.module}.{alias.name}", node.lineno)  # type: ignore[union-attr]

    def _bind(self, local: str, qualified: str, line: int) -> None:
        # A plain `import torch` must not shadow a more specific `import torch.distributed as torch`.
        self.bindings.setdefault(local, qualified)
        if local != qualified:
            self.bindings[local] = qualified
        self.all_bindings.append(Binding(local, qualified, line))

    def resolve_dotted(self, dotted: str) -> str | None:
        """`xm.mark_step` -> `torch_xla.core.xla_model.mark_step`; None when the head is no import."""
        head, _, rest = dotted.partition(".")
        base = self.bindings.get(head) or self.conventions.get(head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def resolve(self, node: ast.AST) -> str | None:
        """The qualified name of an `ast` Name/Attribute chain, or None."""
        name = ast_dotted_name(node)
        return self.resolve_dotted(name) if name else None

    def local_for(self, qualified: str) -> str | None:
        """How this file already spells `qualified` (reuse an alias before adding an import)."""
        for local, target in self.bindings.items():
            if target == qualified:
                return local
        for local, target in self.conventions.items():
            if target == qualified and local not in self.bindings:
                return local
        return None

    def names_under(self, prefixes: Iterable[str]) -> set[str]:
        """Local names bound to anything inside the given packages."""
        prefixes = tuple(prefixes)
        return {
            local
            for local, target in self.bindings.items()
            if any(target == p or target.startswith(p + ".") for p in prefixes)
        }


def ast_dotted_name(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None (hot in the checker: no isinstance)."""
    parts = []
    while node.__class__ is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if node.__class__ is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def qualified_names_used(tree: ast.AST, table: ImportTable) -> set[str]:
    """Every qualified name the file refers to through its imports (for cheap applicability tests)."""
    used: set[str] = set()
    for node in all_nodes(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            dotted = ast_dotted_name(node)
            if dotted:
                resolved = table.resolve_dotted(dotted)
                if resolved:
                    used.add(resolved)
    for binding in table.all_bindings:
        used.add(binding.qualified)
    return used


# Nodes under which a call may not run: a branch, a handler, a short-circuit, a loop body.
_CONDITIONAL = (
    ast.If, ast.IfExp, ast.Match, ast.ExceptHandler, ast.BoolOp, ast.While, ast.For, ast.AsyncFor,
    ast.comprehension, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
)


def unconditional_calls(tree: ast.AST, table: ImportTable) -> set[str]:
    """Qualified names called at least once where the enclosing function (or the module), once
    running, surely makes the call: not under an `if`, a loop, a handler or a short-circuit."""
    return _sure_calls(tree, table)


def surely_called_by(tree: ast.Module, table: ImportTable) -> dict[str, frozenset[str]]:
    """Per module-level function (and "" for the module's own statements): the qualified names
    it surely calls whenever it runs, through the module-level functions it surely calls too."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    outside = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    bodies = {"": outside, **{name: function.body for name, function in functions.items()}}
    closed = {
        name: _sure_calls(ast.Module(body=body, type_ignores=[]), table, local=set(functions))
        for name, body in bodies.items()
    }
    changed = True
    while changed:
        changed = False
        for calls in closed.values():
            more = set().union(*(closed[f] for f in calls & functions.keys()))
            if not more <= calls:
                calls |= more
                changed = True
    return {name: frozenset(calls) for name, calls in closed.items()}


def _unless_initialized(node: ast.If) -> bool:
    """`if not <...>is_initialized():` with no `else`: what it runs is what makes it true."""
    test = node.test
    return (
        not node.orelse
        and isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Call)
        and (ast_dotted_name(test.operand.func) or "").endswith("is_initialized")
    )


def _sure_calls(tree: ast.AST, table: ImportTable, local: set[str] | None = None) -> set[str]:
    """The calls `tree` surely makes once it runs. With `local` (the module's functions), only
    its own body counts, not the functions and classes it defines, and calls of those local
    functions count by their plain names."""
    called: set[str] = set()

    def walk(node: ast.AST, into: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if local is not None and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if isinstance(child, ast.If) and (is_main_guard(child.test) or _unless_initialized(child)):
                # A script's run; or `if not model_parallel_is_initialized(): initialize(...)`,
                # after which the set-up is made either way.
                walk(ast.Module(body=child.body, type_ignores=[]), into)
                continue
            if isinstance(child, _CONDITIONAL):
                if isinstance(child, ast.If) and child.orelse:
                    # `if a: init(x) else: init(y)`: made on either branch.
                    into |= sure(child.body) & sure(child.orelse)
                if _may_leave(child):
                    return  # `if not args.ddp: return train()`: what follows runs only sometimes
                continue
            if isinstance(child, ast.Call):
                dotted = ast_dotted_name(child.func)
                resolved = table.resolve_dotted(dotted) if dotted else None
                if resolved:
                    into.add(resolved)
                elif local is not None and dotted in local:
                    into.add(dotted)
            walk(child, into)

    def sure(body: list[ast.stmt]) -> set[str]:
        found: set[str] = set()
        walk(ast.Module(body=body, type_ignores=[]), found)
        return found

    walk(tree, called)
    return called


def is_main_guard(test: ast.AST) -> bool:
    """`__name__ == "__main__"`: the statements under it run whenever the file runs as a script."""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _may_leave(node: ast.AST) -> bool:
    """Can `node` end its function (or the module's run) early: a `return` or `raise` inside it,
    not inside a function of its own?"""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Return | ast.Raise):
            return True
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef) and _may_leave(child):
            return True
    return False


# Calls that import a module named by a string at run time.
RUN_TIME_IMPORTS = ("importlib.import_module", "__import__")


def string_prefix(node: ast.AST) -> str | None:
    """The literal text a string expression starts with: `"a.b"`, `"a." + x`, `f"a.{x}"`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return string_prefix(node.left)
    if isinstance(node, ast.JoinedStr) and node.values:
        return string_prefix(node.values[0])
    return None


_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\.?")


def modules_out_of_sight(tree: ast.AST, table: ImportTable) -> set[str]:
    """Modules a file reaches without binding names the alias table can follow.

    `from m import *` binds names nobody can list without importing `m`;
    `importlib.import_module("m")` / `__import__("m")` import a module named by a string; and a
    string that spells a dotted path (`"m.f"`: a `mock.patch` target, a `sys.modules` key, an
    `eval`) names one.
    """
    found: set[str] = set()
    for node in all_nodes(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _DOTTED_PATH.fullmatch(node.value):
                found.add(node.value.rstrip("."))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if any(alias.name == "*" for alias in node.names):
                found.add(node.module)
        elif isinstance(node, ast.Call) and node.args:
            dotted = ast_dotted_name(node.func)
            name = table.resolve_dotted(dotted) if dotted else None
            if name is None and dotted == "__import__" and "__import__" not in table.bindings:
                name = "__import__"
            prefix = string_prefix(node.args[0]) if name in RUN_TIME_IMPORTS else None
            if prefix and prefix.strip("."):
                found.add(prefix.strip("."))
    return found
