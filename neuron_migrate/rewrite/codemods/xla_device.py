"""NM001: XLA devices become native devices."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    arg_value,
    code_of,
    expr,
    string_value,
    with_string_value,
)

XLA_DEVICE = (
    "torch_xla.core.xla_model.xla_device",
    "torch_xla.device",
)
DEVICE_COUNT = (
    "torch_xla.device_count",
    "torch_xla.runtime.global_runtime_device_count",
    "torch_xla.runtime.addressable_runtime_device_count",
    "torch_xla.runtime.global_device_count",
    "torch_xla.runtime.local_device_count",
    "torch_xla.runtime.addressable_device_count",
)
DEVICE_TYPE = ("torch_xla.runtime.device_type",)
DEVICE_HW = ("torch_xla.core.xla_model.xla_device_hw",)


def _is_xla_string(value: str | None) -> bool:
    return value is not None and (value == "xla" or value.startswith("xla:"))


class XlaDevice(Codemod):
    """Replaces XLA devices with native ones.

    ## What it does
    Rewrites `xm.xla_device()` and `torch_xla.device()`, the string `"xla"` where it names a
    device (`.to("xla")`, `device="xla"`, `torch.device("xla:0")`, `device = "xla"`), device
    counts (`xr.global_runtime_device_count()`), `xr.device_type()`, `xm.xla_device_hw()` and
    `tensor.device.type == "xla"` tests.

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

    ## Fix safety
    Safe. The portable spelling falls back to the CPU where no accelerator is present;
    `torch.accelerator.device_count()` is 0 on a CPU-only machine, so device counts become
    `max(torch.accelerator.device_count(), 1)`. Device 0 (`"xla:0"`, `xm.xla_device(0)`) was
    the first device of the calling process, so the portable spelling is the current device
    rather than device 0 of the host, which on CUDA would put every process on the first GPU.
    """

    code = "NM001"
    name = "xla-device"
    summary = "XLA devices become native devices (`neuron`, or the current accelerator)"
    triggers = (*XLA_DEVICE, *DEVICE_COUNT, *DEVICE_TYPE, *DEVICE_HW)
    markers = ("'xla", '"xla')
    needs_old_stack_import = False  # "xla" device strings only mean torch_xla
    manual: ClassVar[dict[str, str]] = {
        "torch_xla.core.xla_model.get_xla_supported_devices": "lists XLA device strings; use `range(torch.accelerator.device_count())` or one device per process under torchrun",
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
        if isinstance(updated_node.func, cst.Attribute) and updated_node.func.attr.value == "to":
            first = arg_value(updated_node, 0, "device")
            if first is not None and _is_xla_string(string_value(first.value)):
                # An argument needs no parentheses around `a or b`.
                new = self._device_for(first.value, grouped=False)
                return updated_node.with_changes(
                    args=[a.with_changes(value=new) if a is first else a for a in updated_node.args]
                )
        return updated_node

    def _device(self, call: cst.Call, name: str) -> cst.BaseExpression:
        index = arg_value(call, 0, "n" if name.endswith("xla_device") else "index")
        torch = self.ctx.torch()
        self.changed(f"`{code_of(call.func)}()` -> native device")
        if index is None or (code_of(index.value) == "0" and not self.ctx.target.neuron):
            return self.ctx.group(expr(self.ctx.device_expr()))
        return expr(f"{torch}.device({self.ctx.device_type_expr()}, {code_of(index.value)})")

    def _torch_device(self, call: cst.Call) -> cst.BaseExpression:
        first = call.args[0]
        value = string_value(first.value)
        if not _is_xla_string(value) or first.keyword is not None:
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
            return expr(f"{torch}.device({self.ctx.device_type_expr()}, {index})")
        device = expr(self.ctx.device_expr())
        return self.ctx.group(device) if grouped else device

    # -- scopes: reuse the variable that holds the device ---------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.ctx.device_names.append(None)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self.ctx.device_names.pop()
        return updated_node

    def _remember_device(self, original: cst.Assign) -> None:
        value = original.value
        if (
            len(original.targets) == 1
            and isinstance(original.targets[0].target, cst.Name)
            and isinstance(value, cst.Call)
            and self.qualify(value.func) in XLA_DEVICE
            and not value.args
            and self.ctx.device_names[-1] is None
        ):
            self.ctx.device_names[-1] = original.targets[0].target.value

    # -- keywords and assignments ----------------------------------------------------------------
    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if (
            updated_node.keyword is not None
            and updated_node.keyword.value in ("device", "map_location")
            and _is_xla_string(string_value(updated_node.value))
        ):
            return updated_node.with_changes(value=self._device_for(updated_node.value))
        return updated_node

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        self._remember_device(original_node)
        if _is_xla_string(string_value(updated_node.value)) and any(
            isinstance(t.target, cst.Name | cst.Attribute) and "device" in code_of(t.target).lower()
            for t in updated_node.targets
        ):
            return updated_node.with_changes(value=self._device_for(updated_node.value))
        return updated_node

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.Comparison:
        """`x.device.type == "xla"` asks "is it on the accelerator?"."""
        if not self.ctx.old_stack_file:
            return updated_node  # a library that merely supports XLA among other devices
        left = updated_node.left
        if not (isinstance(left, cst.Attribute) and left.attr.value == "type") or len(updated_node.comparisons) != 1:
            return updated_node
        target = updated_node.comparisons[0]
        if string_value(target.comparator) != "xla" or not isinstance(target.comparator, cst.SimpleString):
            return updated_node
        self.changed('`.type == "xla"` -> native device type test')
        if self.ctx.target.neuron:
            return updated_node.with_changes(
                comparisons=[target.with_changes(comparator=with_string_value(target.comparator, "neuron"))]
            )
        operator = target.operator
        flipped: cst.BaseCompOp
        if isinstance(operator, cst.Equal):
            flipped = cst.NotEqual(whitespace_before=operator.whitespace_before, whitespace_after=operator.whitespace_after)
        elif isinstance(operator, cst.NotEqual):
            flipped = cst.Equal(whitespace_before=operator.whitespace_before, whitespace_after=operator.whitespace_after)
        else:
            return updated_node
        return updated_node.with_changes(
            comparisons=[target.with_changes(operator=flipped, comparator=with_string_value(target.comparator, "cpu"))]
        )
