"""neuronx-distributed's per-rank checkpoint files, and the state dicts that go into them.

NxD's parameters are plain tensors holding this rank's slice, so `state_dict()` gives local
shards and `parallel_layers.checkpointing.save` writes each tensor-parallel rank's own file
(`<dir>/tp_rank_XX_pp_rank_00/checkpoint.pt`). Natively the sharded parameters are DTensors:
the migrated program writes the same files with the same content (each DTensor's local shard),
and makes the shards it loads DTensors again like the parameters they belong to. One table of
what is accepted, read by the check that decides whether a file can be rewritten, and the
helpers the rewritten file gets.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from neuron_migrate.rewrite.codemods.nxd_layouts import LAYERS_MODULE

CHECKPOINTING = f"{LAYERS_MODULE}.checkpointing"
SAVE_SHARDS = (f"{CHECKPOINTING}.save", f"{LAYERS_MODULE}.save")
LOAD_SHARDS = (f"{CHECKPOINTING}.load", f"{LAYERS_MODULE}.load")
# NxD's parameters, in order, and the ones the helpers take (the others are accepted at NxD's
# default only, or, for `save_serially`, at any value: it staggered the writes, nothing more).
SAVE_PARAMETERS = ("checkpoint", "output_dir", "save_serially", "save_xser", "down_cast_bf16", "master_dp_only")
SAVE_KEPT = ("checkpoint", "output_dir", "down_cast_bf16", "master_dp_only")
SAVE_DEFAULTS = {"save_xser": "False"}
LOAD_PARAMETERS = (
    "chkpt_path", "model", "model_or_optimizer", "model_key", "load_xser", "sharded", "strict", "master_dp_only", "weights_only",
)
LOAD_KEPT = ("chkpt_path", "model", "model_or_optimizer", "model_key", "strict", "master_dp_only", "weights_only")
LOAD_DEFAULTS = {"load_xser": "False", "sharded": "True"}

# Receivers whose state holds no parameters: learning-rate schedulers.
SCHEDULER_MODULES = ("torch.optim.lr_scheduler.", "transformers.")

DTENSOR_STATE = "it would hold DTensors"


def _options_blocker(call: ast.Call, short: str, parameters: tuple[str, ...], defaults: dict[str, str]) -> str | None:
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(k.arg is None for k in call.keywords):
        return f"`{short}` is called with `*args`/`**kwargs`"
    if len(call.args) > 2:
        return f"`{short}` has options given by position"
    for keyword in call.keywords:
        if keyword.arg not in parameters:
            return f"`{short}({keyword.arg}=...)` is not an option of NxD's `{short}`"
        if keyword.arg in defaults and ast.unparse(keyword.value) != defaults[keyword.arg]:
            return f"`{short}({keyword.arg}={ast.unparse(keyword.value)})` has no native counterpart here"
    return None


def shards_call_blocker(qualified: str, call: ast.Call, statement: ast.AST | None) -> str | None:
    """Why this `checkpointing.save`/`load` call cannot become the helper, if it cannot."""
    if qualified in SAVE_SHARDS:
        if not isinstance(statement, ast.Expr):
            return "`checkpointing.save` is called for its value"
        return _options_blocker(call, "save", SAVE_PARAMETERS, SAVE_DEFAULTS)
    whole = next((k for k in call.keywords if k.arg == "sharded"), None)
    if whole is not None and ast.unparse(whole.value) == "False":
        return "`load(sharded=False)` reads one whole checkpoint: natively `set_model_state_dict(...)` with `full_state_dict=True`"
    reason = _options_blocker(call, "load", LOAD_PARAMETERS, LOAD_DEFAULTS)
    given = {k.arg for k in call.keywords} | set(LOAD_PARAMETERS[: len(call.args)])
    if reason is None and {"model", "model_or_optimizer"} <= given:
        return "`checkpointing.load` is given both `model` and `model_or_optimizer`"
    return reason


@dataclass
class StateDicts:
    """A file's `state_dict()` calls, numbered in source order, and those of them that only feed
    `checkpointing.save` (which makes what it writes local itself); the names that hold
    schedulers, whose state has no tensors of the model."""

    saved: set[int] = field(default_factory=set)  # numbers of `x.state_dict()` calls
    schedulers: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, tree: ast.AST, resolve: Any) -> StateDicts:
        found = cls()
        saved: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
                qualified = resolve(_dotted(node.value.func)) or ""
                if qualified.startswith(SCHEDULER_MODULES) and "schedul" in qualified.lower():
                    found.schedulers.add(_dotted(node.targets[0]))
            if isinstance(node, ast.Call) and resolve(_dotted(node.func)) in SAVE_SHARDS and node.args:
                saved |= set(_saved_values(node.args[0]))
            for block in (getattr(node, "body", None), getattr(node, "orelse", None), getattr(node, "finalbody", None)):
                if isinstance(block, list):
                    saved |= set(_saved_through_a_name(block, resolve))
        found.saved = {number for number, call in enumerate(state_dict_calls(tree)) if id(call) in saved}
        found.schedulers.discard("")
        return found

    def blocker(self, node: ast.Attribute, parent: ast.AST | None) -> str | None:
        """Why this `.state_dict`/`.load_state_dict` use cannot be given NxD's local shards."""
        receiver = _dotted(node.value)
        if receiver in self.schedulers:
            return None
        if not (isinstance(parent, ast.Call) and parent.func is node and receiver):
            return f"`.{node.attr}` is used other than by calling it on a name: {DTENSOR_STATE}"
        keywords = {k.arg for k in parent.keywords}
        if node.attr == "state_dict" and (parent.args or keywords - {"prefix"}):
            return f"`state_dict()` is called with options other than `prefix`: {DTENSOR_STATE}"
        if node.attr == "load_state_dict" and (len(parent.args) != 1 or keywords - {"state_dict", "strict", "assign"}):
            return f"`load_state_dict` is called with options given by position: {DTENSOR_STATE}"
        return None


def state_dict_calls(tree: ast.AST) -> list[ast.Call]:
    """The `x.state_dict(...)` calls of a file, in source order (an outer call before the calls
    inside it), as a visitor of the file meets them."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "state_dict"]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset, -(c.end_lineno or 0), -(c.end_col_offset or 0)))


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _saved_values(node: ast.AST) -> Iterable[int]:
    """`x.state_dict()` calls that are values of the dict literal `node` (or `node` itself): ids."""
    values = [node.values] if isinstance(node, ast.Dict) else [[node]]
    for value in values[0]:
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "state_dict"
            and not value.args
            and not value.keywords
        ):
            yield id(value)


def _saved_through_a_name(block: list[ast.stmt], resolve: Any) -> Iterable[int]:
    """`state = {"model": model.state_dict(), ...}` whose next use is `checkpointing.save(state, ...)`
    and which nothing reads after it."""
    for index, statement in enumerate(block):
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
            continue
        name = statement.targets[0].id
        later = [s for s in block[index + 1 :] if _reads(s, name)]
        if not later:
            continue
        first = later[0]
        saves = (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Call)
            and resolve(_dotted(first.value.func)) in SAVE_SHARDS
            and first.value.args[:1]
            and isinstance(first.value.args[0], ast.Name)
            and first.value.args[0].id == name
            and sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(first.value)) == 1
        )
        if saves and len(later) == 1:
            yield from _saved_values(statement.value)


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


# -- what the migrated file gets --------------------------------------------------------------

LOCAL_SHARDS = '''\
def $name(data, on_cpu=False, down_cast_bf16=False):
    \"\"\"`data` as NxD's parameters made it: each DTensor as this rank's slice; as NxD's
    `checkpointing.save` wrote it with `on_cpu`, every tensor on the CPU (float32 ones in
    bfloat16 with `down_cast_bf16`).\"\"\"
    if isinstance(data, $DTensor):
        data = data.to_local()
    if isinstance(data, $torch.Tensor) and on_cpu:
        data = data.cpu()
        return data.bfloat16() if down_cast_bf16 and data.dtype == $torch.float32 else data
    if isinstance(data, dict):
        return {key: $name(value, on_cpu, down_cast_bf16) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        values = [$name(value, on_cpu, down_cast_bf16) for value in data]
        return values if isinstance(data, list) else tuple(values)
    return data
'''

SAVE_SHARDS_HELPER = '''\
def $name(checkpoint, output_dir, down_cast_bf16=False, master_dp_only=True):
    """NxD's `checkpointing.save`: each tensor-parallel rank writes its own shards to
    `<output_dir>/tp_rank_XX_pp_rank_00/checkpoint.pt` (`..._dp_rank_XX` per data-parallel rank
    unless `master_dp_only`, when the first data-parallel rank alone writes)."""
    path = $os.path.join(output_dir, f'tp_rank_{$mesh["tp"].get_local_rank():02d}_pp_rank_00')
    if not master_dp_only:
        path += f'_dp_rank_{$mesh["dp"].get_local_rank():02d}'
    $os.makedirs(path, exist_ok=True)
    if $mesh["dp"].get_local_rank() == 0 or not master_dp_only:
        $torch.save($local(checkpoint, True, down_cast_bf16), $os.path.join(path, "checkpoint.pt"))
    $dist.barrier()
'''

LOAD_INTO = '''\
def $name(owner, state, **options):
    \"\"\"`owner.load_state_dict(state, **options)` for a state of NxD's shards: this rank's slices
    as plain tensors, made DTensors again like the parameters they belong to.\"\"\"
    if isinstance(owner, $torch.optim.Optimizer):
        owner.load_state_dict(state)
        for param, values in owner.state.items():
            if isinstance(param, $DTensor):
                for key, value in values.items():
                    if type(value) is $torch.Tensor and value.shape == param.to_local().shape:
                        values[key] = $DTensor.from_local(value, param.device_mesh, param.placements)
        return None
    params = owner.state_dict()
    state = {
        key: $DTensor.from_local(value, params[key].device_mesh, params[key].placements)
        if isinstance(params.get(key), $DTensor) and type(value) is $torch.Tensor
        else value
        for key, value in state.items()
    }
    return owner.load_state_dict(state, **options)
'''

LOAD_SHARDS_HELPER = '''\
def $name(
    chkpt_path, model=None, model_or_optimizer=None, model_key="model", strict=True, master_dp_only=True, weights_only=False
):
    """NxD's `checkpointing.load`: reads this tensor-parallel rank's file of `$save`, loads
    `model_key`'s part of it into the model or optimizer given, and returns the rest."""
    model_or_optimizer = model if model is not None else model_or_optimizer
    path = $os.path.join(chkpt_path, f'tp_rank_{$mesh["tp"].get_local_rank():02d}_pp_rank_00')
    if not master_dp_only:
        path += f'_dp_rank_{$mesh["dp"].get_local_rank():02d}'
    checkpoint = $torch.load($os.path.join(path, "checkpoint.pt"), map_location="cpu", weights_only=weights_only)
    if model_or_optimizer is not None:
        if model_key is None:
            $into(model_or_optimizer, checkpoint, strict=strict)
            return None
        $into(model_or_optimizer, checkpoint.pop(model_key), strict=strict)
    return checkpoint
'''

# `NeuronZero1Optimizer.save_sharded_state_dict(output_dir)` / `load_sharded_state_dict(output_dir)`:
# every rank's optimizer state in a file of its own, `optim.dp_rank_XX.tp_rank_XX`.
OPTIMIZER_SHARDS = ("save_sharded_state_dict", "load_sharded_state_dict")
OPTIMIZER_SHARDS_IGNORED = ("num_workers_per_step",)  # how many ranks of a host wrote at once

SAVE_OPTIMIZER_HELPER = '''\
def $name(optimizer, output_dir):
    """NxD's `NeuronZero1Optimizer.save_sharded_state_dict`: every rank writes its optimizer state
    to `<output_dir>/optim.dp_rank_XX.tp_rank_XX`, each DTensor as this rank's slice."""
    dp, tp = $mesh["dp"].get_local_rank(), $mesh["tp"].get_local_rank()
    $os.makedirs(output_dir, exist_ok=True)
    $torch.save($local(optimizer.state_dict(), True), $os.path.join(output_dir, f"optim.dp_rank_{dp:02d}.tp_rank_{tp:02d}"))
    $dist.barrier()
'''

LOAD_OPTIMIZER_HELPER = '''\
def $name(optimizer, output_dir):
    """NxD's `NeuronZero1Optimizer.load_sharded_state_dict`: this rank's file of `$save_optimizer`."""
    dp, tp = $mesh["dp"].get_local_rank(), $mesh["tp"].get_local_rank()
    state = $torch.load($os.path.join(output_dir, f"optim.dp_rank_{dp:02d}.tp_rank_{tp:02d}"), map_location="cpu")
    $into(optimizer, state)
'''


def optimizer_shards_blocker(call: ast.Call, statement: ast.AST | None) -> str | None:
    """Why `optimizer.save_sharded_state_dict(...)`/`load_...` cannot become the helper, if it cannot."""
    short = ast.unparse(call.func)
    if not isinstance(statement, ast.Expr) or statement.value is not call:
        return f"`{short}` is called for its value"
    if len(call.args) != 1 or any(k.arg not in OPTIMIZER_SHARDS_IGNORED for k in call.keywords):
        return f"`{short}` is not given its folder alone, by position"
    return None
