"""Partition specs as DTensor placements.

A torch_xla spec has one entry per tensor dimension, naming the mesh axes that dimension is split
over; DTensor placements have one entry per mesh dimension, naming the tensor dimension split over
it. The two say the same thing read in opposite directions.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from neuron_migrate.rewrite.codemods.base import string_value

Axis = int | str
Entry = tuple[Axis, ...]  # the mesh axes one tensor dimension is split over; () for none


@dataclass(frozen=True)
class MeshShape:
    """What the file says of a mesh: its number of dimensions and, if given, their names."""

    ndim: int
    names: tuple[str, ...] | None = None

    def index(self, axis: Axis) -> int | None:
        if isinstance(axis, int):
            return axis if 0 <= axis < self.ndim else None
        if self.names is None or axis not in self.names:
            return None
        return self.names.index(axis)


def literal_axis(node: cst.BaseExpression) -> Axis | None:
    value = string_value(node)
    if value is not None:
        return value
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    return None


def literal_spec(node: cst.BaseExpression) -> list[Entry] | None:
    """The entries of a spec written out (`("data", None)`, `(0, ("x", "y"))`), else None."""
    if not isinstance(node, cst.Tuple | cst.List):
        return None
    entries: list[Entry] = []
    for element in node.elements:
        if not isinstance(element, cst.Element):
            return None
        value = element.value
        if isinstance(value, cst.Name) and value.value == "None":
            entries.append(())
            continue
        if isinstance(value, cst.Tuple):
            axes = [literal_axis(e.value) if isinstance(e, cst.Element) else None for e in value.elements]
            if not axes or any(axis is None for axis in axes):
                return None
            entries.append(tuple(axis for axis in axes if axis is not None))
            continue
        axis = literal_axis(value)
        if axis is None:
            return None
        entries.append((axis,))
    return entries


def placements(spec: list[Entry], mesh: MeshShape) -> list[str] | str:
    """One placement per mesh dimension, or why there is none: `Shard(d)` where tensor dimension d
    names that mesh axis, `Replicate()` elsewhere."""
    split_by: list[int | None] = [None] * mesh.ndim
    for dim, axes in enumerate(spec):
        indices = [mesh.index(axis) for axis in axes]
        if any(index is None for index in indices):
            return f"the spec names a mesh axis the mesh does not have ({', '.join(map(repr, axes))})"
        order = [index for index in indices if index is not None]
        if order != sorted(order):
            # DTensor splits over mesh dimensions in their order; the other one needs `_StridedShard`.
            return f"dimension {dim} is split over mesh axes out of the mesh's order"
        for index in order:
            if split_by[index] is not None:
                return f"mesh axis {index} splits two tensor dimensions"
            split_by[index] = dim
    return [f"Shard({dim})" if dim is not None else "Replicate()" for dim in split_by]


def written(found: list[str]) -> str:
    return f"[{', '.join(found)}]"
