"""NM003: `xm.optimizer_step` becomes `optimizer.step()`, keeping its gradient all-reduce."""

from __future__ import annotations

from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    arg_value,
    code_of,
    expr,
    has_star_args,
    stmt,
)
from neuron_migrate.rewrite.codemods.gradient_sync import FSDP, GradientSync, averaged_steps
from neuron_migrate.rewrite.codemods.references import ReferenceRenames
from neuron_migrate.rewrite.codemods.replica_groups import (
    MeshGroups,
    groups_argument,
    process_group,
)

OPTIMIZER_STEP = ("torch_xla.core.xla_model.optimizer_step",)
# Under SPMD one process drives every device: torch_xla's world is that one process, and
# `optimizer_step` averages over nothing.
USE_SPMD = "torch_xla.runtime.use_spmd"
REDUCE_GRADIENTS = ("torch_xla.core.xla_model.reduce_gradients",)
SYNCFREE = "torch_xla.amp.syncfree"
SYNCFREE_CLASSES = ("Adam", "AdamW", "SGD")

# Signals that the file runs as several processes, so `optimizer_step` did all-reduce.
MULTI_PROCESS_SIGNS = (
    "torch_xla.runtime.world_size",
    "torch_xla.runtime.global_ordinal",
    "torch_xla.core.xla_model.xrt_world_size",
    "torch_xla.core.xla_model.get_ordinal",
    "torch.utils.data.distributed.DistributedSampler",
    "torch.utils.data.DistributedSampler",
)

# Statements whose value is evaluated right where they stand, so a call before them runs just before it.
STATEMENT_VALUES = (cst.Expr, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return)

AVERAGE_GRADIENTS = '''\
def {name}(optimizer):
    """Average gradients across processes, as `xm.optimizer_step` did before stepping."""
    if not {dist}.is_initialized() or {dist}.get_world_size() == 1:
        return
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                {dist}.all_reduce(param.grad)
                param.grad /= {dist}.get_world_size()
'''

AVERAGE_GRADIENTS_IN_GROUP = '''\
def {name}(optimizer, group):
    """Average gradients over a replica group, as `xm.optimizer_step(..., groups=...)` did."""
    if not {dist}.is_initialized() or {dist}.get_world_size() == 1:
        return
    for param_group in optimizer.param_groups:
        for param in param_group["params"]:
            if param.grad is not None:
                {dist}.all_reduce(param.grad, group=group)
                # torch_xla divided the group's sum by the world size, not by the group size
                param.grad /= {dist}.get_world_size()
'''

# With tensor parallelism on a `DeviceMesh` the gradients of sharded parameters are DTensors:
# each rank averages its own shard over its data-parallel group.
AVERAGE_SHARDED_GRADIENTS_IN_GROUP = '''\
def {name}(optimizer, group):
    """Average gradients over a replica group, as `xm.optimizer_step(..., groups=...)` did; a
    tensor-parallel parameter's gradient is a DTensor, whose shard on this rank is averaged."""
    if not {dist}.is_initialized() or {dist}.get_world_size() == 1:
        return
    for param_group in optimizer.param_groups:
        for param in param_group["params"]:
            if param.grad is not None:
                grad = param.grad.to_local() if isinstance(param.grad, {DTensor}) else param.grad
                {dist}.all_reduce(grad, group=group)
                # torch_xla divided the group's sum by the world size, not by the group size
                grad /= {dist}.get_world_size()
'''


class XlaOptimizer(ReferenceRenames):
    """Rewrites `xm.optimizer_step`, `xm.reduce_gradients` and the syncfree optimizers.

    ## What it does
    `xm.optimizer_step(optimizer)` becomes `optimizer.step()`, preceded by a call to a small
    `average_gradients(optimizer)` helper, because `xm.optimizer_step` all-reduced the gradients
    whenever more than one process ran. The helper does nothing in a single process (no process
    group, or a world of one), so the same code is right in a helper module that cannot know how
    it is launched. `xm.reduce_gradients(optimizer)` becomes that helper call. Replica
    `groups=[[0, 1], [2, 3]]` average over the native process group holding this rank
    (`average_gradients_in_group(optimizer, replica_group(groups))`; `replica_group` creates
    each `dist.new_group` once, on every rank).
    `torch_xla.amp.syncfree.{Adam,AdamW,SGD}` become `torch.optim.{Adam,AdamW,SGD}` wherever
    they are named (`optimizer_class = AdamW` too), not only where they are called. Where the
    function that steps wraps the model in DDP or FSDP itself, where no branch decides it, and
    builds the optimizer from that model's parameters, the step is only `optimizer.step()`:
    `backward()` averaged already. A wrap anywhere else (under `if args.ddp:`, in a helper, around
    another model) keeps the average: on the runs it does not cover, nothing else averages.

    ## Why
    Dropping the hidden all-reduce silently trains each process on its own shard: the replicas
    drift apart and the loss looks fine. This is the most common silent migration bug.

    ## Example
    ```python
    loss.backward()
    xm.optimizer_step(optimizer)
    ```

    ## Use instead
    ```python
    loss.backward()
    average_gradients(optimizer)
    optimizer.step()
    ```
    Wrapping the model in `DistributedDataParallel` is the faster equivalent; where the stepping
    function already does, no helper is added.

    ## Fix safety
    Safe. The average goes right before the step, so only a step that is a statement of its
    own (`xm.optimizer_step(opt)`, `loss = ...`, `return ...`) is rewritten; one inside a
    lambda, a comprehension, a `while` test or a larger expression is left with a TODO, since
    averaging before that statement would run at the wrong time (or before `backward()`).
    `optimizer_args` becomes keyword arguments of `step()`; `barrier=True` and `pin_layout`
    are dropped (eager execution). With `groups=`, torch_xla divided the group's sum by the
    world size, not the group size, and so does the helper. A file that shards its data by rank
    but never creates a process group (torch_xla joined torchrun's processes by itself) gets a
    TODO at the step: until `dist.init_process_group()` is called, there is nothing to average over
    (none where a script migrated in the same run imports the file and creates the group).
    In a file that turns SPMD on (`xr.use_spmd()`, on every run), one process drove every device
    and the step averaged over nothing: it becomes `optimizer.step()` alone, and
    `xm.reduce_gradients` goes (NM026 averages a batch it splits over the data axis).
    A kept average after DDP averages gradients that are already equal, which changes nothing; after
    FSDP it would sum different shards, so in a file that shards with FSDP a kept average gets a
    TODO that says so.
    """

    code = "NM003"
    name = "xla-optimizer-step"
    summary = "`xm.optimizer_step` -> `optimizer.step()` (+ gradient all-reduce across processes)"
    triggers = (*OPTIMIZER_STEP, *REDUCE_GRADIENTS, SYNCFREE)
    manual: ClassVar[dict[str, str]] = {
        OPTIMIZER_STEP[0]: (
            "`{name}` averaged gradients: make the step a statement of its own, then migrate again"
        ),
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Calls that are the whole value of a one-statement line: the average can go just before.
        self._statement_calls: set[int] = set()
        self._synced = GradientSync()

    def visit_Module(self, node: cst.Module) -> None:
        self._synced = averaged_steps(node, self.qualify, (*OPTIMIZER_STEP, *REDUCE_GRADIENTS))

    @property
    def _spmd(self) -> bool:
        """The file turns SPMD on whenever it runs: the migrated program's processes average
        their gradients as its DTensor layouts say, not at the step."""
        return USE_SPMD in self.ctx.facts.always_called

    def _wrapper_averaged(self, call: cst.CSTNode) -> str | None:
        """"DDP" or "FSDP" where that wrapper averaged this step's gradients in `backward()`."""
        kind = self._synced.averaged.get(id(call))
        if kind is None and self.ctx.facts.uses(*FSDP):
            self.todo(
                "this file uses FSDP: if this optimizer steps FSDP-sharded parameters, drop the added gradient average"
            )
        return kind

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        small = node.body[0] if len(node.body) == 1 else None
        if isinstance(small, STATEMENT_VALUES) and isinstance(small.value, cst.Call):
            self._statement_calls.add(id(small.value))

    def _average(self, optimizer: str, groups: cst.BaseExpression | None) -> str:
        """The helper call that averages the gradients of `optimizer` (over `groups`, if any)."""
        facts = self.ctx.facts
        if facts.inits_process_group_sometimes and not facts.distributed:
            self.todo(
                "`init_process_group` runs only on some runs: create the process group on every run, or gradients are not averaged"
            )
        elif not facts.distributed and not self.ctx.group_made_by and facts.uses(*MULTI_PROCESS_SIGNS):
            # Under torchrun, torch_xla joined the processes without a process group; natively
            # the average needs one, and without it silently does nothing.
            self.todo(
                "several processes but no process group: call `dist.init_process_group()` at start-up, or gradients are not averaged"
            )
        if groups is None:
            name = self.ctx.unused_name("average_gradients")
            self.ctx.need_helper(name, AVERAGE_GRADIENTS.format(name=name, dist=self.ctx.dist()))
            return f"{name}({optimizer})"
        name = self.ctx.unused_name("average_gradients_in_group")
        if self.ctx.shared(MeshGroups).sharded_parameters:
            dtensor = self.ctx.need_from("torch.distributed.tensor", "DTensor")
            source = AVERAGE_SHARDED_GRADIENTS_IN_GROUP.format(name=name, dist=self.ctx.dist(), DTensor=dtensor)
        else:
            source = AVERAGE_GRADIENTS_IN_GROUP.format(name=name, dist=self.ctx.dist())
        self.ctx.need_helper(name, source)
        return f"{name}({optimizer}, {process_group(self.ctx, groups)})"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in OPTIMIZER_STEP:
            return self._optimizer_step(original_node, updated_node)
        return updated_node

    # -- sync-free optimizers: the plain `torch.optim` classes, wherever they are named ---------
    def native(self, qualified: str, node: cst.Name | cst.Attribute) -> str | None:
        """`syncfree.AdamW` (or `AdamW` imported from it) -> `torch.optim.AdamW`: the same update;
        torch_xla's version only spared a host sync when a gradient scaler found no inf."""
        if not (qualified.startswith(SYNCFREE + ".") and qualified.rsplit(".", 1)[-1] in SYNCFREE_CLASSES):
            return None
        return f"{self.ctx.torch()}.optim.{qualified.rsplit('.', 1)[-1]}"

    def _optimizer_step(self, original: cst.Call, call: cst.Call) -> cst.BaseExpression:
        optimizer = arg_value(call, 0, "optimizer")
        if optimizer is None or has_star_args(call):
            return call
        opt = code_of(optimizer.value)
        target = opt if isinstance(optimizer.value, cst.Name | cst.Attribute) else f"({opt})"
        step = f"{target}.step({_step_arguments(call)})"
        groups = groups_argument(call, 3)
        if self._spmd:
            self.changed(f"`xm.optimizer_step({opt})` -> `{target}.step()` (under SPMD it averaged over one process)")
            return expr(step)
        if id(original) not in self._statement_calls and id(original) not in self._synced.averaged:
            return call  # a TODO from the manual table says why
        wrapper = self._wrapper_averaged(original) if groups is None else None
        if wrapper is not None:
            self.changed(f"`xm.optimizer_step({opt})` -> `{target}.step()` ({wrapper} averaged the gradients)")
            return expr(step)
        if id(original) not in self._statement_calls:
            return call  # a TODO from the manual table says why
        self.ctx.insert_before(stmt(f"{self._average(target, groups)}\n"))
        self.changed(f"`xm.optimizer_step({opt})` -> `{target}.step()` after averaging gradients across processes")
        return expr(step)

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not (isinstance(call, cst.Call) and self.qualify(call.func) in REDUCE_GRADIENTS):
            return updated_node
        optimizer = arg_value(call, 0, "optimizer")
        if optimizer is None or has_star_args(call):
            return updated_node
        if self._spmd:
            self.changed("removed `xm.reduce_gradients`: under SPMD it averaged over one process")
            return self.ctx.remove(updated_node)
        groups = groups_argument(call, 1)
        wrapper = self._wrapper_averaged(original_node.value) if groups is None else None
        if wrapper is not None:
            self.changed(f"removed `xm.reduce_gradients`: {wrapper} already averaged the gradients")
            return self.ctx.remove(updated_node)
        self.changed("`xm.reduce_gradients(opt)` -> `average_gradients(opt)`")
        return updated_node.with_changes(value=expr(self._average(code_of(optimizer.value), groups)))


def _step_arguments(call: cst.Call) -> str:
    """`optimizer_args={"closure": c}` as the keyword arguments of `step()`."""
    extra = arg_value(call, 2, "optimizer_args")
    if extra is None:
        return ""
    value = extra.value
    if isinstance(value, cst.Dict) and all(
        isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) for e in value.elements
    ):
        return ", ".join(
            f"{e.key.evaluated_value}={code_of(e.value)}"  # type: ignore[attr-defined]
            for e in value.elements
            if isinstance(e, cst.DictElement)
        )
    return f"**{code_of(value)}"
