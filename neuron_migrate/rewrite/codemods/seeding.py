"""Which device seedings a host seeding of the same value has just done already.

`xm.set_rng_state(seed)` seeded the XLA device's generator only; `torch.manual_seed(seed)` seeds
the host's and every device's. Natively the device seeding becomes one of the device's generator
alone, unless the same seed was given to `torch.manual_seed` (or a seeding helper that calls it)
just before, with nothing in between that draws random numbers: then the device is seeded
already, and the call has nothing left to do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor, code_of

# Seed the host's generator and every device's with their first argument.
HOST_SEEDERS = frozenset({
    "torch.manual_seed",
    "torch.random.manual_seed",
    "transformers.set_seed",
    "transformers.trainer_utils.set_seed",
    "accelerate.utils.set_seed",
    "lightning.seed_everything",
    "lightning.pytorch.seed_everything",
    "pytorch_lightning.seed_everything",
})
# Seed other generators only: another device's, Python's, NumPy's.
OTHER_SEEDERS = frozenset({
    "torch.cuda.manual_seed",
    "torch.cuda.manual_seed_all",
    "torch.xpu.manual_seed",
    "torch.xpu.manual_seed_all",
    "torch.mps.manual_seed",
})

Qualify = Callable[[cst.CSTNode], str | None]


def seeded_already(module: cst.Module, qualify: Qualify, seedings: Iterable[str]) -> set[int]:
    """The ids of the device seeding calls in `module` (`seedings`) that follow a host seeding of
    the same value."""
    finder = _Blocks(qualify, frozenset(seedings))
    finder.scan(module)
    return finder.found


class _Blocks(Visitor):
    def __init__(self, qualify: Qualify, seedings: frozenset[str]) -> None:
        self.qualify = qualify
        self.seedings = seedings
        self.found: set[int] = set()
        # The blocks around the one being read, each with the statement that holds it.
        self.outer: list[tuple[Sequence[cst.BaseStatement], int]] = []

    def visit_Module(self, node: cst.Module) -> None:
        self._block(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        return False  # read by `_block`, with what surrounds it

    def _block(self, body: Sequence[cst.BaseStatement]) -> None:
        for position, statement in enumerate(body):
            call = self._seeding(statement)
            if call is not None and self._host_seeded_before(code_of(call.args[0].value), body, position):
                self.found.add(id(call))
            for inner in _blocks_of(statement):
                self.outer.append((body, position))
                self._block(inner)
                self.outer.pop()

    def _seeding(self, statement: cst.BaseStatement) -> cst.Call | None:
        call = _expression_call(statement)
        return call if call is not None and call.args and self.qualify(call.func) in self.seedings else None

    def _host_seeded_before(self, seed: str, body: Sequence[cst.BaseStatement], position: int) -> bool:
        levels = [*self.outer, (body, position)]
        while levels:
            block, at = levels.pop()
            for statement in reversed(block[:at]):
                call = _expression_call(statement)
                if call is not None and self.qualify(call.func) in HOST_SEEDERS and call.args:
                    return code_of(call.args[0].value) == seed
                if not self._draws_nothing(statement):
                    return False
            if levels:
                holder = levels[-1][0][levels[-1][1]]
                if not (isinstance(holder, cst.If) and self._draws_nothing_in(holder.test)):
                    return False  # a loop or a function: what ran before it is not "just before"
        return False

    def _draws_nothing(self, statement: cst.BaseStatement) -> bool:
        """A line of calls, or of assignments of their results, that leave torch's generators
        alone: of other libraries (`device = xm.xla_device()`), `print`, other generators' seeding."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        return all(
            isinstance(small, cst.Expr | cst.Assign | cst.AnnAssign) and small.value is not None and self._draws_nothing_in(small.value)
            for small in statement.body
        )

    def _draws_nothing_in(self, node: cst.CSTNode) -> bool:
        calls = _Calls()
        calls.scan(node)
        for call in calls.found:
            name = self.qualify(call.func)
            if name is None:
                if not (isinstance(call.func, cst.Name) and call.func.value == "print"):
                    return False
            elif name.split(".")[0] == "torch" and name not in OTHER_SEEDERS:
                return False
        return True


def _expression_call(statement: cst.BaseStatement) -> cst.Call | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.value
    return None


def _blocks_of(statement: cst.BaseStatement) -> list[Sequence[cst.BaseStatement]]:
    """The statement lists a compound statement holds: its body, `else`, `elif`s, handlers."""
    found: list[Sequence[cst.BaseStatement]] = []
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.IndentedBlock):
            found.append(node.body)
            continue
        if isinstance(node, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            continue
        for name in ("body", "orelse", "handlers", "finalbody", "cases"):
            child = getattr(node, name, None)
            if isinstance(child, cst.CSTNode):
                stack.append(child)
            elif isinstance(child, Sequence):
                stack.extend(c for c in child if isinstance(c, cst.CSTNode))
    return found[::-1]


class _Calls(Visitor):
    def __init__(self) -> None:
        self.found: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.found.append(node)
