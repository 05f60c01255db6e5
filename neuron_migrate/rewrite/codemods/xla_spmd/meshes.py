"""What the whole file says about its meshes, read before rewriting: which variables hold a mesh
(and of what shape), which one is the global mesh, and which hold a loss module a step may call.

A variable counts only where the file binds it once: a name rebound elsewhere may hold another
mesh at the place that reads it.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.codemods.xla_spmd.batches import loss_module
from neuron_migrate.rewrite.codemods.xla_spmd.specs import MeshShape

INIT_DEVICE_MESH = "torch.distributed.device_mesh.init_device_mesh"
SPMD_MODULES = ("torch_xla.distributed.spmd", "torch_xla.experimental.xla_sharding")
Resolve = Callable[[str], str | None]


def spmd_name(qualified: str | None, *names: str) -> bool:
    """Is `qualified` one of `names` of the SPMD module (under either of its two homes)?"""
    return qualified is not None and any(qualified == f"{module}.{name}" for module in SPMD_MODULES for name in names)


@dataclass
class MeshFacts:
    meshes: dict[str, MeshShape | None] = field(default_factory=dict)  # variable -> shape (None: unknown)
    identity_ids: set[str] = field(default_factory=set)  # variables holding `np.arange(n)` and the like
    global_meshes: list[str | None] = field(default_factory=list)  # what each `set_global_mesh` is given
    losses: dict[str, str] = field(default_factory=dict)  # variable -> the loss function its module computes


def mesh_facts(source: str, resolve: Resolve) -> MeshFacts:
    facts = MeshFacts()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return facts
    bound = Counter[str]()
    values: dict[str, ast.expr] = {}
    for node in all_nodes(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                values[targets[0].id] = node.value
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.comprehension):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif isinstance(node, ast.NamedExpr):
            targets = [node.target]
        if isinstance(node, ast.arg):
            bound[node.arg] += 1
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    bound[name.id] += 1
        if isinstance(node, ast.Call) and spmd_name(_resolved(node.func, resolve), "set_global_mesh") and node.args:
            given = node.args[0]
            facts.global_meshes.append(given.id if isinstance(given, ast.Name) else None)
    once = {name: value for name, value in values.items() if bound[name] == 1}
    for variable, value in once.items():
        if _identity_ids(value, resolve):
            facts.identity_ids.add(variable)
        loss = loss_module(value, _resolved(value.func, resolve)) if isinstance(value, ast.Call) else None
        if loss is not None:
            facts.losses[variable] = loss
    for variable, value in once.items():
        # Only a mesh of devices in order becomes a `DeviceMesh`: another is not one to shard on.
        if isinstance(value, ast.Call) and spmd_name(_resolved(value.func, resolve), "Mesh") and value.args:
            if not identity_ids(_argument(value, 0, "device_ids", {}) or value.args[0], resolve, facts):
                continue
            facts.meshes[variable] = _shape(value, once)
        elif isinstance(value, ast.Call) and _resolved(value.func, resolve) == INIT_DEVICE_MESH:
            facts.meshes[variable] = _shape(value, once, keyword="mesh_dim_names")  # a mesh migrated already
    return facts


def _resolved(node: ast.expr, resolve: Resolve) -> str | None:
    dotted = ast_dotted_name(node) if isinstance(node, ast.Name | ast.Attribute) else None
    return resolve(dotted) if dotted else None


def _identity_ids(node: ast.expr, resolve: Resolve) -> bool:
    """`np.arange(n)`, `np.array(range(n))`, `list(range(n))`, `range(n)`: every device, in order,
    which is the only order `init_device_mesh` lays ranks out in."""
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    name = _resolved(node.func, resolve) or (node.func.id if isinstance(node.func, ast.Name) else None)
    if name in ("numpy.arange", "range"):
        starts_at_zero = len(node.args) == 1 or (
            len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0
        )
        return starts_at_zero
    if name in ("numpy.array", "list", "tuple") and len(node.args) == 1:
        return _identity_ids(node.args[0], resolve)
    return False


def identity_ids(node: ast.expr, resolve: Resolve, facts: MeshFacts) -> bool:
    if isinstance(node, ast.Name):
        return node.id in facts.identity_ids
    return _identity_ids(node, resolve)


def _shape(call: ast.Call, once: dict[str, ast.expr], keyword: str = "axis_names") -> MeshShape | None:
    """The mesh's dimensions from its literal shape or axis names (or a variable bound once to one);
    `init_device_mesh` takes its names by keyword only."""
    shape = _argument(call, 1, "mesh_shape", once)
    names = _argument(call, 2 if keyword == "axis_names" else len(call.args), keyword, once)
    ndim = len(shape.elts) if isinstance(shape, ast.Tuple | ast.List) else None
    axis_names: tuple[str, ...] | None = None
    if isinstance(names, ast.Tuple | ast.List):
        strings = [e.value for e in names.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(strings) != len(names.elts):
            return None
        axis_names = tuple(strings)
        ndim = len(strings) if ndim is None else ndim
    elif names is not None and not (isinstance(names, ast.Constant) and names.value is None):
        return None
    if ndim is None or (axis_names is not None and len(axis_names) != ndim):
        return None
    return MeshShape(ndim, axis_names)


def _argument(call: ast.Call, position: int, keyword: str, once: dict[str, ast.expr]) -> ast.expr | None:
    found: ast.expr | None = None
    for given in call.keywords:
        if given.arg == keyword:
            found = given.value
    if found is None and position < len(call.args):
        found = call.args[position]
    if isinstance(found, ast.Name) and found.id in once:
        return once[found.id]
    return found
