"""NM008: autocast on the `xla` device becomes autocast on the native device."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.codemods.base import Codemod, arg_value, code_of, expr, string_value

AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast")
XLA_AUTOCAST = ("torch_xla.amp.autocast", "torch_xla.amp.autocast_mode.autocast")


class XlaAutocast(Codemod):
    """Moves autocast from the `xla` device type to the native one.

    ## What it does
    `torch.autocast("xla", dtype=torch.bfloat16)` and `torch_xla.amp.autocast(device, ...)`
    become `torch.autocast(device_type=..., dtype=torch.bfloat16)` for the native device.

    ## Why
    Autocast is keyed by device type; `xla` does not exist natively and Trainium's is `neuron`.

    ## Example
    ```python
    with torch_xla.amp.autocast(device, dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Fix safety
    Safe. The cast policy is the same; which ops autocast lowers follows the native device's
    autocast lists.
    """

    code = "NM008"
    name = "xla-autocast"
    summary = "autocast on `xla` -> autocast on the native device"
    triggers = (*XLA_AUTOCAST, *AUTOCAST)
    manual = {
        "torch_xla.amp.GradScaler": "GradScaler is not needed with bf16; for fp16 use `torch.amp.GradScaler(device_type)`",
        "torch_xla.amp": "use `torch.autocast` / `torch.amp`",
    }

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        torch = self.ctx.torch()
        if name in XLA_AUTOCAST:
            device = arg_value(updated_node, 0, "device")
            if device is None:
                return updated_node
            value = device.value
            device_type = (
                self.ctx.target.device_type(torch)
                if string_value(value) is not None
                else f"{code_of(value)}.type"
            )
            rest = [a for a in updated_node.args if a is not device]
            tail = "".join(f", {code_of(a)}" for a in rest).replace(",,", ",")
            self.changed("`torch_xla.amp.autocast(device)` -> `torch.autocast(device_type)`")
            return expr(f"{torch}.autocast(device_type={device_type}{tail.rstrip(', ')})")
        if name in AUTOCAST:
            device_type = arg_value(updated_node, 0, "device_type")
            if device_type is None or string_value(device_type.value) != "xla":
                return updated_node
            self.changed('autocast `"xla"` -> native device type')
            new_value = expr(self.ctx.target.device_type(torch))
            if isinstance(new_value, cst.SimpleString) and isinstance(device_type.value, cst.SimpleString):
                new_value = device_type.value.with_changes(value=f"{device_type.value.quote}neuron{device_type.value.quote}")
            return updated_node.with_changes(
                args=[a.with_changes(value=new_value) if a is device_type else a for a in updated_node.args]
            )
        return updated_node
