"""What a local name holds, as far as the assignments of its function tell.

Rules ask this to tell a device tensor from a NumPy array, a CPU copy or a Python number
(`spec_aug_mask_idxs[...] = ...` on a NumPy array is no boolean `index_put`), a boolean tensor
by how it was made rather than by its name, and a tensor whose length depends on its values
(`for expert_idx in expert_hit:` after `.nonzero()`). It reads one function at a time, in source
order, without following calls: an answer of `None` means "cannot tell", and rules then fall
back on what the expression looks like.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from neuron_migrate.core.names import ImportTable
from neuron_migrate.core.names import ast_dotted_name as dotted

# The kinds of value. TENSOR, MASK (boolean) and RAGGED (length set by its values) live on the
# device; CPU is a tensor moved to the host; READ is a Python number or list read from a tensor
# (`.item()`, `.tolist()`, `int(t)`), which is data-dependent; PYTHON is any other host value.
TENSOR, MASK, RAGGED, CPU, NUMPY, READ, PYTHON = (
    "tensor",
    "mask",
    "ragged",
    "cpu",
    "numpy",
    "read",
    "python",
)
DEVICE_TENSORS = frozenset({TENSOR, MASK, RAGGED})
TENSORS = DEVICE_TENSORS | {CPU}

RAGGED_OPS = frozenset(
    {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount"}
)
MASK_OPS = frozenset(
    {
        *("isnan", "isinf", "isfinite", "isneginf", "isposinf", "isin", "bool", "signbit"),
        *("logical_and", "logical_or", "logical_not", "logical_xor"),
        *("eq", "ne", "gt", "ge", "lt", "le", "greater", "greater_equal", "less", "less_equal"),
        *("not_equal", "bernoulli_mask"),
    }
)
STATIC_METHODS = frozenset(
    {"size", "dim", "ndimension", "numel", "nelement", "element_size", "stride", "get_device"}
)
STATIC_ATTRIBUTES = frozenset(
    {"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "is_leaf", "layout"}
)
SAME_KIND_ATTRIBUTES = frozenset({"T", "mT", "H", "data", "real", "imag"})
BUILTIN_READS = frozenset({"int", "float", "bool", "round", "complex"})
BUILTIN_PYTHON = frozenset(
    {"len", "range", "str", "repr", "list", "dict", "tuple", "set", "sorted", "enumerate", "zip"}
)
TENSOR_ANNOTATIONS = frozenset(
    {"Tensor", "FloatTensor", "LongTensor", "IntTensor", "HalfTensor", "DoubleTensor"}
)
PYTHON_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "list", "dict", "tuple", "bytes"})
# torch.* names that are not tensor-producing functions.
_TORCH_NOT_TENSORS = (
    "torch.cuda.",
    "torch.backends.",
    "torch.distributed.",
    "torch.jit.",
    "torch.compiler.",
    "torch._dynamo.",
    "torch.accelerator.",
    "torch.nn.",
    "torch.utils.",
    "torch.fx.",
    "torch.is_",
    "torch.get_",
    "torch.set_",
    "torch.finfo",
    "torch.iinfo",
    "torch.device",
    "torch.dtype",
    "torch.Size",
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autocast",
    "torch.Generator",
    "torch.manual_seed",
    "torch.promote_types",
    "torch.result_type",
)
# Device spellings that mean the host.
_HOST_DEVICES = frozenset({"cpu", "meta"})

_Position = tuple[int, int]


class _Binding:
    __slots__ = ("at", "iterates", "value", "within")

    def __init__(
        self, at: _Position, value: ast.AST, iterates: bool, within: tuple[_Position, _Position] | None
    ) -> None:
        self.at = at  # from where the name holds it
        self.value = value  # the expression assigned (or iterated over)
        self.iterates = iterates  # a `for` target: the name holds an element of `value`
        self.within = within  # comprehension targets: only inside that span


def _start(node: ast.AST) -> _Position:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def _end(node: ast.AST) -> _Position:
    return node.end_lineno or node.lineno, node.end_col_offset or 0  # type: ignore[attr-defined]


class Values:
    """Kinds of value per function of one file, indexed on first use."""

    def __init__(self, aliases: ImportTable) -> None:
        self.aliases = aliases
        self._bindings: dict[int, dict[str, list[_Binding]]] = {}
        self._parameters: dict[int, dict[str, str | None]] = {}

    # -- the question rules ask ---------------------------------------------------------------
    def kind(self, node: ast.AST, function: ast.AST | None, depth: int = 0) -> str | None:
        """The kind of value `node` evaluates to inside `function` (None: cannot tell)."""
        if depth > 12:
            return None
        cls = node.__class__
        if cls is ast.Name:
            return self._name(node.id, _start(node), function, depth)  # type: ignore[attr-defined]
        if cls is ast.Constant or cls in (
            ast.JoinedStr,
            ast.List,
            ast.Tuple,
            ast.Dict,
            ast.Set,
            ast.ListComp,
            ast.DictComp,
            ast.SetComp,
        ):
            return PYTHON
        if cls is ast.Call:
            return self._call(node, function, depth)  # type: ignore[arg-type]
        if cls is ast.Attribute:
            attr = node.attr  # type: ignore[attr-defined]
            if self.aliases.resolve(node) is not None:
                return None
            if attr in STATIC_ATTRIBUTES:
                return PYTHON
            if attr in SAME_KIND_ATTRIBUTES:
                return self.kind(node.value, function, depth + 1)  # type: ignore[attr-defined]
            return None
        if cls is ast.Subscript:
            base = self.kind(node.value, function, depth + 1)  # type: ignore[attr-defined]
            if base == RAGGED:
                return TENSOR
            if base in (TENSOR, MASK, CPU, NUMPY):
                return base
            if base == READ:
                return READ
            inner = node.value  # type: ignore[attr-defined]
            if base == PYTHON and (
                (isinstance(inner, ast.Attribute) and inner.attr == "shape")
                or (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "size")
            ):
                return PYTHON  # `x.shape[0]`: a dimension
            return None
        if cls is ast.BinOp:
            left = self.kind(node.left, function, depth + 1)  # type: ignore[attr-defined]
            right = self.kind(node.right, function, depth + 1)  # type: ignore[attr-defined]
            return _combine(left, right, node.op.__class__ in (ast.BitAnd, ast.BitOr, ast.BitXor))  # type: ignore[attr-defined]
        if cls is ast.UnaryOp:
            if node.op.__class__ is ast.Not:  # type: ignore[attr-defined]
                return PYTHON
            return self.kind(node.operand, function, depth + 1)  # type: ignore[attr-defined]
        if cls is ast.Compare:
            ops = node.ops  # type: ignore[attr-defined]
            if any(op.__class__ in (ast.Is, ast.IsNot, ast.In, ast.NotIn) for op in ops):
                return PYTHON
            kinds = [
                self.kind(part, function, depth + 1)
                for part in (node.left, *node.comparators)  # type: ignore[attr-defined]
            ]
            if any(k in TENSORS for k in kinds):
                return MASK if any(k in DEVICE_TENSORS for k in kinds) else CPU
            if NUMPY in kinds:
                return NUMPY
            if READ in kinds:
                return READ
            return PYTHON if all(k == PYTHON for k in kinds) else None
        if cls is ast.IfExp:
            body = self.kind(node.body, function, depth + 1)  # type: ignore[attr-defined]
            other = self.kind(node.orelse, function, depth + 1)  # type: ignore[attr-defined]
            return body if body == other else None
        return None

    def is_device_tensor(self, node: ast.AST, function: ast.AST | None) -> bool:
        return self.kind(node, function) in DEVICE_TENSORS

    def on_host(self, node: ast.AST, function: ast.AST | None) -> bool:
        """NumPy, a CPU tensor or a Python value: nothing on it waits for the device."""
        return self.kind(node, function) in (NUMPY, CPU, PYTHON, READ)

    # -- expressions ---------------------------------------------------------------------------
    def _call(self, node: ast.Call, function: ast.AST | None, depth: int) -> str | None:
        func = node.func
        qualified = self.aliases.resolve(func)
        if qualified is not None:
            return _qualified_call(qualified, node)
        if isinstance(func, ast.Name):
            name = func.id
            if name in BUILTIN_READS and len(node.args) == 1:
                inner = self.kind(node.args[0], function, depth + 1)
                if inner in DEVICE_TENSORS or inner == READ or (inner is None and _reduction(node.args[0])):
                    return READ
                return PYTHON if inner is not None else None
            if name in BUILTIN_PYTHON:
                return PYTHON
            if name in ("min", "max", "sum", "abs") and node.args:
                kinds = {self.kind(a, function, depth + 1) for a in node.args}
                if kinds & DEVICE_TENSORS or READ in kinds:
                    return READ
                return PYTHON if kinds == {PYTHON} else None
            return None
        if not isinstance(func, ast.Attribute):
            return None
        method = func.attr
        receiver = self.kind(func.value, function, depth + 1)
        if receiver == NUMPY:
            return PYTHON if method in ("item", "tolist") else NUMPY
        if receiver in (PYTHON, READ):
            return receiver if method in ("item", "tolist") else None
        tensor_like = receiver in TENSORS
        if receiver is None:
            # Names no other library uses this way: the receiver is a tensor.
            if method in RAGGED_OPS:
                return RAGGED
            if method in _TENSOR_PREDICATES:
                return MASK
        if method in STATIC_METHODS or method.startswith("is_") or method in ("data_ptr", "type"):
            return PYTHON if tensor_like or receiver is None else None
        if method in ("item", "tolist", "equal", "allclose"):
            if receiver == CPU:
                return PYTHON
            return READ if tensor_like or receiver is None else None
        if method == "numpy":
            return NUMPY if tensor_like or receiver is None else None
        if not tensor_like:
            return None
        if method == "cpu":
            return CPU
        if method == "to":
            return _moved(node, receiver or TENSOR)
        if method == "cuda":
            return MASK if receiver == MASK else TENSOR
        placed = CPU if receiver == CPU else None
        if method in RAGGED_OPS:
            return placed or RAGGED
        if method in MASK_OPS or (method in ("any", "all") and not node.args and not node.keywords):
            return placed or MASK
        if receiver == MASK and method in _SHAPE_ONLY:
            return MASK
        return placed or TENSOR

    # -- names -------------------------------------------------------------------------------
    def assigned(self, name: ast.Name, function: ast.AST | None) -> ast.AST | None:
        """The expression `name` was last assigned from before this use (not a loop target)."""
        chosen = self._binding(name.id, _start(name), function)
        return chosen.value if chosen is not None and not chosen.iterates else None

    def _binding(self, name: str, at: _Position, function: ast.AST | None) -> _Binding | None:
        if function is None:
            return None
        chosen = None
        for binding in self._index(function).get(name, ()):
            if binding.at > at:
                break
            if binding.within is not None and not (binding.within[0] <= at <= binding.within[1]):
                continue
            chosen = binding
        return chosen

    def _name(
        self, name: str, at: _Position, function: ast.AST | None, depth: int
    ) -> str | None:
        if function is None:
            return None
        chosen = self._binding(name, at, function)
        if chosen is None:
            return self._parameters.get(id(function), {}).get(name)
        value = self.kind(chosen.value, function, depth + 1)
        if chosen.iterates:
            if value in DEVICE_TENSORS:
                return TENSOR
            if value == CPU:
                return CPU
            if value == NUMPY:
                return NUMPY
            iterated = chosen.value
            if isinstance(iterated, ast.Call) and dotted(iterated.func) == "range":
                return PYTHON
            return None
        return value

    def iterated(self, name: ast.Name, function: ast.AST | None) -> ast.AST | None:
        """For a `for` target, the expression the loop iterates over."""
        if function is None:
            return None
        for binding in self._index(function).get(name.id, ()):
            if binding.iterates and binding.at >= _start(name):
                return binding.value
        return None

    def _index(self, function: ast.AST) -> dict[str, list[_Binding]]:
        key = id(function)
        if key not in self._parameters:
            self._parameters[key] = _parameter_kinds(function, self.aliases)
        return self._bindings.get(key, {})

    # -- filled by the checker's walk, which meets every binding before the code after it -----
    def bind(self, node: ast.AST, function: ast.AST, parent: ast.AST | None) -> None:
        """Record what `node` (an assignment, a `for`, a walrus, a comprehension) binds."""
        found = self._bindings.get(id(function))
        if found is None:
            found = self._bindings[id(function)] = {}
        for name, binding in _bindings_of(node, parent):
            found.setdefault(name, []).append(binding)


# Methods that keep what a tensor is (a boolean tensor stays boolean after `.view`).
_SHAPE_ONLY = frozenset(
    {
        *("view", "reshape", "flatten", "unsqueeze", "squeeze", "expand", "expand_as", "permute"),
        *("transpose", "contiguous", "clone", "detach", "flip", "roll", "repeat", "t"),
        *("narrow", "select", "index_select", "gather", "chunk", "split", "unflatten"),
    }
)


REDUCTIONS = frozenset(
    {"sum", "max", "min", "mean", "amax", "amin", "argmax", "argmin", "count_nonzero", "prod", "norm"}
)


def _reduction(node: ast.AST) -> bool:
    """`lengths.max()`: what `int()` of it reads is a tensor value, whatever `lengths` is."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in REDUCTIONS
    )


def _combine(left: str | None, right: str | None, bitwise: bool) -> str | None:
    kinds = {left, right}
    if kinds & DEVICE_TENSORS:
        if bitwise and kinds <= {MASK, PYTHON, None} and MASK in kinds:
            return MASK
        return TENSOR
    if CPU in kinds:
        return CPU
    if NUMPY in kinds:
        return NUMPY
    if READ in kinds:
        return READ
    if kinds == {PYTHON}:
        return PYTHON
    return None


def _qualified_call(qualified: str, node: ast.Call) -> str | None:
    if qualified.startswith("numpy.") or qualified == "numpy":
        return NUMPY
    if qualified.startswith("math.") or qualified.startswith("random."):
        return PYTHON
    if not qualified.startswith("torch.") or qualified.startswith(_TORCH_NOT_TENSORS):
        return None
    name = qualified.rsplit(".", 1)[-1]
    if name in RAGGED_OPS or (name == "where" and len(node.args) == 1 and not node.keywords):
        return RAGGED
    if name in MASK_OPS or _names_bool(node):
        return MASK if not _to_host(node) else CPU
    return CPU if _to_host(node) else TENSOR


_TENSOR_PREDICATES = frozenset(
    {"bool", "eq", "ne", "gt", "ge", "lt", "le", "isnan", "isinf", "isfinite", "logical_not"}
)


def _moved(node: ast.Call, receiver: str) -> str:
    """What `x.to(...)` makes of a tensor of kind `receiver`."""
    if _to_host(node):
        return CPU
    device = _device_value(node) is not None and not _only_dtype(node)
    if _names_bool(node):
        return CPU if receiver == CPU and not device else MASK
    if device:
        return MASK if receiver == MASK else TENSOR
    if receiver == CPU:
        return CPU
    return TENSOR if receiver == MASK else receiver


def _only_dtype(node: ast.Call) -> bool:
    """`x.to(torch.float32)`: a cast, not a move."""
    if any(kw.arg == "device" for kw in node.keywords):
        return False
    first = node.args[0] if node.args else None
    return isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) and first.value.id in ("torch", "th")


def _device_value(node: ast.Call) -> ast.AST | None:
    for kw in node.keywords:
        if kw.arg == "device":
            return kw.value
    if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
        return node.args[0]
    return None


def _to_host(node: ast.Call) -> bool:
    value = _device_value(node)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value.split(":")[0] in _HOST_DEVICES
    if isinstance(value, ast.Call) and value.args:  # torch.device("cpu")
        first = value.args[0]
        return isinstance(first, ast.Constant) and first.value in _HOST_DEVICES
    return False


def _names_bool(node: ast.Call) -> bool:
    for value in (*node.args, *(kw.value for kw in node.keywords if kw.arg == "dtype")):
        if isinstance(value, ast.Attribute) and value.attr == "bool":
            return True
    return False


def _annotation_kind(annotation: ast.AST | None, aliases: ImportTable) -> str | None:
    if annotation is None:
        return None
    names = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(part.strip() for part in node.value.replace("|", ",").replace("[", ",").replace("]", ",").split(","))
    if "BoolTensor" in names:
        return MASK
    if names & TENSOR_ANNOTATIONS:
        return TENSOR
    if "ndarray" in names:
        return NUMPY
    meaningful = names - {"Optional", "None", "Union"}
    if meaningful and meaningful <= PYTHON_ANNOTATIONS:
        return PYTHON
    return None


def _parameter_kinds(function: ast.AST, aliases: ImportTable) -> dict[str, str | None]:
    args = getattr(function, "args", None)
    if args is None:
        return {}
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return {a.arg: _annotation_kind(a.annotation, aliases) for a in every}


def _bindings_of(node: ast.AST, parent: ast.AST | None) -> Iterator[tuple[str, _Binding]]:
    """The names one node binds, with what and from where."""
    cls = node.__class__
    if cls is ast.Assign:
        at = _end(node)
        for target in node.targets:  # type: ignore[attr-defined]
            yield from _targets(target, node.value, at)  # type: ignore[attr-defined]
    elif cls is ast.AnnAssign:
        if node.value is not None:  # type: ignore[attr-defined]
            yield from _targets(node.target, node.value, _end(node))  # type: ignore[attr-defined]
    elif cls is ast.NamedExpr:
        yield node.target.id, _Binding(_end(node), node.value, False, None)  # type: ignore[attr-defined]
    elif cls in (ast.For, ast.AsyncFor):
        target = node.target  # type: ignore[attr-defined]
        if isinstance(target, ast.Name):
            yield target.id, _Binding(_end(node.iter), node.iter, True, None)  # type: ignore[attr-defined]
    elif cls is ast.comprehension and parent is not None:
        target = node.target  # type: ignore[attr-defined]
        if isinstance(target, ast.Name):
            span = (_start(parent), _end(parent))
            yield target.id, _Binding(_end(node.iter), node.iter, True, span)  # type: ignore[attr-defined]


BINDERS = frozenset({ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension})


def _targets(target: ast.AST, value: ast.AST, at: _Position) -> Iterator[tuple[str, _Binding]]:
    if isinstance(target, ast.Name):
        yield target.id, _Binding(at, value, False, None)
    elif isinstance(target, ast.Tuple | ast.List):
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
            for part, part_value in zip(target.elts, value.elts, strict=True):
                yield from _targets(part, part_value, at)
            return
        if isinstance(value, ast.Call):
            # `a, b = torch.where(mask)`, `values, idx = x.topk(k)`: each part is what the call
            # makes, element-wise; `torch.where(m)` parts are as ragged as the call.
            for part in target.elts:
                if isinstance(part, ast.Name):
                    yield part.id, _Binding(at, value, False, None)
