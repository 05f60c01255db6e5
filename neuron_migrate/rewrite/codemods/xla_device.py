"""NM001: XLA devices become native devices."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    arg_value,
    branch_taken,
    code_of,
    expr,
    string_value,
    with_string_value,
)
from neuron_migrate.rewrite.codemods.device_strings import (
    FLAG_ASSIGNED,
    FLAG_COMPARED,
    FLAG_DEFAULT,
    FLAG_DEVICE_TYPE,
    FLAG_OPTION,
    DeviceStrings,
    compares_xla,
    device_text,
    device_text_todo,
    device_type_attribute,
    is_xla_string,
    names_device_type,
    option_values,
    read_device_strings,
    startswith_xla,
)

XLA_DEVICE = (
    "torch_xla.core.xla_model.xla_device",
    "torch_xla.device",
)
# The devices this process addresses. Counts over all processes (`global_device_count`) and
# hosts are world sizes natively, one device per process: NM006 rewrites those.
DEVICE_COUNT = (
    "torch_xla.device_count",
    "torch_xla.runtime.addressable_runtime_device_count",
    "torch_xla.runtime.addressable_device_count",
)
DEVICE_TYPE = ("torch_xla.runtime.device_type",)
DEVICE_HW = ("torch_xla.core.xla_model.xla_device_hw",)
XLA_STRING = re.compile(r"""['"]xla[:'"]""")  # where none is, no string needs reading


# Lightning's packages: their TPU accelerator and XLA strategies need torch_xla.
LIGHTNING = frozenset({"lightning", "pytorch_lightning", "lightning_fabric"})


# An XLA device number is not a native one: XRT numbered a host's TPU cores from 1 (`xla:1`).
INDEX_TODO = "device numbers differ natively (torch_xla's XRT numbered TPU cores from 1): check this one, or run a process per device"


class XlaDevice(Codemod):
    """Replaces XLA devices with native ones.

    ## What it does
    Rewrites `xm.xla_device()` and `torch_xla.device()`, the string `"xla"` where it names a
    device (`.to("xla")`, `device="xla"`, `torch.device("xla:0")`, and `device = "xla"` when
    `device` is then used as one), this process's device counts (`xr.addressable_device_count()`),
    `xr.device_type()`, `xm.xla_device_hw()` and `tensor.device.type == "xla"` (or
    `.type.startswith("xla")`) tests.
    An `"xla"` that is a mode name (`if args.device == "xla":`, `choices=["cpu", "xla"]`, a
    `device_type = "xla"` that only selects code paths) is left as it is, with a TODO, as is a
    test of a device's text (`str(device).startswith("xla")`, `"xla" in str(device)`), which no
    native device passes. A variable set to `"xla"` that is compared as a string, or never
    reaches `torch.device`, `.to` or `device=`, is left as well: where it selects Trainium, use
    `"neuron"` (or `torch.accelerator.current_accelerator()`) and migrate the code it switches on.

    ## Why
    TorchNeuron registers Trainium as the PyTorch device `neuron`; there is no `xla` device.

    ## Example
    ```python
    device = xm.xla_device()
    model.to(device)
    ```

    ## Use instead
    ```python
    device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    model.to(device)
    ```
    With `--target neuron`: `device = torch.device("neuron")`. Under torchrun each process sees
    its own NeuronCore (`NEURON_RT_VISIBLE_CORES` is set from `LOCAL_RANK`), so no index is needed.

    A parameter default `device="xla"` becomes the native device where the parameter reaches a
    device; else it stays with a TODO, unless a comparison of it already has one.
    A Lightning `Trainer`/`Fabric` given `accelerator="tpu"` or an XLA `strategy` gets a TODO:
    those pieces of Lightning import torch_xla.

    ## Fix safety
    Safe. The portable spelling falls back to the CPU where no accelerator is present;
    `torch.accelerator.device_count()` is 0 on a CPU-only machine, so device counts become
    `max(torch.accelerator.device_count(), 1)`. Device 0 (`"xla:0"`, `xm.xla_device(0)`) was
    the first device of the calling process, so the portable spelling is the current device
    rather than device 0 of the host, which on CUDA would put every process on the first GPU.
    `t.device.type == "xla"` becomes `!= "cpu"` only in a script written for XLA alone: where
    the file also tests for CUDA or the CPU, the XLA branch is one among several and gets a
    TODO instead, as do mode names, whose comparisons a device in their place would break.
    """

    code = "NM001"
    name = "xla-device"
    summary = "XLA devices become native devices (`neuron`, or the current accelerator)"
    triggers = (*XLA_DEVICE, *DEVICE_COUNT, *DEVICE_TYPE, *DEVICE_HW)
    markers = ("'xla", '"xla')
    needs_old_stack_import = False  # "xla" device strings only mean torch_xla
    manual: ClassVar[dict[str, str]] = {
        "torch_xla.core.xla_model.get_xla_supported_devices": "lists XLA device strings; use `range(torch.accelerator.device_count())`",
        "torch_xla.core.xla_model.xla_real_devices": "maps XLA devices to runtime devices; there is no native equivalent",
        "torch_xla.devices": "lists XLA devices; use one device per process under torchrun",
        "torch_xla.real_devices": "maps XLA devices to runtime devices; there is no native equivalent",
        "torch_xla.core.xla_model.xla_device_kind": "no native equivalent; use `torch.accelerator.current_accelerator().type`",
    }

    # -- calls ----------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in XLA_DEVICE:
            return self._device(updated_node, name)
        if name in DEVICE_COUNT:
            self.changed(f"`{code_of(updated_node.func)}()` -> accelerator device count")
            return expr(f"max({self.ctx.torch()}.accelerator.device_count(), 1)")
        if name in DEVICE_TYPE:
            self.changed("`xr.device_type()` -> the accelerator's type")
            if self.ctx.target.neuron:
                return cst.SimpleString('"NEURON"')
            return expr(f"{self.ctx.device_type_expr()}.upper()")
        if name in DEVICE_HW and updated_node.args:
            self.changed("`xm.xla_device_hw(d)` -> `torch.device(d).type.upper()`")
            return expr(f"{self.ctx.torch()}.device({code_of(updated_node.args[0].value)}).type.upper()")
        if name in ("torch.device",) and updated_node.args:
            return self._torch_device(updated_node)
        if self.ctx.old_stack_file and option_values(updated_node):
            self.todo(FLAG_OPTION)
        text = startswith_xla(updated_node) if self.ctx.old_stack_file else None
        if text is not None:
            return self._startswith_xla(updated_node, text)
        if name is not None and name.split(".")[0] in LIGHTNING:
            self._lightning_on_xla(updated_node)
        if isinstance(updated_node.func, cst.Attribute) and updated_node.func.attr.value == "to":
            first = arg_value(updated_node, 0, "device")
            if first is not None and is_xla_string(string_value(first.value)):
                # An argument needs no parentheses around `a or b`.
                new = self._device_for(first.value, grouped=False)
                return updated_node.with_changes(
                    args=[a.with_changes(value=new) if a is first else a for a in updated_node.args]
                )
        return updated_node

    def _startswith_xla(self, call: cst.Call, text: cst.BaseExpression) -> cst.BaseExpression:
        """`device.type.startswith("xla")` is `device.type == "xla"`; any other text that starts
        with `"xla"` (`str(device)`, a tuple of prefixes) is tested as `"xla" in str(device)` is."""
        prefix = call.args[0].value
        if device_type_attribute(text) and isinstance(prefix, cst.SimpleString) and not self.strings.several_devices:
            self.changed('`.type.startswith("xla")` -> native device type test')
            if self.ctx.target.neuron:
                test = cst.ComparisonTarget(cst.Equal(), with_string_value(prefix, "neuron"))
            else:
                test = cst.ComparisonTarget(cst.NotEqual(), with_string_value(prefix, "cpu"))
            return self.ctx.group(cst.Comparison(left=text, comparisons=[test]))
        self.todo(_flag(call, [text]))
        return call

    def _lightning_on_xla(self, call: cst.Call) -> None:
        """`Trainer(accelerator="tpu", strategy="xla")`: Lightning's XLA pieces import torch_xla."""
        for keyword in ("accelerator", "strategy"):
            arg = arg_value(call, None, keyword)
            value = string_value(arg.value) if arg is not None else None
            if value is not None and (value == "tpu" or is_xla_string(value) or value.startswith("xla")):
                self.todo(
                    f'Lightning\'s `{keyword}="{value}"` runs on torch_xla: use `accelerator="auto"` and a '
                    'native strategy (`"ddp"`, `"fsdp"`) under torchrun'
                )
                return

    def _device(self, call: cst.Call, name: str) -> cst.BaseExpression:
        index = arg_value(call, 0, "n" if name.endswith("xla_device") else "index")
        torch = self.ctx.torch()
        self.changed(f"`{code_of(call.func)}()` -> native device")
        if index is None or (code_of(index.value) == "0" and not self.ctx.target.neuron):
            return self.ctx.group(expr(self.ctx.device_expr()))
        if code_of(index.value) != "0":
            self.todo(INDEX_TODO)
        return expr(f"{torch}.device({self.ctx.device_type_expr()}, {code_of(index.value)})")

    def _torch_device(self, call: cst.Call) -> cst.BaseExpression:
        first = call.args[0]
        value = string_value(first.value)
        if not is_xla_string(value) or first.keyword is not None:
            return call
        return self._device_for(first.value, whole_call=call)

    def _device_for(
        self, node: cst.BaseExpression, whole_call: cst.Call | None = None, grouped: bool = True
    ) -> cst.BaseExpression:
        """The native spelling for the device string `node` ("xla" or "xla:N").

        `xla:0` is the first device of this process, which under torch_xla is the one device a
        replica owns: natively that is the current device, not device 0 of the host (on CUDA,
        `cuda:0` would put every process on the first GPU).
        """
        assert isinstance(node, cst.SimpleString)
        value = string_value(node) or "xla"
        torch = self.ctx.torch()
        self.changed(f"device {node.value} -> native device")
        if self.ctx.target.neuron:
            new = with_string_value(node, value.replace("xla", "neuron", 1))
            if whole_call is not None:
                return whole_call.with_changes(args=[whole_call.args[0].with_changes(value=new), *whole_call.args[1:]])
            return new
        _, _, index = value.partition(":")
        if whole_call is not None and len(whole_call.args) > 1:
            index = code_of(whole_call.args[1].value)
        if index and index != "0":
            self.todo(INDEX_TODO)
            return expr(f"{torch}.device({self.ctx.device_type_expr()}, {index})")
        device = expr(self.ctx.device_expr())
        return self.ctx.group(device) if grouped else device

    # -- scopes: reuse the variable that holds the device ---------------------------------------
    def _remember_device(self, original: cst.Assign) -> None:
        """`device = xm.xla_device()`: later lookups in this scope can say `device`, if nothing
        else in the scope assigns `device` (a later `device = torch.device("cpu")` would not
        hold the accelerator) and it is this scope's own variable."""
        value = original.value
        target = original.targets[0].target if len(original.targets) == 1 else None
        if not (
            isinstance(target, cst.Name)
            and isinstance(value, cst.Call)
            and self.qualify(value.func) in XLA_DEVICE
            and not value.args
        ):
            return
        scope = self.ctx.scope
        if scope in self.ctx.device_names or scope.lookup(target.value) is not scope:
            return
        if scope.bound[target.value].count != 1:
            return
        if scope.kind == "Module":
            # Functions defined after it may say `device` too, if it is set whenever the module
            # runs: a statement of the module's own body, not under `if __name__ == ...`.
            assert self.ctx.scopes is not None
            statement = self.ctx.frames[-1].statement
            if self.ctx.scopes.statement_blocks[statement] != 0:
                return
        self.ctx.device_names[scope] = target.value

    # -- keywords and assignments ----------------------------------------------------------------
    strings = DeviceStrings()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._elifs: set[int] = set()
        self._known: dict[int, bool] = {}  # `True`/`False` written for a device-type test, by id

    def visit_Module(self, node: cst.Module) -> None:
        # Whether `name = "xla"` is a device depends on where `name` goes later in the file.
        if XLA_STRING.search(self.ctx.source):
            self.strings = read_device_strings(node, self.qualify)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if (
            updated_node.keyword is not None
            and updated_node.keyword.value in ("device", "map_location")
            and is_xla_string(string_value(updated_node.value))
        ):
            return updated_node.with_changes(value=self._device_for(updated_node.value))
        return updated_node

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        self._remember_device(original_node)
        if len(updated_node.targets) != 1:
            return updated_node
        value = self._assigned_string(original_node, updated_node.targets[0].target, updated_node.value)
        return updated_node if value is None else updated_node.with_changes(value=value)

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign:
        if updated_node.value is None:
            return updated_node
        value = self._assigned_string(original_node, updated_node.target, updated_node.value)
        return updated_node if value is None else updated_node.with_changes(value=value)

    def _assigned_string(
        self, original: cst.Assign | cst.AnnAssign, target: cst.BaseExpression, value: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        """`name = "xla"`: the native device if the name is used as one, else None (and a TODO)."""
        if not is_xla_string(string_value(value)) or not isinstance(target, cst.Name | cst.Attribute):
            return None
        if self.strings.names_device(original):
            return self._device_for(value)
        if self.ctx.old_stack_file:
            self.todo(FLAG_ASSIGNED.format(name=code_of(target)))
        return None

    def leave_Param(self, original_node: cst.Param, updated_node: cst.Param) -> cst.Param:
        """`def f(device="xla")`: the native device where the parameter is used as one."""
        default = updated_node.default
        if default is None or not is_xla_string(string_value(default)):
            return updated_node
        if self.strings.names_device(original_node):
            return updated_node.with_changes(default=self._device_for(default, grouped=False))
        if self.ctx.old_stack_file and updated_node.name.value not in self.strings.compared:
            self.todo(FLAG_DEFAULT.format(name=updated_node.name.value))  # a compared flag has its own
        return updated_node

    # -- `xr.device_type() == "NEURON"` with `--target neuron`: known, so the test goes ----------
    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def _known_type_test(self, comparison: cst.Comparison) -> bool | None:
        """What `xr.device_type() == "NEURON"` (or `!=`, either way round) is on Trainium."""
        if not self.ctx.target.neuron or len(comparison.comparisons) != 1:
            return None
        target = comparison.comparisons[0]
        sides = (comparison.left, target.comparator)
        calls = [side for side in sides if isinstance(side, cst.Call) and self.qualify(side.func) in DEVICE_TYPE]
        literals = [string_value(side) for side in sides if string_value(side) is not None]
        if len(calls) != 1 or len(literals) != 1 or not isinstance(target.operator, cst.Equal | cst.NotEqual):
            return None
        return (literals[0] == "NEURON") == isinstance(target.operator, cst.Equal)

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> Any:
        known = self._known.pop(id(updated_node.test), None)
        if known is None or id(original_node) in self._elifs:
            return updated_node
        self.changed(f"`if xr.device_type() ...` -> the branch Trainium takes (the test is {known})")
        return branch_taken(self.ctx, updated_node, known)

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.BaseExpression:
        known = self._known.pop(id(updated_node.test), None)
        if known is None:
            return updated_node
        self.changed(f"`... if xr.device_type() ... else ...` -> the value Trainium takes (the test is {known})")
        return updated_node.body if known else updated_node.orelse

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        """`x.device.type == "xla"` asks "is it on the accelerator?" in a script written for XLA
        alone; anywhere else `"xla"` in a comparison is a mode name, or one device among several."""
        known = self._known_type_test(original_node)
        if known is not None:
            constant = cst.Name(str(known))
            self._known[id(constant)] = known
            return constant
        if not self.ctx.old_stack_file or not compares_xla(updated_node):
            return updated_node  # a library that merely supports XLA among other devices
        target = updated_node.comparisons[0]
        xla = _device_type_is_xla(updated_node)
        if xla is None or self.strings.several_devices:
            self.todo(_flag(updated_node, [updated_node.left, *(c.comparator for c in updated_node.comparisons)]))
            return updated_node
        self.changed('`.type == "xla"` -> native device type test')
        operator = target.operator
        if not self.ctx.target.neuron:
            assert isinstance(operator, cst.Equal | cst.NotEqual)
            kind = cst.NotEqual if isinstance(operator, cst.Equal) else cst.Equal
            operator = kind(whitespace_before=operator.whitespace_before, whitespace_after=operator.whitespace_after)
        native = with_string_value(xla, "neuron" if self.ctx.target.neuron else "cpu")
        return updated_node.with_changes(
            left=native if updated_node.left is xla else updated_node.left,
            comparisons=[
                target.with_changes(operator=operator, comparator=native if target.comparator is xla else target.comparator)
            ],
        )


def _flag(test: cst.BaseExpression, operands: list[cst.BaseExpression]) -> str:
    """The TODO for a test against `"xla"` left as is: of a device's text, of its type, or of a mode name."""
    if any(device_text(o) for o in operands):
        return device_text_todo(test)
    return FLAG_DEVICE_TYPE if names_device_type(operands[0]) else FLAG_COMPARED


def _device_type_is_xla(comparison: cst.Comparison) -> cst.SimpleString | None:
    """The `"xla"` of `t.device.type == "xla"` (or `!=`, either way round), a test this codemod
    can turn native."""
    if len(comparison.comparisons) != 1:
        return None
    target = comparison.comparisons[0]
    if not isinstance(target.operator, cst.Equal | cst.NotEqual):
        return None
    for device, xla in ((comparison.left, target.comparator), (target.comparator, comparison.left)):
        if device_type_attribute(device) and isinstance(xla, cst.SimpleString) and string_value(xla) == "xla":
            return xla
    return None
