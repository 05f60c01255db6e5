"""Runs every selected codemod in one traversal of the tree, and applies their statement requests.

One traversal instead of one per codemod is what makes rewriting a file cost about one LibCST
pass. Each node is handed to the codemods in registry order; a codemod that turns a node into
something of another type ends the chain for that node. On the way out of each statement the
dispatcher applies what the codemods asked for: TODO comments (never twice), statements inserted
before or after, statements removed with their comments carried to the next statement, and
`pass` where a block would otherwise be empty. It also marks old-stack names that no codemod
rewrote, so nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

import libcst as cst

from neuron_migrate.core.cst_children import INERT, PUNCTUATION, transform
from neuron_migrate.core.oldstack import old_stack_module
from neuron_migrate.core.scopes import Scope, ScopeTable
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    Frame,
    MigrationContext,
    StatementHeaderVisitor,
    Transformer,
    Visitor,
    dotted_name,
    own_hook,
    star_import_todo,
    stmt,
)
from neuron_migrate.rewrite.effects import has_effects
from neuron_migrate.rewrite.guards import join_guards

_STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


class _Comments(Visitor):
    """Comments, each with the argument it stands in, if any: the one whose line it ends
    (`x=1,  # why`) or, on a line of its own, the one it stands above."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str | None]] = []
        self._arguments: list[str | None] = []
        self._above: list[int] = []  # indexes in `found` of comments waiting for the next argument

    def visit_Call(self, node: cst.Call) -> None:
        self._above_next(node.whitespace_before_args)

    def leave_Call(self, original_node: cst.Call) -> None:
        self._above.clear()  # above the closing parenthesis: about the call

    def visit_Arg(self, node: cst.Arg) -> bool:
        key = _argument_key(node)
        for index in self._above:
            self.found[index] = (self.found[index][0], key)
        self._above.clear()
        self._arguments.append(key)
        for part in (node.keyword, node.equal, node.value):
            if isinstance(part, cst.CSTNode):
                self.scan(part)
        comma = node.comma
        if isinstance(comma, cst.Comma):
            self.scan(comma.whitespace_before)
            after = comma.whitespace_after
            if isinstance(after, cst.ParenthesizedWhitespace):
                self.scan(after.first_line)  # ends this argument's line
                self._arguments.pop()
                self._above_next(after, own_lines_only=True)
                return False
        self._arguments.pop()
        return False

    def _above_next(self, whitespace: cst.BaseParenthesizableWhitespace, own_lines_only: bool = False) -> None:
        if not isinstance(whitespace, cst.ParenthesizedWhitespace):
            return
        if not own_lines_only:
            self.scan(whitespace.first_line)
        for line in whitespace.empty_lines:
            if line.comment is not None:
                self._above.append(len(self.found))
                self.found.append((line.comment.value, None))

    def visit_Comment(self, node: cst.Comment) -> None:
        self.found.append((node.value, self._arguments[-1] if self._arguments else None))


def _argument_key(arg: cst.Arg) -> str:
    """How to tell whether an argument is still in a call: `name=` for a keyword, else its value."""
    if arg.keyword is not None:
        return f"{arg.keyword.value}="
    return _EMPTY_MODULE.code_for_node(arg.value)


def _still_passed(key: str, code: str) -> bool:
    if key.endswith("="):
        return re.search(rf"(?<![\w.]){re.escape(key[:-1])}\s*=(?!=)", code) is not None
    return key in code


_EMPTY_MODULE = cst.Module(body=[])


def _comments(*nodes: cst.CSTNode) -> list[tuple[str, str | None]]:
    """The comments inside `nodes` (leading lines excepted: those move with the statement)."""
    finder = _Comments()
    for node in nodes:
        if isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            node = node.with_changes(leading_lines=[])
        finder.scan(node)
    return finder.found


def _concrete(*bases: type) -> frozenset[type]:
    """Every concrete LibCST class under `bases`: `type(node) in ...` is many times faster than
    `isinstance` on LibCST's abstract classes, and the traversal asks for each node."""
    found: set[type] = set()
    todo = list(bases)
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not getattr(cls, "__abstractmethods__", None):
            found.add(cls)
    return frozenset(found)


STATEMENTS = _concrete(*_STATEMENT_TYPES)
_IMPORTS = frozenset({cst.Import, cst.ImportFrom})
_SMALL_STATEMENT_HOLDERS = frozenset({cst.SimpleStatementLine, cst.SimpleStatementSuite})
_BLOCKS = frozenset({cst.Module, cst.IndentedBlock})
# Where an expression needs no parentheses of its own.
_VALUE_HOLDERS = frozenset({cst.Assign, cst.AnnAssign, cst.Arg, cst.Return, cst.Expr, cst.If, cst.While})


# Where a keyword may touch a parenthesized expression (`if(test):`, `return(x)`): the field that
# holds the whitespace after it.
_KEYWORD_SPACES: dict[type, str] = {
    cst.If: "whitespace_before_test",
    cst.While: "whitespace_after_while",
    cst.Return: "whitespace_after_return",
}


def _keyword_space(node: Any) -> dict[str, cst.SimpleWhitespace]:
    """The change that puts a space after `node`'s keyword where it touched the parenthesis
    about to go (`if(rank == 0):` -> `if rank == 0:`); none where a space is there."""
    field = _KEYWORD_SPACES.get(type(node))
    space = getattr(node, field, None) if field else None
    if field is None or not isinstance(space, cst.SimpleWhitespace) or space.value:
        return {}
    return {field: cst.SimpleWhitespace(" ")}


def todo_line(code: str, message: str) -> cst.EmptyLine:
    # A message may quote code that spans lines (`compiler_args=[...]`): a comment is one line.
    return cst.EmptyLine(comment=cst.Comment(f"# TODO(neuron-migrate {code}): {' '.join(message.split())}"))


def add_todos(
    node: cst.CSTNode, todos: Sequence[tuple[str, str]], comments: Sequence[str] = ()
) -> cst.CSTNode:
    """Add comments and TODOs above a statement, skipping any it already carries (idempotence)."""
    if not (todos or comments) or not hasattr(node, "leading_lines"):
        return node
    existing = {_said(line.comment.value) for line in node.leading_lines if line.comment is not None}
    new = [cst.EmptyLine(comment=cst.Comment(text)) for text in comments]
    new += [todo_line(c, m) for c, m in todos]
    new = [line for line in new if line.comment is not None and _said(line.comment.value) not in existing]
    if not new:
        return node
    return node.with_changes(leading_lines=[*node.leading_lines, *new])


def _said(comment: str) -> str:
    """A TODO's message without its rule code: two rules that say the same thing say it once."""
    return comment.split("): ", 1)[1] if comment.startswith("# TODO(neuron-migrate ") and "): " in comment else comment


def _merge_leading(carried: list[cst.EmptyLine], own: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    # The blank line above a removed statement stays above the TODO the next one got.
    todo = bool(own) and own[0].comment is not None and own[0].comment.value.startswith("# TODO(neuron-migrate ")
    if todo or any(line.comment is not None for line in carried):
        return [*carried, *own]
    return list(own) if own else carried


class _LeftoverFinder(StatementHeaderVisitor):
    """Collects old-stack names still referenced in one statement (its header, for compounds)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.found: list[str] = []
        self._calls: list[str] = []  # the names the calls around this node are reached through

    def _old(self, dotted: str | None) -> bool:
        head = dotted.split(".")[0] if dotted else None
        return head in self.names and head not in self._calls

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        dotted = dotted_name(node)
        if self._old(dotted):
            assert dotted is not None
            self.found.append(dotted)
            return False
        self.scan(node.value)  # `torch.autocast` is not the old `autocast`: skip `.attr`
        return False

    def visit_Call(self, node: cst.Call) -> bool:
        """One TODO per call and what it reaches through the same name: `xm.all_reduce(
        xm.REDUCE_SUM, t)` is one item, `neuron_allclose(cumsum(x), y)` two."""
        dotted = dotted_name(node.func)
        if not self._old(dotted):
            return True
        assert dotted is not None
        self.found.append(dotted)
        self._calls.append(dotted.split(".")[0])
        for arg in node.args:
            self.scan(arg)
        self._calls.pop()
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if self._old(node.value):
            self.found.append(node.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        """`xm = None` (an `except ImportError` fallback) binds the name anew: no use of the old
        module. An attribute or item set on it still is."""
        target = node.target
        bound = [e.value for e in target.elements] if isinstance(target, cst.Tuple | cst.List) else [target]
        return not all(isinstance(name, cst.Name) for name in bound)

    # A definition's own name and its parameters bind names; only what they evaluate is a use.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for part in (*node.decorators, node.params, node.returns):
            if part is not None:
                self.scan(part)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        for part in (*node.decorators, *node.bases, *node.keywords):
            self.scan(part)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        for part in (node.annotation, node.default):
            if part is not None:
                self.scan(part)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.scan(node.value)  # `f(AdamW=1)`: the keyword is no use of a name
        return False


_SCOPE_NODES = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _star_imported(small: cst.BaseSmallStatement) -> str | None:
    """The module of `from <module> import *` (not a relative one)."""
    if not isinstance(small, cst.ImportFrom) or not isinstance(small.names, cst.ImportStar):
        return None
    if small.relative or small.module is None:
        return None
    return dotted_name(small.module)


def _wrapped_line(node: Any) -> Any:
    """The one simple line a rewrite wrapped in a guard (`if rank == 0: print(...)`), or `node`."""
    if (
        isinstance(node, cst.If)
        and node.orelse is None
        and isinstance(node.body, cst.IndentedBlock)
        and len(node.body.body) == 1
        and isinstance(node.body.body[0], cst.SimpleStatementLine)
    ):
        return node.body.body[0]
    return node


class ScopeMismatch(Exception):
    """The LibCST tree and the `ast` scope table disagree: no rewrite may rely on either."""


def _inner_parts(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of a scope's node that are evaluated inside the scope: a function's body (its
    decorators and defaults are not), a comprehension's all but its first iterable."""
    if isinstance(node, cst.FunctionDef | cst.ClassDef | cst.Lambda):
        return [node.body]
    assert isinstance(node, cst.ListComp | cst.SetComp | cst.DictComp | cst.GeneratorExp)
    parts: list[cst.CSTNode] = [node.key, node.value] if isinstance(node, cst.DictComp) else [node.elt]
    first = node.for_in
    parts += [first.target, *first.ifs]
    if first.inner_for_in is not None:
        parts.append(first.inner_for_in)
    return parts


class ScopeFollower:
    """Keeps `ctx.scope_stack` current along the traversal, numbering scopes and statements as the
    `ast` scope table did (and checking that both agree)."""

    def __init__(self, table: ScopeTable, stack: list[Scope]) -> None:
        self.table = table
        self.stack = stack
        self.next_scope = 0
        self.next_statement = 0
        self.entries: dict[int, Scope] = {}  # id of a node -> the scope it is evaluated in

    def statement(self, node: cst.CSTNode) -> int:
        number = self.next_statement
        self.next_statement += 1
        size = len(node.body) if isinstance(node, cst.SimpleStatementLine) else 1
        expected = self.table.statements[number] if number < len(self.table.statements) else None
        if expected != (type(node).__name__, size):
            raise ScopeMismatch(f"statement {number + 1} is {type(node).__name__}, the scope table says {expected}")
        return number

    def enter(self, node: cst.CSTNode) -> None:
        if type(node) in _SCOPE_NODES:  # exact types: `isinstance` on LibCST nodes is slow
            number = self.next_scope
            self.next_scope += 1
            scope = self.table.scopes[number] if number < len(self.table.scopes) else None
            if scope is None or scope.kind != type(node).__name__:
                raise ScopeMismatch(f"scope {number + 1} is {type(node).__name__}, the scope table says {scope}")
            for part in _inner_parts(node):
                self.entries[id(part)] = scope
        scope = self.entries.get(id(node))
        if scope is not None:
            self.stack.append(scope)

    def leave(self, node: cst.CSTNode) -> Scope | None:
        """The scope whose part `node` was, now left."""
        scope = self.entries.pop(id(node), None)
        if scope is not None:
            self.stack.pop()
        return scope


@cache
def _hooks(codemod: type) -> tuple[str, ...]:
    """The `visit_<Node>` and `leave_<Node>` methods a codemod class defines, by name (not LibCST's
    empty defaults, which every transformer inherits for every node type)."""
    return tuple(
        attr
        for attr in dir(codemod)
        if attr.startswith(("visit_", "leave_")) and attr.count("_") == 1 and own_hook(codemod, attr) is not None
    )


class Dispatcher(Transformer):
    def __init__(
        self,
        ctx: MigrationContext,
        codemods: Sequence[Codemod],
        old_stack_names: Iterable[str],
        manual_messages: Callable[[str], tuple[str, str] | None],
        add_imports: Callable[[cst.Module], cst.Module] = lambda module: module,
    ) -> None:
        super().__init__()
        self.ctx = ctx
        # Applied to the module while the statements the codemods removed still stand, so that a
        # new from-import takes the place of the old-stack import line it replaces.
        self.add_imports = add_imports
        self.old_stack_names = frozenset(old_stack_names)
        self.manual_messages = manual_messages
        self._visits: dict[str, list[Callable[..., Any]]] = defaultdict(list)
        self._leaves: dict[str, list[Callable[..., Any]]] = defaultdict(list)
        for codemod in codemods:
            for attr in _hooks(type(codemod)):
                (self._visits if attr.startswith("visit_") else self._leaves)[attr[6:]].append(getattr(codemod, attr))
        # Punctuation no codemod hooks: the traversal need not visit it (`cst_children.transform`).
        self.unvisited = frozenset(k for k in PUNCTUATION if k.__name__ not in self._visits.keys() | self._leaves.keys())
        self._saw_old_name: list[bool] = []
        self._import_depth = 0
        self._elifs: set[int] = set()  # `elif` clauses, which are `If` nodes but no statements of a block
        assert ctx.scopes is not None
        self._scopes = ScopeFollower(ctx.scopes, ctx.scope_stack)
        self._in_fstring = 0
        self._guards: dict[int, cst.CSTNode] = {}  # by id: the `if` statements the rewrite wrote or changed the test of
        # A top-level statement no step replaced comes back as the very node it was (see
        # `printing`), and an f-string is requoted only if something in it changed: the count
        # of replacements, and the edits made when each of those nodes began.
        self._replaced = 0
        self._began: list[tuple[int, ...]] = []
        # By scope: the last statement given TODOs, and those TODOs (a run of statements carries one).
        self._said: dict[int, tuple[int, set[tuple[str, str]]]] = {}
        self._late_at_module_level: set[str] = set()  # imports put above a module statement

    # -- traversal ------------------------------------------------------------------------------
    def rewrite(self, module: cst.Module) -> cst.Module:
        """The module with every codemod applied, in one traversal."""
        result = transform(module, self, self.unvisited)
        assert isinstance(result, cst.Module)
        return result

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind is cst.If and type(node.orelse) is cst.If:  # type: ignore[attr-defined]
            self._elifs.add(id(node.orelse))  # type: ignore[attr-defined]
        self._scopes.enter(node)
        if kind in STATEMENTS:
            if not self.ctx.frames:
                self._began.append(self._edits())
            self.ctx.frames.append(
                Frame(statement=self._scopes.statement(node), changes_before=len(self.ctx.changes))
            )
            self._saw_old_name.append(False)
        elif kind in _IMPORTS:
            self._import_depth += 1
        elif kind is cst.FormattedString:
            self._began.append(self._edits())
        elif (
            kind is cst.Name
            and node.value in self.old_stack_names  # type: ignore[attr-defined]
            and self._saw_old_name
            and not self._import_depth
        ):
            self._saw_old_name[-1] = True
        for fn in self._visits.get(kind.__name__, ()):
            fn(node)
        return kind not in INERT  # LibCST keeps what it does not go below as it is

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result: Any = updated_node
        original = type(original_node)
        for fn in self._leaves.get(original.__name__, ()):
            result = fn(original_node, result)
            if type(result) is not original:
                break
        if original in INERT:  # half the nodes: none of the steps below is about them
            self._scopes.leave(original_node)  # a comprehension's element may be a bare name
            if result is not updated_node and not _same(result, updated_node):
                self._replaced += 1
            return result
        if original in _IMPORTS:
            self._import_depth -= 1
        kind = type(result)
        if kind in _VALUE_HOLDERS:
            result = self._ungroup(result)
        if kind in _SMALL_STATEMENT_HOLDERS:
            result = self._sweep_small(result)
            kind = type(result)
        if original is cst.SimpleStatementLine and len(self.ctx.changes) > self.ctx.frames[-1].changes_before:
            self._keep_comments(original_node, result)
            result = _without_stale_comments(result, self.ctx)
        if original in STATEMENTS:
            result = self._finish_statement(
                result,
                elif_clause=id(original_node) in self._elifs,
                wrapped=original is cst.SimpleStatementLine,
            )
            kind = type(result)
            self._note_guards(original_node, result)
        if kind is cst.Module:
            result = self.add_imports(result)
        if kind in _BLOCKS:
            result = join_guards(
                sweep_block(result, self.ctx.removed, self.ctx.placeholders, self.ctx.source), self._guards.keys()
            )
        if original is cst.FormattedString:
            edited = self._began.pop() != self._edits() or not _same(result, updated_node)
            if edited and type(result) is cst.FormattedString:
                result = requoted(result)
        left = self._scopes.leave(original_node)
        if left is not None and type(result) is cst.IndentedBlock and left in self.ctx.function_imports:
            result = with_imports_on_top(result, list(self.ctx.function_imports.pop(left)))
        if result is not updated_node and not _same(result, updated_node):  # not a `with_changes` of what it had
            self._replaced += 1
        if original in STATEMENTS and not self.ctx.frames and self._began.pop() == self._edits():
            return original_node  # rebuilt by LibCST, but equal to it
        return result

    def _edits(self) -> tuple[int, ...]:
        """Grows with every change made so far: a node replaced, or marked for removal."""
        ctx = self.ctx
        return (self._replaced, len(ctx.removed), len(ctx.placeholders), len(ctx.changes), len(ctx.notes))

    def _note_guards(self, original: cst.CSTNode, result: Any) -> None:
        """Remember the `if` statements the rewrite wrote (`xm.save(...)` -> `if rank == 0: ...`)
        or whose test it rewrote: a guard next to one with the same test may join it."""
        for node in result.nodes if type(result) is cst.FlattenSentinel else (result,):
            if type(node) is not cst.If:
                continue
            if not isinstance(original, cst.If) or _EMPTY_MODULE.code_for_node(original.test) != _EMPTY_MODULE.code_for_node(node.test):
                self._guards[id(node)] = node

    def _keep_comments(self, original: cst.CSTNode, result: Any) -> None:
        """A comment inside a rewritten call (`xm.save(\n    state,  # weights only\n    path)`)
        goes above the statement when the rewrite did not keep it in place."""
        if isinstance(result, cst.RemovalSentinel) or id(result) in self.ctx.removed:
            return
        nodes = result.nodes if isinstance(result, cst.FlattenSentinel) else [result]
        kept = {text for text, _ in _comments(*nodes)}
        code = "".join(_EMPTY_MODULE.code_for_node(node) for node in nodes)
        for text, argument in _comments(original):
            # A comment on an argument the rewrite dropped (`logging_dir="logs",  # TensorBoard`)
            # went with it, and one about the XLA code the call was is no longer true.
            if text not in kept and (argument is None or _still_passed(argument, code)) and not _speaks_of_xla(text):
                self.ctx.comment(text)

    def _ungroup(self, node: Any) -> Any:
        field = "test" if isinstance(node, cst.If | cst.While) else "value"
        value = getattr(node, field, None)
        if value is not None and id(value) in self.ctx.grouped and len(value.lpar) == 1:
            return node.with_changes(**{field: value.with_changes(lpar=[], rpar=[]), **_keyword_space(node)})
        return node

    # -- statements -----------------------------------------------------------------------------
    def _finish_statement(self, result: Any, elif_clause: bool = False, wrapped: bool = False) -> Any:
        """`wrapped`: the statement was a simple line, so a compound statement in its place (`if
        rank == 0: print(...)` for a `master_print`) holds it in its body: leftovers are looked for
        there, and its TODOs go on the line they are about, where a second run would put them."""
        frame = self.ctx.frames.pop()
        if not elif_clause and emptied_if(result, self.ctx.placeholders):
            # Its test only guarded what was removed (a metrics print on rank 0, say).
            result = without_emptied_if(result, self.ctx)
            if id(result) in self.ctx.removed:
                frame.todos.clear()  # they were about its test, which went with it
        saw_old = self._saw_old_name.pop()
        if saw_old and isinstance(result, _STATEMENT_TYPES) and id(result) not in self.ctx.removed:
            self._mark_leftovers(_wrapped_line(result) if wrapped else result, frame)
        if type(result) is cst.SimpleStatementLine and id(result) not in self.ctx.removed:
            self._mark_star_imports(result, frame)
        nodes: list[Any]
        if isinstance(result, cst.FlattenSentinel):
            nodes = list(result.nodes)
        elif isinstance(result, cst.RemovalSentinel):
            nodes = []
        else:
            nodes = [result]
        if frame.late_imports:
            self._add_late_imports(frame, [n for n in nodes if id(n) not in self.ctx.removed])
        if frame.todos:
            # Statements that follow one another with the same cause (three metric reports in a
            # row) carry one TODO, above the first; the same cause anywhere else gets its own.
            last, said = self._said.get(id(self.ctx.scope), (-2, set()))
            todos = frame.todos
            assert self.ctx.scopes is not None
            blocks = self.ctx.scopes.statement_blocks
            if frame.statement == last + 1 and last >= 0 and frame.statement < len(blocks) and blocks[last] == blocks[frame.statement]:
                frame.todos = [todo for todo in todos if todo not in said]
            self._said[id(self.ctx.scope)] = (frame.statement, set(todos))
        if not (frame.todos or frame.comments or frame.before or frame.after):
            return result
        removed = bool(nodes) and all(id(n) in self.ctx.removed for n in nodes)
        if frame.before or frame.after:
            if removed or not nodes:
                leading = list(nodes[0].leading_lines) if nodes else []
                nodes = [*frame.before, *frame.after]
            else:
                leading = []
                if frame.before:
                    first = nodes[0]
                    leading = list(getattr(first, "leading_lines", ()))
                    nodes[0] = first.with_changes(leading_lines=[])
                    if type(first) is cst.SimpleStatementLine and first.trailing_whitespace.comment is not None:
                        # `xm.optimizer_step(opt)  # all-reduce + step` is two lines now: the comment
                        # is about both, so it goes above them.
                        leading.append(cst.EmptyLine(comment=first.trailing_whitespace.comment))
                        nodes[0] = nodes[0].with_changes(
                            trailing_whitespace=first.trailing_whitespace.with_changes(
                                whitespace=cst.SimpleWhitespace(""), comment=None
                            )
                        )
                nodes = [*frame.before, *nodes, *frame.after]
            if leading and nodes:
                nodes[0] = nodes[0].with_changes(
                    leading_lines=[*leading, *getattr(nodes[0], "leading_lines", ())]
                )
        if frame.todos or frame.comments:
            if nodes and wrapped and len(nodes) == 1 and _wrapped_line(nodes[0]) is not nodes[0]:
                inner = _wrapped_line(nodes[0])
                nodes[0] = nodes[0].deep_replace(inner, add_todos(inner, frame.todos, frame.comments))
            elif nodes:
                was_removed = id(nodes[0]) in self.ctx.removed
                nodes[0] = add_todos(nodes[0], frame.todos, frame.comments)
                if was_removed:
                    self.ctx.remove(nodes[0])
            else:
                # Nothing left to carry the comment: keep it on a `pass` so it is not lost.
                nodes = [add_todos(cst.SimpleStatementLine([cst.Pass()]), frame.todos, frame.comments)]
        if len(nodes) == 1:
            return nodes[0]
        return cst.FlattenSentinel(nodes)

    def _mark_leftovers(self, node: cst.CSTNode, frame: Frame) -> None:
        finder = _LeftoverFinder(self.old_stack_names)
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if id(small) not in self.ctx.removed:
                    finder.scan(small)
        else:
            finder.scan(node)
        for dotted in dict.fromkeys(finder.found):
            if dotted in frame.explained:
                continue  # a codemod's own TODO here says what to do with it
            if dotted.split(".")[0] in self.ctx.rebound:
                continue  # its import now imports the native counterpart
            qualified = self._possible_import(dotted)
            if qualified is None:
                continue  # a parameter or local variable named like an import
            manual = self.manual_messages(qualified)
            if manual is None:
                continue
            code, message = manual
            constant = qualified.rsplit(".", 1)[-1]
            if constant.isupper() and not constant.isdigit() and len(constant) > 1:
                # `PIXEL_SIZE_MAP`: a value, not an API to port: the advice for the package does not fit
                message = f"`{dotted}` is a constant of `{qualified.split('.')[0]}`: copy its value into this file"
            else:
                message = message.replace("{name}", dotted) if "{name}" in message else f"`{dotted}`: {message}"
            if (code, message) not in frame.todos:
                frame.todos.append((code, message))

    def _mark_star_imports(self, line: cst.SimpleStatementLine, frame: Frame) -> None:
        """`from torch_xla.core.xla_model import *`: the names it binds are out of sight, so
        nothing they reach is migrated (a codemod of the package may have said so already)."""
        for small in line.body:
            module = _star_imported(small)
            if module is None or not old_stack_module(module):
                continue
            message = star_import_todo(module)
            manual = self.manual_messages(module)
            if manual is not None and all(said != message for _, said in frame.todos):
                frame.todos.append((manual[0], message))

    def _add_late_imports(self, frame: Frame, kept: list[Any]) -> None:
        """The imports this statement now needs before the scope's own import of the same name:
        at the top of a function (the name is local to all of it), or above a module statement."""
        used = names_read([*frame.before, *kept, *frame.after])
        lines = [line for line, name in frame.late_imports.items() if name in used]
        scope = self.ctx.scope
        if scope.kind == "Module":
            # Once above a module statement, the import serves the statements after it too.
            lines = [line for line in lines if line not in self._late_at_module_level]
            self._late_at_module_level.update(lines)
            frame.before[:0] = [stmt(line + "\n") for line in lines]
        else:
            self.ctx.function_imports.setdefault(scope, {}).update(dict.fromkeys(lines))

    def _possible_import(self, dotted: str) -> str | None:
        """What `dotted` may name through an old-stack import here (a `None` stand-in aside)."""
        head, _, rest = dotted.partition(".")
        owner = self.ctx.scope.lookup(head)
        imports = owner.bound[head].imports if owner is not None else []
        if not imports:
            return None
        base = imports[-1].qualified
        return f"{base}.{rest}" if rest else base

    def _sweep_small(self, node: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> Any:
        kept = [s for s in node.body if id(s) not in self.ctx.removed]
        if len(kept) == len(node.body):
            return node
        if not kept:
            if isinstance(node, cst.SimpleStatementSuite):
                placeholder = cst.Pass()
                self.ctx.placeholders[id(placeholder)] = placeholder
                return node.with_changes(body=[placeholder])
            return self.ctx.remove(node)
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(body=kept)


# A comment line that speaks of the old stack (`# XLA imports`, `# sync the XLA graph`).
_OLD_STACK_WORDS = re.compile(r"\b(?:xla|pjrt|xrt|torch_xla|xm|xmp|neuronx?|trainium|mark_steps?)\b", re.IGNORECASE)
# Of those, the words that describe what the XLA stack did, which a native rewrite of the same
# line no longer does (Neuron and Trainium are still the hardware it runs on).
_XLA_WORDS = re.compile(r"\b(?:xla|pjrt|xrt|torch_xla|xm|xmp|mark_steps?|MpDeviceLoader|ParallelLoader|per_device_loader)\b", re.IGNORECASE)


_MARKER = "neuron-migrate"  # the migration's own notes and cell markers are never dropped


def _without_old_stack_comments(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a statement the migration removed, less each paragraph of comments that
    speaks of the old stack: it described what went (`# XLA imports`)."""
    kept: list[cst.EmptyLine] = []
    paragraph: list[cst.EmptyLine] = []
    for line in [*lines, None]:
        if line is not None and line.comment is not None:
            paragraph.append(line)
            continue
        texts = [p.comment.value for p in paragraph if p.comment is not None]
        if any(_OLD_STACK_WORDS.search(text) and _MARKER not in text for text in texts):
            kept.extend(p for p in paragraph if p.comment is not None and _MARKER in p.comment.value)
        else:
            kept.extend(paragraph)
        paragraph = []
        if line is not None:
            kept.append(line)
    return kept


def _ends_its_paragraph(block: cst.Module | cst.IndentedBlock, index: int) -> bool:
    """Is a blank line (or the end of an indented block) after statement `index`? Then the
    comment right above it spoke of it alone. The end of a file (or of a notebook's last cell) is
    no sign: what comes last there is often a comment on the file."""
    body = block.body
    if index + 1 == len(body):
        return isinstance(block, cst.IndentedBlock)
    following: Sequence[cst.EmptyLine] = getattr(body[index + 1], "leading_lines", ())
    return bool(following) and following[0].comment is None


def _without_own_comment(lines: list[cst.EmptyLine], source: str) -> list[cst.EmptyLine]:
    """`lines` less the file's comments right above the statement (`# run the pending graph`
    over a removed `xm.mark_step()`): they described what went. What the migration wrote there (a
    launch line, its notes) stays."""
    start = len(lines)
    while start > 0 and lines[start - 1].comment is not None:
        start -= 1
    return [
        *lines[:start],
        *(
            line
            for line in lines[start:]
            if line.comment is not None and (_MARKER in line.comment.value or line.comment.value not in source)
        ),
    ]


def _speaks_of_xla(text: str) -> bool:
    return _XLA_WORDS.search(text) is not None and _MARKER not in text


def _without_stale_comments(result: Any, ctx: MigrationContext) -> Any:
    """A line a codemod rewrote, less the comments that described its XLA code: the one at its end
    (`device = xm.xla_device()  # the XLA device`) and the paragraph right above it. Kept, they
    would state the old semantics on the new code."""
    if not isinstance(result, cst.SimpleStatementLine | cst.If) or id(result) in ctx.removed:
        return result
    line = _wrapped_line(result)
    if isinstance(line, cst.SimpleStatementLine):
        comment = line.trailing_whitespace.comment
        if comment is not None and _speaks_of_xla(comment.value):
            bare = line.with_changes(
                trailing_whitespace=line.trailing_whitespace.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
            )
            result = bare if line is result else result.deep_replace(line, bare)
    leading = list(result.leading_lines)
    start = len(leading)
    while start > 0 and leading[start - 1].comment is not None:
        start -= 1
    paragraph = leading[start:]
    if any(_speaks_of_xla(p.comment.value) for p in paragraph if p.comment is not None):
        kept = [p for p in paragraph if p.comment is not None and _MARKER in p.comment.value]
        result = result.with_changes(leading_lines=[*leading[:start], *kept])
    return result


def sweep_block(
    node: cst.Module | cst.IndentedBlock,
    removed: dict[int, cst.CSTNode],
    placeholders: dict[int, cst.CSTNode] | None = None,
    source: str | None = None,
) -> Any:
    """Drop removed statements; their comments move to the next statement, or to the footer.

    With the file's `source`: a comment of the file right above a removed statement that a blank
    line ends goes with it (it spoke of that statement alone), unless the block would be empty."""
    if not any(id(s) in removed for s in node.body):
        return node
    kept_any = any(id(s) not in removed for s in node.body)
    body: list[Any] = []
    carried: list[cst.EmptyLine] = []
    statement: Any
    for index, statement in enumerate(node.body):
        if id(statement) in removed:
            lines = list(getattr(statement, "leading_lines", ()))
            if source is not None and kept_any and _ends_its_paragraph(node, index):
                lines = _without_own_comment(lines, source)
            carried.extend(_without_old_stack_comments(lines))
            continue
        if carried or not body:
            own = list(statement.leading_lines)
            if not body and len(body) != len(node.body) and id(node.body[0]) in removed:
                # What was first in the block went: no blank line may open the block now.
                while own and own[0].comment is None and isinstance(node, cst.IndentedBlock):
                    own.pop(0)
            statement = statement.with_changes(leading_lines=_merge_leading(carried, own))
            carried = []
        body.append(statement)
    comments = [line for line in carried if line.comment is not None]
    if not body and isinstance(node, cst.IndentedBlock):
        # Keep every comment of the emptied block above the `pass` that stands in for it.
        comments += [line for line in node.footer if line.comment is not None]
        placeholder = cst.SimpleStatementLine([cst.Pass()], leading_lines=comments)
        if placeholders is not None and not comments:
            placeholders[id(placeholder)] = placeholder
        footer = [line for line in node.footer if line.comment is None]
        return node.with_changes(body=[placeholder], footer=footer)
    return node.with_changes(body=body, footer=[*comments, *node.footer])


def emptied_if(node: cst.CSTNode, placeholders: dict[int, cst.CSTNode]) -> bool:
    """An `if` whose whole body the migration removed, with no `else` nor comment: it can go too."""
    if not isinstance(node, cst.If) or node.orelse is not None or len(node.body.body) != 1:
        return False
    if isinstance(node.body, cst.SimpleStatementSuite):  # `if x: xm.mark_step()`
        return id(node.body.body[0]) in placeholders and node.body.trailing_whitespace.comment is None
    body = node.body
    return (
        isinstance(body, cst.IndentedBlock)
        and id(body.body[0]) in placeholders
        and not body.footer
        and body.header.comment is None
    )


def without_emptied_if(node: cst.If, ctx: MigrationContext) -> Any:
    """What stays of an emptied `if`: nothing, unless its test does something.

    `if save_checkpoint(model, path): xm.mark_step()` still saves: the call stays as a
    statement. A test that calls something inside a larger expression keeps its `if`.
    """
    test = node.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and not test.lpar:
        test = test.expression
    if not has_effects(test, ctx.resolve_dotted):
        return ctx.remove(node)
    if isinstance(test, cst.Call | cst.Await):
        call = cst.Expr(test.with_changes(lpar=[], rpar=[]))
        return cst.SimpleStatementLine([call], leading_lines=node.leading_lines)
    return node


def with_imports_on_top(block: cst.IndentedBlock, lines: Sequence[str]) -> cst.IndentedBlock:
    """A function body with `lines` (imports) first, after its docstring."""
    body = list(block.body)
    first = body[0] if body else None
    docstring = (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
    at = 1 if docstring else 0
    new = [stmt(line + "\n") for line in lines]  # comments stay with the statement they precede
    return block.with_changes(body=[*body[:at], *new, *body[at:]])


class _Requoter(Transformer):
    """Turns `quote` into the other quote in the plain strings of an f-string's expressions."""

    def __init__(self, quote: str) -> None:
        super().__init__()
        self.quote = quote
        self.other = "'" if quote == '"' else '"'

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        return False  # a nested f-string has quotes of its own

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        if updated_node.quote != self.quote:
            return updated_node
        prefix = updated_node.prefix
        body = updated_node.value[len(prefix) + 1 : -1]
        if self.other in body or "\\" in body:
            return updated_node
        return updated_node.with_changes(value=f"{prefix}{self.other}{body}{self.other}")


def _same(a: Any, b: cst.CSTNode) -> bool:
    """Is `a` a copy of `b` holding the very same children and values?"""
    if type(a) is not type(b):
        return False
    for f in dataclasses.fields(b):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x is y:
            continue
        if not (isinstance(x, Sequence) and isinstance(y, Sequence) and not isinstance(x, str)):
            return False
        if len(x) != len(y) or any(i is not j for i, j in zip(x, y, strict=True)):
            return False
    return True


def requoted(node: cst.FormattedString) -> cst.FormattedString:
    """Before Python 3.12 an f-string's expressions cannot hold its own quote: a rewrite that put
    `torch.device("neuron")` into `f"{...}"` must say `torch.device('neuron')`."""
    quote = node.end
    if len(quote) != 1:
        return node  # a triple-quoted f-string takes either quote inside
    parts = [
        part.with_changes(expression=part.expression.visit(_Requoter(quote)))
        if isinstance(part, cst.FormattedStringExpression)
        else part
        for part in node.parts
    ]
    return node.with_changes(parts=parts)


class _NameCollector(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def names_read(nodes: Iterable[cst.CSTNode]) -> set[str]:
    collector = _NameCollector()
    for node in nodes:
        collector.scan(node)
    return collector.names
