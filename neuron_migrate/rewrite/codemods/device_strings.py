"""Which `"xla"` strings name a device, and which are a mode flag that only looks like one.

`model.to("xla")` and a `device = "xla"` that reaches `.to(device)` name the device; natively
they become the native device. `if args.device == "xla":`, `choices=["cpu", "xla"]` or a
`device_type = "xla"` that only selects code paths are the user's own option values: rewriting
them into a device would break the comparisons that read them, so they stay, with a TODO.
The file is read once, before rewriting, for where each name flows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor, code_of, dotted_name, string_value

# Device types other than XLA: a file that tests for one of them handles several devices.
OTHER_DEVICE_TYPES = frozenset(
    {"cpu", "cuda", "mps", "xpu", "hpu", "npu", "mtia", "maia", "ipu", "meta", "gpu"}
)
OTHER_DEVICE_CHECKS = (
    "torch.cuda.is_available",
    "torch.backends.mps.is_available",
    "torch.xpu.is_available",
)
DEVICE_KEYWORDS = ("device", "map_location")

FLAG_COMPARED = (
    '`"xla"` here is a mode name, left as is: check that what it selects runs without XLA; accept `"neuron"` for Trainium'
)
FLAG_ASSIGNED = (
    '`{name} = "xla"` is more than a device here, left as is: use `"neuron"` where it selects Trainium, migrate what it switches on'
)
FLAG_DEFAULT = (
    '`{name}="xla"` default left as is: natively no device is "xla": default to `"neuron"` or the current accelerator'
)
FLAG_OPTION = (
    '`"xla"` is a command-line option value, left as is: offer `"neuron"`, or map `xla` to the native device'
)
FLAG_DEVICE_TYPE = (
    '`"xla"` is never a native device type, so this test never matches: test for `"neuron"` if it means Trainium'
)

FLAG_DEVICE_TEXT = (
    '{test}: no native device is named "xla", so it never matches: test for "neuron" where Trainium is meant'
)


def device_text_todo(test: cst.BaseExpression) -> str:
    """The TODO for a test of a device's text (`str(device)`) against `"xla"`."""
    code = code_of(test)
    return FLAG_DEVICE_TEXT.format(test=f"`{code}`" if len(code) <= 40 and "\n" not in code else "This test")


def is_xla_string(value: str | None) -> bool:
    return value is not None and (value == "xla" or value.startswith("xla:"))


@dataclass
class DeviceStrings:
    """What the `"xla"` strings of one file are."""

    devices: set[int] = field(
        default_factory=set
    )  # ids of `name = "xla"` statements that name a device
    several_devices: bool = False  # the file also tests for CUDA, the CPU, ...
    compared: set[str] = field(default_factory=set)  # names compared with a string (mode flags)

    def names_device(self, assignment: cst.Assign | cst.AnnAssign | cst.Param) -> bool:
        return id(assignment) in self.devices


def read_device_strings(
    module: cst.Module, qualify: Callable[[cst.CSTNode], str | None]
) -> DeviceStrings:
    finder = _Finder(qualify)
    finder.scan(module)
    return finder.strings()


def device_type_attribute(node: cst.BaseExpression) -> bool:
    """`t.device.type`, `device.type`, `values[0].device.type`, `torch.device(d).type`: the type
    of a device."""
    if not (isinstance(node, cst.Attribute) and node.attr.value == "type"):
        return False
    owner = node.value
    if isinstance(owner, cst.Call):
        return dotted_name(owner.func) == "torch.device"
    if isinstance(owner, cst.Attribute):
        last = owner.attr.value.lower()  # whatever it is read from: `batch[0].device`, `f().device`
    elif isinstance(owner, cst.Name):
        last = owner.value.lower()
    else:
        return False
    return "device" in last or last == "dev"


def names_device_type(node: cst.BaseExpression) -> bool:
    """A device type by its look: `t.device.type`, or a variable called `..._device_type`."""
    name = dotted_name(node) or ""
    return device_type_attribute(node) or name.lower().endswith("device_type")


def compares_xla(comparison: cst.Comparison) -> bool:
    """Any operand of the comparison is `"xla"`, or a literal collection holding it."""
    operands = [comparison.left, *(c.comparator for c in comparison.comparisons)]
    return any(is_xla_string(value) for operand in operands for value in _strings(operand))


def startswith_xla(call: cst.Call) -> cst.BaseExpression | None:
    """The text of `text.startswith("xla")` (or of a tuple holding `"xla"`), else None."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "startswith" and call.args):
        return None
    prefix = call.args[0]
    if prefix.keyword is not None or not any(is_xla_string(v) for v in _strings(prefix.value)):
        return None
    return func.value


def device_text(node: cst.BaseExpression) -> bool:
    """`str(...)`: in a file for XLA, what is turned into text and tested for `"xla"` is a device."""
    return isinstance(node, cst.Call) and dotted_name(node.func) == "str" and len(node.args) == 1


def option_values(call: cst.Call) -> bool:
    """`parser.add_argument(..., choices=[..., "xla"], default="xla")`."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
        return False
    return any(
        arg.keyword is not None
        and arg.keyword.value in ("choices", "default", "const")
        and any(is_xla_string(v) for v in _strings(arg.value))
        for arg in call.args
    )


def _strings(node: cst.BaseExpression) -> list[str]:
    """The string values of a literal, or of the elements of a literal tuple, list or set."""
    if isinstance(node, cst.Tuple | cst.List | cst.Set):
        values = [string_value(e.value) for e in node.elements if isinstance(e, cst.Element)]
    else:
        values = [string_value(node)]
    return [v for v in values if v is not None]


class _Finder(Visitor):
    """Where names flow: into devices (`.to(x)`, `device=x`), into comparisons with a string."""

    def __init__(self, qualify: Callable[[cst.CSTNode], str | None]) -> None:
        super().__init__()
        self.qualify = qualify
        self.found = DeviceStrings()
        self.sinks: set[str] = set()
        self.compared: set[str] = set()
        self.scopes: list[str] = ["module"]  # "module", "class" or "function"
        # `name = "xla"` statements outside class bodies: (the statement's id, the name).
        self.assignments: list[tuple[int, str]] = []

    def strings(self) -> DeviceStrings:
        """A name is a device if it reaches one and is never compared as a string."""
        for statement, name in self.assignments:
            if name in self.sinks and name not in self.compared:
                self.found.devices.add(statement)
        self.found.compared = self.compared
        return self.found

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append("class")

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append("function")

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1:
            self._assignment(node, node.targets[0].target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assignment(node, node.target, node.value)

    def _assignment(
        self, node: cst.CSTNode, target: cst.BaseExpression, value: cst.BaseExpression
    ) -> None:
        # A class attribute (a config field) is read as `obj.name`, by code this file may not show.
        if self.scopes[-1] == "class" or not isinstance(target, cst.Name | cst.Attribute):
            return
        if is_xla_string(string_value(value)):
            self.assignments.append((id(node), code_of(target)))

    def visit_Param(self, node: cst.Param) -> None:
        """`def f(device="xla")`: a name bound to the string, as an assignment binds it."""
        if node.default is not None and is_xla_string(string_value(node.default)):
            self.assignments.append((id(node), node.name.value))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if self.qualify(func) in OTHER_DEVICE_CHECKS:
            self.found.several_devices = True
        if (
            (_is_to(node) or self.qualify(func) == "torch.device")
            and node.args
            and node.args[0].keyword is None
        ):
            self.sinks.add(code_of(node.args[0].value))

    def leave_Call(self, original_node: cst.Call) -> None:
        # `device=x` of a torch function; a function of the user's own may compare it.
        if (self.qualify(original_node.func) or "").startswith("torch.") or _is_to(original_node):
            for arg in original_node.args:
                if arg.keyword is not None and arg.keyword.value in DEVICE_KEYWORDS:
                    self.sinks.add(code_of(arg.value))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(c.comparator for c in node.comparisons)]
        strings = [value for operand in operands for value in _strings(operand)]
        if not strings:
            return
        if any(s in OTHER_DEVICE_TYPES or s.startswith("cuda:") for s in strings):
            self.found.several_devices = True
        for operand in operands:
            if isinstance(operand, cst.Name | cst.Attribute):
                self.compared.add(code_of(operand))


def _is_to(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to"
