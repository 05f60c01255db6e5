"""NM025: a neuronx-distributed tensor-parallel program becomes DTensor on a `DeviceMesh`.

NxD keeps its process groups in module globals and builds each layer already sharded. The native
program keeps one `DeviceMesh` in a module-level variable and shards plain layers with
`parallelize_module` where NxD built its parallel ones, so model code written for local shards
(head counts divided by the tensor-parallel size) computes what it did. NxD's region mappings
become DTensor redistributions with the same forward and backward (`nxd_layouts.py`).
"""

from __future__ import annotations

import ast
import importlib.util
import operator
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from string import Template
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.core.oldstack import OPTIMUM_NEURON, PACKAGES
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    arg_value,
    code_of,
    expr,
    fix_trailing_comma,
    is_docstring,
    stmt,
)
from neuron_migrate.rewrite.codemods.mixed_parameters import (
    FOREACH_OPTIMIZERS,
    OPTION,
    foreach_off,
    without_foreach,
)
from neuron_migrate.rewrite.codemods.neuronx_distributed import (
    DIVIDE,
    LOCAL_WORLD_SIZE,
    MOVE_TO_DEVICE,
    ROOTS,
    TRACE_CALLS,
    VERSION_PROBES,
    NeuronxDistributed,
    inference_todo,
)
from neuron_migrate.rewrite.codemods.nxd_checkpointing import (
    LOAD_INTO,
    LOAD_KEPT,
    LOAD_OPTIMIZER_HELPER,
    LOAD_SHARDS,
    LOAD_SHARDS_HELPER,
    LOCAL_SHARDS,
    OPTIMIZER_SHARDS,
    SAVE_KEPT,
    SAVE_OPTIMIZER_HELPER,
    SAVE_SHARDS,
    SAVE_SHARDS_HELPER,
    StateDicts,
    shards_call_blocker,
)
from neuron_migrate.rewrite.codemods.nxd_layouts import (
    LAYER_NAMES,
    LAYERS,
    LAYERS_MODULE,
    MAPPING_NAMES,
    MAPPINGS,
    NXD,
    SEQUENCE_OPTIONS,
    STRIDE,
    STRIDED,
    Layer,
    Mapping,
    layer_style,
    redistribution,
)
from neuron_migrate.rewrite.codemods.nxd_program import MeshProgram, sibling_modules
from neuron_migrate.rewrite.codemods.nxd_state import (
    AS_LIST,
    DESTROY,
    INITIALIZE,
    IS_INITIALIZED,
    MESH_QUERIES,
    PIPELINE_QUERIES,
    REPLICA_GROUPS,
    STATE,
)
from neuron_migrate.rewrite.codemods.nxd_trainer import (
    CHECKPOINT_IGNORED,
    CONFIG,
    HAS,
    HAS_HELPER,
    LOAD,
    LOAD_HELPER,
    MODEL,
    OPTIMIZER,
    SAVE,
    SAVE_HELPER,
    STEP_HOOK,
    TRAINER_CALLS,
    ZERO1,
    ZERO1_OWN,
    TrainerPlan,
    trainer_blocker,
    uses_blocker,
    zero1_norm,
)
from neuron_migrate.rewrite.codemods.replica_groups import MeshGroups
from neuron_migrate.rewrite.codemods.upgrade.table import ADAMW_UPDATE
from neuron_migrate.rewrite.codemods.upgrade.table import DEFAULTS as UPGRADE_DEFAULTS

# torch_xla steps that average gradients over `groups=`: with the data-parallel groups, each rank
# averages its own shard over the replicas of that shard (position of `groups`).
DATA_PARALLEL_AVERAGES = {
    "torch_xla.core.xla_model.optimizer_step": 3,
    "torch_xla.core.xla_model.reduce_gradients": 1,
}
XLA_COLLECTIVES = tuple(
    f"torch_xla.core.xla_model.{name}" for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
)
# initialize_model_parallel's other arguments, accepted at their default only.
# ... and one at any value: it only ran a first all-reduce to warm NxD's collectives up.
INITIALIZE_IGNORED = ("skip_collective_init",)
INITIALIZE_DEFAULTS = {
    "pipeline_model_parallel_size": "1",
    "context_parallel_size": "1",
    "expert_model_parallel_size": "1",
}
TENSOR_CLASSES = ("DTensor", "Replicate", "Shard", "Partial")
COMPARISONS = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
}
# Libraries a training script imports that may be missing where `rewrite` runs: published
# packages, which never read NxD's process state.
LIBRARIES = (
    "h5py", "numpy", "scipy", "pandas", "datasets", "tokenizers", "transformers", "accelerate", "tqdm",
    "wandb", "tensorboard", "tensorboardX", "sklearn", "PIL", "yaml", "requests", "evaluate", "sentencepiece",
)

# NxD's vocabulary-parallel loss. Its custom backward is the gradient of this expression with the
# maximum held constant; a target outside the vocabulary (-100) picks no logit on any rank.
CROSS_ENTROPY = (f"{LAYERS_MODULE}.loss_functions.parallel_cross_entropy", f"{LAYERS_MODULE}.parallel_cross_entropy")
CROSS_ENTROPY_HELPER = '''\
def $name(logits, target):
    """NxD's `parallel_cross_entropy`: each token's loss from logits split across the vocabulary
    over the tensor-parallel ranks, gathered whole here. A target outside the vocabulary (such as
    -100) costs the log-sum-exp of the logits less their maximum, as in NxD."""
    logits = $DTensor.from_local(logits, $mesh["tp"], [$Shard(-1)]).full_tensor()
    logits = logits - logits.amax(dim=-1, keepdim=True).detach()
    inside = (target >= 0) & (target < logits.size(-1))
    picked = logits.gather(-1, (target * inside).unsqueeze(-1)).squeeze(-1)
    return logits.logsumexp(dim=-1) - picked * inside.float()
'''
# NxD's copy of transformers 4's AdamW (it kept its states in fp32 where torch_xla downcast to
# bf16): torch's AdamW, with transformers 4's defaults written out (the upgrade table's).
ADAMW_FP32 = f"{NXD}.utils.adamw_fp32_optim_params.AdamW_FP32OptimParams"
ADAMW_DEFAULTS = UPGRADE_DEFAULTS["transformers.AdamW"]
# NxD's all-reduce of the gradients of sequence-parallel norms and biases: DTensor does it in backward.
SEQUENCE_GRADIENTS = (
    f"{LAYERS_MODULE}.grads.allreduce_sequence_parallel_gradients",
)

# Gradient clipping over the whole model: NxD's own, and torch's, which cannot mix DTensor and plain
# parameters; both become a helper that can.
CLIP = (
    f"{NXD}.parallel_layers.grads.clip_grad_norm",
    f"{NXD}.parallel_layers.clip_grad_norm",
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
)
# Their options, accepted only at these values (NxD's `force_spmd` changes how, not what, it sums).
CLIP_OPTIONS = {
    "norm_type": ("2", "2.0"),
    "zero1_optimizer": ("False",),
    "zero1_optimizer_groups": ("None",),
    "error_if_nonfinite": ("False",),
    "foreach": ("None",),
}
CLIP_HELPER = '''\
def $name(parameters, max_norm):
    """`torch.nn.utils.clip_grad_norm_` for a model whose tensor-parallel parameters are DTensors
    and the others plain tensors, which torch's own cannot mix: the norm of the whole model."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = [$torch.linalg.vector_norm(grad) for grad in grads]
    total = $torch.linalg.vector_norm(
        $torch.stack([norm.full_tensor() if isinstance(norm, $DTensor) else norm for norm in norms])
    )
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale)
    return total
'''
# NxD also seeded a second generator for dropout inside tensor-parallel regions; DTensor keeps the
# random ops of shards consistent from the default generator.
SEED = (f"{NXD}.parallel_layers.random.model_parallel_xla_manual_seed", f"{NXD}.parallel_layers.model_parallel_xla_manual_seed")
REWRITTEN = (*CLIP[2:],)  # names outside NxD this codemod rewrites in a migrated file

# What makes DTensor parameters behave differently from NxD's local shards in the rest of a file.
NOT_WITH_DTENSORS_CALLS = {
    "torch_xla.core.xla_model.optimizer_step": "`xm.optimizer_step` without data-parallel `groups=` all-reduces tensor-parallel shards too",
    "torch_xla.core.xla_model.reduce_gradients": "`xm.reduce_gradients` without data-parallel `groups=` all-reduces tensor-parallel shards too",
    "torch.nn.parallel.DistributedDataParallel": "DDP over tensor-parallel DTensor parameters needs a data-parallel mesh dimension",
    "torch.distributed.fsdp.fully_shard": "FSDP2 with tensor parallelism needs the 2-D mesh wired by hand",
    "torch.nn.utils.clip_grad_value_": "`clip_grad_value_` cannot mix DTensor and plain parameters",
    "torch.nn.utils.clip_grad.clip_grad_value_": "`clip_grad_value_` cannot mix DTensor and plain parameters",
    "torch.set_default_dtype": "NxD's layers are float32 whatever the default dtype; native layers follow it",
}


LEFT_TODO = "TODO(neuron-migrate NM025)"
ALREADY_LEFT = "an earlier migration left it to a person"
SEQUENCE_MARK = "sequence_parallel_enabled"  # the attribute NxD's gradient all-reduce looks for
INIT_METHOD = "init_method"  # a parallel layer's initializer of its whole weight
INIT_WEIGHT = '''\
def $name(module, init_method):
    """`module` with `init_method` applied to its whole weight, as NxD's parallel layers did
    before each rank kept its slice."""
    with $torch.no_grad():
        init_method(module.weight)
    return module
'''
GRADIENT_IN_PLACE = ("zero_", "detach_", "requires_grad_")  # what changes a gradient rather than reads it
# NxD all-reduces these only in `allreduce_sequence_parallel_gradients` (its trainer's optimizer calls
# it); a program that never does trained a copy per rank.
UNREDUCED_SEQUENCE_GRADIENTS = (
    "with sequence parallelism on, NxD never all-reduced this layer's gradients (copies drifted apart per rank); DTensor does"
)
# A `stride=` layer's weight is split in one piece per rank natively, its output laid out as NxD's
# by DTensor: each rank's rows are not NxD's, so neither are the slices in its per-rank files.
STRIDED_LOADS = "`stride=` layers keep other rows on each rank than NxD did: load files the migrated program wrote, not NxD's"
STRIDED_SHARD = '''\
def $name(stride):
    """Where NxD's `stride=` layers kept a fused projection (q, k, v) on each rank: this rank's
    share of each of the `stride` parts of the last dimension, one part after another."""
    return $StridedShard(-1, split_factor=stride)  # private in torch, but DTensor's only placement for this
'''


@dataclass(frozen=True)
class Blocker:
    """One reason the file's NxD cannot move, at the line holding it (0: the file as a whole)."""

    reason: str
    line: int = 0


@dataclass
class Plan:
    """What the whole-file check decided: why the file is left as it is, or how it is migrated."""

    blockers: list[Blocker] = field(default_factory=list)
    unseen_modules: set[str] = field(default_factory=set)  # imported, found nowhere: a TODO each
    sequence_dims: set[str] = field(default_factory=set)  # of the sequence-parallel layers and mappings
    reduces_sequence_gradients: bool = False  # where the program asks NxD to (it never does alone)
    trainer: TrainerPlan = field(default_factory=TrainerPlan)
    state_dicts: StateDicts = field(default_factory=StateDicts)
    strided: int = 0  # the line of the first `stride=` layer (0: none)
    strided_program: bool = False  # a `stride=` layer in this file or another of its program

    @property
    def blocked(self) -> str | None:
        """The first reason the file is left as it was; None when it is migrated."""
        return self.blockers[0].reason if self.blockers else None

    @property
    def sequence_dim(self) -> str:
        """The sequence dimension for norms, which work on any: the file's own when it has one."""
        return next(iter(self.sequence_dims)) if len(self.sequence_dims) == 1 else "0"


def plan(source: str, resolve: Any, always_called: set[str], path: str, program: MeshProgram | None = None) -> Plan:
    """Whether the file's NxD tensor parallelism can be migrated as a whole, what it needs, and
    every line that holds it back.

    All or nothing: replacing NxD's process groups breaks every NxD call left in the file, so each
    use must be one this codemod rewrites, in a file that sets the groups up on every run (or, in
    a `program` of several files, in the one file of them that does).
    """
    found = Plan()
    found.blockers = list(_blockers(source, resolve, always_called, path, found, program))
    if not found.blockers and program is not None and program.blocked:
        found.blockers = [Blocker(program.blocked)]
    return found


def _blockers(
    source: str, resolve: Any, always_called: set[str], path: str, found: Plan, program: MeshProgram | None
) -> Iterator[Blocker]:
    if LEFT_TODO in source:
        yield Blocker(ALREADY_LEFT)  # an earlier run marked every line that holds it back
        return
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        yield Blocker("the file does not parse")
        return
    nodes = all_nodes(tree)
    parents = {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}
    optional = optional_imports(tree)
    untracked = _autograd_function_bodies(tree, resolve)
    initializes = 0
    for node in nodes:
        if isinstance(node, ast.Attribute) and node.attr == MASTER_WEIGHT:
            yield Blocker(f"`.{MASTER_WEIGHT}` (the whole weight `keep_master_weight=True` kept): natively `weight.full_tensor()`", node.lineno)
    names: set[str] = set()
    found.state_dicts = StateDicts.of(tree, resolve)
    for node in nodes:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(NXD) and node.names[0].name == "*":
            yield Blocker(f"`from {node.module} import *` hides which NxD names the file uses", line)
        if isinstance(node, ast.Attribute) and node.attr in ("state_dict", "load_state_dict"):
            reason = found.state_dicts.blocker(node, parents.get(id(node)))
            if reason is not None:
                yield Blocker(reason, line)
        if _marks_sequence_parallel(node):
            yield Blocker(f"a parameter is marked `{SEQUENCE_MARK}` by hand for NxD's gradient all-reduce", line)
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        dotted = ast_dotted_name(node)
        qualified = resolve(dotted) if dotted else None
        if qualified is None or (dotted or "").partition(".")[0] in optional:
            continue  # an optional import fails natively, and the file takes its fallback
        parent = parents.get(id(node))
        if qualified in DATA_PARALLEL_AVERAGES and _averages_over_data_parallel(parent, node, DATA_PARALLEL_AVERAGES[qualified], resolve):
            continue
        if qualified in NOT_WITH_DTENSORS_CALLS:
            yield Blocker(NOT_WITH_DTENSORS_CALLS[qualified], line)
            continue
        if qualified in XLA_COLLECTIVES and isinstance(parent, ast.Call) and _reads_parameters(parent):
            yield Blocker(f"`{dotted}` reduces gradients or parameters, which are DTensors natively", line)
            continue
        if qualified not in REWRITTEN and qualified != NXD and not qualified.startswith(NXD + "."):
            continue
        if isinstance(parent, ast.Attribute) and resolve(ast_dotted_name(parent) or "") is not None:
            continue  # the inner part of a longer name
        if qualified == ADAMW_FP32:
            reason = _adamw_blocker(node, parent, resolve)
            if reason is not None:
                yield Blocker(reason, line)
            continue
        if not (isinstance(parent, ast.Call) and parent.func is node):
            if qualified not in CROSS_ENTROPY:  # held as a value: the helper takes (logits, target) too
                yield Blocker(f"`{dotted}` is used other than by calling it", line)
            continue
        names.add(qualified)
        if qualified in MAPPING_NAMES and MAPPINGS[MAPPING_NAMES[qualified]].forward_only and id(parent) not in untracked:
            yield Blocker(f"`{dotted}` has no backward of its own: natively only inside an `autograd.Function`", line)
            continue
        reason = _call_blocker(qualified, parent, parents.get(id(parent)), found)
        if reason is not None:
            yield Blocker(reason, line)
        initializes += qualified == INITIALIZE
    trainer = found.trainer
    builds = initializes + bool(trainer.config)
    surely = INITIALIZE in always_called or bool(always_called & set(CONFIG))
    if (program is not None and not program.builds_mesh) or (builds == 0 and names & {*TRACE_CALLS, *LIGHTNING_STRATEGIES}):
        # the program's own script builds the mesh, or `parallel_model_trace` or NxD's Lightning
        # strategy (from its `nxd_config`) sets the groups up itself
        pass
    elif builds == 0:
        yield Blocker("NxD's groups are set up in another file: migrate this one in the same run as the script that sets them up")
    elif builds != 1 or not surely:
        yield Blocker("`initialize_model_parallel` or `neuronx_distributed_config` is not called once on every run")
    used = uses_blocker(tree, trainer)
    if used is not None:
        yield Blocker(*used)
    if IS_INITIALIZED in names and DESTROY in names:
        yield Blocker("`destroy_model_parallel` is followed by `model_parallel_is_initialized` checks")
    found.strided_program = bool(found.strided) or (program is not None and program.strided)
    found.reduces_sequence_gradients = (
        bool(names & set(SEQUENCE_GRADIENTS))
        or trainer.sequence_parallel == "True"
        or (program is not None and program.reduces_sequence_gradients)
    )
    unseen = _unseen_modules(tree, path)
    if unseen and _extends_sys_path(tree):
        yield Blocker(f"`{unseen[0]}` is not next to this file nor installed: if it uses NxD, migrate both")
    found.unseen_modules = set(unseen)
    reason = _sibling_blocker(tree, path) if program is None else None
    if reason is not None:
        yield Blocker(reason)


def _autograd_function_bodies(tree: ast.Module, resolve: Any) -> set[int]:
    """The nodes inside the static methods of `torch.autograd.Function` subclasses, where autograd
    records nothing: a forward-only redistribution means the same there as NxD's helper."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        if not any(resolve(ast_dotted_name(base) or "") == "torch.autograd.Function" for base in node.bases):
            continue
        for method in node.body:
            if isinstance(method, ast.FunctionDef) and method.name in ("forward", "backward", "symbolic"):
                inside.update(id(n) for n in ast.walk(method))
    return inside


def _guarded_imports(tree: ast.Module) -> set[int]:
    """The import statements of a `try` that catches their failure (`except ImportError`)."""
    return {
        id(statement)
        for node in all_nodes(tree)
        if isinstance(node, ast.Try) and any(_catches_import_error(handler) for handler in node.handlers)
        for statement in node.body
        if isinstance(statement, ast.Import | ast.ImportFrom)
    }


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = ast.unparse(handler.type) if handler.type is not None else "Exception"
    return any(name in caught for name in ("ImportError", "ModuleNotFoundError", "Exception"))


def optional_imports(tree: ast.Module) -> set[str]:
    """Names an NxD import binds in a `try` whose `except ImportError` binds them too (a fallback)."""
    found: set[str] = set()
    for node in all_nodes(tree):
        if not isinstance(node, ast.Try):
            continue
        imported = {
            alias.asname or alias.name.partition(".")[0]
            for statement in node.body
            if isinstance(statement, ast.Import | ast.ImportFrom)
            and ((statement.module or "") if isinstance(statement, ast.ImportFrom) else statement.names[0].name).startswith(NXD)
            for alias in statement.names
        }
        for handler in node.handlers:
            if not _catches_import_error(handler):
                continue
            found |= imported & {
                target.id
                for statement in ast.walk(ast.Module(body=handler.body, type_ignores=[]))
                for target in (statement.targets if isinstance(statement, ast.Assign) else [])
                if isinstance(target, ast.Name)
            }
    return found


def _averages_over_data_parallel(call: ast.AST | None, func: ast.AST, position: int, resolve: Any) -> bool:
    """`xm.reduce_gradients(opt, groups=parallel_state.get_data_parallel_replica_groups())`."""
    if not (isinstance(call, ast.Call) and call.func is func):
        return False
    groups = _argument(call, position, "groups")
    if not isinstance(groups, ast.Call):
        return False
    query = resolve(ast_dotted_name(groups.func) or "") or ""
    plain = not groups.args and not groups.keywords
    return (plain or query in AS_LIST) and _group_query(query, groups) == f"{STATE}.get_data_parallel_replica_groups"


def _reads_parameters(call: ast.Call) -> bool:
    """The collective's arguments name gradients or parameters (`p.grad`, `model.parameters()`)."""
    return any(
        isinstance(node, ast.Attribute) and node.attr in ("grad", "parameters", "named_parameters", "main_grad")
        for arg in (*call.args, *(k.value for k in call.keywords))
        for node in ast.walk(arg)
    )


def _marks_sequence_parallel(node: ast.AST) -> bool:
    """`setattr(p, "sequence_parallel_enabled", ...)` or `p.sequence_parallel_enabled = ...`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
        return len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == SEQUENCE_MARK
    if isinstance(node, ast.Assign):
        # A model configuration's flag of the same name (`config.sequence_parallel_enabled = True`)
        # is no parameter, nor is a module's or a configuration's own (`self.sequence_parallel_enabled`).
        return any(
            isinstance(t, ast.Attribute)
            and t.attr == SEQUENCE_MARK
            and not _CONFIGURATION.search(ast.unparse(t.value))
            and not (isinstance(t.value, ast.Name) and t.value.id == "self")
            for t in node.targets
        )
    return False


_CONFIGURATION = re.compile(r"(?:config|conf|cfg|args|flags|options)$", re.IGNORECASE)


def _call_blocker(qualified: str, call: ast.Call, statement: ast.AST | None, found: Plan) -> str | None:
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(k.arg is None for k in call.keywords):
        return f"`{qualified.rpartition('.')[2]}` is called with `*args`/`**kwargs`"
    short = qualified.rpartition(".")[2]
    if qualified == INITIALIZE:
        if not isinstance(statement, ast.Expr) or len(call.args) > 1:
            return "`initialize_model_parallel` is called for its value or with positional options"
        for keyword in call.keywords:
            if keyword.arg == "tensor_model_parallel_size" or (keyword.arg in INITIALIZE_IGNORED and _plain(keyword.value)):
                continue
            if INITIALIZE_DEFAULTS.get(keyword.arg or "") != ast.unparse(keyword.value):
                return f"`initialize_model_parallel({keyword.arg}=...)`: only tensor parallelism is migrated"
        return None
    if qualified in AS_LIST and _as_list(call) is not None:
        return None if _as_list(call) in ("True", "False") else f"`{short}(as_list=...)` is decided at run time"
    if qualified in MESH_QUERIES or qualified in REPLICA_GROUPS or qualified in PIPELINE_QUERIES or qualified == IS_INITIALIZED:
        return None if not call.args and not call.keywords else f"`{short}` is called with arguments"
    if qualified == DESTROY:
        return None if isinstance(statement, ast.Expr) and not call.args else f"`{short}` is called for its value"
    if qualified in MOVE_TO_DEVICE:
        return None  # NM024 makes it `model.to(device)`
    if qualified in DIVIDE:
        return None if len(call.args) == 2 and not call.keywords else f"`{short}` is called with other than two numbers"
    if qualified in LOCAL_WORLD_SIZE:
        return None if not (call.args or call.keywords) else f"`{short}` is called with arguments"
    if qualified in VERSION_PROBES:
        # NM024 keeps the branch native torch takes of an `if` the probe decides alone.
        decides = isinstance(statement, ast.If) and statement.test is call and not call.args and not call.keywords
        return None if decides else f"`{short}` is used other than as the whole test of an `if`"
    if qualified in SEED:
        return None if len(call.args) == 1 and not call.keywords else f"`{short}` is called with other than a seed"
    if qualified in SEQUENCE_GRADIENTS:
        return None if isinstance(statement, ast.Expr) else f"`{short}` is called for its value"
    if qualified in CLIP:
        if len(call.args) > 2:
            return f"`{short}` has options given by position"
        for keyword in call.keywords:
            if keyword.arg not in ("parameters", "max_norm", "force_spmd") and ast.unparse(keyword.value) not in CLIP_OPTIONS.get(keyword.arg or "", ()):
                return f"`{short}({keyword.arg}=...)` has no counterpart for DTensor parameters here"
        return None
    if qualified in CROSS_ENTROPY:
        smoothing = _argument(call, 2, "label_smoothing")
        if len(call.args) < 2 and not {"vocab_parallel_logits", "target"} <= {k.arg for k in call.keywords}:
            return f"`{short}` is called without logits and targets"
        if smoothing is not None and ast.unparse(smoothing) not in ("0", "0.0"):
            return f"`{short}(label_smoothing=...)` is inconsistent in NxD"
        return None
    if qualified in MAPPING_NAMES:
        return _mapping_blocker(short, MAPPINGS[MAPPING_NAMES[qualified]], call, found)
    if qualified in TRAINER_CALLS:
        return trainer_blocker(qualified, call, statement, found.trainer)
    if qualified in SAVE_SHARDS or qualified in LOAD_SHARDS:
        return shards_call_blocker(qualified, call, statement)
    if qualified in LAYER_NAMES:
        return _layer_blocker(short, LAYERS[LAYER_NAMES[qualified]], call, found)
    written = ast_dotted_name(call.func) or short
    worked = inference_todo(qualified, written, lambda position, keyword: _unparsed(_argument(call, position, keyword)))
    return worked or _advice(qualified, written)


def _adamw_blocker(node: ast.expr, parent: ast.AST | None, resolve: Any) -> str | None:
    """`AdamW_FP32OptimParams(...)`, or the class handed to NxD's optimizer wrappers, becomes
    torch's AdamW unless it turns bias correction off, which torch's always does."""
    if isinstance(parent, ast.Call) and parent.func is node:
        correct_bias = _argument(parent, 5, "correct_bias")
        if correct_bias is not None and ast.unparse(correct_bias) != "True":
            return "`AdamW_FP32OptimParams(correct_bias=...)`: torch's AdamW always corrects the bias"
        return None
    wrapper = resolve(ast_dotted_name(parent.func) or "") if isinstance(parent, ast.Call) else None
    if isinstance(parent, ast.Call) and wrapper in (*ZERO1, *OPTIMIZER) and any(node is a for a in parent.args[:2]):
        return None
    return f"`{ast_dotted_name(node)}` is used other than by calling it or handing it to NxD's optimizer"


def _unparsed(node: ast.expr | None) -> str | None:
    return ast.unparse(node) if node is not None else None


def _advice(qualified: str, spelled: str) -> str:
    """What NM024 says of an NxD name no codemod rewrites, said where it holds the file back."""
    manual = NeuronxDistributed.manual
    best = max((p for p in manual if qualified == p or qualified.startswith(p + ".")), key=len, default=NXD)
    if best == NXD:
        return f"`{spelled}` has no native rewrite yet"
    message = manual[best]
    return message.replace("{name}", spelled) if "{name}" in message else f"`{spelled}`: {message}"


def _as_list(call: ast.Call) -> str | None:
    """The `as_list` NxD's group query is called with alone (`get_data_parallel_group(as_list=True)`)."""
    if len(call.args) + len(call.keywords) != 1 or (call.keywords and call.keywords[0].arg != "as_list"):
        return None
    return ast.unparse(call.args[0] if call.args else call.keywords[0].value)


def _group_query(qualified: str, call: ast.Call) -> str:
    """The query a group call makes: `get_data_parallel_group(as_list=True)` is NxD's
    `get_data_parallel_replica_groups()`."""
    return AS_LIST[qualified] if qualified in AS_LIST and _as_list(call) == "True" else qualified


def _argument(call: ast.Call, position: int | None, keyword: str) -> ast.expr | None:
    for given in call.keywords:
        if given.arg == keyword:
            return given.value
    return call.args[position] if position is not None and len(call.args) > position else None


def _plain(node: ast.expr) -> bool:
    """An expression that reads a value and does nothing else (safe to keep where it was)."""
    return isinstance(node, ast.Constant | ast.Name) or (
        isinstance(node, ast.Attribute) and _plain(node.value)
    ) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _plain(node.operand))


def _mapping_blocker(short: str, mapping: Mapping, call: ast.Call, found: Plan) -> str | None:
    known = {"input_", *(k for k, _ in mapping.defaults)}
    if mapping.dimension is not None:
        keyword, position, default = mapping.dimension
        known.add(keyword)
        dim = _argument(call, position, keyword)
        if dim is None and default is None:
            return f"`{short}` is called without `{keyword}`"
        if dim is not None and not _plain(dim):
            return f"`{short}({keyword}=...)` is computed where it is passed"
        if "sequence" in short:
            found.sequence_dims.add(ast.unparse(dim) if dim is not None else str(default))
    if mapping.grad_switch is not None:
        keyword, position, values = mapping.grad_switch
        known.add(keyword)
        value = _argument(call, position, keyword)
        if value is not None and ast.unparse(value) not in values:
            return f"`{short}({keyword}=...)` is not `True` or `False` where it is passed"
    positional = 1 + (mapping.dimension is not None) + (mapping.grad_switch is not None)
    if len(call.args) > positional:
        return f"`{short}` has options given by position"
    for keyword_arg in call.keywords:
        name = keyword_arg.arg or ""
        if name not in known:
            return f"`{short}({name}=...)` is not an option of NxD's mapping"
        if dict(mapping.defaults).get(name, ast.unparse(keyword_arg.value)) != ast.unparse(keyword_arg.value):
            return f"`{short}({name}={ast.unparse(keyword_arg.value)})` has no native counterpart here"
    return None


KEEP_MASTER_WEIGHT = "keep_master_weight"
MASTER_WEIGHT = "master_weight"


def _layer_blocker(short: str, layer: Layer, call: ast.Call, found: Plan) -> str | None:
    if len(call.args) > len(layer.sizes):
        return f"`{short}` has options given by position"
    given = {k.arg or "": ast.unparse(k.value) for k in call.keywords}
    stride = next((k.value for k in call.keywords if k.arg == STRIDE), None)
    if stride is not None and given[STRIDE] != "1":
        reason = _stride_blocker(short, layer, stride, given)
        if reason is not None:
            return reason
        found.strided = found.strided or call.lineno
    sequence = given.get(SEQUENCE_OPTIONS[0], "False")
    if sequence not in ("True", "False"):
        flag = next(k.value for k in call.keywords if k.arg == SEQUENCE_OPTIONS[0])
        if not _plain(flag):
            return f"`{short}(sequence_parallel_enabled=...)` is computed where it is passed"
        sequence = "True"  # the layout is chosen at run time: each must be one DTensor has
    if sequence == "True":
        if layer.sequence_style is None:
            return f"`{short}(sequence_parallel_enabled=True)` lays its output out in a way DTensor does not"
        if layer.switch and given.get(layer.switch, str(layer.switch_default)) != str(layer.sequence_switch):
            return f"`{short}` with sequence parallelism needs `{layer.switch}={layer.sequence_switch}` (NxD refuses it otherwise)"
        dim = next((k.value for k in call.keywords if k.arg == SEQUENCE_OPTIONS[1]), None)
        if dim is not None and not _plain(dim):
            return f"`{short}(sequence_dimension=...)` is computed where it is passed"
        if layer.switch:
            found.sequence_dims.add("0" if dim is None or ast.unparse(dim) == "None" else ast.unparse(dim))
    for name, value in given.items():
        if name in (*(old for old, _ in layer.sizes), *layer.passed, *SEQUENCE_OPTIONS, STRIDE):
            continue
        if name == INIT_METHOD and layer.native != "LayerNorm":
            continue  # applied to the whole weight, as NxD did
        if name in (layer.switch, KEEP_MASTER_WEIGHT) and value in ("True", "False"):
            continue  # NxD split a whole weight either way; keeping it only mattered to `.master_weight`
        if dict(layer.defaults).get(name) != value:
            return f"`{short}({name}={value})` has no native counterpart here"
    return None


def _turns(loop: cst.For, qualify: Any) -> list[int]:
    """The `if` statements of `loop` that let ranks take turns, one group a pass, with a barrier
    each pass (`for w in ...: if local_rank // n == w: model = build()` then `xm.rendezvous(...)`):
    ids, where the loop's body has both."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []
    waits = any(
        isinstance(s, cst.SimpleStatementLine)
        and isinstance(s.body[0], cst.Expr)
        and isinstance(s.body[0].value, cst.Call)
        and qualify(s.body[0].value.func) in BARRIERS
        for s in body
    )
    if not waits:
        return []
    return [id(s) for s in body if isinstance(s, cst.If) and _RANKED.search(code_of(s.test))]


LIGHTNING_STRATEGIES = tuple(f"{NXD}.lightning{module}.NeuronXLAStrategy" for module in ("", ".strategy"))
_RANKED = re.compile(r"rank|ordinal", re.IGNORECASE)
BARRIERS = ("torch_xla.core.xla_model.rendezvous", "torch.distributed.barrier")
# Building the sharded model now runs collectives over its tensor-parallel group
# (`parallelize_module` scatters each weight from the group's first rank).
BUILT_IN_TURNS = (
    "building sharded layers runs collectives in each tensor-parallel group: a group split across turns hangs; build at once"
)


def _sequence_gradients(kind: str, given: dict[str, str]) -> bool:
    """Does this layer (its keywords as code) make parameters whose gradients NxD all-reduces over
    the tensor-parallel group only when asked: a norm or a row layer's bias, along the sequence?"""
    if given.get(SEQUENCE_OPTIONS[0], "False") == "False":
        return False
    return LAYERS[kind].native == "LayerNorm" or (kind == "RowParallelLinear" and given.get("bias", "True") != "False")


def _stride_blocker(short: str, layer: Layer, stride: ast.expr, given: dict[str, str]) -> str | None:
    """Why a fused projection (`stride=3` for q, k, v) cannot move, if it cannot."""
    if not _plain(stride):
        return f"`{short}(stride=...)` is computed where it is passed"
    sequence = given.get(SEQUENCE_OPTIONS[0], "False")
    if layer.strided_style is None or (sequence != "False" and layer.sequence_strided_style is None):
        return f"`{short}(stride={ast.unparse(stride)})` has no native counterpart here"
    if given.get(layer.switch, str(layer.switch_default)) != str(layer.strided_switch):
        return (
            f"`{short}(stride={ast.unparse(stride)})` needs `{layer.switch}={layer.strided_switch}`: "
            "otherwise NxD's output changes with the tensor-parallel size"
        )
    return None


def _unseen_modules(tree: ast.Module, path: str) -> list[str]:
    """Modules this file imports that are neither next to it nor installed here, nor published
    libraries known to read no NxD state. Found where a file it edits `sys.path` to reach, they
    hold the file back: if they use NxD, their layers and groups expect the NxD state this file no
    longer sets up. Found nowhere, they may be a package of the user's environment or a model
    file copied in before the run: the import gets a TODO."""
    if not path:
        return []
    folder = Path(path).parent
    guarded = _guarded_imports(tree)
    unseen = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            top = module.partition(".")[0]
            if not (
                top in sys.stdlib_module_names
                or top in LIBRARIES
                or top in (*PACKAGES, *ROOTS, "neuronxcc")  # the old stack, and Neuron's compiler
                or module.startswith(OPTIMUM_NEURON)
                or (folder / top).is_dir()
                or (folder / f"{top}.py").is_file()
                or _installed(top)
            ):
                unseen.append(module)
    return unseen


def _extends_sys_path(tree: ast.Module) -> bool:
    """`sys.path.append(...)`, `.insert`, `.extend`, `site.addsitedir(...)` or `sys.path = ...`."""
    for node in all_nodes(tree):
        if isinstance(node, ast.Call) and ast_dotted_name(node.func) in _PATH_CALLS:
            return True
        if isinstance(node, ast.Assign | ast.AugAssign) and any(
            ast_dotted_name(t) == "sys.path" for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        ):
            return True
    return False


_PATH_CALLS = frozenset({"sys.path.append", "sys.path.insert", "sys.path.extend", "site.addsitedir"})


@cache
def _installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _sibling_blocker(tree: ast.Module, path: str) -> str | None:
    """A module of the user's own, next to this file, that uses NxD too: its layers and groups
    would expect the NxD state this file no longer sets up."""
    if not path:
        return None
    for module, candidate in sibling_modules(tree, Path(path).parent):
        try:
            text = candidate.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if NXD in text:
            return f"`{module}` next to this file uses neuronx-distributed as well: migrate the two together"
    return None


class NxdTensorParallel(Codemod):
    """Migrates a neuronx-distributed tensor-parallel program to DTensor on a `DeviceMesh`.

    ## What it does
    | neuronx-distributed | native |
    |---|---|
    | `parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)` | `mesh = init_device_mesh(device_type, (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))`, a module-level variable |
    | `get_tensor_model_parallel_size()` / `_rank()` / `_group()` | `mesh["tp"].size()` / `.get_local_rank()` / `.get_group()` |
    | `get_data_parallel_size()` / `_rank()` / `_group()` | `mesh["dp"].size()` / `.get_local_rank()` / `.get_group()` |
    | `model_parallel_is_initialized()` | `mesh is not None` |
    | `get_pipeline_model_parallel_size()` / `_rank()` | `1` / `0` (no pipeline stages) |
    | `destroy_model_parallel()` | removed (the mesh's groups go with the process group) |
    | `ColumnParallelLinear(i, o, gather_output=False)` | `parallelize_module(nn.Linear(i, o), mesh["tp"], ColwiseParallel())` |
    | `ColumnParallelLinear(i, o)` (gathers by default) | `... ColwiseParallel(output_layouts=Replicate())` |
    | `RowParallelLinear(i, o, input_is_parallel=True)` | `parallelize_module(nn.Linear(i, o), mesh["tp"], RowwiseParallel())` |
    | `RowParallelLinear(i, o)` (scatters its input by default) | `... RowwiseParallel(input_layouts=Replicate())` |
    | `ParallelEmbedding(v, d)` (vocabulary-sharded) | `parallelize_module(nn.Embedding(v, d), mesh["tp"], RowwiseParallel(input_layouts=Replicate()))` |
    | `ParallelEmbedding(v, d, shard_across_embedding=True)` | `... ColwiseParallel(output_layouts=Replicate())` |
    | `ColumnParallelLinear(..., sequence_parallel_enabled=True, sequence_dimension=d)` | `... ColwiseParallel(input_layouts=Shard(d))` (the input arrives split along the sequence) |
    | `RowParallelLinear(..., sequence_parallel_enabled=True, sequence_dimension=d)` | `... RowwiseParallel(output_layouts=Shard(d))` (reduce-scattered along the sequence) |
    | `ColumnParallelLinear(i, o, init_method=fn)` (any layer with `init_method=`) | `parallelize_module(init_weight(nn.Linear(i, o), fn), ...)`: `fn` on the whole weight, then sharded |
    | `ColumnParallelLinear(..., gather_output=False, sequence_parallel_enabled=config.sp)` | `... ColwiseParallel(input_layouts=Shard(0)) if config.sp else ColwiseParallel()`: the same expression picks the layout |
    | `layer_norm.LayerNorm(h, sequence_parallel_enabled=True)` | `parallelize_module(nn.LayerNorm(h), mesh["tp"], SequenceParallel(sequence_dim=d, use_local_output=True))`; without sequence parallelism `nn.LayerNorm(h)` |
    | `grads.allreduce_sequence_parallel_gradients(optimizer)` | removed: DTensor sums those gradients in backward |
    | `copy_to_tensor_model_parallel_region(x)` | `DTensor.from_local(x, mesh["tp"], [Replicate()]).to_local(grad_placements=[Partial()])` |
    | `reduce_from_tensor_model_parallel_region(x)` | `DTensor.from_local(x, mesh["tp"], [Partial()]).full_tensor()` |
    | `scatter_to_tensor_model_parallel_region(x)` / `gather_from_...(x)` | `... [Replicate()]).redistribute(placements=[Shard(-1)]).to_local()` / `... [Shard(-1)]).full_tensor()` |
    | `scatter_to_` / `gather_from_` / `reduce_scatter_to_sequence_parallel_region(x, d)` | the same redistributions along `Shard(d)` (`gather_from` with `to_model_parallel=True` reduce-scatters the gradient: `grad_placements=[Partial()]`) |
    | `parallel_cross_entropy(logits, target)` | `vocab_parallel_cross_entropy(logits, target)`, a helper computing NxD's per-token loss from the gathered logits |
    | `xm.reduce_gradients(opt, groups=get_data_parallel_replica_groups())` | `average_gradients_in_group(opt, mesh["dp"].get_group())`, each rank its own shards |
    | `get_data_parallel_replica_groups()` / `get_tensor_model_parallel_replica_groups()` | the columns / rows of `mesh.mesh` (a collective given them takes that dimension's own group) |
    | `cfg = nxd.neuronx_distributed_config(tensor_parallel_size=tp, optimizer_config={...})` | the mesh, as above |
    | `model = nxd.initialize_parallel_model(cfg, build, include_buffers, *args)` | `model = build(*args).to(device)`, `model.train()`; with ZeRO-1 `fully_shard(model, mesh=mesh["dp"])` (FSDP2) |
    | `AdamW_FP32OptimParams(params, ...)`, or handed to NxD's optimizer | `torch.optim.AdamW(params, ..., eps=1e-6, weight_decay=0.0)`: its defaults, and a TODO (torch adds `eps` after the bias correction: larger early updates where gradients are small) |
    | `opt = NeuronZero1Optimizer(params, cls, **kw)` | `opt = cls(params, **kw)` and the same step pre-hook (average over `mesh["dp"]`, clip to `max_norm`, 1.0 by default), with a TODO: shard the model with `fully_shard` for ZeRO-1's memory |
    | `opt = nxd.initialize_parallel_optimizer(cfg, cls, params, **kw)` | `opt = cls(params, **kw)` and a step pre-hook that averages the gradients over `mesh["dp"]` (unless FSDP does) and clips them (NxD's default: to 1.0), keeping `opt.grad_norm` |
    | `nxd.save_checkpoint` / `load_checkpoint` / `has_checkpoint` | helpers on `torch.distributed.checkpoint` with the same `<dir>/<tag>` and newest-tag behaviour |
    | `checkpointing.save(state, dir)` / `checkpointing.load(dir, model)` | `save_shards` / `load_shards`, helpers writing and reading NxD's per-rank files (`<dir>/tp_rank_XX_pp_rank_00/checkpoint.pt`, each DTensor as this rank's slice) |
    | `p.grad` read for its value (not assigned, cleared or compared with `None`) | `local_shards(p.grad)`: this rank's slice, as NxD's gradient was |
    | `model.state_dict()` / `optimizer.load_state_dict(state)` elsewhere | `local_shards(model.state_dict())` / `load_shards_into(optimizer, state)`: this rank's slices, as NxD's parameters gave them, made DTensors again on loading (a scheduler's are left as they are) |
    | `get_data_parallel_group(as_list=True)` | the replica groups, as `get_data_parallel_replica_groups()` |
    | `model_parallel_xla_manual_seed(seed)` | `torch.manual_seed(seed)` |
    | `grads.clip_grad_norm(params, max_norm)`, `torch.nn.utils.clip_grad_norm_(params, max_norm)` | `clip_grad_norm_of_shards_(params, max_norm)`, a helper added to the file |

    ## Why
    neuronx-distributed is the old stack's model-parallel library, built on torch_xla. Its
    parallel layers hold a slice of the weight and call collectives in forward and backward;
    DTensor does the same from a layout. `ColwiseParallel()` returns this rank's slice of the
    output, as `gather_output=False` did, and `RowwiseParallel()` takes such a slice and sums
    the partial outputs, as `input_is_parallel=True` did, so model code that divides its head
    counts by the tensor-parallel size keeps working. NxD initialised each layer's full weight
    from the seed and kept its slice; `parallelize_module` shards rank 0's full weight, the
    same numbers for every tensor-parallel size (NxD drew each rank's slice of a bias apart).
    torch's `clip_grad_norm_` cannot mix DTensor and plain parameters; the helper takes the norm
    of the whole model as NxD's `clip_grad_norm` did, each shard counted once. Each region
    mapping is an `autograd.Function` in NxD; the DTensor redistribution that replaces it does
    the same collective going forward and, through the layout it gives the gradient, the same
    one coming back. NxD's `parallel_cross_entropy` returns each token's loss and charges a
    target outside the vocabulary (-100) the log-sum-exp of the shifted logits, where
    `F.cross_entropy` under `loss_parallel()` gives 0: the helper keeps NxD's values, at the
    cost of gathering the logits on every rank.

    ## Example
    ```python
    from neuronx_distributed.parallel_layers import layers, parallel_state
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    self.up = layers.ColumnParallelLinear(hidden, 4 * hidden, gather_output=False)
    ```

    ## Use instead
    ```python
    mesh = init_device_mesh(device_type, (dist.get_world_size() // 2, 2), mesh_dim_names=("dp", "tp"))
    self.up = parallelize_module(nn.Linear(hidden, 4 * hidden), mesh["tp"], ColwiseParallel())
    ```

    ## Fix safety
    All or nothing per file, because replacing NxD's process groups breaks any NxD call left
    behind: the file must call `initialize_model_parallel` once on every run, with tensor
    parallelism only, and use no other NxD API; layer options must be ones with a native
    meaning (`skip_bias_add`, padding, process groups and a
    sequence-parallel embedding are not; `keep_master_weight` is dropped, since NxD split a whole
    weight either way, unless the file reads `.master_weight`). A fused projection, `ColumnParallelLinear(stride=3)`
    for q, k and v (or a `RowParallelLinear(stride=k)` fed by one), moves with
    `gather_output=False` (`input_is_parallel=True`) and without sequence parallelism (NxD's
    gathered output and scattered input change with the tensor-parallel size): each rank's output
    is its share of every part, as the model code splits it, through the private `_StridedShard`
    placement. The weight is split in one piece per rank as for any layer (a checkpoint loads at
    any size), and DTensor all-gathers the output into NxD's order and the gradient back, which
    NxD did without; each rank's rows are not NxD's, so where a program loads NxD's per-rank files
    (`checkpointing.load`, `load_state_dict` of slices) it gets a TODO: only files the migrated
    program wrote hold its rows. With
    sequence parallelism, NxD only summed the gradients of the norms and biases a program passed
    to `allreduce_sequence_parallel_gradients`; DTensor always does, so a file that never calls it,
    or marks parameters for it by hand, is left. `parallel_cross_entropy` with label smoothing is
    left too (NxD's backward does not match its forward then). The trainer API is migrated when
    its configuration sets only tensor parallelism, ZeRO-1 and clipping (pipelines, activation
    checkpointing, LoRA, meta-device initialisation and mixed-precision settings are left), goes
    only to `initialize_parallel_model`/`initialize_parallel_optimizer`, and the model and
    optimizer are not used through NxD's wrappers (`.module`, `.optimizer`); ZeRO-1 is left where
    the file also uses 16-bit floats (NxD kept fp32 master weights). ZeRO-1 becomes FSDP2, which
    averages the gradients as NxD did and shards the parameters too (ZeRO-3). Checkpoints are
    written with DCP: ones NxD wrote cannot be read back, which the report says. `checkpointing.save`
    and `load` keep NxD's files, which the migrated program and NxD read alike (XLA serialization
    and unsharded loading are left). `state_dict()` and `load_state_dict(state)` called on a name
    give and take NxD's slices in the same way; with other options than `prefix`, `strict` and
    `assign` (`keep_vars=True` returns the DTensor parameters themselves), or used other than by
    calling them, the file is left. A gradient read for its value (`p.grad`) is made this rank's
    slice, as NxD's was: natively it is a DTensor, whose arithmetic would run collectives (on
    rank 0 alone, a hang). Files that clip gradients by value or with another norm, step
    with `xm.optimizer_step`, wrap in DDP/FSDP or change the default dtype are left as they were. A script and the modules of its
    folder that it imports and that use NxD too (its model code) are one program: migrated
    together in one run, the mesh kept in the folder's `parallel_mesh.py`, which the script sets
    and the model code reads (several scripts sharing one model file each set it, in processes
    of their own, unless one imports another); if any of them is left, all are, and a file migrated without the
    others it shares NxD's state with is left too, as is one importing a module that is neither
    next to it nor installed (a folder put on `sys.path`), which may read that state unseen;
    without a `sys.path` change such a module (a model file copied in before the run, say) gets
    a TODO at its import.
    A file's NxD code moves as a whole; an NxD import in a `try` whose `except ImportError`
    gives the name a fallback is optional, and stays so: natively the fallback is taken. The mesh replaces NxD's process groups only where
    `initialize_model_parallel` or `neuronx_distributed_config` runs once on every run.
    Sequence-parallel norms and biases NxD never all-reduced
    (`allreduce_sequence_parallel_gradients`) drifted apart on each rank, while DTensor reduces
    them in backward: they migrate, with a TODO at each such layer; a parameter marked `sequence_parallel_enabled` by hand has no native
    counterpart, where only the layers sharded with `SequenceParallel`/`RowwiseParallel` reduce
    their gradients. `xm.optimizer_step` or `xm.reduce_gradients` without the data-parallel
    `groups=` all-reduced every gradient over all processes, tensor-parallel shards included.
    NxD's ZeRO-1 kept float32 master weights of low-precision parameters, which FSDP2 would step
    in low precision. torch's optimizers over the migrated model are built with `foreach=False`:
    the multi-tensor kernels, their default on accelerators, refuse DTensor and plain parameters
    in one list.
    A file left is given back as it was, torch_xla included (its NxD runs on torch_xla, so a half
    migrated file would run on neither stack), with a TODO above every line that holds it back
    and the report's status "left as it was". A migrated
    program gives the losses and gradients of its one-process run under `torchrun`, clipped
    gradients, sequence parallelism, every region mapping and the loss of ignored targets
    included (tested with two and four processes). The helper loss no longer shifts the caller's
    logits in place, as NxD's did.
    """

    code = "NM025"
    name = "nxd-tensor-parallel"
    summary = "neuronx-distributed tensor parallelism -> `DeviceMesh` + `parallelize_module` (DTensor)"
    triggers = (STATE, *LAYER_NAMES, *MAPPING_NAMES, *TRAINER_CALLS)
    manual: ClassVar[dict[str, str]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plan = Plan()
        self._mesh = ""
        self._statement_values: set[int] = set()  # assigned or returned values: a layer there may span lines
        self._state_dicts: dict[int, int] = {}  # `x.state_dict()` calls -> their number in the file
        self._grads_kept: set[int] = set()  # `.grad` attributes assigned, compared with None or cleared
        self._not_values: set[int] = set()  # names called, or an attribute's own name
        self._functions: list[cst.FunctionDef] = []  # the functions being rewritten, innermost last
        self._global_in: set[int] = set()  # functions that build the mesh: `global mesh` opens them
        self._turns: set[int] = set()  # `if` statements where ranks take turns (see `_turns`)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def visit_For(self, node: cst.For) -> None:
        self._turns.update(_turns(node, self.qualify))

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if id(original_node) in self._turns:
            self.todo(BUILT_IN_TURNS)
        return updated_node

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        if id(original_node) not in self._global_in or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        # First in the body (after a docstring): the function may read the mesh before it builds it.
        body = list(updated_node.body.body)
        at = 1 if body and is_docstring(body[0]) else 0
        body.insert(at, stmt(f"global {self._mesh}\n"))
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def visit_Module(self, node: cst.Module) -> None:
        ctx = self.ctx
        program = ctx.mesh_program
        # A file this plan blocks never reaches the codemods: the engine gives it back as it was.
        self._plan = plan(ctx.source, ctx.imports.resolve_dotted, ctx.facts.always_called, ctx.path, program)
        # One file: a module-level variable. A program of several: the attribute of the folder's
        # mesh module, which the script sets and the model code reads.
        self._mesh = f"{ctx.need_import(program.module)}.mesh" if program is not None else ctx.unused_name("mesh")
        known = ctx.shared(MeshGroups)
        known.sharded_parameters = True
        for dim, groups in REPLICA_GROUPS.values():
            known.groups[groups.format(mesh=self._mesh)] = f'{self._mesh}["{dim}"].get_group()'

    # -- process state ---------------------------------------------------------------------------
    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not isinstance(call, cst.Call):
            return updated_node
        name = self.qualify(call.func)
        if name == DESTROY:
            self.changed("removed `destroy_model_parallel()`: the mesh's groups end with the process group")
            return self.ctx.remove(updated_node)
        if name in SEQUENCE_GRADIENTS:
            self.changed(
                "removed `allreduce_sequence_parallel_gradients(...)`: the sequence-parallel norms and biases are "
                "replicated DTensors, whose gradients DTensor sums over `mesh[\"tp\"]` in backward"
            )
            return self.ctx.remove(updated_node)
        if name != INITIALIZE:
            return updated_node
        size = arg_value(call, 0, "tensor_model_parallel_size")
        self.changed(
            "`initialize_model_parallel(tensor_model_parallel_size=...)` -> `init_device_mesh(..., "
            'mesh_dim_names=("dp", "tp"))` in a module-level variable'
        )
        return self._mesh_assignment("1" if size is None else code_of(size.value))

    def _mesh_assignment(self, tp: str) -> cst.BaseSmallStatement:
        """`mesh = init_device_mesh(device_type, (world // tp, tp), mesh_dim_names=("dp", "tp"))`."""
        init_device_mesh = self.ctx.need_from("torch.distributed.device_mesh", "init_device_mesh")
        world = f"{self.ctx.dist()}.get_world_size()"
        if tp == "1":
            shape = f"({world}, 1)"
        elif isinstance(expr(tp), cst.Name | cst.Attribute | cst.Integer | cst.Call | cst.Subscript):
            shape = f"({world} // {tp}, {tp})"
        else:
            shape = f"({world} // ({tp}), {tp})"
        if self.ctx.scope is not self.ctx.scope.module and "." not in self._mesh and self._functions:
            self._global_in.add(id(self._functions[-1]))
        args = [self.ctx.device_type_expr(), shape, 'mesh_dim_names=("dp", "tp")']
        assign = f"{self._mesh} = {init_device_mesh}({', '.join(args)})"
        if len(assign) > 88:  # one argument per line, as a formatter would
            assign = f"{self._mesh} = {init_device_mesh}(\n" + "".join(f"    {arg},\n" for arg in args) + ")"
        line = stmt(assign + "\n")
        assert isinstance(line, cst.SimpleStatementLine)
        return line.body[0]

    # -- the trainer API -------------------------------------------------------------------------
    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        call = updated_node.value
        if not isinstance(call, cst.Call) or len(updated_node.targets) != 1:
            return updated_node
        name = self.qualify(call.func)
        target = code_of(updated_node.targets[0].target)
        trainer = self._plan.trainer
        if name in CONFIG:
            self.changed("`neuronx_distributed_config(...)` -> the device mesh (`init_device_mesh`)")
            return self._mesh_assignment(trainer.tensor_parallel_size)
        if name in MODEL:
            model_args = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in call.args[3:]]
            model_args += [
                code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip()
                for a in call.args if a.keyword is not None and a.keyword.value != "include_buffers"
            ]
            function = code_of(call.args[1].value)
            self.ctx.insert_after(stmt(f"{target}.train()  # as NxD's model wrapper left it\n"))
            if trainer.zero1 != "False":
                self._zero1(target, trainer.zero1)
            self.changed("`initialize_parallel_model(config, build, ...)` -> `build(...)` on the device, in training mode")
            return updated_node.with_changes(value=expr(f"{function}({', '.join(model_args)}).to({self.ctx.device_expr()})"))
        if name in ZERO1:
            return self._zero1_optimizer(updated_node, call, original_node.value, target)
        if name in OPTIMIZER:
            options = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in call.args[2:]]
            cls = cst.ensure_type(original_node.value, cst.Call).args[1].value
            options += self._adamw_defaults(cls, list(call.args[3:]))
            options += self._foreach_option(cls, call.args[3:])
            hook = self._step_hook()
            average = {"False": "True", "True": "False"}.get(trainer.zero1, f"not {trainer.zero1}")
            norm = trainer.max_grad_norm or "None"
            self.ctx.insert_after(stmt(f"{target}.register_step_pre_hook({hook}(average={average}, max_norm={norm}))\n"))
            self.changed(
                "`initialize_parallel_optimizer(config, cls, params, ...)` -> `cls(params, ...)` with a step pre-hook "
                "that averages and clips the gradients as NxD's optimizer did"
            )
            return updated_node.with_changes(value=expr(f"{code_of(call.args[1].value)}({', '.join(options)})"))
        return updated_node

    def _zero1_optimizer(self, assign: cst.Assign, call: cst.Call, original: cst.BaseExpression, target: str) -> cst.Assign:
        """`NeuronZero1Optimizer(params, cls, **options)` -> `cls(params, **options)` with the step
        pre-hook doing what its `step()` did first: average over `mesh["dp"]`, clip the norm."""
        given = {a.keyword.value: code_of(a.value) for a in call.args if a.keyword is not None}
        kept = [a for a in call.args if a.keyword is None or a.keyword.value not in ZERO1_OWN]
        params, cls = (code_of(a.value) for a in call.args[:2])
        options = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in kept[2:]]
        cls_node = cst.ensure_type(original, cst.Call).args[1].value
        options += self._adamw_defaults(cls_node, kept[2:])
        options += self._foreach_option(cls_node, kept[2:])
        hook = self._step_hook()
        self.ctx.insert_after(stmt(f"{target}.register_step_pre_hook({hook}(average=True, max_norm={zero1_norm(given)}))\n"))
        self.todo(
            'ZeRO-1 split the optimizer state: `fully_shard(model, mesh=mesh["dp"])` first (it shards parameters too), '
            "then `average=False`"
        )
        self.changed(
            "`NeuronZero1Optimizer(params, cls, ...)` -> `cls(params, ...)` with a step pre-hook that averages the "
            "gradients over the data-parallel ranks and clips their norm, as its `step()` did"
        )
        return assign.with_changes(value=expr(f"{cls}({', '.join([params, *options])})"))

    def _foreach_option(self, cls: cst.BaseExpression, args: Sequence[cst.Arg]) -> list[str]:
        """`["foreach=False"]` for an optimizer class of torch's (NxD's AdamW becomes torch's)
        built with neither `foreach=` nor `fused=` (see `mixed_parameters`); nothing otherwise."""
        qualified = self.qualify(cls)
        return [OPTION] if foreach_off(self, "torch.optim.AdamW" if qualified == ADAMW_FP32 else qualified, args) else []

    def _zero1(self, model: str, enabled: str) -> None:
        """NxD's ZeRO-1 sharded the optimizer state over the data-parallel ranks: FSDP2 over
        `mesh["dp"]` does (and the parameters too), averaging the gradients as it goes."""
        fully_shard = self.ctx.need_from("torch.distributed.fsdp", "fully_shard")
        shard = f'{fully_shard}({model}, mesh={self._mesh}["dp"])'
        comment = "  # ZeRO-1: the optimizer state (and here the parameters) split over the data-parallel ranks"
        if enabled == "True":
            self.ctx.insert_after(stmt(shard + comment + "\n"))
        else:
            self.ctx.insert_after(stmt(f"if {enabled}:{comment}\n    {shard}\n"))
        self.changed('ZeRO-1 -> FSDP2 `fully_shard(model, mesh=mesh["dp"])`')

    def _step_hook(self) -> str:
        name = self.ctx.unused_name("nxd_optimizer_step_hook")
        source = Template(STEP_HOOK).substitute(
            name=name,
            DTensor=self.ctx.need_from("torch.distributed.tensor", "DTensor"),
            dist=self.ctx.dist(),
            mesh=self._mesh,
            clip=self._clip_helper(),
        )
        return self.ctx.need_helper(name, source)

    def _checkpoint(self, call: cst.Call, name: str) -> cst.BaseExpression:
        kind = "save" if name in SAVE else "load" if name in LOAD else "has"
        helper = self._checkpoint_helper(kind)
        kept = [a for a in call.args if a.keyword is None or a.keyword.value not in CHECKPOINT_IGNORED]
        self.changed(f"`{name.rpartition('.')[2]}` -> `{helper}` (`torch.distributed.checkpoint`)")
        if kind == "load":
            self.ctx.note(
                self.code,
                "checkpoints are written with `torch.distributed.checkpoint` now: ones NxD wrote before cannot be "
                "loaded by the migrated program; convert them (NxD's per-rank files to a DCP state dict) or start anew",
            )
        return call.with_changes(func=expr(helper), args=fix_trailing_comma(kept))

    def _checkpoint_helper(self, kind: str) -> str:
        save = self.ctx.unused_name("save_dcp_checkpoint")
        spelled = {
            "name": self.ctx.unused_name(f"{kind}_dcp_checkpoint"),
            "save": save,
            "os": self.ctx.os(),
            "torch": self.ctx.torch(),
            "dist": self.ctx.dist(),
            "dcp": self.ctx.need_import("torch.distributed.checkpoint", "dcp"),
            **{
                n: self.ctx.need_from("torch.distributed.checkpoint.state_dict", n)
                for n in ("get_model_state_dict", "get_optimizer_state_dict", "set_model_state_dict", "set_optimizer_state_dict", "StateDictOptions")
            },
        }
        template = {"save": SAVE_HELPER, "load": LOAD_HELPER, "has": HAS_HELPER}[kind]
        return self.ctx.need_helper(spelled["name"], Template(template).substitute(spelled))

    # -- queries and layers ----------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self._unseen(code_of(alias.name))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not node.relative and node.module is not None:
            self._unseen(code_of(node.module))

    def _unseen(self, module: str) -> None:
        if module in self._plan.unseen_modules:
            self.todo(f"`{module}` is not next to this file nor installed: if it uses NxD, migrate it in the same run as this file")

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        self._not_values.update(id(n) for n in (node.name, node.asname and node.asname.name) if n is not None)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return updated_node if id(original_node) in self._not_values else self._loss_held(updated_node)

    def _loss_held(self, node: cst.Name | cst.Attribute) -> cst.BaseExpression:
        """`loss_fct = parallel_cross_entropy` -> the helper, which takes the same (logits, target);
        `AdamW_FP32OptimParams` handed to NxD's optimizer -> torch's AdamW."""
        name = self.qualify(node)
        if name == ADAMW_FP32:
            return expr(f"{self.ctx.torch()}.optim.AdamW")
        if name not in CROSS_ENTROPY:
            return node
        self.changed("`parallel_cross_entropy` held as a value -> the helper computing NxD's per-token loss")
        return expr(self._cross_entropy_helper())

    def _adamw(self, original: cst.Call, call: cst.Call) -> cst.BaseExpression:
        defaults = self._adamw_defaults(original.func, list(call.args))
        defaults += self._foreach_option(original.func, call.args)
        args = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in call.args]
        return expr(f"{self.ctx.torch()}.optim.AdamW({', '.join([*args, *defaults])})")

    def _adamw_defaults(self, cls: cst.BaseExpression, args: list[cst.Arg]) -> list[str]:
        """transformers 4's AdamW defaults torch's does not share, for `AdamW_FP32OptimParams`'s
        keyword options `args` (none for another class)."""
        if self.qualify(cls) != ADAMW_FP32:
            return []
        given = {a.keyword.value for a in args if a.keyword is not None}
        positional = sum(a.keyword is None for a in args)  # from `params`, for a call
        self.changed("`AdamW_FP32OptimParams` -> `torch.optim.AdamW` with its defaults (`eps=1e-6`, no weight decay)")
        self.todo(ADAMW_UPDATE)
        return [
            f"{d.keyword}={d.old}"
            for d in ADAMW_DEFAULTS
            if d.keyword not in given and (d.position is None or positional <= d.position)
        ]

    def visit_Call(self, node: cst.Call) -> None:
        self._not_values.add(id(node.func))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict":
            self._state_dicts[id(node)] = len(self._state_dicts)  # in source order, as `state_dict_calls`

    def visit_Assign(self, node: cst.Assign) -> None:
        self._statement_values.add(id(node.value))
        self._grads_kept.update(id(target.target) for target in node.targets)

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self._statement_values.add(id(node.value))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._grads_kept.add(id(node.target))
        if node.value is not None:
            self._statement_values.add(id(node.value))

    # -- gradients read for their value: this rank's slice, as NxD's were ------------------------
    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._grads_kept.add(id(node.target))

    def visit_Del(self, node: cst.Del) -> None:
        self._grads_kept.add(id(node.target))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if all(isinstance(c.comparator, cst.Name) and c.comparator.value == "None" for c in node.comparisons):
            self._grads_kept.add(id(node.left))  # `p.grad is None`

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_values.add(id(node.attr))
        if node.attr.value in GRADIENT_IN_PLACE:
            self._grads_kept.add(id(node.value))  # `p.grad.zero_()` changes the DTensor itself

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if id(original_node) not in self._not_values and original_node.attr.value != "grad":
            return self._loss_held(updated_node)
        if original_node.attr.value != "grad" or id(original_node) in self._grads_kept:
            return updated_node
        self.changed("`.grad` read -> its DTensor's local part, this rank's slice as NxD's gradients were")
        return expr(f"{self._shards_helper('local')}({code_of(updated_node)})")

    def leave_UnaryOperation(
        self, original_node: cst.UnaryOperation, updated_node: cst.UnaryOperation
    ) -> cst.BaseExpression:
        """`not model_parallel_is_initialized()` -> `mesh is None`."""
        operand = original_node.expression
        if isinstance(original_node.operator, cst.Not) and self.called(operand, IS_INITIALIZED):
            return self.ctx.group(expr(f"{self._mesh} is None"))
        return updated_node

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        """`get_pipeline_model_parallel_rank() == 0` -> `True`: a comparison the one stage decides."""
        left = original_node.left
        name = self.qualify(left.func) if isinstance(left, cst.Call) else None
        if name not in PIPELINE_QUERIES or len(original_node.comparisons) != 1:
            return updated_node
        (comparison,) = original_node.comparisons
        compare = COMPARISONS.get(type(comparison.operator))
        if compare is None or not isinstance(comparison.comparator, cst.Integer):
            return updated_node
        value = compare(int(PIPELINE_QUERIES[name]), int(comparison.comparator.value, 0))
        self.changed(f"`{code_of(original_node)}` -> `{value}`: the mesh has no pipeline stages")
        return expr(str(value))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in self._plan.trainer.zero1_optimizers
            and func.attr.value in OPTIMIZER_SHARDS
        ):
            return self._optimizer_shards(func.value.value, func.attr.value, updated_node)
        name = self.qualify(original_node.func)
        if name in FOREACH_OPTIMIZERS:
            return without_foreach(self, updated_node)
        if name in AS_LIST and original_node.args:
            value = original_node.args[0].value
            listed = isinstance(value, cst.Name) and value.value == "True"
            name = AS_LIST[name] if listed else name
        if name in MESH_QUERIES:
            dim, method = MESH_QUERIES[name]
            self.changed(f"`{name.rpartition('.')[2]}()` -> `mesh[\"{dim}\"].{method}`")
            return expr(f'{self._mesh}["{dim}"].{method}')
        if name in PIPELINE_QUERIES:
            self.changed(f"`{name.rpartition('.')[2]}()` -> `{PIPELINE_QUERIES[name]}`: the mesh has no pipeline stages")
            return expr(PIPELINE_QUERIES[name])
        if name in REPLICA_GROUPS:
            dim, groups = REPLICA_GROUPS[name]
            self.changed(f"`{name.rpartition('.')[2]}()` -> the ranks of each `mesh[\"{dim}\"]` group")
            return expr(groups.format(mesh=self._mesh))
        if name == IS_INITIALIZED:
            if "." not in self._mesh:
                self.ctx.need_helper(self._mesh, f"{self._mesh} = None  # the device mesh, once built\n")
            self.changed("`model_parallel_is_initialized()` -> `mesh is not None`")
            return self.ctx.group(expr(f"{self._mesh} is not None"))
        if name in LAYER_NAMES:
            return self._layer(LAYER_NAMES[name], updated_node, id(original_node) in self._statement_values)
        if name in MAPPING_NAMES:
            return self._mapping(MAPPING_NAMES[name], updated_node, id(original_node) in self._statement_values)
        if name in CROSS_ENTROPY:
            return self._cross_entropy(updated_node)
        if name == ADAMW_FP32:
            return self._adamw(original_node, updated_node)
        if name is not None and name in (*SAVE, *LOAD, *HAS):
            return self._checkpoint(updated_node, name)
        if name in SAVE_SHARDS or name in LOAD_SHARDS:
            return self._shards(updated_node, name)
        receiver = self._state_owner(original_node)
        if receiver == "load_state_dict":
            func = updated_node.func
            assert isinstance(func, cst.Attribute)
            if self._plan.strided_program:
                self.todo(STRIDED_LOADS)
            self.changed("`.load_state_dict(state)` of NxD's shards -> a helper that makes them DTensors again")
            return updated_node.with_changes(
                func=expr(self._shards_helper("into")),
                args=[cst.Arg(func.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *updated_node.args],
            )
        if receiver == "state_dict" and self._state_dicts.get(id(original_node)) not in self._plan.state_dicts.saved:
            self.changed("`.state_dict()` -> its DTensors as this rank's slices, as NxD's parameters gave them")
            return expr(f"{self._shards_helper('local')}({code_of(updated_node)})")
        if name in SEED:
            self.changed("`model_parallel_xla_manual_seed(seed)` -> `torch.manual_seed(seed)`")
            return updated_node.with_changes(func=expr(f"{self.ctx.torch()}.manual_seed"))
        if name in CLIP:
            return self._clip(updated_node, name)
        return updated_node

    # -- NxD's per-rank checkpoint files -------------------------------------------------------
    def _state_owner(self, call: cst.Call) -> str | None:
        """"state_dict" or "load_state_dict" for such a call on what may hold sharded parameters
        (not a scheduler); the whole-file check made sure each is one a helper can take."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("state_dict", "load_state_dict")):
            return None
        return None if code_of(func.value) in self._plan.state_dicts.schedulers else func.attr.value

    def _shards(self, call: cst.Call, name: str) -> cst.BaseExpression:
        save = name in SAVE_SHARDS
        kept = SAVE_KEPT if save else LOAD_KEPT
        args = [a for a in call.args if a.keyword is None or a.keyword.value in kept]
        helper = self._shards_helper("save" if save else "load")
        if not save and self._plan.strided_program:
            self.todo(STRIDED_LOADS)
        self.changed(
            f"`checkpointing.{'save' if save else 'load'}` -> `{helper}`, NxD's per-rank files of DTensors' local shards"
        )
        return call.with_changes(func=expr(helper), args=fix_trailing_comma(args))

    def _shards_helper(self, kind: str) -> str:
        names = {k: self.ctx.unused_name(n) for k, n in (
            ("local", "local_shards"), ("into", "load_shards_into"), ("save", "save_shards"), ("load", "load_shards"),
            ("save_optimizer", "save_optimizer_shards"), ("load_optimizer", "load_optimizer_shards"),
        )}
        spelled = {
            **names,
            "os": self.ctx.os(),
            "torch": self.ctx.torch(),
            "dist": self.ctx.dist(),
            "mesh": self._mesh,
            "DTensor": self.ctx.need_from("torch.distributed.tensor", "DTensor"),
        }
        templates = {
            "local": LOCAL_SHARDS, "into": LOAD_INTO, "save": SAVE_SHARDS_HELPER, "load": LOAD_SHARDS_HELPER,
            "save_optimizer": SAVE_OPTIMIZER_HELPER, "load_optimizer": LOAD_OPTIMIZER_HELPER,
        }  # fmt: skip
        needs = {
            "local": (), "into": (), "save": ("local",), "load": ("into",), "save_optimizer": ("local",),
            "load_optimizer": ("into",),
        }  # fmt: skip
        for needed in needs[kind]:
            self.ctx.need_helper(names[needed], Template(templates[needed]).substitute(spelled, name=names[needed]))
        return self.ctx.need_helper(names[kind], Template(templates[kind]).substitute(spelled, name=names[kind]))

    def _nn(self) -> str:
        """`nn` where the file has it, else `torch.nn` through its `torch`, else a new import."""
        if self.ctx.resolve_dotted("nn") == "torch.nn":
            return "nn"
        if self.ctx.resolve_dotted("torch") == "torch":
            return f"{self.ctx.torch()}.nn"
        return self.ctx.need_import("torch.nn", "nn")

    def _spelled(self, code: str) -> str:
        """`code` with the DTensor classes it names spelled as they can be here, imports added."""
        for name in TENSOR_CLASSES:
            if re.search(rf"\b{name}\b", code):
                code = re.sub(rf"\b{name}\b", self.ctx.need_from("torch.distributed.tensor", name), code)
        return code

    def _mapping(self, kind: str, call: cst.Call, whole_value: bool) -> cst.BaseExpression:
        mapping = MAPPINGS[kind]
        tensor = arg_value(call, 0, "input_")
        if tensor is None:
            return call
        dim = None
        if mapping.dimension is not None:
            keyword, position, default = mapping.dimension
            given = arg_value(call, position, keyword)
            dim = code_of(given.value) if given is not None else default
        grad = mapping.grad
        if mapping.grad_switch is not None:
            keyword, position, values = mapping.grad_switch
            given = arg_value(call, position, keyword)
            grad = values[code_of(given.value) if given is not None else "True"]
        chain = [self._spelled(part) for part in redistribution(mapping, code_of(tensor.value), f'{self._mesh}["tp"]', dim, grad)]
        carried = "forward (inside an `autograd.Function`)" if mapping.forward_only else "forward and backward"
        self.changed(f"`{kind}` -> a DTensor redistribution over `mesh[\"tp\"]` with NxD's {carried}")
        if whole_value and len("".join(chain)) > 72:  # one call of the chain a line, as a formatter would
            return expr("(\n" + "".join(f"    {part}\n" for part in chain) + ")")
        return expr("".join(chain))

    def _cross_entropy(self, call: cst.Call) -> cst.BaseExpression:
        logits = arg_value(call, 0, "vocab_parallel_logits")
        target = arg_value(call, 1, "target")
        if logits is None or target is None:
            return call
        helper = self._cross_entropy_helper()
        self.changed(
            "`parallel_cross_entropy` -> a helper computing NxD's per-token loss from the logits gathered over "
            '`mesh["tp"]` (for a large vocabulary, `loss_parallel()` keeps them split but gives 0, not the '
            "log-sum-exp, for targets of -100)"
        )
        return expr(f"{helper}({code_of(logits.value)}, {code_of(target.value)})")

    def _optimizer_shards(self, optimizer: str, method: str, call: cst.Call) -> cst.BaseExpression:
        """`optimizer.save_sharded_state_dict(dir)` -> `save_optimizer_shards(optimizer, dir)`, the
        same per-rank files with the plain optimizer's state."""
        save = method == OPTIMIZER_SHARDS[0]
        helper = self._shards_helper("save_optimizer" if save else "load_optimizer")
        self.changed(f"`{optimizer}.{method}` -> `{helper}`: this rank's file of the optimizer's state")
        if not save:
            self.ctx.note(
                self.code,
                "optimizer files are this rank's plain optimizer state now: ones NxD's ZeRO-1 wrote before cannot be "
                "loaded by the migrated program",
            )
        return expr(f"{helper}({optimizer}, {code_of(call.args[0].value)})")

    def _cross_entropy_helper(self) -> str:
        helper = self.ctx.unused_name("vocab_parallel_cross_entropy")
        source = Template(CROSS_ENTROPY_HELPER).substitute(
            name=helper, mesh=self._mesh, **{n: self.ctx.need_from("torch.distributed.tensor", n) for n in ("DTensor", "Shard")}
        )
        return self.ctx.need_helper(helper, source)

    def _clip(self, call: cst.Call, name: str) -> cst.BaseExpression:
        parameters = arg_value(call, 0, "parameters")
        max_norm = arg_value(call, 1, "max_norm")
        if parameters is None or max_norm is None:
            return call
        helper = self._clip_helper()
        self.changed(
            f"`{name.rpartition('.')[2]}` -> a helper clipping the norm of DTensor and plain parameters together"
        )
        return expr(f"{helper}({code_of(parameters.value)}, {code_of(max_norm.value)})")

    def _clip_helper(self) -> str:
        torch = self.ctx.torch()  # spelled first, so the helper's `torch` stays torch itself
        helper = self.ctx.unused_name("clip_grad_norm_of_shards_")
        source = Template(CLIP_HELPER).substitute(
            name=helper, torch=torch, DTensor=self.ctx.need_from("torch.distributed.tensor", "DTensor")
        )
        return self.ctx.need_helper(helper, source)

    def _layer(self, kind: str, call: cst.Call, whole_value: bool) -> cst.BaseExpression:
        layer = LAYERS[kind]
        given = {arg.keyword.value: code_of(arg.value) for arg in call.args if arg.keyword is not None}
        if _sequence_gradients(kind, given) and not self._plan.reduces_sequence_gradients:
            self.todo(UNREDUCED_SEQUENCE_GRADIENTS)
        module = self._module(layer, call)
        flag = given.get(SEQUENCE_OPTIONS[0], "False")
        if flag not in ("True", "False"):
            return self._layout_chosen_at_run_time(kind, module, given, flag, whole_value)
        style = self._style(layer, given)
        if not style:
            self.changed(f"`{kind}` -> `nn.{layer.native}` (without sequence parallelism it is torch's)")
            return expr(module)
        stride = given.get(STRIDE, "1")
        if stride == "1":
            self.changed(f"`{kind}` -> `nn.{layer.native}` sharded by `parallelize_module(..., {style})`")
        else:
            self.changed(
                f"`{kind}(stride={stride})` -> `nn.{layer.native}` sharded by `parallelize_module(..., {style})`: "
                f"each rank's share of each of the {stride} parts, as in NxD, laid out by DTensor (an all-gather each way)"
            )
        return self._parallelized(module, self._spelled_style(style), whole_value)

    def _module(self, layer: Layer, call: cst.Call) -> str:
        """The plain `torch.nn` module of the layer's call, its NxD-only options dropped."""
        dropped = {layer.switch, *dict(layer.defaults), *SEQUENCE_OPTIONS, INIT_METHOD, STRIDE}
        init_method = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == INIT_METHOD), None)
        args = []
        for arg in call.args:
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in dropped:
                continue
            renamed = dict(layer.sizes).get(keyword or "")
            if renamed is not None:
                arg = arg.with_changes(keyword=cst.Name(renamed))
            args.append(code_of(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip())
        module = f'{self._nn()}.{layer.native}({", ".join(args)})'
        if init_method is not None and code_of(init_method) != "None":
            module = f"{self._init_helper()}({module}, {code_of(init_method)})"
        return module

    def _parallelized(self, module: str, spelled: str, whole_value: bool) -> cst.BaseExpression:
        """`parallelize_module(module, mesh["tp"], style)`, wrapped as a formatter would."""
        parallelize = self.ctx.need_from("torch.distributed.tensor.parallel", "parallelize_module")
        arguments = f'{module}, {self._mesh}["tp"], {spelled}'
        if not whole_value or len(arguments) <= 64:
            return expr(f"{parallelize}({arguments})")
        if len(arguments) <= 84:  # wrapped as a formatter would: on a line of their own
            return expr(f"{parallelize}(\n    {arguments}\n)")
        one_per_line = "".join(f"    {argument},\n" for argument in (module, f'{self._mesh}["tp"]', spelled))
        return expr(f"{parallelize}(\n{one_per_line})")

    def _layout_chosen_at_run_time(
        self, kind: str, module: str, given: dict[str, str], flag: str, whole_value: bool
    ) -> cst.BaseExpression:
        """`sequence_parallel_enabled=config.flag`: the layout NxD gave either value, picked by the
        same expression where the layer is built."""
        layer = LAYERS[kind]
        on = self._spelled_style(self._style(layer, {**given, SEQUENCE_OPTIONS[0]: "True"}))
        off = self._style(layer, {**given, SEQUENCE_OPTIONS[0]: "False"})
        if off:  # sharded either way: only the style depends on the flag
            self.changed(f"`{kind}(sequence_parallel_enabled={flag})` -> its sequence-parallel style when `{flag}`")
            choice = f"{on} if {flag} else {self._spelled_style(off)}"
            if whole_value and len(choice) > 76:  # on lines of their own, as a formatter would
                choice = f"(\n        {on}\n        if {flag}\n        else {self._spelled_style(off)}\n    )"
            return self._parallelized(module, choice, whole_value)
        self.changed(f"`{kind}(sequence_parallel_enabled={flag})` -> sharded along the sequence when `{flag}`")
        parallelized = code_of(self._parallelized(module, on, whole_value=False))
        if not whole_value or len(parallelized) + len(flag) + len(module) <= 72:
            return expr(f"{parallelized} if {flag} else {module}")
        if len(parallelized) > 84:  # on lines of their own, as a formatter would
            parallelized = code_of(self._parallelized(module, on, whole_value=True)).replace("\n", "\n    ")
        return expr(f"(\n    {parallelized}\n    if {flag}\n    else {module}\n)")

    def _init_helper(self) -> str:
        name = self.ctx.unused_name("init_weight")
        return self.ctx.need_helper(name, Template(INIT_WEIGHT).substitute(name=name, torch=self.ctx.torch()))

    def _style(self, layer: Layer, given: dict[str, str]) -> str:
        """The `parallelize_module` style that lays the layer out as NxD did ("" for none)."""
        strided = f"{self._strided_helper()}({{stride}})" if given.get(STRIDE, "1") != "1" else STRIDED
        style = layer_style(layer, given, self._plan.sequence_dim, strided)
        assert style is not None  # the whole-file check refused it otherwise
        return style

    def _strided_helper(self) -> str:
        name = self.ctx.unused_name("strided_shard")
        strided_shard = self.ctx.need_from("torch.distributed.tensor.placement_types", "_StridedShard")
        return self.ctx.need_helper(name, Template(STRIDED_SHARD).substitute(name=name, StridedShard=strided_shard))

    def _spelled_style(self, style: str) -> str:
        style_class, _, rest = style.partition("(")
        return self.ctx.need_from("torch.distributed.tensor.parallel", style_class) + "(" + self._spelled(rest)
