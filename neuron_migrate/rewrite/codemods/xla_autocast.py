"""NM008: autocast on the `xla` device becomes autocast on the native device."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    append_arg,
    arg_value,
    code_of,
    expr,
    fix_trailing_comma,
    has_star_args,
    keyword_arg,
    string_value,
    with_string_value,
)

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
    Safe. Autocast on `xla` meant bfloat16 when no dtype was given, while native autocast picks
    the device's default (float16 on CUDA), so `dtype=torch.bfloat16` is written out. On
    Trainium torch_xla's autocast turned itself off for any other dtype (with a warning); such
    calls now really autocast and get a TODO. Positional arguments of
    `torch_xla.amp.autocast(device, enabled, dtype)` become keywords, since `torch.autocast`
    orders them differently. Which ops autocast lowers follows the native device's lists.
    """

    code = "NM008"
    name = "xla-autocast"
    summary = "autocast on `xla` -> autocast on the native device"
    triggers = (*XLA_AUTOCAST, *AUTOCAST)
    manual: ClassVar[dict[str, str]] = {
        "torch_xla.amp.GradScaler": "`{name}` is not needed with bf16; for fp16 use `torch.amp.GradScaler(device.type)`",
        "torch_xla.amp": "use `torch.autocast` / `torch.amp`",
    }

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in XLA_AUTOCAST:
            return self._xla_autocast(updated_node)
        if name in AUTOCAST:
            return self._torch_autocast(updated_node)
        return updated_node

    def _xla_autocast(self, call: cst.Call) -> cst.BaseExpression:
        """`torch_xla.amp.autocast(device, enabled, dtype, cache_enabled)` -> `torch.autocast`."""
        device = arg_value(call, 0, "device")
        if device is None or has_star_args(call):
            return call
        torch = self.ctx.torch()
        value = device.value
        native = code_of(value.with_changes(lpar=[], rpar=[])) == self.ctx.target.device(torch)
        if string_value(value) is not None or native:  # `autocast(torch_xla.device())`: the device's own type
            device_type = self.ctx.device_type_expr()
        elif isinstance(value, cst.Name | cst.Attribute | cst.Call | cst.Subscript) or value.lpar:
            device_type = f"{code_of(value)}.type"
        else:
            device_type = f"({code_of(value)}).type"
        args = [keyword_arg("device_type", expr(device_type)).with_changes(comma=device.comma)]
        position = 0
        for arg in call.args:
            if arg.keyword is None:
                position += 1
                if arg is device:
                    continue
                # torch.autocast orders its parameters differently: name them.
                named = keyword_arg(XLA_AUTOCAST_PARAMETERS[position - 1], arg.value)
                arg = arg.with_changes(keyword=named.keyword, equal=named.equal)
            elif arg is device:
                continue
            args.append(arg)
        args = self._bf16_default(call, args, only_bf16=True)
        self.changed("`torch_xla.amp.autocast(device)` -> `torch.autocast(device_type)`")
        return call.with_changes(func=expr(f"{torch}.autocast"), args=_commas(args))

    def _torch_autocast(self, call: cst.Call) -> cst.BaseExpression:
        device_type = arg_value(call, 0, "device_type")
        if device_type is None or string_value(device_type.value) != "xla":
            return call
        self.changed('autocast `"xla"` -> native device type')
        new_value = expr(self.ctx.device_type_expr())
        if isinstance(new_value, cst.SimpleString) and isinstance(device_type.value, cst.SimpleString):
            new_value = with_string_value(device_type.value, "neuron")
        args = [a.with_changes(value=new_value) if a is device_type else a for a in call.args]
        if not has_star_args(call):
            args = self._bf16_default(call, args, positional_dtype=True)
        return call.with_changes(args=_commas(args))

    def _bf16_default(
        self, call: cst.Call, args: list[cst.Arg], positional_dtype: bool = False, only_bf16: bool = False
    ) -> list[cst.Arg]:
        """Autocast on `xla` meant bfloat16 unless told otherwise; natively the default depends on
        the device (float16 on CUDA). torch_xla's own autocast also turned itself off on Trainium
        for any other dtype (`only_bf16`)."""
        dtype = next((a for a in args if a.keyword is not None and a.keyword.value == "dtype"), None)
        if dtype is None and positional_dtype:
            positional = [a for a in args if a.keyword is None]
            dtype = positional[1] if len(positional) > 1 else None
        bf16 = expr(f"{self.ctx.torch()}.bfloat16")
        if dtype is None:
            return append_arg(call, args, keyword_arg("dtype", bf16))
        if code_of(dtype.value) == "None":
            return [a.with_changes(value=bf16) if a is dtype else a for a in args]
        if only_bf16 and self.qualify(dtype.value) != "torch.bfloat16":
            self.todo(
                f"this now autocasts to `{code_of(dtype.value)}`, which torch_xla skipped on Trainium: "
                "check the numerics, or use `torch.bfloat16`"
            )
        return args


XLA_AUTOCAST_PARAMETERS = ("device", "enabled", "dtype", "cache_enabled")
def _commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """Every argument but the last gets a comma; the last keeps a one-per-line layout's comma."""
    fixed = []
    for k, arg in enumerate(args):
        if k < len(args) - 1 and not isinstance(arg.comma, cst.Comma):
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        fixed.append(arg)
    return fix_trailing_comma(fixed)
