"""What every codemod shares: the target spellings, the per-file context, and the base class.

A codemod is a LibCST transformer that only writes `leave_*` methods; the dispatcher runs all
selected codemods in a single traversal. Codemods never edit statements around them directly:
they ask the context to remove a statement, insert statements before or after the current one,
attach a TODO, need an import or a helper. The dispatcher applies those requests where the tree
allows it, so comments survive and blocks never end up empty.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.cst_children import INERT, PUNCTUATION, children
from neuron_migrate.core.names import ImportTable
from neuron_migrate.core.oldstack import OPTIMUM_NEURON
from neuron_migrate.core.scopes import Scope, ScopeTable
from neuron_migrate.rewrite.results import Change, Note
from neuron_migrate.rewrite.spelling import State, renamed, state, visible_import

if TYPE_CHECKING:
    from neuron_migrate.rewrite.codemods.nxd_program import MeshProgram

_EMPTY = cst.Module(body=[])
N = TypeVar("N", bound=cst.CSTNode)
S = TypeVar("S")


def star_import_todo(module: str) -> str:
    """The TODO at `from <old-stack module> import *`, whose names no rewrite can follow."""
    return (
        f"`from {module} import *` hides the names it brings, so none is migrated: import each by name and migrate again"
    )


def dotted_name(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a LibCST Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def names_in(source: str) -> frozenset[str]:
    """Every name `source` binds or reads, in any scope (a new module-level name must avoid them)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    for node in all_nodes(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
    return frozenset(names)


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def expr(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


def stmt(source: str) -> cst.BaseStatement:
    return cst.parse_statement(source)


def arg_value(call: cst.Call, position: int | None, keyword: str | None) -> cst.Arg | None:
    """The argument given by keyword, or at `position` among the positional ones."""
    if keyword is not None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return arg
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position < len(positional):
            return positional[position]
    return None


def has_star_args(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def without_args(call: cst.Call, keywords: Sequence[str]) -> cst.Call:
    kept = [a for a in call.args if a.keyword is None or a.keyword.value not in keywords]
    return call.with_changes(args=fix_trailing_comma(kept))


def fix_trailing_comma(args: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Drop the comma after the new last argument, unless the call was laid out one per line."""
    args = list(args)
    if args and isinstance(args[-1].comma, cst.Comma):
        comma = args[-1].comma
        if not (isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace)):
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


_NO_SPACE = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, spaced as keyword arguments are."""
    return cst.Arg(keyword=cst.Name(name), value=value, equal=_NO_SPACE)


def append_arg(call: cst.Call, args: Sequence[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """`args` with `new` after them, keeping a one-per-line layout."""
    args = list(args)
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma) and isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace):
        separator = args[-2].comma if len(args) > 1 else cst.Comma(whitespace_after=call.whitespace_before_args)
        return [*args[:-1], last.with_changes(comma=separator), new.with_changes(comma=last.comma)]
    if not isinstance(last.comma, cst.Comma) and isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
        # One per line, `)` on a line of its own: the new argument goes on a line of its own
        # before it, and the closing layout moves to it.
        before = args[-2].comma.whitespace_after if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else call.whitespace_before_args
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=before), whitespace_after_arg=cst.SimpleWhitespace(""))
        return [*args, new.with_changes(whitespace_after_arg=last.whitespace_after_arg)]
    if not isinstance(last.comma, cst.Comma):
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return [*args, new]


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain (non-f, non-bytes) string literal."""
    if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_docstring(statement: cst.BaseStatement) -> bool:
    """A statement that is only a string: a module's, class's or function's docstring when first."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def is_main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`: what is under it runs whenever the file runs as a script."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    target = test.comparisons[0]
    return (
        isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and isinstance(target.operator, cst.Equal)
        and string_value(target.comparator) == "__main__"
    )


def _header_comment(block: cst.BaseSuite) -> list[cst.EmptyLine]:
    """The comment after `if test:` or `else:`, as a line of its own."""
    if isinstance(block, cst.IndentedBlock) and block.header.comment is not None:
        return [cst.EmptyLine(comment=block.header.comment)]
    return []


def branch_taken(ctx: MigrationContext, node: cst.If, taken: bool) -> Any:
    """What stands in place of an `if` whose test is known to be `taken`: the statements of the
    branch it takes (the comments above the `if` and on its header kept above them), the `elif`
    that follows, or nothing."""
    leading = list(node.leading_lines)
    branch: cst.BaseSuite | None = node.body
    if not taken:
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            return orelse.with_changes(leading_lines=[*leading, *orelse.leading_lines])
        branch = orelse.body if orelse is not None else None
        leading += [*orelse.leading_lines, *_header_comment(orelse.body)] if orelse is not None else []
    else:
        leading += _header_comment(node.body)
    statements: list[Any] = list(branch.body) if branch is not None else []
    if isinstance(branch, cst.SimpleStatementSuite):  # `if test: a = 1` on one line
        statements = [cst.SimpleStatementLine(body=branch.body)]
    if all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(p, cst.Pass) for p in s.body) for s in statements):
        # Nothing runs (the migration may have emptied the branch): what it said went with it.
        return ctx.remove(node)
    statements[0] = statements[0].with_changes(leading_lines=[*leading, *statements[0].leading_lines])
    return cst.FlattenSentinel(statements)


def elif_taken(node: cst.If, taken: bool) -> Any:
    """What stands in place of an `elif` whose test is known: an `else:` with its body, or the
    clause that follows it (none at all)."""
    if taken:
        return cst.Else(body=node.body, leading_lines=node.leading_lines)
    if node.orelse is None:
        return cst.RemovalSentinel.REMOVE
    return node.orelse.with_changes(leading_lines=[*node.leading_lines, *node.orelse.leading_lines])


def with_string_value(node: cst.SimpleString, value: str) -> cst.SimpleString:
    quote = node.quote
    return node.with_changes(value=f"{node.prefix}{quote}{value}{quote}")


_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.", re.MULTILINE)


def _module_path(path: Path) -> str:
    """`pkg.sub.mod` for `pkg/sub/mod.py`: the packages above it are the folders with an
    `__init__.py` (`<package>` where none can be seen)."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts) if len(parts) > 1 else f"<package>.{path.stem}"


# The file changes its own environment: a variable read once may differ from one read later.
_WRITES_ENVIRONMENT = re.compile(r"environ\s*\[[^\]]*\]\s*=|environ\.(?:update|setdefault|pop|clear)\b|putenv|unsetenv")


@dataclass(frozen=True)
class Target:
    """How the migrated code names the device, the compile backend and the process group."""

    name: str  # "portable" | "neuron"

    @property
    def neuron(self) -> bool:
        return self.name == "neuron"

    def device(self, torch: str = "torch") -> str:
        if self.neuron:
            return f'{torch}.device("neuron")'
        return f'{torch}.accelerator.current_accelerator(check_available=True) or {torch}.device("cpu")'

    def device_type(self, torch: str = "torch") -> str:
        if self.neuron:
            return '"neuron"'
        return f"({self.device(torch)}).type"


PORTABLE = Target("portable")
NEURON = Target("neuron")
TARGETS = {"portable": PORTABLE, "neuron": NEURON}


@dataclass
class FileFacts:
    """File-wide facts some rewrites depend on, computed once before rewriting."""

    used: set[str] = field(default_factory=set)  # qualified names the file refers to
    # Qualified names some function (or the module) surely calls once it runs: no branch decides.
    always_called: set[str] = field(default_factory=set)
    # Per module-level function ("" for the module's own statements): what it surely calls.
    surely_called_by: dict[str, frozenset[str]] = field(default_factory=dict)
    # XLA variables the process running the file starts with, where its launcher is known (a
    # notebook's `%env`, the `!` command that runs a `%%writefile` script): name -> value.
    environment: dict[str, str] = field(default_factory=dict)

    def uses(self, *prefixes: str) -> bool:
        return any(
            name == prefix or name.startswith(prefix + ".") for prefix in prefixes for name in self.used
        )

    @property
    def launches_processes(self) -> bool:
        return self.uses(
            "torch_xla.distributed.xla_multiprocessing.spawn",
            "torch_xla.launch",
        )

    @property
    def inits_process_group(self) -> bool:
        """Some function of the file (or the module) creates the process group whenever it runs."""
        return "torch.distributed.init_process_group" in self.always_called

    @property
    def inits_process_group_sometimes(self) -> bool:
        """The file creates the process group only on some runs (`if args.ddp: ...`)."""
        return self.uses("torch.distributed.init_process_group") and not self.inits_process_group

    @property
    def distributed(self) -> bool:
        """The file sets up the process group itself for every run (or will, once migrated: a
        launch becomes an entry point that creates it)."""
        return self.launches_processes or self.inits_process_group

    def no_group_warning(self) -> str:
        """What to tell a person where ranks and collectives may run without a process group."""
        if self.inits_process_group_sometimes:
            return (
                "`init_process_group` runs only on some runs: create the process group on every run, or the "
                "others act as one process"
            )
        return (
            "no process group is created here: under torchrun call `dist.init_process_group()` at start-up, "
            "or it acts as one process"
        )


@dataclass
class Frame:
    """Requests made while inside one statement."""

    todos: list[tuple[str, str]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # plain comments, e.g. a launch command
    before: list[cst.BaseStatement] = field(default_factory=list)
    after: list[cst.BaseStatement] = field(default_factory=list)
    statement: int = -1  # its number in the file's `ScopeTable.statements`
    changes_before: int = 0  # how many changes the file had when the statement began
    # Imports of this scope that come only after this statement: import line -> the name it
    # binds, repeated (at the top of a function, or above a module-level statement) if the
    # rewritten statement reads the name.
    late_imports: dict[str, str] = field(default_factory=dict)
    explained: set[str] = field(default_factory=set)  # names a codemod's own TODO here speaks of


@dataclass
class MigrationContext:
    target: Target
    imports: ImportTable
    facts: FileFacts
    path: str = ""
    source: str = ""
    old_stack_file: bool = True  # the file imports an old-stack package
    changes: list[Change] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    # Statements to drop, by id; the values keep the nodes alive so an id is never reused.
    removed: dict[int, cst.CSTNode] = field(default_factory=dict)
    new_imports: dict[str, str | None] = field(default_factory=dict)  # module -> asname
    from_imports: dict[str, dict[str, None]] = field(default_factory=dict)  # module -> names, in order
    provided: set[str] = field(default_factory=set)  # qualified names an import rewritten in place binds
    rebound: set[str] = field(default_factory=set)  # local names an old-stack import, rewritten in place, binds natively
    # Per-file state of a codemod family, one instance per class (see `shared`).
    family_state: dict[type, Any] = field(default_factory=dict)
    helpers: dict[str, str] = field(default_factory=dict)  # name -> source of a module-level def
    module_prologue: list[str] = field(default_factory=list)  # statements placed after imports
    grouped: dict[int, cst.CSTNode] = field(default_factory=dict)  # parentheses we added, maybe needlessly
    placeholders: dict[int, cst.CSTNode] = field(default_factory=dict)  # `pass` we put in emptied blocks
    # Per scope: the variable that holds the native device for the whole scope (assigned once),
    # so later uses in that scope say `device` instead of repeating the lookup.
    device_names: dict[Scope, str] = field(default_factory=dict)
    scopes: ScopeTable | None = None  # what each name means where; built from `source` if not given
    scope_stack: list[Scope] = field(default_factory=list)  # the dispatcher keeps it current
    # Imports to put at the top of a function that imports the same names only further down.
    function_imports: dict[Scope, dict[str, None]] = field(default_factory=dict)
    # Each name handed out for a module: ("import", module, asname) or ("from", module, name).
    spelled: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)
    more_imports: dict[tuple[str, str | None], None] = field(default_factory=dict)  # beyond `new_imports`
    # Imports the file has, but only after code that may call the place that needs them: added at the top.
    hoisted: set[tuple[str, str | None]] = field(default_factory=set)
    file_names: frozenset[str] | None = None  # every name the source binds or reads (see unused_name)
    mesh_program: MeshProgram | None = None  # the file's part in an NxD program of several files
    group_made_by: str | None = None  # the script of the run that gives this module's processes a group
    _at_module_end: bool = False
    _set_up: bool = False  # spelling a set-up statement added after the leading imports (`RANK = ...`)

    def __post_init__(self) -> None:
        if self.scopes is None:
            try:
                tree = ast.parse(self.source)
            except (SyntaxError, ValueError):
                tree = ast.Module(body=[], type_ignores=[])
            self.scopes = ScopeTable.from_ast(tree, self.source)
        if not self.scope_stack:
            self.scope_stack.append(self.scopes.module)
        if self.file_names is None:
            self.file_names = self.scopes.names

    # -- where we are ---------------------------------------------------------------------------
    @property
    def scope(self) -> Scope:
        """The scope the node being rewritten is evaluated in."""
        return self.scope_stack[-1]

    @property
    def statement(self) -> int:
        """The number of the statement being rewritten (after the last one for module-level helpers)."""
        if self._at_module_end or not self.frames:
            assert self.scopes is not None
            return len(self.scopes.statements)
        return self.frames[-1].statement

    @property
    def _table(self) -> ScopeTable:
        assert self.scopes is not None
        return self.scopes

    def binding_key(self, name: str) -> tuple[Scope, str] | None:
        """Which variable `name` is here: equal keys in two places mean the same variable. None
        where it is no variable of the file, or one that a `del` may have unbound."""
        owner = self.scope.lookup(name)
        return (owner, name) if owner is not None and not owner.bound[name].deleted else None

    @contextmanager
    def _module_level(self, set_up: bool = False) -> Iterator[None]:
        """Spell names for a definition added at module level, after every statement of the file;
        a `set_up` statement (`RANK = int(os.environ...)`) runs where it stands, after the imports."""
        saved = self._at_module_end, self._set_up
        self.scope_stack.append(self.scope.module)
        self._at_module_end, self._set_up = True, set_up
        try:
            yield
        finally:
            self.scope_stack.pop()
            self._at_module_end, self._set_up = saved

    # -- reporting ------------------------------------------------------------------------------
    def changed(self, code: str, message: str) -> None:
        self.changes.append(Change(code, message))

    def note(self, code: str, message: str) -> None:
        if not any(n.code == code and n.message == message for n in self.notes):
            self.notes.append(Note(code, message))

    def todo(self, code: str, message: str, explains: Sequence[str] = ()) -> None:
        """Attach `# TODO(neuron-migrate CODE): message` to the statement being rewritten; the
        names it `explains` (as written) get no generic TODO of their own there."""
        frame = self.frames[-1] if self.frames else None
        if frame is None:
            raise RuntimeError("todo() outside a statement")
        if (code, message) not in frame.todos:
            frame.todos.append((code, message))
        frame.explained.update(explains)

    def comment(self, text: str) -> None:
        """Put a plain comment line above the statement being rewritten (never twice)."""
        frame = self.frames[-1]
        if text not in frame.comments:
            frame.comments.append(text)

    # -- statement edits ------------------------------------------------------------------------
    def remove(self, node: N) -> N:
        """Drop this small statement (or statement) from its block; its comments are kept."""
        self.removed[id(node)] = node
        return node

    def insert_before(self, *statements: cst.BaseStatement) -> None:
        self.frames[-1].before.extend(statements)

    def insert_after(self, *statements: cst.BaseStatement) -> None:
        self.frames[-1].after.extend(statements)

    def group(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """Parenthesize a low-precedence expression; the dispatcher drops the parentheses where
        the context makes them needless (an assignment, an argument, a return)."""
        if not isinstance(node, cst.BooleanOperation | cst.IfExp | cst.Comparison):
            return node
        wrapped = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        self.grouped[id(wrapped)] = wrapped
        return wrapped

    # -- imports and helpers --------------------------------------------------------------------
    def need_import(self, module: str, asname: str | None = None) -> str:
        """The name to write for `module` here, adding `import module [as asname]` if needed.

        An import already seen here is reused; else `asname`, then the dotted module name, then a
        fresh alias, whichever is free here. A function that imports the name only further down
        gets the import at its top instead (the name is local to all of that function); a module
        that imports it only after code that may run this place gets it at the top as well.
        """
        found = visible_import(self._table, self.scope, self.statement, module, asname, self._set_up)
        if found is not None:
            return self._spell(found, ("import", module, found if found != module else None))
        top = module.split(".")[0]
        candidates: list[tuple[str, str, str | None]] = [(asname, module, asname)] if asname else []
        candidates.append((top, top, None))
        for name, qualified, alias in candidates:
            bound = self._bind(name, qualified, f"import {module}" + (f" as {alias}" if alias else ""))
            if bound is State.TOO_LATE:
                self.hoisted.add((qualified, alias))
                bound = State.FREE
            if bound is State.FREE or (bound is State.USABLE and "." in module):
                self._add_import(module, alias)  # `torch.distributed` is spelled through `torch`
            if bound is State.FREE and "." in module and alias is None:
                self._add_import(top, None)
            if bound is not State.TAKEN:
                return self._spell(alias or module, ("import", module, alias))
        fresh = self.unused_name(asname or top)
        self._add_import(module, fresh)
        return self._spell(fresh, ("import", module, fresh))

    def _add_import(self, module: str, alias: str | None) -> None:
        if self.new_imports.setdefault(module, alias) != alias:
            self.more_imports[(module, alias)] = None  # the same module under a second name

    def need_from(self, module: str, name: str) -> str:
        """The local name for `module.name`, adding `from module import name` if it is not bound here."""
        qualified = f"{module}.{name}"
        if qualified in self.provided:
            return name
        found = visible_import(self._table, self.scope, self.statement, qualified, name, self._set_up)
        if found is not None and "." not in found:
            return self._spell(found, ("from", module, name))
        bound = self._bind(name, qualified, f"from {module} import {name}", replaced=OPTIMUM_NEURON)
        if bound is State.TOO_LATE:
            bound = State.TAKEN  # spelled through the module, imported at the top
        if bound is State.FREE:
            self.from_imports.setdefault(module, {})[name] = None
        if bound is not State.TAKEN:
            return self._spell(name, ("from", module, name))
        # The short name means something else here: spell it through the module.
        return f"{self.need_import(module)}.{name}"

    def _bind(self, name: str, qualified: str, line: str, replaced: str | None = None) -> State:
        """Can `name` mean `qualified` here? TAKEN when it cannot; a function that imports it only
        further down gets `line` at its top. A module-level import (FREE) is the caller's to add."""
        found = state(self.scope, self.statement, name, qualified, self._table, self._set_up)
        if found is State.TAKEN and replaced is not None:
            owner = self.scope.lookup(name)
            meaning = owner.bound[name].imported_as if owner is not None else None
            if meaning is not None and meaning.startswith(replaced):
                found = State.FREE  # an import the migration rewrites in place
        if found is State.FREE and name in vars(builtins):
            return State.TAKEN
        if found is State.LATE:
            self.frames[-1].late_imports[line] = name  # added if the statement ends up reading it
        return found

    def _spell(self, written: str, how: tuple[str, str, str | None]) -> str:
        head = written.split(".")[0]
        kind, module, alias = how
        if kind == "import" and alias is None and written == module and "." in module:
            how = (kind, head, None)  # `torch.distributed` written through `torch`: the head is torch itself
        self.spelled.setdefault(head, how)
        return written

    def shared(self, kind: type[S]) -> S:
        """The state of type `kind` that the codemods of one family share in this file."""
        found = self.family_state.get(kind)
        if found is None:
            found = self.family_state[kind] = kind()
        return found

    def resolve_dotted(self, dotted: str) -> str | None:
        """What `dotted` stands for here in the migrated code, the imports the migration adds included."""
        found = self.scope.resolve_dotted(dotted)
        if found is not None:
            return found
        head, _, rest = dotted.partition(".")
        added = {asname or module: module for module, asname in self.new_imports.items()}
        if head not in added:
            return None
        return f"{added[head]}.{rest}" if rest else added[head]

    def torch(self) -> str:
        return self.need_import("torch")

    def spelled_torch(self) -> str:
        """How the migrated code names `torch`, without asking for an import."""
        for written, (kind, module, alias) in self.spelled.items():
            if kind == "import" and module == "torch":
                return alias or written
        return "torch"

    def dist(self) -> str:
        return self.need_import("torch.distributed", "dist")

    def os(self) -> str:
        return self.need_import("os")

    def need_helper(self, name: str, source: str) -> str:
        """Add the module-level definition `source` once. The module names in it were spelled
        for the place that asked: respell them for the module level, adding imports there."""
        if name not in self.helpers:
            self.helpers[name] = self._for_module_level(source)
        return name

    def _for_module_level(self, source: str) -> str:
        spellings: dict[str, str] = {}
        definition = source.lstrip().startswith(("def ", "async def ", "class ", "@"))
        with self._module_level(set_up=not definition):
            for written in sorted(names_in(source) & self.spelled.keys()):
                kind, module, alias = self.spelled[written]
                if kind == "import":
                    spellings[written] = self.need_import(module, alias)
                else:
                    spellings[written] = self.need_from(module, alias or "")
        return renamed(source, {old: new for old, new in spellings.items() if old != new})

    # -- spellings shared by several codemods ---------------------------------------------------
    def device_variable(self) -> str | None:
        """The variable that holds the device here: this scope's own, or one the module set
        before this function was defined and that nothing in between hides."""
        own = self.device_names.get(self.scope)
        if own is not None:
            return own
        module = self.scope.module
        name = self.device_names.get(module)
        return name if name is not None and self.scope.lookup(name) is module else None

    def device_expr(self) -> str:
        return self.device_variable() or self.target.device(self.torch())

    def device_type_expr(self) -> str:
        variable = self.device_variable()
        if variable:
            return f"{variable}.type"
        return self.target.device_type(self.torch())

    def local_rank_expr(self) -> str:
        return self._launcher_variable("LOCAL_RANK", 0)

    def local_world_size_expr(self) -> str:
        """The processes on this host, as torchrun says (one without it)."""
        return f'int({self.os()}.environ.get("LOCAL_WORLD_SIZE", 1))'

    def rank_expr(self) -> str:
        dist = self.dist()
        if self.facts.distributed:
            return f"{dist}.get_rank()"
        return f"({dist}.get_rank() if {dist}.is_initialized() else 0)"

    def world_size_expr(self) -> str:
        dist = self.dist()
        if self.facts.distributed:
            return f"{dist}.get_world_size()"
        return f"({dist}.get_world_size() if {dist}.is_initialized() else 1)"

    # Before a process group exists, only the launcher's environment knows the ranks (torchrun
    # sets these variables; a plain `python` run is one process).
    def env_rank_expr(self) -> str:
        return self._launcher_variable("RANK", 0)

    def env_world_size_expr(self) -> str:
        return self._launcher_variable("WORLD_SIZE", 1)

    def _launcher_variable(self, variable: str, default: int) -> str:
        """`int(os.environ.get("RANK", 0))`, read once into a module-level `RANK` in a script:
        torchrun sets it before the process starts. Not in a notebook (the kernel reads it before
        `notebook_launcher` forks), nor where the file writes the environment itself, nor where
        the name is taken."""
        read = f'int({self.os()}.environ.get("{variable}", {default}))'
        if self.notebook or _WRITES_ENVIRONMENT.search(self.source) or self.unused_name(variable) != variable:
            return read
        return self.need_helper(variable, f"{variable} = {read}\n")

    @property
    def script_name(self) -> str:
        """The file's name as a launch command names it."""
        if self.path in ("", "<stdin>"):
            return "script.py"
        if ".ipynb:cell " in self.path:
            return "<the %%writefile script>"  # a notebook cell that writes a script to launch
        if self.path.endswith(".ipynb"):
            return "<this notebook saved as a script>"  # torchrun runs Python files, not notebooks
        if _RELATIVE_IMPORT.search(self.source):  # a module of a package: it runs only as one
            return f"-m {_module_path(Path(self.path))}"
        return PurePath(self.path).name

    @property
    def notebook(self) -> bool:
        """The code is a notebook's cells: it runs in a kernel, not as a launched script."""
        return self.path.endswith(".ipynb")

    def unused_name(self, name: str) -> str:
        """`name`, or `name_2`, `name_3`, ... where the file already uses `name` for something else."""
        if self.file_names is None:
            self.file_names = names_in(self.source)
        candidate, number = name, 1
        while candidate in self.file_names:
            number += 1
            candidate = f"{name}_{number}"
        return candidate


class Visitor(cst.CSTVisitor):
    """A LibCST visitor without per-field hooks. For every field of every node, LibCST looks up a
    `visit_<Node>_<field>` method by name; none is defined here, and the lookups cost about as much
    as the rest of a visit.

    `scan(node)` visits as `node.visit(self)` does (the same hooks, in the same order, `False` from
    a `visit_*` skips the children) without rebuilding the tree: use it, a visitor changes nothing.
    """

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass

    def scan(self, node: cst.CSTNode) -> None:
        hooks = _HOOKS.setdefault(type(self), {})
        custom = type(self).on_visit is not cst.CSTVisitor.on_visit or type(self).on_leave is not cst.CSTVisitor.on_leave
        shallow = _shallow(type(self))
        unseen = PUNCTUATION if shallow else frozenset()  # punctuation it has no hook for

        def walk(node: cst.CSTNode) -> None:
            if custom:
                if self.on_visit(node):
                    for child in children(node):
                        walk(child)
                self.on_leave(node)
                return
            kind = type(node)
            try:
                visit, leave = hooks[kind]
            except KeyError:
                visit, leave = hooks[kind] = (
                    own_hook(type(self), f"visit_{kind.__name__}"),
                    own_hook(type(self), f"leave_{kind.__name__}"),
                )
            if (visit is None or visit(self, node) is not False) and kind not in shallow:
                for child in children(node):
                    if type(child) not in unseen:
                        walk(child)
            if leave is not None:
                leave(self, node)

        walk(node)


# By visitor class and node type: its `visit_*` and `leave_*` functions for that type.
_HOOKS: dict[type, dict[type, tuple[Any, Any]]] = {}


def own_hook(visitor: type, name: str) -> Any:
    """`visitor`'s method `name` (`visit_Call`, `leave_Name`), or None where it has only LibCST's
    empty default, which every visitor and transformer inherits for every node type."""
    found = getattr(visitor, name, None)
    base = cst.CSTTransformer if issubclass(visitor, cst.CSTTransformer) else cst.CSTVisitor
    return None if found is getattr(base, name, None) else found


@cache
def _shallow(visitor: type) -> frozenset[type]:
    """The nodes `visitor` need not go below: below a name or a comma there is only punctuation,
    unless that is what it looks for."""
    if any(own_hook(visitor, f"{hook}_{kind.__name__}") for kind in PUNCTUATION for hook in ("visit", "leave")):
        return frozenset()
    return INERT


class Transformer(cst.CSTTransformer):
    """A LibCST transformer without per-field hooks (see `Visitor`)."""

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


class StatementHeaderVisitor(Visitor):
    """Visits one statement only: a compound statement's header, never its body or imports."""

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return False

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False


class Codemod(Transformer):
    """Base of every codemod. Subclasses set the class attributes and write `leave_*` methods.

    The class docstring is the user documentation, in sections: what it does, why, example,
    use instead, fix safety (rendered by `neuron-migrate rules`).
    """

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # The codemod runs on a file only if it refers to one of these qualified names (or below).
    triggers: ClassVar[tuple[str, ...]] = ()
    # Qualified name -> TODO text, for APIs of this family that have no automatic rewrite.
    manual: ClassVar[dict[str, str]] = {}
    # The codemod runs only if the raw text contains one of these (cheap prefilter).
    markers: ClassVar[tuple[str, ...]] = ()
    # Most codemods only touch files that import the old stack: an `"xla"` string or an
    # `XLA_USE_BF16` in a library that merely supports XLA is not a script to migrate.
    needs_old_stack_import: ClassVar[bool] = True
    # Selected by name (`--select NM2`), it runs on files without the old stack as well.
    runs_alone: ClassVar[bool] = False

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__()
        self.ctx = ctx

    @classmethod
    def applies(cls, facts: FileFacts, text: str) -> bool:
        if cls.triggers and facts.uses(*cls.triggers):
            return True
        return any(marker in text for marker in cls.markers)

    def qualify(self, node: cst.CSTNode) -> str | None:
        """What `node` names through an import, where it is evaluated; None for anything else
        (a parameter or local variable named like an import is not that import)."""
        dotted = dotted_name(node)
        return self.ctx.scope.resolve_dotted(dotted) if dotted else None

    def called(self, node: cst.CSTNode, *names: str) -> bool:
        """Is `node` a call of one of the qualified `names`?"""
        return isinstance(node, cst.Call) and self.qualify(node.func) in names

    def changed(self, message: str) -> None:
        self.ctx.changed(self.code, message)

    def todo(self, message: str, explains: Sequence[str] = ()) -> None:
        self.ctx.todo(self.code, message, explains)
