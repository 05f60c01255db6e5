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

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Codemod, Frame, MigrationContext, dotted_name

_STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
# Where an expression needs no parentheses of its own.
_VALUE_HOLDERS = (cst.Assign, cst.AnnAssign, cst.Arg, cst.Return, cst.Expr, cst.If, cst.While)


def todo_line(code: str, message: str) -> cst.EmptyLine:
    return cst.EmptyLine(comment=cst.Comment(f"# TODO(neuron-migrate {code}): {message}"))


def add_todos(
    node: cst.CSTNode, todos: Sequence[tuple[str, str]], comments: Sequence[str] = ()
) -> cst.CSTNode:
    """Add comments and TODOs above a statement, skipping any it already carries (idempotence)."""
    if not (todos or comments) or not hasattr(node, "leading_lines"):
        return node
    existing = {line.comment.value for line in node.leading_lines if line.comment is not None}
    new = [cst.EmptyLine(comment=cst.Comment(text)) for text in comments]
    new += [todo_line(c, m) for c, m in todos]
    new = [line for line in new if line.comment is not None and line.comment.value not in existing]
    if not new:
        return node
    return node.with_changes(leading_lines=[*node.leading_lines, *new])


def _merge_leading(carried: list[cst.EmptyLine], own: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    if any(line.comment is not None for line in carried):
        return [*carried, *own]
    return list(own) if own else carried


class StatementHeaderVisitor(cst.CSTVisitor):
    """Visits one statement only: a compound statement's header, never its body or imports."""

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return False

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False


class _LeftoverFinder(StatementHeaderVisitor):
    """Collects old-stack names still referenced in one statement (its header, for compounds)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.found: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        dotted = dotted_name(node)
        if dotted and dotted.split(".")[0] in self.names:
            self.found.append(dotted)
            return False
        node.value.visit(self)  # `torch.autocast` is not the old `autocast`: skip `.attr`
        return False

    def visit_Call(self, node: cst.Call) -> bool:
        """One TODO per call: `xm.all_reduce(xm.REDUCE_SUM, t)` is one item, not two."""
        dotted = dotted_name(node.func)
        if dotted and dotted.split(".")[0] in self.names:
            self.found.append(dotted)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names:
            self.found.append(node.value)


class Dispatcher(cst.CSTTransformer):
    def __init__(
        self,
        ctx: MigrationContext,
        codemods: Sequence[Codemod],
        old_stack_names: Iterable[str],
        manual_messages: Callable[[str], tuple[str, str] | None],
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.old_stack_names = frozenset(old_stack_names)
        self.manual_messages = manual_messages
        self._visits: dict[str, list[Callable[..., Any]]] = defaultdict(list)
        self._leaves: dict[str, list[Callable[..., Any]]] = defaultdict(list)
        for codemod in codemods:
            for attr in dir(type(codemod)):
                if attr.startswith("visit_") and attr.count("_") == 1:
                    self._visits[attr[6:]].append(getattr(codemod, attr))
                elif attr.startswith("leave_") and attr.count("_") == 1:
                    self._leaves[attr[6:]].append(getattr(codemod, attr))
        self._saw_old_name: list[bool] = []
        self._import_depth = 0

    # -- traversal ------------------------------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _STATEMENT_TYPES):
            self.ctx.frames.append(Frame())
            self._saw_old_name.append(False)
        elif isinstance(node, cst.Import | cst.ImportFrom):
            self._import_depth += 1
        elif (
            isinstance(node, cst.Name)
            and node.value in self.old_stack_names
            and self._saw_old_name
            and not self._import_depth
        ):
            self._saw_old_name[-1] = True
        for fn in self._visits.get(type(node).__name__, ()):
            fn(node)
        return True

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        result: Any = updated_node
        for fn in self._leaves.get(type(original_node).__name__, ()):
            result = fn(original_node, result)
            if type(result) is not type(original_node):
                break
        if isinstance(original_node, cst.Import | cst.ImportFrom):
            self._import_depth -= 1
        if isinstance(result, _VALUE_HOLDERS):
            result = self._ungroup(result)
        if isinstance(result, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            result = self._sweep_small(result)
        if isinstance(original_node, _STATEMENT_TYPES):
            result = self._finish_statement(result)
        if isinstance(result, cst.Module | cst.IndentedBlock):
            result = sweep_block(result, self.ctx.removed, self.ctx.placeholders)
        return result

    def _ungroup(self, node: Any) -> Any:
        field = "test" if isinstance(node, cst.If | cst.While) else "value"
        value = getattr(node, field, None)
        if value is not None and id(value) in self.ctx.grouped and len(value.lpar) == 1:
            return node.with_changes(**{field: value.with_changes(lpar=[], rpar=[])})
        return node

    # -- statements -----------------------------------------------------------------------------
    def _finish_statement(self, result: Any) -> Any:
        frame = self.ctx.frames.pop()
        if emptied_if(result, self.ctx.placeholders):
            # Its test only guarded what was removed (a metrics print on rank 0, say).
            self.ctx.remove(result)
        saw_old = self._saw_old_name.pop()
        if saw_old and isinstance(result, _STATEMENT_TYPES) and id(result) not in self.ctx.removed:
            self._mark_leftovers(result, frame)
        nodes: list[Any]
        if isinstance(result, cst.FlattenSentinel):
            nodes = list(result.nodes)
        elif isinstance(result, cst.RemovalSentinel):
            nodes = []
        else:
            nodes = [result]
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
                nodes = [*frame.before, *nodes, *frame.after]
            if leading and nodes:
                nodes[0] = nodes[0].with_changes(
                    leading_lines=[*leading, *getattr(nodes[0], "leading_lines", ())]
                )
        if frame.todos or frame.comments:
            if nodes:
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
                    small.visit(finder)
        else:
            node.visit(finder)
        for dotted in dict.fromkeys(finder.found):
            qualified = self.ctx.imports.resolve_dotted(dotted) or dotted
            manual = self.manual_messages(qualified)
            if manual is None:
                continue
            code, message = manual
            message = message.replace("{name}", dotted) if "{name}" in message else f"`{dotted}`: {message}"
            if (code, message) not in frame.todos:
                frame.todos.append((code, message))

    def _sweep_small(self, node: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> Any:
        kept = [s for s in node.body if id(s) not in self.ctx.removed]
        if len(kept) == len(node.body):
            return node
        if not kept:
            if isinstance(node, cst.SimpleStatementSuite):
                return node.with_changes(body=[cst.Pass()])
            return self.ctx.remove(node)
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(body=kept)


def sweep_block(
    node: cst.Module | cst.IndentedBlock,
    removed: dict[int, cst.CSTNode],
    placeholders: dict[int, cst.CSTNode] | None = None,
) -> Any:
    """Drop removed statements; their comments move to the next statement, or to the footer."""
    if not any(id(s) in removed for s in node.body):
        return node
    body: list[Any] = []
    carried: list[cst.EmptyLine] = []
    statement: Any
    for statement in node.body:
        if id(statement) in removed:
            carried.extend(getattr(statement, "leading_lines", ()))
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
    """An `if` whose whole body the migration removed, with no `else`: it can go too."""
    return (
        isinstance(node, cst.If)
        and node.orelse is None
        and isinstance(node.body, cst.IndentedBlock)
        and len(node.body.body) == 1
        and id(node.body.body[0]) in placeholders
        and not node.body.footer
    )
