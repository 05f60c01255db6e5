"""Which step boundaries fence a timer: the next thing the program does is read the clock.

Under torch_xla, `xm.mark_step()` followed by `time.perf_counter()` made the time include the
step's work. Natively, ops run asynchronously on an accelerator, so without a synchronize the
clock would be read while the device is still busy and the measurement would silently shrink.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor

TIMERS = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.process_time",
        "timeit.default_timer",
    }
)

Qualify = Callable[[cst.CSTNode], str | None]


@dataclass
class TimerFences:
    # `fence()` statements the clock is read right after, by id: whether more of their line
    # follows them (`xm.mark_step(); t = time.time()`).
    statements: dict[int, bool] = field(default_factory=dict)
    # Loops whose every step ends with a fence and that the clock is read right after, by id:
    # one wait after the loop is what the timing needs, not one per step.
    loops: set[int] = field(default_factory=set)


def fences_before_timer(node: cst.Module | cst.FunctionDef, qualify: Qualify, fences: Sequence[str]) -> TimerFences:
    """The fences of the module or function `node` the clock is read right after; `qualify`
    resolves names where `node`'s own statements run (a function may import torch_xla itself)."""
    finder = _Fences(qualify, frozenset(fences))
    finder.block(node.body if isinstance(node, cst.Module) else _statements(node.body), None)
    return finder.found


def fence_only(function: cst.FunctionDef, qualify: Qualify, fences: Sequence[str]) -> list[int]:
    """The fences of a function that does nothing else (`def sync(): torch_xla.sync()`, maybe
    behind an `if` and an import), by id: it exists to make its callers wait, which they may do
    before reading the clock. Empty for any other function."""
    found: list[int] = []

    def only_fences(body: Sequence[cst.CSTNode]) -> bool:
        for statement in body:
            if isinstance(statement, cst.SimpleStatementLine):
                if not only_fences(statement.body):
                    return False
            elif isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
                if qualify(statement.value.func) not in fences:
                    return False
                found.append(id(statement))
            elif isinstance(statement, cst.If) and not isinstance(statement.orelse, cst.Else | cst.If):
                if not only_fences(_statements(statement.body)):
                    return False
            elif not isinstance(statement, cst.Import | cst.ImportFrom | cst.Pass) and not (
                isinstance(statement, cst.Expr) and isinstance(statement.value, cst.SimpleString)
            ):
                return False
        return True

    return found if only_fences(_statements(function.body)) and found else []


class _Fences:
    def __init__(self, qualify: Qualify, fences: frozenset[str]) -> None:
        self.qualify = qualify
        self.fences = fences
        self.found = TimerFences()

    def block(self, body: Sequence[cst.CSTNode], after: cst.CSTNode | None) -> None:
        """Statements of one block; `after` runs when the block is done (None: unknown)."""
        for k, statement in enumerate(body):
            following = body[k + 1] if k + 1 < len(body) else after
            if isinstance(statement, cst.SimpleStatementLine):
                self.block(statement.body, following)
            elif isinstance(statement, cst.Expr):
                if self._is_fence(statement) and self._reads_timer(following):
                    self.found.statements[id(statement)] = k + 1 < len(body)
            elif isinstance(statement, cst.FunctionDef | cst.ClassDef):
                self.block(_statements(statement.body), None)
            elif isinstance(statement, cst.For | cst.While) and self._ends_with_fence(statement):
                if self._reads_timer(following):
                    self.found.loops.add(id(statement))
                for inner in _blocks(statement):
                    self.block(inner, None)
            elif isinstance(statement, cst.BaseCompoundStatement):
                for inner in _blocks(statement):
                    self.block(inner, following)

    def _ends_with_fence(self, loop: cst.For | cst.While) -> bool:
        last = _statements(loop.body)[-1]
        if isinstance(last, cst.SimpleStatementLine):
            last = last.body[-1]
        return isinstance(last, cst.Expr) and self._is_fence(last)

    def _is_fence(self, statement: cst.Expr) -> bool:
        return (
            isinstance(statement.value, cst.Call)
            and self.qualify(statement.value.func) in self.fences
        )

    def _reads_timer(self, node: cst.CSTNode | None) -> bool:
        if node is None:
            return False
        reader = _TimerRead(self.qualify)
        reader.scan(node)
        return reader.found


class _TimerRead(Visitor):
    def __init__(self, qualify: Qualify) -> None:
        super().__init__()
        self.qualify = qualify
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if self.qualify(node.func) in TIMERS:
            self.found = True
        return not self.found

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # defining a function reads no clock

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _statements(body: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    return body.body


def _blocks(statement: cst.BaseCompoundStatement) -> list[Sequence[cst.CSTNode]]:
    """The blocks of a compound statement: its body, and those of `elif`, `else`, `except`, `finally`."""
    if isinstance(statement, cst.Match):
        return [_statements(case.body) for case in statement.cases]
    blocks = [_statements(statement.body)]
    for name in ("orelse", "handlers", "finalbody"):
        part = getattr(statement, name, None)
        parts = part if isinstance(part, Sequence) else [part] if part is not None else []
        for clause in parts:
            if isinstance(clause, cst.If):
                blocks.extend(_blocks(clause))
            else:
                blocks.append(_statements(clause.body))
    return blocks
