"""What a variable holds, where the file says so plainly: a module, float tensors, integer tensors.

`XLA_USE_BF16=1` stored float tensors as bf16 on the device and left integer tensors (token ids,
labels) alone, so a migration that casts where data moves to the device must know which is which.
This reads the file once: a name is of a kind when every assignment to it in its function (or at
module level) gives that kind, from what builds it (`torch.randn`, `torch.randint`, `.long()`, a
class of this file that derives from `nn.Module`, ...) or from a function of this file that returns
it. Anything else is unknown, and the migration leaves a TODO rather than guess.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor, dotted_name


class Kind(enum.Enum):
    MODULE = "module"
    FLOAT = "float tensor"
    INT = "integer tensor"
    LOADED = "loaded model"  # `from_pretrained` / `from_config`: the loader takes the dtype
    TOKENIZER = "tokenizer"  # what it returns holds token ids and masks: integers


FLOAT_FACTORIES = frozenset(
    f"torch.{name}"
    for name in (
        "randn",
        "rand",
        "zeros",
        "ones",
        "empty",
        "normal",
        "randn_like",
        "rand_like",
        "linspace",
        "eye",
    )
)
INT_FACTORIES = frozenset(
    {"torch.randint", "torch.randint_like", "torch.randperm", "torch.multinomial"}
)
INT_METHODS = frozenset({"long", "int", "short", "bool", "byte", "argmax", "argmin"})
FLOAT_METHODS = frozenset({"float", "double", "softmax", "log_softmax"})
KEEPING_METHODS = frozenset(
    {"to", "clone", "detach", "contiguous", "view", "reshape", "cpu", "pin_memory"}
)
LOADERS = frozenset({"from_pretrained", "from_config"})
INT_DTYPES = frozenset(
    f"torch.{n}" for n in ("long", "int64", "int", "int32", "int16", "int8", "uint8", "bool")
)
MODULE_BASES = ("torch.nn.", "transformers.")


class TensorKinds(Visitor):
    """Scan a module with `scan(module)`, then ask `kind(expression, function)`."""

    def __init__(self, qualify: Callable[[cst.CSTNode], str | None]) -> None:
        self.qualify = qualify
        self.functions: list[str] = [""]  # "" is module level
        self.assigned: dict[tuple[str, str], list[Assigned]] = {}
        self.returns: dict[str, list[cst.BaseExpression]] = {}
        self.module_classes: set[str] = set()
        self._resolving: set[tuple[str, str]] = set()

    # -- reading the file -----------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            name = self.qualify(base.value) or dotted_name(base.value) or ""
            if name.startswith(MODULE_BASES) or name in self.module_classes:
                self.module_classes.add(node.name.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.returns.setdefault(self.functions[-1], []).append(node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self._forget(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._forget(node.target)

    def _bind(self, target: cst.BaseExpression, value: Assigned) -> None:
        if isinstance(target, cst.Name):
            self.assigned.setdefault((self.functions[-1], target.value), []).append(value)
        elif isinstance(target, cst.Tuple | cst.List):
            values = value.elements if isinstance(value, cst.Tuple | cst.List) else None
            if values is not None and len(values) == len(target.elements):
                for element, item in zip(target.elements, values, strict=True):
                    self._bind(element.value, item.value)
            else:
                for position, element in enumerate(target.elements):
                    self._bind(
                        element.value,
                        _Unpacked(value, position)
                        if isinstance(value, cst.BaseExpression)
                        else None,
                    )

    def _forget(self, target: cst.BaseExpression) -> None:
        for node in _names(target):
            self.assigned.setdefault((self.functions[-1], node), []).append(None)

    # -- answering ------------------------------------------------------------------------------
    def kind(self, node: Assigned, function: str) -> Kind | None:
        """The kind of `node` evaluated in `function` ("" at module level), or None if unknown."""
        if node is None or isinstance(node, Kind):
            return node
        if isinstance(node, _Unpacked):
            return self._unpacked(node, function)
        if isinstance(node, cst.Name):
            return self._variable(function, node.value)
        if isinstance(node, cst.Call):
            return self._call(node, function)
        return None

    def _variable(self, function: str, name: str) -> Kind | None:
        key = (function, name)
        if key not in self.assigned:
            return self._variable("", name) if function else None
        if key in self._resolving:
            return None
        self._resolving.add(key)
        try:
            kinds = set()
            for value in self.assigned[key]:
                found = self.kind(value, function)
                if found is None and not _refers_to(value, name):
                    return None
                if found is not None:
                    kinds.add(found)
            return kinds.pop() if len(kinds) == 1 else None
        finally:
            self._resolving.discard(key)

    def _call(self, call: cst.Call, function: str) -> Kind | None:
        func = call.func
        name = self.qualify(func) or dotted_name(func) or ""
        dtype = next((a.value for a in call.args if a.keyword and a.keyword.value == "dtype"), None)
        if dtype is not None:
            return Kind.INT if (self.qualify(dtype) or "") in INT_DTYPES else Kind.FLOAT
        if name in FLOAT_FACTORIES:
            return Kind.FLOAT
        if name in INT_FACTORIES:
            return Kind.INT
        if isinstance(func, cst.Name) and func.value in self.module_classes:
            return Kind.MODULE
        if isinstance(func, cst.Name) and self._variable(function, func.value) is Kind.TOKENIZER:
            return Kind.INT
        if isinstance(func, cst.Name) and func.value in self.returns:
            return self._returned(func.value, None)
        if name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper():
            return Kind.MODULE
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in LOADERS:
                owner = dotted_name(func.value) or ""
                return (
                    Kind.TOKENIZER
                    if owner.endswith(("Tokenizer", "TokenizerFast"))
                    else Kind.LOADED
                )
            if method in INT_METHODS:
                return Kind.INT
            if method in FLOAT_METHODS:
                return Kind.FLOAT
            if method in KEEPING_METHODS and not any(
                (self.qualify(a.value) or "") in INT_DTYPES for a in call.args
            ):
                return self.kind(func.value, function)
        return None

    def _returned(self, function: str, position: int | None) -> Kind | None:
        kinds = set()
        for value in self.returns.get(function, []):
            if position is not None:
                if not isinstance(value, cst.Tuple) or position >= len(value.elements):
                    return None
                value = value.elements[position].value
            found = self.kind(value, function)
            if found is None:
                return None
            kinds.add(found)
        return kinds.pop() if len(kinds) == 1 else None

    def _unpacked(self, node: _Unpacked, function: str) -> Kind | None:
        call = node.value
        if (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Name)
            and call.func.value in self.returns
        ):
            return self._returned(call.func.value, node.position)
        return None


@dataclass(frozen=True)
class _Unpacked:
    """The `position`-th element of `value`, as a tuple target receives it."""

    value: cst.BaseExpression
    position: int


Assigned = cst.BaseExpression | Kind | _Unpacked | None


def _names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Tuple | cst.List):
        return [name for element in target.elements for name in _names(element.value)]
    return []


def _refers_to(value: Assigned, name: str) -> bool:
    """`x = x.to(device)`: an assignment that keeps the kind the name already has."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        if value.func.attr.value not in KEEPING_METHODS:
            return False
        value = value.func.value
    return isinstance(value, cst.Name) and value.value == name
