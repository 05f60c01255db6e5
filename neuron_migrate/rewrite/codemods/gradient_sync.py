"""Which optimizer steps a DDP or FSDP wrapper already averaged the gradients for.

`xm.optimizer_step` all-reduced the gradients whenever several processes ran. After a
`DistributedDataParallel` or FSDP wrapper, `backward()` has done that (FSDP's gradients are even
shards, which must not be all-reduced again), so the step alone is what remains. That holds only
where the wrapper surely averaged *this* optimizer's gradients on *this* run: the function that
steps wraps the model where no branch decides it (`model = DDP(model)`, `fully_shard(model)`) and
builds the optimizer from that model's `parameters()`, both before the step, and rebinds neither
afterwards. A wrapper anywhere else (in a helper, under `if args.ddp:`, around another model)
proves nothing about this step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor, arg_value, is_main_guard

DDP = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
)
FSDP = (
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard",
    "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel",
    "torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel",
)
# FSDP2 shards the module it is given in place: `fully_shard(model)` wraps `model` itself.
IN_PLACE = frozenset({"torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard"})

Qualify = Callable[[cst.CSTNode], str | None]


@dataclass
class GradientSync:
    # Step calls (`xm.optimizer_step(opt)`, `xm.reduce_gradients(opt)`), by id, whose optimizer's
    # gradients a wrapper averaged: "DDP" or "FSDP".
    averaged: dict[int, str] = field(default_factory=dict)


def averaged_steps(module: cst.Module, qualify: Qualify, steps: Iterable[str]) -> GradientSync:
    found = GradientSync()
    finder = _Functions(qualify, frozenset(steps), found)
    finder.body(_run_by_module(module.body))
    finder.scan(module)
    return found


def _run_by_module(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The module's own statements, with those under `if __name__ == "__main__":` in its place."""
    statements: list[cst.BaseStatement] = []
    for statement in body:
        if isinstance(statement, cst.If) and statement.orelse is None and is_main_guard(statement.test):
            statements.extend(statement.body.body)  # type: ignore[arg-type]
        else:
            statements.append(statement)
    return statements


class _Functions(Visitor):
    """Each function body in turn (the module's own is done first, by `body`)."""

    def __init__(self, qualify: Qualify, steps: frozenset[str], found: GradientSync) -> None:
        self.qualify = qualify
        self.steps = steps
        self.found = found

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if isinstance(node.body, cst.IndentedBlock):
            self.body(node.body.body)

    def body(self, statements: Sequence[cst.BaseStatement]) -> None:
        assigned = _Assignments()
        for position, statement in enumerate(statements):
            assigned.at = position
            assigned.scan(statement)
        wrapped: dict[str, tuple[int, str]] = {}  # model name -> (statement, wrapper)
        optimizers: dict[str, tuple[int, str]] = {}  # optimizer name -> (statement, model name)
        for position, statement in enumerate(statements):
            for name, wrapper in self._wraps(statement):
                wrapped[name] = (position, wrapper)
            built = self._builds_optimizer(statement)
            if built is not None:
                optimizers[built[0]] = (position, built[1])
            for call in _calls(statement, self.steps, self.qualify):
                optimizer = arg_value(call, 0, "optimizer")
                if optimizer is None or not isinstance(optimizer.value, cst.Name):
                    continue
                kind = self._averaged(optimizer.value.value, position, wrapped, optimizers, assigned)
                if kind is not None:
                    self.found.averaged[id(call)] = kind

    def _averaged(
        self,
        optimizer: str,
        step: int,
        wrapped: dict[str, tuple[int, str]],
        optimizers: dict[str, tuple[int, str]],
        assigned: _Assignments,
    ) -> str | None:
        if optimizer not in optimizers:
            return None
        built, model = optimizers[optimizer]
        if model not in wrapped:
            return None
        wrap, kind = wrapped[model]
        # The optimizer is assigned once; the model last by its wrap, and both before the step.
        if assigned.where(optimizer) != [built] or max(assigned.where(model), default=wrap) > wrap:
            return None
        return kind if built < step and wrap < step else None

    def _wraps(self, statement: cst.BaseStatement) -> list[tuple[str, str]]:
        """`model = DDP(...)`, `model = fully_shard(m)` and `fully_shard(model)`: (name, wrapper)."""
        small = _only_small(statement)
        value = small.value if isinstance(small, cst.Assign | cst.Expr) else None
        if not isinstance(value, cst.Call):
            return []
        name = self.qualify(value.func)
        kind = "DDP" if name in DDP else "FSDP" if name in FSDP else None
        if kind is None:
            return []
        found = []
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            found.append((small.targets[0].target.value, kind))
        module = arg_value(value, 0, "module")
        if name in IN_PLACE and module is not None and isinstance(module.value, cst.Name):
            found.append((module.value.value, kind))
        return found

    def _builds_optimizer(self, statement: cst.BaseStatement) -> tuple[str, str] | None:
        """`optimizer = Optimizer(model.parameters(), ...)`: (optimizer name, model name)."""
        small = _only_small(statement)
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call)):
            return None
        target = small.targets[0].target
        params = arg_value(small.value, 0, "params")
        if not isinstance(target, cst.Name) or params is None:
            return None
        value = params.value
        if not (
            isinstance(value, cst.Call)
            and not value.args
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "parameters"
            and isinstance(value.func.value, cst.Name)
        ):
            return None
        return target.value, value.func.value.value


def _only_small(statement: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        return statement.body[0]
    return None


class _Assignments(Visitor):
    """Where each name is bound in one function body: the numbers of its top-level statements."""

    def __init__(self) -> None:
        self.at = 0  # the statement being read
        self.names: dict[str, list[int]] = {}

    def where(self, name: str) -> list[int]:
        return self.names.get(name, [])

    def _bind(self, target: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            self.names.setdefault(target.value, []).append(self.at)
        elif isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._bind(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._bind(node.name)

    def visit_Del(self, node: cst.Del) -> None:
        self._bind(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._bind(node.name)
        return False  # its body binds names of its own

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._bind(node.name)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _calls(statement: cst.CSTNode, names: frozenset[str], qualify: Qualify) -> list[cst.Call]:
    """The calls of `names` in `statement`, outside the functions and classes it defines."""
    finder = _StepCalls(names, qualify)
    finder.scan(statement)
    return finder.found


class _StepCalls(Visitor):
    def __init__(self, names: frozenset[str], qualify: Qualify) -> None:
        self.names = names
        self.qualify = qualify
        self.found: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.qualify(node.func) in self.names:
            self.found.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False
