"""NM010: `torch.compile` with an XLA backend gets the native one."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.codemods.base import Codemod, arg_value, string_value, without_args

COMPILE = ("torch.compile",)
XLA_BACKENDS = frozenset({"openxla", "openxla_eval", "aot_torchxla_trace_once", "torchxla_trace_once"})


class XlaCompileBackend(Codemod):
    """Replaces the `openxla` dynamo backends.

    ## What it does
    `torch.compile(model, backend="openxla")` becomes `torch.compile(model)`, which picks the
    backend of the device the model runs on (`neuron` on Trainium, inductor elsewhere). With
    `--target neuron` it becomes `torch.compile(model, backend="neuron")`.

    ## Why
    The `openxla` backends lower to torch_xla, which is gone.

    ## Example
    ```python
    model = torch.compile(model, backend="openxla")
    ```

    ## Use instead
    ```python
    model = torch.compile(model)
    ```

    ## Fix safety
    Safe. The Neuron backend rejects dynamic shapes: `neuron-migrate check` flags
    `dynamic=True` and shapes that vary between steps.
    """

    code = "NM010"
    name = "xla-compile-backend"
    summary = '`torch.compile(backend="openxla")` -> the native backend'
    triggers = COMPILE
    markers = ("openxla", "torchxla_trace_once")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.qualify(updated_node.func) not in COMPILE:
            return updated_node
        backend = arg_value(updated_node, None, "backend")
        if backend is None or string_value(backend.value) not in XLA_BACKENDS:
            return updated_node
        assert isinstance(backend.value, cst.SimpleString)
        self.changed(f"`torch.compile(backend={backend.value.value})` -> native backend")
        if self.ctx.target.neuron:
            quote = backend.value.quote
            new_value = backend.value.with_changes(value=f"{quote}neuron{quote}")
            return updated_node.with_changes(
                args=[a.with_changes(value=new_value) if a is backend else a for a in updated_node.args]
            )
        return without_args(updated_node, ("backend",))
