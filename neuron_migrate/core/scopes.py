"""Which binding a name refers to at each place in a file: one `ast` walk, scope by scope.

A file-wide alias table cannot tell `def f(xm): xm.mark_step()` from the module's `xm`, nor see
that a function's `dist = torch.cdist(a, b)` hides `torch.distributed`. Python looks a name up
in the innermost scope that binds it (a function, lambda, comprehension or class body, then the
module), and a class body is not seen from the functions inside it; this table does the same.
Scopes and statements are numbered in the order a LibCST traversal meets them, so a transformer
can follow along without position metadata.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from neuron_migrate.core.names import ImportTable

COMPREHENSIONS = ("ListComp", "SetComp", "DictComp", "GeneratorExp")

# Statement kinds, spelled as LibCST names the node that holds the statement.
_COMPOUND: dict[type, str] = {
    ast.FunctionDef: "FunctionDef",
    ast.AsyncFunctionDef: "FunctionDef",
    ast.ClassDef: "ClassDef",
    ast.If: "If",
    ast.For: "For",
    ast.AsyncFor: "For",
    ast.While: "While",
    ast.With: "With",
    ast.AsyncWith: "With",
    ast.Try: "Try",
    ast.Match: "Match",
}
if hasattr(ast, "TryStar"):  # Python 3.11+
    _COMPOUND[ast.TryStar] = "TryStar"
SIMPLE = "SimpleStatementLine"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Imported:
    """One import statement's binding of a name."""

    qualified: str  # what the name stands for ("torch.distributed")
    statement: int  # the import statement's number (see `ScopeTable.statements`)
    unconditional: bool  # runs whenever its scope does: not under `if`, a loop, `except` or `else`
    block: int  # the block (body) it stands in, numbered as `ScopeTable.block_parents`


@dataclass
class Bound:
    """How one scope binds one name."""

    imports: list[Imported] = field(default_factory=list)
    others: int = 0  # assignments, parameters, defs, loop and `with` targets: anything but an import
    fallbacks: int = 0  # `name = None`: the stand-in for an import that failed, never a module
    deleted: bool = False  # a `del name` in the scope: the name may be unbound anywhere after

    @property
    def imported_as(self) -> str | None:
        """The one thing this name is imported as here, if nothing else binds it."""
        targets = {i.qualified for i in self.imports}
        return next(iter(targets)) if len(targets) == 1 and not self.others else None

    @property
    def count(self) -> int:
        """How many statements bind the name (1: it holds one value for the whole scope)."""
        return len(self.imports) + self.others + self.fallbacks


@dataclass(eq=False)
class Scope:
    kind: str  # "Module", "FunctionDef", "Lambda", "ClassDef" or one of COMPREHENSIONS
    parent: Scope | None
    start: tuple[int, int, int, int] = (0, 0, 0, 0)  # where its node begins (and ends, negated)
    bound: dict[str, Bound] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)  # names read (or deleted) in this scope itself
    statement: int = -1  # the statement that creates it (a `def`, or the one holding a lambda)
    name: str = ""  # a `def`'s or `class`'s name

    @property
    def qualified_name(self) -> str:
        """`Outer.method.inner`: which function this is, however the code around it moved."""
        names = []
        scope: Scope | None = self
        while scope is not None and scope.kind != "Module":
            names.append(scope.name or f"<{scope.kind.lower()}>")
            scope = scope.parent
        return ".".join(reversed(names))

    @property
    def module(self) -> Scope:
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def enclosing(self) -> Scope | None:
        """The next scope a name is looked up in: class bodies do not enclose what they hold."""
        scope = self.parent
        while scope is not None and scope.kind == "ClassDef":
            scope = scope.parent
        return scope

    def lookup(self, name: str) -> Scope | None:
        """The scope whose binding `name` refers to here; None for builtins and undefined names."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.globals:
                return scope.module if name in scope.module.bound else None
            if name in scope.bound and name not in scope.nonlocals:
                return scope
            scope = scope.enclosing()
        return None

    def meaning(self, name: str) -> str | None:
        """What `name` was imported as, where its binding here is that import and nothing else."""
        scope = self.lookup(name)
        return scope.bound[name].imported_as if scope is not None else None

    def resolve_dotted(self, dotted: str) -> str | None:
        """`xm.mark_step` -> `torch_xla.core.xla_model.mark_step` here; None if the head is no import."""
        head, _, rest = dotted.partition(".")
        base = self.meaning(head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def chain(self) -> Iterable[Scope]:
        """This scope, then every scope a name is looked up in after it."""
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.enclosing()


@dataclass
class ScopeTable:
    module: Scope
    scopes: list[Scope]  # every scope but the module, in source order
    statements: list[tuple[str, int]]  # per statement as LibCST holds them: (kind, small statements)
    names: frozenset[str]  # every identifier the file binds or reads, in any scope
    statement_blocks: list[int]  # per statement: the block (body) it stands in
    block_parents: list[int]  # per block: the block holding its statement (-1: none)
    module_reads: dict[str, int] = field(default_factory=dict)  # module-level name -> first statement reading it
    module_calls: dict[str, int] = field(default_factory=dict)  # the same, read in a call or a decorator
    definitions: frozenset[str] = frozenset()  # names of the module's own functions and classes

    @property
    def first_definition(self) -> int:
        """The module's first `def` or `class` statement, above which set-up code is added."""
        return next(
            (
                number
                for number, ((kind, _), block) in enumerate(zip(self.statements, self.statement_blocks, strict=False))
                if block == 0 and kind in ("FunctionDef", "ClassDef")
            ),
            len(self.statements),
        )

    def first_read(self, names: Iterable[str], in_call: bool = False) -> int:
        """The first module-level statement that reads one of `names` (in a call: that calls with
        one of them), past the end where none does."""
        reads = self.module_calls if in_call else self.module_reads
        return min((reads[n] for n in names if n in reads), default=len(self.statements))

    def imports_bound_for(self, scope: Scope) -> int:
        """Module-level imports before this statement have run whenever code in `scope` (a function,
        or a lambda) runs: those before its `def`, or before the module first reads one of its own
        functions or classes (a call, or a callback handed to a launcher, may run any of them)."""
        outer = scope
        while outer.parent is not None and outer.parent.parent is not None:
            outer = outer.parent
        return max(outer.statement, self.first_read(self.definitions))

    def runs_before(self, imported: Imported, statement: int) -> bool:
        """Has `imported` run whenever `statement` runs? It comes first, and either runs whenever
        its scope does or stands in a block that holds the statement."""
        if imported.statement >= statement:
            return False
        if imported.unconditional:
            return True
        block = self.statement_blocks[statement] if statement < len(self.statement_blocks) else -1
        while block >= 0:
            if block == imported.block:
                return True
            block = self.block_parents[block]
        return False

    def innermost(self, line: int, column: int) -> Scope:
        """The scope that code at this position (an `ast` line and column) runs in."""
        found = self.module
        for scope in self.scopes:
            first = scope.start[:2]
            if first > (line, column):
                break
            if (line, column) < (-scope.start[2], -scope.start[3]):
                found = scope
        return found

    def binding_at(self, node: ast.AST, name: str) -> tuple[Scope, str] | None:
        """Which variable `name` is where `node` stands (as `MigrationContext.binding_key` says
        during a rewrite): equal keys mean the same variable."""
        owner = self.innermost(node.lineno, node.col_offset).lookup(name)  # type: ignore[attr-defined]
        return (owner, name) if owner is not None and not owner.bound[name].deleted else None

    @classmethod
    def from_ast(cls, tree: ast.Module, source: str) -> ScopeTable:
        return _Builder(source).build(tree)

    def read_bindings(self) -> set[tuple[Scope, str]]:
        """The bindings some code reads, as (scope that binds, name): an import not among them is dead."""
        return {
            (owner, name)
            for scope in (self.module, *self.scopes)
            for name in scope.reads
            if (owner := scope.lookup(name)) is not None
        }

    def module_imports(self) -> set[tuple[str, str | None]]:
        """The module-level imports as (module, alias or None), as `import module as alias` says it."""
        found: set[tuple[str, str | None]] = set()
        for name, bound in self.module.bound.items():
            for imported in bound.imports:
                found.add((imported.qualified, None if name == imported.qualified else name))
        return found


def _simple(node: ast.stmt) -> bool:
    return node.__class__ not in _COMPOUND


class _Builder:
    """One walk of the tree: statements recursively (their nesting is shallow), expressions with
    an explicit stack (a long `a + b + ...` nests deeper than Python's recursion allows)."""

    def __init__(self, source: str) -> None:
        self.lines = _LINE_BREAK.split(source)
        self.module = Scope("Module", None)
        self.scope = self.module
        self.scopes: list[Scope] = []
        self.statements: list[tuple[str, int]] = []
        self.statement = -1
        self.conditional = 0  # how many `if`/loop/`except`/`else` bodies enclose the statement
        self.names: set[str] = set()
        self.pending_nonlocal: list[tuple[Scope, str, Bound]] = []
        self.block_parents: list[int] = []
        self.statement_blocks: list[int] = []
        self.current_block = -1
        self.deleted: list[tuple[Scope, str]] = []
        self.module_reads: dict[str, int] = {}
        self.module_calls: dict[str, int] = {}
        self.calls_seen: set[int] = set()  # calls inside a module-level call already recorded
        self.definitions: set[str] = set()

    def build(self, tree: ast.Module) -> ScopeTable:
        self.block(tree.body)
        for scope, name, bound in self.pending_nonlocal:
            # A `nonlocal` name is bound in the enclosing function that binds it.
            owner = scope.enclosing()
            target = owner.lookup(name) if owner is not None else None
            into = (target or scope).bound.setdefault(name, Bound())
            into.imports += bound.imports
            into.others += bound.others
            into.fallbacks += bound.fallbacks
        for scope, name in self.deleted:
            owner = scope.lookup(name)
            if owner is not None:
                owner.bound[name].deleted = True
        scopes = sorted(self.scopes, key=lambda s: s.start)
        return ScopeTable(
            self.module,
            scopes,
            self.statements,
            frozenset(self.names),
            self.statement_blocks,
            self.block_parents,
            self.module_reads,
            self.module_calls,
            frozenset(self.definitions),
        )

    # -- bindings -------------------------------------------------------------------------------
    def bind(self, scope: Scope, name: str, imported: str | None = None, fallback: bool = False) -> None:
        self.names.add(name)
        if name in scope.globals:
            scope = scope.module
        if name in scope.nonlocals:
            bound = Bound()
            self.pending_nonlocal.append((scope, name, bound))
        else:
            bound = scope.bound.setdefault(name, Bound())
        if imported is not None:
            bound.imports.append(Imported(imported, self.statement, self.conditional == 0, self.current_block))
        elif fallback:
            bound.fallbacks += 1
        else:
            bound.others += 1

    def new_scope(self, kind: str, node: ast.AST, parent: Scope) -> Scope:
        start = (node.lineno, node.col_offset, -(node.end_lineno or 0), -(node.end_col_offset or 0))  # type: ignore[attr-defined]
        decorators = getattr(node, "decorator_list", None)
        if decorators:  # LibCST's node begins at the first `@`
            start = (decorators[0].lineno, -1, start[2], start[3])
        scope = Scope(kind, parent, start, statement=self.statement, name=getattr(node, "name", ""))
        self.scopes.append(scope)
        return scope

    def parameters(self, args: ast.arguments, scope: Scope) -> None:
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                self.bind(scope, arg.arg)

    # -- statements -----------------------------------------------------------------------------
    def starts_line(self, node: ast.stmt) -> bool:
        line = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""
        return not line.encode("utf-8", "surrogatepass")[: node.col_offset].strip()

    def block(self, body: list[ast.stmt], conditional: int = 0) -> None:
        """A body: an indented block numbers its statements, a one-line suite belongs to its header."""
        self.conditional += conditional
        header, outer = self.statement, self.current_block
        self.current_block = len(self.block_parents)
        self.block_parents.append(outer)
        numbered = bool(body) and self.starts_line(body[0])
        previous: ast.stmt | None = None
        for node in body:
            if numbered:
                same_line = previous is not None and _simple(previous) and node.lineno == previous.end_lineno
                if same_line and _simple(node):  # `a = 1; b = 2` is one LibCST statement
                    kind, count = self.statements[-1]
                    self.statements[-1] = (kind, count + 1)
                else:
                    self.statements.append((_COMPOUND.get(node.__class__, SIMPLE), 1))
                    self.statement_blocks.append(self.current_block)
                self.statement = len(self.statements) - 1
            self.stmt(node)
            previous = node
        self.statement, self.current_block = header, outer
        self.conditional -= conditional

    def stmt(self, node: ast.stmt) -> None:
        cls = node.__class__
        if cls is ast.FunctionDef or cls is ast.AsyncFunctionDef or cls is ast.ClassDef:
            self.definition(node)  # type: ignore[arg-type]
        elif cls is ast.Import or cls is ast.ImportFrom:
            self.import_(node)  # type: ignore[arg-type]
        elif cls is ast.Global:
            self.scope.globals.update(node.names)  # type: ignore[attr-defined]
            self.names.update(node.names)  # type: ignore[attr-defined]
        elif cls is ast.Nonlocal:
            self.scope.nonlocals.update(node.names)  # type: ignore[attr-defined]
            self.names.update(node.names)  # type: ignore[attr-defined]
        elif cls is ast.Assign and isinstance(node.value, ast.Constant) and node.value.value is None:  # type: ignore[attr-defined]
            for target in node.targets:  # type: ignore[attr-defined]
                if isinstance(target, ast.Name):
                    self.bind(self.scope, target.id, fallback=True)
                else:
                    self.expressions([target])
        elif cls in _COMPOUND:
            self.compound(node)
        else:
            self.expressions(list(ast.iter_child_nodes(node)))

    def definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        outer = list(node.decorator_list)
        if isinstance(node, ast.ClassDef):
            outer += [*node.bases, *(k.value for k in node.keywords)]
        else:
            args = node.args
            outer += [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
            every = (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
            outer += [a.annotation for a in every if a is not None and a.annotation is not None]
            if node.returns is not None:
                outer.append(node.returns)
        if self.scope is self.module:
            for decorator in node.decorator_list:
                self.record_call(decorator)
        self.expressions(outer)
        self.bind(self.scope, node.name)
        if self.scope is self.module:
            self.definitions.add(node.name)
        kind = "ClassDef" if isinstance(node, ast.ClassDef) else "FunctionDef"
        scope = self.new_scope(kind, node, self.scope)
        if not isinstance(node, ast.ClassDef):
            self.parameters(node.args, scope)
        saved = self.scope, self.conditional
        self.scope, self.conditional = scope, 0
        self.block(node.body)
        self.scope, self.conditional = saved

    def import_(self, node: ast.Import | ast.ImportFrom) -> None:
        table = ImportTable()
        table.add(node)
        for binding in table.all_bindings:
            self.bind(self.scope, binding.local, imported=binding.qualified)
        if isinstance(node, ast.ImportFrom) and (node.level or not node.module):
            for alias in node.names:  # relative: the package's own modules, never the old stack
                self.bind(self.scope, alias.asname or alias.name)

    def compound(self, node: ast.stmt) -> None:
        if isinstance(node, ast.If | ast.While):
            self.expressions([node.test])
            self.block(node.body, 1)
            self.block(node.orelse, 1)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.expressions([node.target, node.iter])
            self.block(node.body, 1)
            self.block(node.orelse, 1)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self.expressions([item.context_expr, *([item.optional_vars] if item.optional_vars else [])])
            self.block(node.body)
        elif isinstance(node, ast.Match):
            self.expressions([node.subject])
            for case in node.cases:
                self.expressions([case.pattern, *([case.guard] if case.guard else [])])
                self.block(case.body, 1)
        else:  # try / try-star
            self.block(node.body)  # type: ignore[attr-defined]
            for handler in node.handlers:  # type: ignore[attr-defined]
                if handler.type is not None:
                    self.expressions([handler.type])
                if handler.name:
                    self.bind(self.scope, handler.name)
                self.block(handler.body, 1)
            self.block(node.orelse, 1)  # type: ignore[attr-defined]
            self.block(node.finalbody)  # type: ignore[attr-defined]

    # -- expressions ----------------------------------------------------------------------------
    def expressions(self, nodes: Sequence[ast.AST]) -> None:
        stack = [(node, self.scope) for node in reversed(nodes)]
        while stack:
            node, scope = stack.pop()
            cls = node.__class__
            if cls is ast.Name:
                self.names.add(node.id)  # type: ignore[attr-defined]
                if node.ctx.__class__ is ast.Store:  # type: ignore[attr-defined]
                    self.bind(scope, node.id)  # type: ignore[attr-defined]
                else:
                    scope.reads.add(node.id)  # type: ignore[attr-defined]
                    if scope is self.module:
                        self.module_reads.setdefault(node.id, self.statement)  # type: ignore[attr-defined]
                    if node.ctx.__class__ is ast.Del:  # type: ignore[attr-defined]
                        self.deleted.append((scope, node.id))  # type: ignore[attr-defined]
            elif cls is ast.Call and scope is self.module and id(node) not in self.calls_seen:
                self.record_call(node)
                stack += [(child, scope) for child in reversed(list(ast.iter_child_nodes(node)))]
            elif cls is ast.Lambda:
                args = node.args  # type: ignore[attr-defined]
                inner = self.new_scope("Lambda", node, scope)
                self.parameters(args, inner)
                stack.append((node.body, inner))  # type: ignore[attr-defined]
                stack += [(d, scope) for d in (*args.defaults, *args.kw_defaults) if d is not None]
            elif cls.__name__ in COMPREHENSIONS:
                stack += self.comprehension(node, scope)
            elif cls is ast.NamedExpr:
                owner = scope
                while owner.kind in COMPREHENSIONS and owner.parent is not None:
                    owner = owner.parent
                self.bind(owner, node.target.id)  # type: ignore[attr-defined]
                stack.append((node.value, scope))  # type: ignore[attr-defined]
            else:
                if cls is ast.MatchAs or cls is ast.MatchStar:
                    if node.name:  # type: ignore[attr-defined]
                        self.bind(scope, node.name)  # type: ignore[attr-defined]
                elif cls is ast.MatchMapping and node.rest:  # type: ignore[attr-defined]
                    self.bind(scope, node.rest)  # type: ignore[attr-defined]
                stack += [(child, scope) for child in reversed(list(ast.iter_child_nodes(node)))]

    def record_call(self, node: ast.AST) -> None:
        """The names a module-level call (or decorator) reads, callbacks it is handed included."""
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Store):
                self.module_calls.setdefault(inner.id, self.statement)
            elif isinstance(inner, ast.Call):
                self.calls_seen.add(id(inner))

    def comprehension(self, node: ast.AST, scope: Scope) -> list[tuple[ast.AST, Scope]]:
        """What to walk next: the first iterable in the enclosing scope, the rest inside."""
        inner = self.new_scope(node.__class__.__name__, node, scope)
        generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        todo: list[tuple[ast.AST, Scope]] = [(generators[0].iter, scope)]
        for number, generator in enumerate(generators):
            todo.append((generator.target, inner))
            if number:
                todo.append((generator.iter, inner))
            todo += [(condition, inner) for condition in generator.ifs]
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        todo += [(part, inner) for part in parts]
        return todo
