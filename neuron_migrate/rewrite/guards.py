"""Two `if rank == 0:` blocks in a row, one of them written by the rewrite, become one block.

`xm.is_master_ordinal()` and `xm.save` (which wrote from the main process only) both turn into a
test of the rank; one after the other they would repeat it, as nobody writing the code by hand
would. The blocks are joined only where that cannot change what runs: the test reads the rank
and nothing else (no call but `get_rank()`, `is_initialized()`, `os.environ.get(...)`, `int(...)`),
and the first block does not touch any name the test reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor

# The calls a rank test may make: none of them has an effect, nor changes between two statements.
_PURE_CALLS = frozenset({"get_rank", "is_initialized", "get_world_size", "get", "int"})


class _Names(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.impure = False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if name not in _PURE_CALLS:
            self.impure = True


def _names(node: cst.CSTNode) -> _Names:
    found = _Names()
    found.scan(node)
    return found


_EMPTY_MODULE = cst.Module(body=[])


def _joinable(first: Any, second: Any) -> bool:
    if not (type(first) is cst.If and type(second) is cst.If):
        return False
    if first.orelse is not None or second.orelse is not None:
        return False
    if not (type(first.body) is cst.IndentedBlock and type(second.body) is cst.IndentedBlock):
        return False
    if second.body.header.comment is not None:
        return False
    code = _EMPTY_MODULE.code_for_node
    if code(first.test) != code(second.test):
        return False
    test = _names(first.test)
    if test.impure:
        return False
    return not (_names(first.body).names & (test.names - {"int"}))


def _joined(first: cst.If, second: cst.If) -> cst.If:
    assert isinstance(first.body, cst.IndentedBlock) and isinstance(second.body, cst.IndentedBlock)
    moved = [*(line for line in first.body.footer if line.comment is not None), *second.leading_lines]
    inner: list[Any] = list(second.body.body)
    if moved:
        inner[0] = inner[0].with_changes(leading_lines=[*moved, *inner[0].leading_lines])
    body = first.body.with_changes(body=[*first.body.body, *inner], footer=second.body.footer)
    return first.with_changes(body=body)


def join_guards(block: Any, written: Iterable[int]) -> Any:
    """`block` (a module or indented block) with each guard the rewrite wrote (ids in `written`)
    joined to a guard with the same test right before or after it."""
    ours = set(written)
    statements = list(block.body)
    if not any(id(s) in ours for s in statements):
        return block
    out: list[Any] = []
    for statement in statements:
        previous = out[-1] if out else None
        if previous is not None and (id(previous) in ours or id(statement) in ours) and _joinable(previous, statement):
            out[-1] = _joined(previous, statement)
            ours.add(id(out[-1]))
            continue
        out.append(statement)
    if len(out) == len(statements):
        return block
    return block.with_changes(body=out)
