"""Parameter marks that are tensor parallelism: a linear layer's weight split by rows or by
columns becomes `parallelize_module` with `ColwiseParallel`/`RowwiseParallel`.

The layer's input and its output stay whole tensors (`output_layouts=Replicate()`,
`input_layouts=Replicate()`), as every tensor is in the global view of the SPMD program: the code
around the layer cannot tell. Chained layers could skip the gather between them, but only a
reading of `forward` could say that they are chained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import arg_value, code_of, dotted_name
from neuron_migrate.rewrite.codemods.xla_spmd.specs import MeshShape, literal_spec, placements

COLWISE = "ColwiseParallel(output_layouts=Replicate())"
ROWWISE = "RowwiseParallel(input_layouts=Replicate())"


@dataclass(frozen=True)
class Mark:
    """One `xs.mark_sharding(t, mesh, spec)` statement, its arguments as written."""

    tensor: cst.BaseExpression
    mesh: cst.BaseExpression
    spec: cst.BaseExpression


@dataclass
class Layer:
    """The marks of one module's `weight` and `bias`, statements in their block's order."""

    owner: str
    statements: list[int] = field(default_factory=list)  # ids of the mark statements
    found: dict[str, list[str]] = field(default_factory=dict)  # "weight"/"bias" -> placements
    style: str = ""
    submesh: str = ""
    meshes: set[str] = field(default_factory=set)  # every mesh its marks name, as written


def mark_of(line: cst.CSTNode, is_mark: Callable[[cst.Call], bool]) -> Mark | None:
    """The mark a statement line is, if it is only that call with its three arguments."""
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    small = line.body[0]
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call) or not is_mark(small.value):
        return None
    call = small.value
    if any(arg.star for arg in call.args) or len(call.args) != 3:
        return None
    tensor, mesh, spec = arg_value(call, 0, "t"), arg_value(call, 1, "mesh"), arg_value(call, 2, "partition_spec")
    if tensor is None or mesh is None or spec is None:
        return None
    return Mark(tensor.value, mesh.value, spec.value)


def path(node: cst.BaseExpression) -> str | None:
    """`model.blocks[0].mlp`: names, attributes and literal indices, which read the same object
    each time (no call in between); None for anything else."""
    if dotted_name(node) is not None:
        return code_of(node)
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        literal = isinstance(index, cst.Index) and isinstance(index.value, cst.Integer | cst.SimpleString)
        return code_of(node) if literal and path(node.value) is not None else None
    if isinstance(node, cst.Attribute):
        return code_of(node) if path(node.value) is not None else None
    return None


def plan_layers(
    body: Sequence[cst.CSTNode],
    is_mark: Callable[[cst.Call], bool],
    mesh_of: Callable[[cst.BaseExpression], tuple[str, MeshShape] | None],
) -> list[Layer]:
    """The layers of one block whose marks say column or row parallelism, and nothing else."""
    layers: dict[str, Layer] = {}
    refused: set[str] = set()
    reads_parameters = False  # an optimizer made above would keep the parameters replaced here
    for line in body:
        mark = mark_of(line, is_mark)
        target = mark.tensor if mark is not None else None
        if mark is None or not isinstance(target, cst.Attribute) or target.attr.value not in ("weight", "bias"):
            reads_parameters = reads_parameters or "parameters(" in code_of(line)
            continue
        owner = path(target.value)
        mesh = mesh_of(mark.mesh)
        spec = literal_spec(mark.spec)
        if owner is None:
            continue
        layer = layers.setdefault(owner, Layer(owner))
        found = placements(spec, mesh[1]) if spec is not None and mesh is not None else None
        part = target.attr.value
        if reads_parameters or found is None or isinstance(found, str) or part in layer.found:
            refused.add(owner)
            continue
        if part == "weight":
            if mesh is None or len(spec or ()) != 2:
                refused.add(owner)
                continue
            layer.style, layer.submesh = _style(found, mesh[0], mesh[1])
        layer.found[part] = found
        layer.meshes.add(mesh[0] if mesh is not None else "")
        layer.statements.append(id(line))
    return [layer for owner, layer in layers.items() if owner not in refused and _consistent(layer)]


def _style(weight: list[str], mesh: str, shape: MeshShape) -> tuple[str, str]:
    """Column or row parallel, and over which mesh dimension, from the weight's placements."""
    split = [i for i, placement in enumerate(weight) if placement != "Replicate()"]
    if len(split) != 1:
        return "", ""
    dim = split[0]
    if shape.ndim == 1:
        submesh = mesh
    elif shape.names is not None:
        submesh = f'{mesh}["{shape.names[dim]}"]'
    else:
        return "", ""
    style = {"Shard(0)": COLWISE, "Shard(1)": ROWWISE}.get(weight[dim], "")
    return style, submesh


def _consistent(layer: Layer) -> bool:
    """A bias split as `ColwiseParallel` splits it (with the weight's rows), or not at all."""
    weight = layer.found.get("weight")
    if not layer.style or weight is None or len(layer.meshes) != 1:
        return False
    bias = layer.found.get("bias")
    if bias is None or all(placement == "Replicate()" for placement in bias):
        return True
    if layer.style != COLWISE:
        return False
    return bias == ["Shard(0)" if placement == "Shard(0)" else "Replicate()" for placement in weight]
