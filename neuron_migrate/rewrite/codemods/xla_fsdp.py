"""NM014: torch_xla's FSDP wrapper becomes FSDP2 `fully_shard`; its ZeRO-1 optimizer becomes
`torch.distributed.optim.ZeroRedundancyOptimizer`, with the gradient averaging and clipping that
torch_xla's `step()` did itself."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from string import Template
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.core.oldstack import PRECISION
from neuron_migrate.rewrite.codemods.base import (
    arg_value,
    code_of,
    dotted_name,
    expr,
    fix_trailing_comma,
    stmt,
)
from neuron_migrate.rewrite.codemods.optimum.support import one_per_line
from neuron_migrate.rewrite.codemods.references import ReferenceRenames

FSDP_PACKAGE = "torch_xla.distributed.fsdp"
FSDP_CLASSES = (
    f"{FSDP_PACKAGE}.XlaFullyShardedDataParallel",
    f"{FSDP_PACKAGE}.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel",
)
TRANSFORMER_POLICY = f"{FSDP_PACKAGE}.transformer_auto_wrap_policy"
# torch_xla's wrap policies: torch's FSDP keeps the same functions, called the same way
# (`policy(module, recurse, numel)`), in `torch.distributed.fsdp.wrap`.
WRAP_POLICIES = ("size_based_auto_wrap_policy", "transformer_auto_wrap_policy", "lambda_auto_wrap_policy", "always_wrap_policy")
NATIVE_POLICIES = {
    f"{package}.{policy}": policy for policy in WRAP_POLICIES for package in (FSDP_PACKAGE, f"{FSDP_PACKAGE}.wrap")
}
SHARD_BY_POLICY = '''\
def $name(module, policy, **options):
    """`fully_shard` the submodules `policy` picks, innermost first, then `module`: the auto-wrap
    walk of torch_xla's FSDP (`policy(module, recurse, unwrapped_params)`), each unit sharded by
    FSDP2 with `options`."""

    def shard(child):
        numel = sum(p.numel() for p in child.parameters())
        if not policy(child, True, numel):
            return 0
        sharded = sum(shard(grandchild) for grandchild in child.children())
        if not policy(child, False, numel - sharded):
            return sharded
        $fully_shard(child, **options)
        return numel

    if policy is not None:
        for child in module.children():
            shard(child)
    return $fully_shard(module, **options)
'''
ZERO_MODULE = "torch_xla.distributed.zero_redundancy_optimizer"
ZERO = f"{ZERO_MODULE}.ZeroRedundancyOptimizer"

# torch_xla FSDP options that only steered XLA graphs, layouts and buffers: the numbers are the same
# without them. (`disable_reshard_on_root=True`, torch_xla's default, is FSDP2's default too.)
FSDP_XLA_ONLY = frozenset({
    "flatten_parameters",
    "execute_sharding_on_init",
    "optimization_barrier_in_forward",
    "optimization_barrier_in_backward",
    "sync_on_finalization",
    "disable_reshard_on_root",
    "shard_param_on_dim_0",
    "pin_layout_in_collective_ops",
    "reduce_scatter_bucket_size_mb",
    "coalesce_all_gather_ops",
    "_shard_size_multiple",
    "_use_xla_patched_linear",
})
FSDP_KEPT = frozenset({"reshard_after_forward"})  # same name and meaning in `fully_shard`
# Precision options given their default (full fp32 compute, buffers and reductions): FSDP2's too.
FSDP_FP32 = {"compute_dtype": "torch.float32", "buffer_dtype": "torch.float32"}
# Lower precision: torch_xla gathered the parameters and computed in `compute_dtype`, reduced the
# gradients in it too (unless `fp32_reduce_scatter=True`), and cast the floating buffers to
# `buffer_dtype` (`compute_dtype` when not given); FSDP2 says the first two with a
# `MixedPrecisionPolicy` and leaves buffers alone, so they are cast once, as torch_xla did.
FSDP_PRECISION = frozenset({"compute_dtype", "buffer_dtype", "fp32_reduce_scatter"})
CAST_BUFFERS = '''\
def $name(module, dtype):
    """`module` with its floating-point buffers in `dtype`, as torch_xla's FSDP kept them for its
    `compute_dtype`; FSDP2 leaves buffers as they are."""
    for buffer in module.buffers():
        if buffer.is_floating_point():
            buffer.data = buffer.data.to(dtype)
    return module
'''

# ZeRO options that only steered torch_xla's collectives; every other keyword the two classes do
# not share (groups, lazy init, dtypes, master weights) is left for a person.
ZERO_XLA_ONLY = frozenset({
    "pin_layout",
    "bucket_cap_mb_all_gather",
    "bucket_cap_mb_reduce_scatter",
    "use_grad_acc_hook",
})
ZERO_NOT_NATIVE = frozenset({
    "optimizer_dtype",
    "sharding_groups",
    "grad_norm_groups",
    "lazy_init",
    "save_master_weights",
    "higher_cc_precision",
})

ZERO_CLASS = '''\
class $name($optim.ZeroRedundancyOptimizer):
    """ZeRO-1 as torch_xla ran it: `step()` first averages the gradients across processes and,
    unless `grad_clipping=False`, clips their global norm to `max_norm` (1.0 when not given)."""

    def __init__(self, params, optimizer_class, grad_clipping=True, max_norm=None, **defaults):
        super().__init__(params, optimizer_class=optimizer_class, **defaults)
        if any(p.dtype != $torch.float32 for group in self.param_groups for p in group["params"]):
            raise TypeError(
                "parameters must be float32: torch_xla's ZeRO-1 stepped float32 copies of lower-precision "
                "ones, and this class steps them as they are"
            )
        self.max_norm = (1.0 if max_norm is None else max_norm) if grad_clipping else None

    def zero_grad(self, set_to_none=False):
        # Zeroed in place, as torch_xla did: a parameter without a gradient this step is still stepped.
        super().zero_grad(set_to_none=set_to_none)

    def step(self, closure=None, **kwargs):
        loss = None
        if closure is not None:
            with $torch.enable_grad():
                loss = closure()
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        for grad in grads:
            $dist.all_reduce(grad)
            grad.div_($dist.get_world_size())
        if self.max_norm is not None:
            $torch.nn.utils.clip_grad_norm_(
                [p for group in self.param_groups for p in group["params"]], self.max_norm
            )
        super().step(**kwargs)
        return loss
'''


class XlaFsdp(ReferenceRenames):
    """Rewrites torch_xla's FSDP wrapper and ZeRO-1 optimizer into their native counterparts.

    ## What it does
    | torch_xla | native |
    |---|---|
    | `XlaFullyShardedDataParallel(module)` (`FSDP`) | `fully_shard(module)` (FSDP2, `torch.distributed.fsdp`), which shards `module` in place and returns it |
    | `FSDP(module, reshard_after_forward=...)` | `fully_shard(module, reshard_after_forward=...)` |
    | `flatten_parameters=`, `optimization_barrier_in_forward=`, `pin_layout_in_collective_ops=`, ... | dropped (they only steered XLA graphs and collectives) |
    | `compute_dtype=torch.float32`, `buffer_dtype=torch.float32` | dropped (the default, FSDP2's too) |
    | `FSDP(model, compute_dtype=torch.bfloat16, fp32_reduce_scatter=True)` | `fully_shard(cast_floating_buffers(model, torch.bfloat16), mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))`: gathered and computed in it, float32 parameters stepped, buffers cast once as torch_xla did (`buffer_dtype`, when given) |
    | `model.clip_grad_norm_(max_norm)` on a module the file sharded | `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`, which sees the whole sharded norm |
    | `m = FSDP(model, auto_wrap_policy=partial(transformer_auto_wrap_policy, transformer_layer_cls={Block}))` | a loop calling `fully_shard` on each `Block` submodule, innermost first, then `m = fully_shard(model)` |
    | `m = FSDP(model, auto_wrap_policy=policy)`, any other policy (size-based, chosen by a variable, the file's own) | `m = fully_shard_by_policy(model, policy)`, a function added to the file that walks the submodules as torch_xla did and `fully_shard`s those the policy picks |
    | torch_xla's `size_based_auto_wrap_policy` (and the transformer, lambda and always policies) | torch's, in `torch.distributed.fsdp.wrap`: the same functions |
    | `ZeroRedundancyOptimizer(params, optim.Adam, lr=...)` (torch_xla), float32 parameters | `AveragingZeroRedundancyOptimizer(params, optim.Adam, lr=...)`, a subclass of `torch.distributed.optim.ZeroRedundancyOptimizer` added to the file |

    ## Why
    Both live in torch_xla, which is gone. FSDP2 reduce-scatters averaged gradients as torch_xla's
    FSDP did, so an `xm.optimizer_step` in the file gets no extra all-reduce (NM003). Native ZeRO
    only shards the optimizer state: torch_xla's also averaged the gradients and clipped their
    norm in `step()`, which the added subclass keeps.

    ## Example
    ```python
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
    from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer
    model = FSDP(model, flatten_parameters=False)
    optimizer = ZeroRedundancyOptimizer(other.parameters(), torch.optim.SGD, lr=0.1, max_norm=5.0)
    ```

    ## Use instead
    ```python
    from torch.distributed.fsdp import fully_shard
    model = fully_shard(model)
    optimizer = AveragingZeroRedundancyOptimizer(other.parameters(), torch.optim.SGD, lr=0.1, max_norm=5.0)
    # with `class AveragingZeroRedundancyOptimizer(torch.distributed.optim.ZeroRedundancyOptimizer)` added
    ```

    ## Fix safety
    Safe for the rewritten calls: the losses of a few steps match an unsharded run (tested under
    torchrun; in bfloat16, within its rounding of a one-process bfloat16 run). A wrapper call
    with an option that changes the numbers or the module's layout (a precision option computed
    where it is passed, sharding groups, `auto_wrapper_callable`,
    `param_init_fn`), positional options or `**kwargs` is left with a
    TODO, as is a file that reads `.module` (a `fully_shard` module is not a wrapper) or that
    patches, subclasses or `isinstance`-tests either class (native code would lose that), and every
    `get_shard_metadata()`, `clip_grad_norm_` on a wrapper the file did not build or with `groups=`, `checkpoint_module` and
    `consolidate_sharded_model_checkpoints` (sharded checkpoints become DCP). Native ZeRO's
    `state_dict()` needs `consolidate_state_dict(to=0)` first on every rank (the report says so).
    torch_xla's ZeRO-1 stepped float32 copies of the parameters (`optimizer_dtype`) and cast the
    result back: for bf16 parameters, fp32 master weights. Native ZeRO steps the parameters
    themselves, which is the same only for float32 ones, so a file that may hold its model in
    lower precision (`torch.bfloat16`, `.half()`, a `dtype=` load, a bf16 switch, a dtype named
    by a string) keeps the torch_xla call with a TODO, and the added class refuses parameters that
    are not float32. So does a file that does not create the process group for every run: native
    ZeRO needs one, where torch_xla's also ran in a single process without. By hand,
    sharding groups become `mesh=`; a full checkpoint is `get_model_state_dict(model,
    options=StateDictOptions(full_state_dict=True, cpu_offload=True))` on rank 0.
    """

    code = "NM014"
    name = "xla-fsdp"
    summary = "torch_xla FSDP -> FSDP2 `fully_shard`; torch_xla ZeRO-1 -> native `ZeroRedundancyOptimizer`"
    triggers = (FSDP_PACKAGE, ZERO_MODULE)
    manual: ClassVar[dict[str, str]] = {
        FSDP_PACKAGE: "`{name}` is torch_xla FSDP: use FSDP2 `fully_shard(submodule)` on each block, then on the root module",
        FSDP_CLASSES[0]: "use `fully_shard(module, mp_policy=MixedPrecisionPolicy(...))` (`torch.distributed.fsdp`)",
        FSDP_CLASSES[1]: "use `torch.distributed.fsdp.fully_shard(module, reshard_after_forward=...)`, which shards in place",
        f"{FSDP_PACKAGE}.checkpoint_module": "use `checkpoint_wrapper(module)` (`torch.distributed.algorithms._checkpoint`) before `fully_shard`",
        f"{FSDP_PACKAGE}.consolidate_sharded_model_checkpoints": "save with `dcp.save`, or a full `get_model_state_dict(model, options=...)` on rank 0",
        f"{FSDP_PACKAGE}.wrap": "FSDP2 has no auto-wrap: call `fully_shard` on each submodule the policy selected, then on the root",
        f"{FSDP_PACKAGE}.utils.consolidate_sharded_model_checkpoints": "save with DCP, or a full `get_model_state_dict`",
        ZERO: "use torch's `ZeroRedundancyOptimizer`; average and clip gradients before `step()`",
        ZERO_MODULE: "`{name}` is torch_xla's ZeRO-1: use `torch.distributed.optim.ZeroRedundancyOptimizer`",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._only_constructed: dict[tuple[str, ...], bool] = {}
        self._precision_sign: str | None = None  # "" once the file is known to show none
        self._group_told = False  # the TODO that FSDP2 needs a process group, at the first wrap
        self._sharded: set[str] = set()  # what holds a module `fully_shard` returned (`model`, `self.model`)

    # -- calls ---------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in FSDP_CLASSES:
            return self._fully_shard(updated_node)
        if name == ZERO:
            return self._zero(updated_node)
        if name is None and isinstance(updated_node.func, cst.Attribute) and self._uses_fsdp():
            receiver = code_of(updated_node.func.value)
            if updated_node.func.attr.value == "clip_grad_norm_" and receiver in self._sharded:
                return self._clip(receiver, updated_node)
            self._wrapper_method(updated_node.func.attr.value)
        return updated_node

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if self.called(original_node.value, *FSDP_CLASSES) and not self.called(updated_node.value, *FSDP_CLASSES):
            self._sharded.update(code_of(target.target) for target in updated_node.targets)
        return updated_node

    def _clip(self, receiver: str, call: cst.Call) -> cst.BaseExpression:
        """`model.clip_grad_norm_(max_norm[, norm_type])` of torch_xla's wrapper: torch's over the
        module's parameters, which sees the whole norm of FSDP2's sharded ones."""
        if len(call.args) > 2 or any(a.star or (a.keyword is not None and a.keyword.value == "groups") for a in call.args):
            self._wrapper_method("clip_grad_norm_")
            return call
        args = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in call.args]
        self.changed("torch_xla FSDP's `clip_grad_norm_` -> `torch.nn.utils.clip_grad_norm_` over the module's parameters")
        return expr(f"{self.ctx.torch()}.nn.utils.clip_grad_norm_({', '.join([f'{receiver}.parameters()', *args])})")

    def _fully_shard(self, call: cst.Call) -> cst.BaseExpression:
        module = arg_value(call, 0, "module")
        if module is None or not self._fsdp_options_native(call) or self._reads_wrapped_module():
            return call
        if not self._only_called(FSDP_CLASSES):
            return call
        kept = [module.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)]
        kept += [arg for arg in call.args if arg.keyword is not None and arg.keyword.value in FSDP_KEPT]
        precision = self._precision(call)
        if precision is not None:
            policy, cast = precision
            between = kept[0].comma if isinstance(kept[0].comma, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            kept[-1] = kept[-1].with_changes(comma=between)  # laid out as the arguments before it
            kept.append(cst.Arg(keyword=cst.Name("mp_policy"), value=expr(policy), equal=_EQUAL))
            if cast is not None:
                kept[0] = kept[0].with_changes(value=expr(f"{cast[0]}({code_of(module.value)}, {cast[1]})"))
        dropped = sorted(
            arg.keyword.value
            for arg in call.args
            if arg.keyword is not None
            and (
                arg.keyword.value in FSDP_XLA_ONLY
                or (arg.keyword.value in FSDP_FP32 and self.qualify(arg.value) == FSDP_FP32[arg.keyword.value])
                or (arg.keyword.value == "fp32_reduce_scatter" and code_of(arg.value) == "False")
            )
        )
        if dropped:
            self.ctx.note(self.code, f"dropped torch_xla FSDP options with no native meaning: {', '.join(dropped)}")
        self.changed("`XlaFullyShardedDataParallel(module)` -> `fully_shard(module)` (FSDP2)")
        if not (self.ctx.facts.distributed or self._group_told):
            # torch_xla's FSDP ran in a plain `python` process; FSDP2 shards over a process group.
            self._group_told = True
            self.todo(
                "`fully_shard` needs a process group: run under torchrun and call `dist.init_process_group()` first "
                "(XLA FSDP needed none)"
            )
        fully_shard = self.ctx.need_from("torch.distributed.fsdp", "fully_shard")
        if len(kept) == 1:  # `fully_shard(model)` on one line, however the wrapper call was laid out
            only = kept[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return call.with_changes(func=expr(fully_shard), args=[only], whitespace_before_args=cst.SimpleWhitespace(""))
        return call.with_changes(func=expr(fully_shard), args=_ending_as(call, kept))

    def _fsdp_options_native(self, call: cst.Call) -> bool:
        """Only the module is positional, and every option is kept or XLA-only."""
        for position, arg in enumerate(call.args):
            if arg.star:
                return False
            if arg.keyword is None:
                if position > 0:
                    return False
            elif arg.keyword.value != "module" and not self._droppable(arg):
                return False
        return True

    def _droppable(self, arg: cst.Arg) -> bool:
        keyword = arg.keyword.value if arg.keyword is not None else ""
        if keyword == "fp32_reduce_scatter":
            return code_of(arg.value) in ("True", "False")
        if keyword in FSDP_PRECISION:
            return _pure(arg.value)
        return keyword in FSDP_KEPT | FSDP_XLA_ONLY

    def _precision(self, call: cst.Call) -> tuple[str, tuple[str, str] | None] | None:
        """`MixedPrecisionPolicy(...)` for the wrapper's `compute_dtype`, and the helper and dtype
        that cast its buffers (None: left in float32); None at full precision."""
        given = {a.keyword.value: a.value for a in call.args if a.keyword is not None and a.keyword.value in FSDP_PRECISION}
        compute = given.get("compute_dtype")
        buffers = given.get("buffer_dtype", compute)
        full = compute is None or self.qualify(compute) == FSDP_FP32["compute_dtype"]
        if full and (buffers is None or self.qualify(buffers) == FSDP_FP32["buffer_dtype"]):
            return None
        torch = self.ctx.torch()
        policy = self.ctx.need_from("torch.distributed.fsdp", "MixedPrecisionPolicy")
        options = [f"param_dtype={code_of(compute)}"] if compute is not None else []
        if "fp32_reduce_scatter" in given and code_of(given["fp32_reduce_scatter"]) == "True":
            options.append(f"reduce_dtype={torch}.float32")
        self.changed("torch_xla FSDP's `compute_dtype` -> FSDP2 `mp_policy=MixedPrecisionPolicy(...)`")
        cast = None
        if buffers is not None and self.qualify(buffers) != FSDP_FP32["buffer_dtype"]:
            name = self.ctx.unused_name("cast_floating_buffers")
            cast = (self.ctx.need_helper(name, Template(CAST_BUFFERS).substitute(name=name)), code_of(buffers))
        return f"{policy}({', '.join(options)})", cast

    def _zero(self, call: cst.Call) -> cst.BaseExpression:
        positional = [arg for arg in call.args if arg.keyword is None]
        not_native = {arg.keyword.value for arg in call.args if arg.keyword is not None and not self._zero_default(arg)}
        if any(arg.star for arg in call.args) or len(positional) > 2 or not_native & ZERO_NOT_NATIVE:
            return call
        if not self._only_called((ZERO,)):
            return call
        if arg_value(call, 0, "params") is None or arg_value(call, 1, "optimizer_class") is None:
            return call
        if not self.ctx.facts.distributed:
            self.todo(
                "`ZeroRedundancyOptimizer` needs a process group on every run: call `dist.init_process_group()` "
                "at start-up, then migrate again"
            )
            return call
        sign = self._lower_precision()
        if sign is not None:
            self.todo(
                f"parameters may be {sign}: native ZeRO steps them as they are: keep them float32, then migrate again"
            )
            return call
        kept = [
            arg
            for arg in call.args
            if arg.keyword is None or (arg.keyword.value not in ZERO_XLA_ONLY and not self._zero_default(arg))
        ]
        name = self.ctx.unused_name("AveragingZeroRedundancyOptimizer")
        torch = self.ctx.torch()  # spelled first, so the helper's `torch` stays torch itself
        spellings = {"torch": torch, "optim": self.ctx.need_import("torch.distributed.optim"), "dist": self.ctx.dist()}
        self.ctx.need_helper(name, Template(ZERO_CLASS).substitute(spellings, name=name))
        self.changed(
            "torch_xla `ZeroRedundancyOptimizer` -> a subclass of `torch.distributed.optim.ZeroRedundancyOptimizer` "
            "that averages and clips the gradients in `step()`, added to the file"
        )
        self.ctx.note(
            self.code,
            "native `ZeroRedundancyOptimizer.state_dict()` needs `optimizer.consolidate_state_dict(to=0)` on every "
            "rank first, and returns the full state on rank 0 only",
        )
        return call.with_changes(func=cst.Name(name), args=_ending_as(call, kept))

    def _zero_default(self, arg: cst.Arg) -> bool:
        """`optimizer_dtype=torch.float32`: torch_xla's default, and what native ZeRO keeps."""
        return arg.keyword is not None and arg.keyword.value == "optimizer_dtype" and self.qualify(arg.value) == "torch.float32"

    def _lower_precision(self) -> str | None:
        """What in the file may put its parameters below float32, in its own words; None if nothing."""
        if self._precision_sign is None:
            self._precision_sign = _lower_precision_sign(self.ctx.source, self.ctx.imports.resolve_dotted) or ""
        return self._precision_sign or None

    def _only_called(self, classes: tuple[str, ...]) -> bool:
        """The file only constructs `classes`: one that patches, subclasses or tests for them
        (`isinstance`) would lose that on the native code."""
        if classes not in self._only_constructed:
            found = _only_called(self.ctx.source, classes, self.ctx.imports.resolve_dotted)
            self._only_constructed[classes] = found
        return self._only_constructed[classes]

    # -- a class-based auto-wrap policy -------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        """`model = FSDP(model, auto_wrap_policy=partial(transformer_auto_wrap_policy, transformer_layer_cls=...))`:
        torch_xla wrapped every submodule of those classes, innermost first, then the root."""
        small = updated_node.body[0]
        if len(updated_node.body) != 1 or not isinstance(small, cst.Assign | cst.Expr | cst.Return):
            return updated_node
        call = small.value
        if not isinstance(call, cst.Call) or self.qualify(call.func) not in FSDP_CLASSES:
            return updated_node
        policy = arg_value(call, None, "auto_wrap_policy")
        module = arg_value(call, 0, "module")
        if policy is None or module is None:
            return updated_node
        classes = self._layer_classes(policy.value) if isinstance(module.value, cst.Name) else None
        rest = call.with_changes(args=fix_trailing_comma([arg for arg in call.args if arg is not policy]))
        sharded = self._fully_shard(rest)
        if sharded is rest:
            return updated_node
        fully_shard = self.ctx.need_from("torch.distributed.fsdp", "fully_shard")
        if classes is None:
            return updated_node.with_changes(body=[small.with_changes(value=self._by_policy(small, sharded, policy.value))])
        assert isinstance(module.value, cst.Name)
        name, submodule = module.value.value, self.ctx.unused_name("submodule")
        # torch_xla wrapped each submodule with the root's options (its buffers were cast with the root's)
        options = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in cst.ensure_type(sharded, cst.Call).args[1:]]
        call_line = f"{fully_shard}({', '.join([submodule, *options])})"
        if len(call_line) > 90:  # one argument a line, as a formatter would
            call_line = f"{fully_shard}(\n" + "".join(f"            {a},\n" for a in [submodule, *options]) + "        )"
        loop = (
            f"for {submodule} in reversed(list({name}.modules())[1:]):\n"
            f"    if isinstance({submodule}, {classes}):\n"
            f"        {call_line}\n"
        )
        self.ctx.insert_before(stmt(loop))
        if isinstance(small, cst.Assign):
            self._sharded.update(code_of(target.target) for target in small.targets)
        self.changed("torch_xla `transformer_auto_wrap_policy` -> `fully_shard` on each submodule of its classes")
        return updated_node.with_changes(body=[small.with_changes(value=sharded)])

    def _by_policy(self, statement: cst.BaseSmallStatement, sharded: cst.BaseExpression, policy: cst.BaseExpression) -> cst.BaseExpression:
        """`fully_shard_by_policy(model, policy, **options)`: any policy torch_xla's FSDP took, walked as it walked it."""
        name = self.ctx.unused_name("fully_shard_by_policy")
        fully_shard = self.ctx.need_from("torch.distributed.fsdp", "fully_shard")
        self.ctx.need_helper(name, Template(SHARD_BY_POLICY).substitute(name=name, fully_shard=fully_shard))
        if isinstance(statement, cst.Assign):
            self._sharded.update(code_of(target.target) for target in statement.targets)
        self.changed("torch_xla FSDP with an `auto_wrap_policy` -> `fully_shard` on the submodules the policy picks, then the root")
        call = cst.ensure_type(sharded, cst.Call)
        args = [call.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT), cst.Arg(policy), *call.args[1:]]
        new = cst.Call(func=cst.Name(name), args=fix_trailing_comma(args))
        return one_per_line(new) if len(code_of(new)) > 88 else new

    def native(self, qualified: str, node: cst.Name | cst.Attribute) -> str | None:
        """torch_xla's wrap policies -> torch's (`torch.distributed.fsdp.wrap`), the same functions;
        a name whose import now imports torch's stays as it is."""
        policy = NATIVE_POLICIES.get(qualified)
        if policy is None or (isinstance(node, cst.Name) and node.value in self._policy_imports):
            return None
        return self.ctx.need_from("torch.distributed.fsdp.wrap", policy)

    def visit_Module(self, node: cst.Module) -> None:
        # `from torch_xla.distributed.fsdp.wrap import size_based_auto_wrap_policy`: its names stay.
        self._policy_imports: set[str] = set()
        for statement in node.body:
            for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.ImportFrom) and self._policies_only(small) and not isinstance(small.names, cst.ImportStar):
                    self._policy_imports.update(dotted_name(a.asname.name if a.asname else a.name) or "" for a in small.names)
        self.ctx.rebound |= self._policy_imports

    def _policies_only(self, node: cst.CSTNode) -> bool:
        """A module-level `from <torch_xla's wrap> import <policies>` and nothing else."""
        if not isinstance(node, cst.ImportFrom) or node.relative or isinstance(node.names, cst.ImportStar) or node.module is None:
            return False
        module = dotted_name(node.module)
        return module in (FSDP_PACKAGE, f"{FSDP_PACKAGE}.wrap") and all(
            isinstance(alias.name, cst.Name) and f"{module}.{alias.name.value}" in NATIVE_POLICIES for alias in node.names
        )

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        updated_node = super().leave_ImportFrom(original_node, updated_node)
        if not self._policies_only(original_node) or self.ctx.scope is not self.ctx.scope.module:
            return updated_node
        self.changed("torch_xla's wrap policies imported from `torch.distributed.fsdp.wrap`, where torch keeps the same functions")
        return updated_node.with_changes(module=cst.parse_expression("torch.distributed.fsdp.wrap"))

    def _layer_classes(self, policy: cst.BaseExpression) -> str | None:
        """`(A, B)` for `functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={A, B})`,
        `tuple(classes)` for `transformer_layer_cls=classes`; None for any other policy."""
        if not isinstance(policy, cst.Call) or self.qualify(policy.func) != "functools.partial":
            return None
        function = arg_value(policy, 0, None)
        layers = arg_value(policy, None, "transformer_layer_cls")
        if function is None or layers is None or len(policy.args) != 2:
            return None
        if self.qualify(function.value) not in (
            TRANSFORMER_POLICY,
            f"{FSDP_PACKAGE}.wrap.transformer_auto_wrap_policy",
            "torch.distributed.fsdp.wrap.transformer_auto_wrap_policy",  # torch_xla's, renamed on the way up
        ):
            return None
        value = layers.value
        if dotted_name(value) is not None:  # a variable holding the classes, read where the policy was
            return f"tuple({code_of(value)})"
        if not isinstance(value, cst.Set | cst.List | cst.Tuple) or not value.elements:
            return None
        names = [code_of(element.value) for element in value.elements if isinstance(element, cst.Element)]
        if len(names) != len(value.elements) or any(dotted_name(element.value) is None for element in value.elements):
            return None
        return f"({', '.join(names)},)" if len(names) == 1 else f"({', '.join(names)})"

    # -- what a torch_xla FSDP wrapper offered beyond the module --------------------------------
    def _wrapper_method(self, method: str) -> None:
        if method == "get_shard_metadata":
            self.todo(
                "FSDP2 has no shard metadata: save with `dcp.save({'model': get_model_state_dict(model)}, checkpoint_id=dir)`, "
                "load with `dcp.load`"
            )
        elif method == "clip_grad_norm_":
            self.todo(
                "if this is FSDP's `clip_grad_norm_(max_norm)`: use `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`"
            )

    def _uses_fsdp(self) -> bool:
        return self.ctx.facts.uses(FSDP_PACKAGE)

    def _reads_wrapped_module(self) -> bool:
        """A file that reads `.module` may mean the wrapped module, which `fully_shard` does not keep
        apart (the module is the result)."""
        return re.search(r"\.module\b", self.ctx.source) is not None


_EQUAL = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def _pure(value: cst.BaseExpression) -> bool:
    """A value read again where it is used twice: a name, an attribute, or `getattr(torch, name)`."""
    if dotted_name(value) is not None:
        return True
    return (
        isinstance(value, cst.Call)
        and code_of(value.func) == "getattr"
        and len(value.args) == 2
        and all(dotted_name(a.value) is not None for a in value.args)
    )


def _ending_as(call: cst.Call, kept: list[cst.Arg]) -> list[cst.Arg]:
    """`kept`, the arguments of `call` left, ending as its arguments did (the layout before `)`)."""
    if kept and call.args and kept[-1] is not call.args[-1]:
        kept = [*kept[:-1], kept[-1].with_changes(comma=call.args[-1].comma)]
    return fix_trailing_comma(kept)


def _only_called(source: str, qualified: tuple[str, ...], resolve: Callable[[str], str | None]) -> bool:
    """Is every reference to one of the `qualified` names in `source` the callee of a call?"""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    callees = {id(node.func) for node in all_nodes(tree) if isinstance(node, ast.Call)}
    for node in all_nodes(tree):
        dotted = ast_dotted_name(node) if isinstance(node, ast.Name | ast.Attribute) else None
        if dotted is not None and resolve(dotted) in qualified and id(node) not in callees:
            return False
    return True


# Below float32: the dtypes, the methods that cast to them, and the names scripts give them.
LOWER_DTYPES = frozenset({"torch.bfloat16", "torch.float16", "torch.half"})
LOWER_CASTS = frozenset({"bfloat16", "half"})
LOWER_NAMES = frozenset({"bfloat16", "float16", "half", "bf16", "fp16", "torch.bfloat16", "torch.float16", "torch.half"})
DTYPE_KEYWORDS = frozenset({"dtype", "torch_dtype"})
# `dtype=` values that leave parameters in float32: full-precision floats, and integer tensors.
NOT_LOWER = frozenset({
    "torch.float32", "torch.float", "torch.float64", "torch.double", "torch.int64", "torch.long",
    "torch.int32", "torch.int", "torch.int16", "torch.int8", "torch.uint8", "torch.bool",
})


def _lower_precision_sign(source: str, resolve: Callable[[str], str | None]) -> str | None:
    """The first thing in `source` that may put parameters below float32: a lower dtype, a cast to
    one, a dtype chosen by a variable (`dtype=dtype`) or named by a string, or a precision switch."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return "the file does not parse"
    for node in all_nodes(tree):
        dotted = ast_dotted_name(node) if isinstance(node, ast.Attribute | ast.Name) else None
        if dotted is not None and resolve(dotted) in LOWER_DTYPES:
            return f"`{dotted}`"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOWER_CASTS:
            return f"`.{node.func.attr}()`"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.lower() in LOWER_NAMES:
                return f'`"{node.value}"`'
            if node.value in PRECISION:
                return f"`{node.value}`"
        if isinstance(node, ast.keyword) and node.arg in DTYPE_KEYWORDS:
            value = ast_dotted_name(node.value)
            none = isinstance(node.value, ast.Constant) and node.value.value is None
            if not none and (value is None or resolve(value) not in NOT_LOWER):
                return f"`{node.arg}={ast.unparse(node.value)}`"
    return None
