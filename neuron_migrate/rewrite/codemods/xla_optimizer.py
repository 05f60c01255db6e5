"""NM003: `xm.optimizer_step` becomes `optimizer.step()`, keeping its gradient all-reduce."""

from __future__ import annotations

from typing import Any

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Codemod, arg_value, code_of, expr, stmt

OPTIMIZER_STEP = ("torch_xla.core.xla_model.optimizer_step",)
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

AVERAGE_GRADIENTS = '''\
def average_gradients(optimizer):
    """Average gradients across processes, as `xm.optimizer_step` did before stepping."""
    if not {dist}.is_initialized() or {dist}.get_world_size() == 1:
        return
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                {dist}.all_reduce(param.grad)
                param.grad /= {dist}.get_world_size()
'''


class XlaOptimizer(Codemod):
    """Rewrites `xm.optimizer_step`, `xm.reduce_gradients` and the syncfree optimizers.

    ## What it does
    `xm.optimizer_step(optimizer)` becomes `optimizer.step()`. In a file that runs several
    processes (it spawns them, initializes a process group, or shards data by rank) and does
    not wrap the model in DDP/FSDP, a call to a small `average_gradients(optimizer)` helper
    is inserted before the step, because `xm.optimizer_step` all-reduced the gradients across
    replicas. `xm.reduce_gradients(optimizer)` becomes that helper call.
    `torch_xla.amp.syncfree.{Adam,AdamW,SGD}` become `torch.optim.{Adam,AdamW,SGD}`.

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
    Wrapping the model in `DistributedDataParallel` is the faster equivalent; when the file
    already does, no helper is added.

    ## Fix safety
    Safe. `optimizer_args` becomes keyword arguments of `step()`; `barrier=True` is dropped
    (eager execution); replica `groups=` get a TODO. A file that shards its data by rank but
    never creates a process group (torch_xla joined torchrun's processes by itself) gets a TODO
    at the step: until `dist.init_process_group()` is called, the helper has nothing to average
    over.
    """

    code = "NM003"
    name = "xla-optimizer-step"
    summary = "`xm.optimizer_step` -> `optimizer.step()` (+ gradient all-reduce across processes)"
    triggers = (*OPTIMIZER_STEP, *REDUCE_GRADIENTS, SYNCFREE)

    def _multi_process(self) -> bool:
        facts = self.ctx.facts
        return facts.distributed or facts.uses(*MULTI_PROCESS_SIGNS)

    def _sync_gradients(self, optimizer: str) -> bool:
        """Ask for the all-reduce before the step; False when nothing is needed."""
        if self.ctx.facts.syncs_gradients or not self._multi_process():
            return False
        self._check_process_group()
        helper = self.ctx.need_helper("average_gradients", AVERAGE_GRADIENTS.format(dist=self.ctx.dist()))
        self.ctx.insert_before(stmt(f"{helper}({optimizer})\n"))
        return True

    def _check_process_group(self) -> None:
        """Under torchrun, torch_xla joined the processes without a process group; native
        collectives need one, and without it the gradient average silently does nothing."""
        if not self.ctx.facts.distributed:
            self.todo(
                "this file runs as several processes but creates no process group: call "
                "`dist.init_process_group()` at start-up (torchrun provides the rendezvous), or gradients are not averaged"
            )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in OPTIMIZER_STEP:
            return self._optimizer_step(updated_node)
        if name and name.startswith(SYNCFREE + ".") and name.rsplit(".", 1)[-1] in SYNCFREE_CLASSES:
            cls = name.rsplit(".", 1)[-1]
            self.changed(f"`{code_of(updated_node.func)}` -> `torch.optim.{cls}`")
            return updated_node.with_changes(func=expr(f"{self.ctx.torch()}.optim.{cls}"))
        return updated_node

    def _optimizer_step(self, call: cst.Call) -> cst.BaseExpression:
        optimizer = arg_value(call, 0, "optimizer")
        if optimizer is None:
            return call
        opt = code_of(optimizer.value)
        if arg_value(call, None, "groups") is not None:
            self.todo("`groups=` limited the gradient all-reduce to replica groups; reduce over a `dist.new_group(...)` instead")
        step_args = ""
        extra = arg_value(call, 2, "optimizer_args")
        if extra is not None:
            value = extra.value
            if isinstance(value, cst.Dict) and all(
                isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) for e in value.elements
            ):
                step_args = ", ".join(
                    f"{e.key.evaluated_value}={code_of(e.value)}"  # type: ignore[attr-defined]
                    for e in value.elements
                    if isinstance(e, cst.DictElement)
                )
            else:
                step_args = f"**{code_of(value)}"
        target = opt if isinstance(optimizer.value, cst.Name | cst.Attribute) else f"({opt})"
        synced = self._sync_gradients(target)
        what = " after averaging gradients across processes" if synced else ""
        self.changed(f"`xm.optimizer_step({opt})` -> `{target}.step()`{what}")
        return expr(f"{target}.step({step_args})")

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not (isinstance(call, cst.Call) and self.qualify(call.func) in REDUCE_GRADIENTS):
            return updated_node
        optimizer = arg_value(call, 0, "optimizer")
        if optimizer is None:
            return updated_node
        if self.ctx.facts.syncs_gradients:
            self.changed("removed `xm.reduce_gradients`: DDP/FSDP already averages gradients")
            return self.ctx.remove(updated_node)
        if self._multi_process():
            self._check_process_group()
        helper = self.ctx.need_helper("average_gradients", AVERAGE_GRADIENTS.format(dist=self.ctx.dist()))
        self.changed("`xm.reduce_gradients(opt)` -> `average_gradients(opt)`")
        return updated_node.with_changes(value=expr(f"{helper}({code_of(optimizer.value)})"))
