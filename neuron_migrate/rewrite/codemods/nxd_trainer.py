"""neuronx-distributed's trainer API and its checkpoints, and what does the same natively.

Read from NxD's `trainer/trainer.py`, `trainer/optimizer.py` and `trainer/checkpoint.py`:
`neuronx_distributed_config` sets the process groups up; `initialize_parallel_model` builds the
model with the given function, moves it to the device and puts it in training mode;
`initialize_parallel_optimizer` wraps the optimizer so that each `step()` first averages the
gradients over the data-parallel ranks (ZeRO-1 does that itself) and clips the whole model's norm
(on by default, to 1.0), kept as `optimizer.grad_norm`; `save_checkpoint`/`load_checkpoint`
keep `<dir>/<tag>/` and the newest tag. Natively: the mesh, the plain model, FSDP2 over the
data-parallel ranks for ZeRO-1, an optimizer step pre-hook, and `torch.distributed.checkpoint`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from neuron_migrate.rewrite.codemods.nxd_checkpointing import (
    OPTIMIZER_SHARDS,
    optimizer_shards_blocker,
)

NXD = "neuronx_distributed"


def _aliases(name: str, *modules: str) -> tuple[str, ...]:
    return tuple(f"{NXD}{module}.{name}" for module in ("", ".trainer", *modules))


CONFIG = _aliases("neuronx_distributed_config", ".trainer.trainer")
MODEL = _aliases("initialize_parallel_model", ".trainer.trainer")
OPTIMIZER = _aliases("initialize_parallel_optimizer", ".trainer.trainer")
SAVE = _aliases("save_checkpoint", ".trainer.checkpoint")
LOAD = _aliases("load_checkpoint", ".trainer.checkpoint")
HAS = _aliases("has_checkpoint", ".trainer.checkpoint")
ZERO1 = tuple(f"{NXD}.optimizer{module}.NeuronZero1Optimizer" for module in ("", ".zero_redundancy_optimizer"))
TRAINER_CALLS = (*CONFIG, *MODEL, *OPTIMIZER, *SAVE, *LOAD, *HAS, *ZERO1)

# neuronx_distributed_config's options, accepted only at their defaults (the sizes of parallelism
# this migration does not do, and features that change the model or its precision).
CONFIG_DEFAULTS = {
    "pipeline_parallel_size": "1",
    "expert_parallel_size": "1",
    "context_parallel_size": "1",
    "pipeline_config": "None",
    "activation_checkpoint_config": "None",
    "pad_model": "False",
    "model_init_config": "None",
    "lora_config": "None",
    "mixed_precision_config": "None",
}
CONFIG_IGNORED = ("sequential_move_factor", "lnc_size")  # how NxD moved weights and used cores
OPTIMIZER_CONFIG = {"zero_one_enabled": "False", "grad_clipping": "True", "max_grad_norm": "1.0"}
# NeuronZero1Optimizer's own options (torch_xla's ZeroRedundancyOptimizer's), accepted at these
# values; the rest go to the optimizer class. Its state is fp32 (`optimizer_dtype`), gradients are
# averaged over the data-parallel ranks, their whole norm clipped (`max_norm`, 1.0 by default).
ZERO1_OPTIONS = {
    "optimizer_dtype": ("None", "torch.float32"),
    "grad_clipping": ("True", "False"),
    "lazy_init": ("False",),
    "use_grad_acc_hook": ("False",),
    "higher_cc_precision": ("False",),
}
# How it communicated and what its own state dict held: nothing to do natively.
ZERO1_IGNORED = (
    "pin_layout", "grad_norm_groups", "bucket_cap_mb_all_gather", "bucket_cap_mb_reduce_scatter", "coalesce_cc",
    "save_master_weights",
)  # fmt: skip
ZERO1_GROUPS = ("get_data_parallel_replica_groups", "get_data_parallel_group")  # its `sharding_groups`, NxD's default
ZERO1_OWN = frozenset({*ZERO1_OPTIONS, *ZERO1_IGNORED, "sharding_groups", "max_norm"})
# Keyword arguments of the checkpoint functions with nothing to do natively (how NxD wrote files).
CHECKPOINT_IGNORED = ("num_workers", "use_xser", "async_save")
SAVE_KEYWORDS = ("checkpoint_dir_str", "tag", "model", "optimizer", "scheduler", "user_content", *CHECKPOINT_IGNORED)
SAVE_DEFAULTS = {"num_kept_ckpts": "None", "zero1_optimizer": "False", "use_zero1_dcp": "False", "avoid_saving_lower_precision_weights": "False"}
LOAD_KEYWORDS = ("path", "tag", "model", "optimizer", "scheduler", "strict", *CHECKPOINT_IGNORED)
LOAD_DEFAULTS = {"use_zero1_dcp": "False"}
# What the NxD wrappers have that plain modules and optimizers have not.
WRAPPER_ATTRIBUTES = {
    "module", "local_modules", "original_module", "run_train", "run_eval", "nxd_config", "pp_enabled",
    "optimizer", "save_state_dict", "load_state_dict_from", "save_sharded_state_dict", "load_sharded_state_dict",
    "base_optimizer", "init_zero", "sharding_groups",
}


@dataclass
class TrainerPlan:
    """The trainer API calls of a file, as the whole-file check read them."""

    config: str = ""  # the variable the configuration is assigned to
    tensor_parallel_size: str = "1"
    zero1: str = "False"  # an expression
    zero1_optimizers: set[str] = field(default_factory=set)  # variables holding a `NeuronZero1Optimizer`
    max_grad_norm: str | None = "1.0"  # None: not clipped
    sequence_parallel: str = "False"
    models: set[str] = field(default_factory=set)  # variables holding an initialized model
    optimizers: set[str] = field(default_factory=set)
    given: list[tuple[str, str]] = field(default_factory=list)  # (call, what it got first) to check


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for given in call.keywords:
        if given.arg == keyword:
            return given.value
    return call.args[position] if len(call.args) > position else None


def _plain(node: ast.expr) -> bool:
    """A value read from a name, an attribute or a literal: the same wherever it is evaluated again."""
    if isinstance(node, ast.Constant | ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _plain(node.value)
    return isinstance(node, ast.UnaryOp) and _plain(node.operand)


def _assigned_name(statement: ast.AST | None, call: ast.Call) -> str | None:
    if isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1:
        target = statement.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    return None


def trainer_blocker(qualified: str, call: ast.Call, statement: ast.AST | None, plan: TrainerPlan) -> str | None:
    """Why this trainer API call has no faithful native rewrite here, or None (recording what the
    rewrite needs in `plan`)."""
    short = qualified.rpartition(".")[2]
    if qualified in CONFIG:
        return _config_blocker(call, statement, plan)
    if qualified in ZERO1:
        return _zero1_blocker(short, call, statement, plan)
    if qualified in (*MODEL, *OPTIMIZER):
        name = _assigned_name(statement, call)
        if name is None:
            return f"`{short}` is not assigned to a variable of its own"
        fixed = 2 if qualified in MODEL else 3  # the configuration, then the model function or the optimizer's class and parameters
        if len(call.args) < fixed or (qualified in OPTIMIZER and len(call.args) > fixed) or any(isinstance(a, ast.Starred) for a in call.args):
            return f"`{short}` is not given its configuration and {'model function' if fixed == 2 else 'optimizer class and parameters'} by position"
        first = call.args[0]
        plan.given.append((short, first.id if isinstance(first, ast.Name) else ast.unparse(first)))
        (plan.models if qualified in MODEL else plan.optimizers).add(name)
        return None
    if qualified in (*SAVE, *LOAD):
        save = qualified in SAVE
        reason = _options_blocker(
            short, call, SAVE_KEYWORDS if save else LOAD_KEYWORDS, SAVE_DEFAULTS if save else LOAD_DEFAULTS, statement, save
        )
        if reason is None and _argument(call, 3, "optimizer") is not None and _argument(call, 2, "model") is None:
            return f"`{short}` is given an optimizer without its model (DCP keeps the two together)"
        return reason
    if qualified in HAS:
        return None if len(call.args) + len(call.keywords) == 1 else f"`{short}` is called with other than a folder"
    return None


def _zero1_blocker(short: str, call: ast.Call, statement: ast.AST | None, plan: TrainerPlan) -> str | None:
    name = _assigned_name(statement, call)
    if name is None:
        return f"`{short}` is not assigned to a variable of its own"
    if len(call.args) != 2:
        return f"`{short}` is not given its parameters and optimizer class by position"
    for keyword in call.keywords:
        option, value = keyword.arg or "", ast.unparse(keyword.value)
        if option == "sharding_groups":
            groups = keyword.value.func if isinstance(keyword.value, ast.Call) else keyword.value
            if value != "None" and ast.unparse(groups).rpartition(".")[2] not in ZERO1_GROUPS:
                return f"`{short}(sharding_groups={value})` shards over other than the data-parallel ranks"
        elif option == "max_norm" and not _plain(keyword.value):
            return f"`{short}(max_norm=...)` is computed where it is passed"
        elif option in ZERO1_OPTIONS and value not in ZERO1_OPTIONS[option]:
            return f"`{short}({option}={value})` has no native counterpart here"
    plan.optimizers.add(name)
    plan.zero1_optimizers.add(name)
    return None


def zero1_norm(given: dict[str, str]) -> str:
    """The norm a `NeuronZero1Optimizer` with these options (as code) clipped to; "None": not clipped."""
    return "None" if given.get("grad_clipping") == "False" else given.get("max_norm", "1.0")


def _config_blocker(call: ast.Call, statement: ast.AST | None, plan: TrainerPlan) -> str | None:
    name = _assigned_name(statement, call)
    if name is None or plan.config:
        return "`neuronx_distributed_config` is not assigned to one variable, once"
    if call.args:
        return "`neuronx_distributed_config` has options given by position"
    plan.config = name
    for keyword in call.keywords:
        value = ast.unparse(keyword.value)
        option = keyword.arg or ""
        if option == "tensor_parallel_size":
            plan.tensor_parallel_size = value
        elif option == "sequence_parallel":
            plan.sequence_parallel = value
        elif option == "optimizer_config":
            reason = _optimizer_config(keyword.value, plan)
            if reason is not None:
                return reason
            continue
        elif option in CONFIG_IGNORED:
            continue
        elif CONFIG_DEFAULTS.get(option) != value:
            return f"`neuronx_distributed_config({option}={value})` has no native counterpart"
        if not _plain(keyword.value):
            return f"`neuronx_distributed_config({option}=...)` is computed where it is passed"
    return None


def _optimizer_config(node: ast.expr, plan: TrainerPlan) -> str | None:
    if not isinstance(node, ast.Dict) or any(k is None for k in node.keys):
        return "`optimizer_config` is not a dictionary written out"
    given: dict[str, ast.expr] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and key.value in OPTIMIZER_CONFIG):
            return f"`optimizer_config` holds `{ast.unparse(key) if key else '**'}`, which has no native counterpart here"
        if not _plain(value):
            return f"`optimizer_config[{key.value!r}]` is computed where it is passed"
        given[key.value] = value
    # NxD's defaults for the keys left out: no ZeRO-1, clipping to 1.0.
    plan.zero1 = ast.unparse(given["zero_one_enabled"]) if "zero_one_enabled" in given else "False"
    clipping = ast.unparse(given["grad_clipping"]) if "grad_clipping" in given else "True"
    if clipping not in ("True", "False"):
        return "`optimizer_config['grad_clipping']` is decided at run time"
    norm = ast.unparse(given["max_grad_norm"]) if "max_grad_norm" in given else "1.0"
    plan.max_grad_norm = norm if clipping == "True" else None
    return None


def _options_blocker(
    short: str, call: ast.Call, keywords: tuple[str, ...], defaults: dict[str, str], statement: ast.AST | None, needs_statement: bool
) -> str | None:
    if needs_statement and not isinstance(statement, ast.Expr):
        return f"`{short}` is called for its value"
    if len(call.args) > 2:
        return f"`{short}` has options given by position"
    for keyword in call.keywords:
        value = ast.unparse(keyword.value)
        if keyword.arg in keywords:
            continue
        if defaults.get(keyword.arg or "") != value:
            return f"`{short}({keyword.arg}={value})` has no native counterpart here"
    if isinstance(_argument(call, 2, "model"), ast.Dict) or isinstance(_argument(call, 3, "optimizer"), ast.Dict):
        return f"`{short}` is given a state dict, not the model and optimizer"
    return None


def uses_blocker(tree: ast.AST, plan: TrainerPlan) -> tuple[str, int] | None:
    """The configuration may only be handed to the trainer API; the model and optimizer it makes
    are plain natively, without NxD's wrappers' attributes. The reason, and the line it is at
    (0: the file as a whole)."""
    for short, first in plan.given:
        if first != plan.config:
            return f"`{short}` is given `{first}`, not the file's configuration", 0
    if (plan.zero1 != "False" or plan.zero1_optimizers) and _low_precision(tree):
        return "ZeRO-1 kept float32 master weights of low-precision parameters, which would step in low precision here", 0
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = node.value.id
            call = parents.get(id(node))
            if owner in plan.zero1_optimizers and node.attr in OPTIMIZER_SHARDS and isinstance(call, ast.Call):
                reason = optimizer_shards_blocker(call, parents.get(id(call)))
                if reason is not None:
                    return reason, line
                continue
            if owner in plan.models | plan.optimizers and node.attr in WRAPPER_ATTRIBUTES:
                return f"`{owner}.{node.attr}` is NxD's wrapper's own, which a plain module or optimizer has not", line
            if owner == plan.config:
                return f"the configuration `{plan.config}` is read other than by the trainer API", line
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == plan.config:
            return f"the configuration `{plan.config}` is read other than by the trainer API", line
    return None


LOW_PRECISION = ("torch.bfloat16", "torch.float16", "torch.half")
CASTS = ("half", "bfloat16")


def _low_precision(tree: ast.AST) -> bool:
    """Does the code cast to 16 bits: `.half()`, `.bfloat16()`, `.to(torch.bfloat16)`,
    `dtype=torch.float16`, `torch.set_default_dtype(torch.bfloat16)`? (torch_xla's bf16 switches
    change nothing natively; NM009 marks them.)"""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in CASTS:
            return True
        values = [*node.args, *(k.value for k in node.keywords if k.arg in ("dtype", "torch_dtype"))]
        if any(ast.unparse(value) in LOW_PRECISION for value in values):
            return True
    return False


# -- what the migrated file gets --------------------------------------------------------------

STEP_HOOK = '''\
def $name(average, max_norm):
    """What NxD's optimizer did before each step: the gradients averaged over the data-parallel
    ranks (`average`; FSDP averages them itself), then the whole model's gradient norm clipped to
    `max_norm` (None: not clipped) and kept as `optimizer.grad_norm`."""

    def hook(optimizer, args, kwargs):
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if average:
            for param in params:
                grad = param.grad.to_local() if isinstance(param.grad, $DTensor) else param.grad
                $dist.all_reduce(grad, group=$mesh["dp"].get_group())
                grad /= $mesh["dp"].size()
        optimizer.grad_norm = None if max_norm is None else $clip(params, max_norm)

    return hook
'''

SAVE_HELPER = '''\
def $name(checkpoint_dir_str, tag, model=None, optimizer=None, scheduler=None, user_content=None):
    """NxD's `save_checkpoint` with `torch.distributed.checkpoint`: `<dir>/<tag>` holds the model and
    optimizer states (DTensor shards, which load again at any tensor-parallel size), the
    scheduler's and the user content beside them, and `<dir>/newest` names the tag."""
    path = $os.path.join(checkpoint_dir_str, str(tag))
    state = {}
    if model is not None:
        state["model"] = $get_model_state_dict(model)
    if optimizer is not None:
        state["optimizer"] = $get_optimizer_state_dict(model, optimizer)
    $dcp.save(state, checkpoint_id=path)
    if $dist.get_rank() == 0:
        if scheduler is not None:
            $torch.save(scheduler.state_dict(), $os.path.join(path, "scheduler.pt"))
        if user_content is not None:
            $torch.save(user_content, $os.path.join(path, "user_content.pt"))
        with open($os.path.join(checkpoint_dir_str, "newest"), "w") as newest:
            newest.write(str(tag))
    $dist.barrier()
'''

LOAD_HELPER = '''\
def $name(path, tag=None, model=None, optimizer=None, scheduler=None, strict=True):
    """NxD's `load_checkpoint` of a checkpoint `$save` wrote (the newest when `tag` is None):
    loads what is given and returns the user content, or None."""
    if tag is None:
        with open($os.path.join(path, "newest")) as newest:
            tag = newest.read()
    path = $os.path.join(path, str(tag))
    state = {}
    if model is not None:
        state["model"] = $get_model_state_dict(model)
    if optimizer is not None:
        state["optimizer"] = $get_optimizer_state_dict(model, optimizer)
    $dcp.load(state, checkpoint_id=path)
    if model is not None:
        $set_model_state_dict(model, state["model"], options=$StateDictOptions(strict=strict))
    if optimizer is not None:
        $set_optimizer_state_dict(model, optimizer, state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict($torch.load($os.path.join(path, "scheduler.pt")))
    user_content = $os.path.join(path, "user_content.pt")
    # Written by this program's own rank 0: safe to unpickle.
    return $torch.load(user_content, weights_only=False) if $os.path.exists(user_content) else None
'''

HAS_HELPER = '''\
def $name(checkpoint_dir_str):
    """NxD's `has_checkpoint`: whether `$save` has written a checkpoint into the folder."""
    return $os.path.exists($os.path.join(checkpoint_dir_str, "newest"))
'''
