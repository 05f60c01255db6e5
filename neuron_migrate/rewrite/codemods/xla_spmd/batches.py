"""Batches split over a mesh axis: where a block marks its batch tensors on one axis and then
takes one training step on them, each process can take its slice of the batch and average its
gradients over that axis, and the step means what SPMD's did.

SPMD's loss is the mean over the whole batch. The mean of equal slices' means is that mean, and
so is the average of their gradients: the rewrite needs a loss that is a mean over samples, fed
only by the marked tensors through one model call, and a `loss.backward()` to average after.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import code_of, string_value
from neuron_migrate.rewrite.codemods.xla_autocast import AUTOCAST, XLA_AUTOCAST
from neuron_migrate.rewrite.codemods.xla_spmd.layers import mark_of, path
from neuron_migrate.rewrite.codemods.xla_spmd.specs import MeshShape, literal_spec, placements

F = "torch.nn.functional"
# Losses whose default reduction is the mean over every element: equal slices, equal counts.
MEAN_LOSSES = {f"{F}.{name}" for name in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits")}
# The mean over the targets that are not `ignore_index`, which is the mean over the batch only if none is.
CLASS_LOSSES = {f"{F}.cross_entropy", f"{F}.nll_loss"}
PER_ELEMENT_KEYWORDS = ("beta", "delta", "label_smoothing")
# `nn.MSELoss()` and the like: the module computes its function with the constructor's keywords.
LOSS_MODULES = {
    "MSELoss": "mse_loss",
    "L1Loss": "l1_loss",
    "SmoothL1Loss": "smooth_l1_loss",
    "HuberLoss": "huber_loss",
    "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "CrossEntropyLoss": "cross_entropy",
    "NLLLoss": "nll_loss",
}
# Methods that work on each element (or row) alone, with literal arguments: a slice of their
# result is their result on the slice.
ELEMENTWISE = ("pow", "abs", "square", "exp", "log", "sigmoid", "tanh", "relu", "neg", "sqrt", "float", "double")
RESHAPES = ("view", "reshape")  # with -1 first: the leading dimension stays the samples'
SQUEEZES = ("squeeze", "unsqueeze")  # of a dimension after the samples'
ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power)

Qualify = Callable[[cst.CSTNode], str | None]
LossOf = Callable[[cst.BaseExpression], str | None]  # the loss function a callee computes, qualified
MeshOf = Callable[[cst.BaseExpression], tuple[str, MeshShape] | None]


@dataclass
class BatchSplit:
    """One block's batch, split over one mesh axis, and the step it feeds."""

    mesh: str  # the mesh variable the marks name
    submesh: str  # the data axis as a mesh: `mesh`, or `mesh["data"]`
    tensors: dict[int, str] = field(default_factory=dict)  # id of a mark statement -> the tensor it marks
    model: str = ""
    loss: str = ""
    backward: int = 0  # id of the `loss.backward()` statement
    ignore_index: bool = False  # the loss skips targets equal to `ignore_index`


def plan_batch_split(
    body: Sequence[cst.CSTNode], is_mark: Callable[[cst.Call], bool], mesh_of: MeshOf, qualify: Qualify, loss_of: LossOf
) -> BatchSplit | None:
    """The block's batch split, if its marks on names say one and its step can be followed."""
    split: BatchSplit | None = None
    first = last = -1
    for index, line in enumerate(body):
        mark = mark_of(line, is_mark)
        if mark is None or not isinstance(mark.tensor, cst.Name):
            continue
        found = _batch_axis(mark.mesh, mark.spec, mesh_of)
        if found is None or (split is not None and (split.mesh, split.submesh) != found):
            return None
        split = split or BatchSplit(*found)
        if mark.tensor.value in split.tensors.values():
            return None
        split.tensors[id(line)] = mark.tensor.value
        first, last = (index if first < 0 else first), index
    if split is None:
        return None
    names = set(split.tensors.values())
    reads = [i for i in range(first, len(body)) if id(body[i]) not in split.tensors and _reads(body[i], names)]
    # The loss is the only statement that reads the batch once it is split.
    if len(reads) != 1 or reads[0] < last:
        return None
    step = _loss(_under_autocast(body[reads[0]], names, qualify), names, qualify, loss_of)
    if step is None:
        return None
    split.loss, split.model, split.ignore_index = step
    uses = [line for line in body[reads[0] + 1 :] if _reads(line, {split.loss})]
    if not uses or not _backward(uses[0], split.loss):
        return None
    split.backward = id(uses[0])
    return split


def _under_autocast(line: cst.CSTNode, batch: set[str], qualify: Qualify) -> cst.CSTNode:
    """The one statement under `with torch.autocast(...):` (which changes only the precision),
    else the statement itself."""
    if not isinstance(line, cst.With) or not isinstance(line.body, cst.IndentedBlock) or len(line.body.body) != 1:
        return line
    for item in line.items:
        call = item.item
        if item.asname is not None or not isinstance(call, cst.Call) or qualify(call.func) not in AUTOCAST + XLA_AUTOCAST:
            return line
        if _reads(call, batch):
            return line
    return line.body.body[0]


def _backward(line: cst.CSTNode, loss: str) -> bool:
    """`loss.backward()`, a statement of its own."""
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
    call = small.value if isinstance(small, cst.Expr) else None
    if not isinstance(call, cst.Call) or call.args or not isinstance(call.func, cst.Attribute):
        return False
    return call.func.attr.value == "backward" and isinstance(call.func.value, cst.Name) and call.func.value.value == loss


def _batch_axis(mesh: cst.BaseExpression, spec: cst.BaseExpression, mesh_of: MeshOf) -> tuple[str, str] | None:
    """The mesh and its axis a mark splits a tensor's first dimension over, and nothing else."""
    known = mesh_of(mesh)
    entries = literal_spec(spec)
    if known is None or entries is None:
        return None
    found = placements(entries, known[1])
    if isinstance(found, str) or [p for p in found if p != "Replicate()"] != ["Shard(0)"]:
        return None
    axis = found.index("Shard(0)")
    name, shape = known
    if shape.ndim == 1:
        return name, name
    return (name, f'{name}["{shape.names[axis]}"]') if shape.names is not None else None


def _names(line: cst.CSTNode) -> set[str] | None:
    """The variables a statement reads or binds (not attribute names); None where it cannot be read."""
    try:
        tree = ast.parse(code_of(line).strip())
    except SyntaxError:
        return None
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _reads(line: cst.CSTNode, names: set[str]) -> bool:
    """Does the statement read (or bind) one of `names`? Yes, for all that is known, where it cannot be read."""
    found = _names(line)
    return found is None or bool(found & names)


def _loss(line: cst.CSTNode, batch: set[str], qualify: Qualify, loss_of: LossOf) -> tuple[str, str, bool] | None:
    """`loss = <a mean over samples of the model's output on the batch>`: the loss variable, the
    model, and whether the loss skips ignored targets."""
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    assign = line.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    value = assign.value
    models: set[str] = set()
    if not isinstance(value, cst.Call):
        return None
    if isinstance(value.func, cst.Attribute) and value.func.attr.value == "mean" and not value.args:
        ok, ignore_index = _per_sample(value.func.value, batch, models, qualify), False
    else:
        name = loss_of(value.func)
        if name not in MEAN_LOSSES | CLASS_LOSSES or len(value.args) < 2 or not _mean_keywords(value.args[2:]):
            return None
        ok = all(arg.keyword is None and not arg.star and _per_sample(arg.value, batch, models, qualify) for arg in value.args[:2])
        ignore_index = name in CLASS_LOSSES
    if not ok or len(models) != 1:
        return None
    return assign.targets[0].target.value, models.pop(), ignore_index


def loss_module(call: ast.Call, qualified: str | None) -> str | None:
    """The loss function `nn.MSELoss(...)` (and the like) computes, if a mean over samples."""
    module, _, name = (qualified or "").rpartition(".")
    if module not in ("torch.nn", "torch.nn.modules.loss") or name not in LOSS_MODULES or call.args:
        return None
    for keyword in call.keywords:
        value = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
        if keyword.arg == "reduction" and value == "mean":
            continue
        if keyword.arg not in PER_ELEMENT_KEYWORDS or isinstance(value, bool) or not isinstance(value, int | float):
            return None
    return f"{F}.{LOSS_MODULES[name]}"


def _mean_keywords(args: Sequence[cst.Arg]) -> bool:
    for arg in args:
        if arg.keyword is None:
            return False
        if arg.keyword.value == "reduction" and string_value(arg.value) == "mean":
            continue
        if arg.keyword.value not in PER_ELEMENT_KEYWORDS or not isinstance(arg.value, cst.Integer | cst.Float):
            return False
    return True


def _per_sample(node: cst.BaseExpression, batch: set[str], models: set[str], qualify: Qualify) -> bool:
    """Built sample by sample from the batch: a marked tensor, the model called on marked
    tensors, element-wise methods and arithmetic of those (and numbers)."""
    if isinstance(node, cst.Name):
        return node.value in batch
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _per_sample(node.expression, batch, models, qualify)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, ARITHMETIC):
        sides = (node.left, node.right)
        return all(_number(side) or _per_sample(side, batch, models, qualify) for side in sides) and not all(map(_number, sides))
    if not isinstance(node, cst.Call) or any(arg.keyword is not None or arg.star for arg in node.args):
        return False
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in ELEMENTWISE + RESHAPES + SQUEEZES:
        method, args = node.func.attr.value, [arg.value for arg in node.args]
        if method in RESHAPES:
            # `view(-1, VOCAB)`: the sizes after the first are the sample's own, read from anything but the batch
            fits = bool(args) and code_of(args[0]) == "-1" and not any(_reads(arg, batch) for arg in args[1:])
        elif method in SQUEEZES:
            fits = len(args) == 1 and _number(args[0]) and code_of(args[0]) not in ("0", "-0")
        else:
            fits = all(_number(arg) for arg in args)
        return fits and _per_sample(node.func.value, batch, models, qualify)
    model = path(node.func)
    # A module of the file's own, not a function it imports nor a builtin.
    if model is None or qualify(node.func) is not None or model.split(".")[0] in vars(builtins):
        return False
    if not node.args or not all(isinstance(arg.value, cst.Name) and arg.value.value in batch for arg in node.args):
        return False
    models.add(model)
    return True


def _number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _number(node.expression)
    return isinstance(node, cst.Integer | cst.Float)
