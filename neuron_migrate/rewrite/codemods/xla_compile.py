"""NM010: `torch.compile` with an XLA backend gets the native one."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    append_arg,
    arg_value,
    code_of,
    fix_trailing_comma,
    has_star_args,
    keyword_arg,
    string_value,
    with_string_value,
)

COMPILE = ("torch.compile",)
OPTIMIZE = ("torch._dynamo.optimize",)  # the backend may come first, by position
XLA_BACKENDS = frozenset({"openxla", "openxla_eval", "aot_torchxla_trace_once", "torchxla_trace_once"})


class XlaCompileBackend(Codemod):
    """Replaces the `openxla` dynamo backends.

    ## What it does
    `torch.compile(model, backend="openxla")` becomes `torch.compile(model, dynamic=False)`,
    which picks the backend of the device the model runs on (`neuron` on Trainium, inductor
    elsewhere). With `--target neuron` it becomes
    `torch.compile(model, backend="neuron", dynamic=False)`. `dynamic=False` keeps XLA's one
    graph per input shape (a `dynamic=` the call already passes is kept).

    ## Why
    The `openxla` backends lower to torch_xla, which is gone.

    ## Example
    ```python
    model = torch.compile(model, backend="openxla")
    ```

    ## Use instead
    ```python
    model = torch.compile(model, dynamic=False)
    ```

    ## Fix safety
    Safe. The Neuron backend rejects dynamic shapes, hence `dynamic=False`: without it, a
    second input shape would make dynamo try a dynamic graph. `neuron-migrate check` flags
    `dynamic=True` and shapes that vary between steps.

    `torch._dynamo.optimize("openxla")` (a decorator or wrapper, its backend often given by
    position) is rewritten the same way: `torch._dynamo.optimize(dynamic=False)`, or
    `torch._dynamo.optimize("neuron", dynamic=False)` with `--target neuron`.
    """

    code = "NM010"
    name = "xla-compile-backend"
    summary = '`torch.compile(backend="openxla")` -> the native backend'
    triggers = (*COMPILE, *OPTIMIZE)
    markers = ("openxla", "torchxla_trace_once")
    needs_old_stack_import = False  # dynamo loads the openxla backend without an import

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name not in (*COMPILE, *OPTIMIZE):
            return updated_node
        backend = arg_value(updated_node, 0 if name in OPTIMIZE else None, "backend")
        if backend is None or string_value(backend.value) not in XLA_BACKENDS:
            return updated_node
        assert isinstance(backend.value, cst.SimpleString)
        self.changed(f"`{code_of(updated_node.func)}(backend={backend.value.value})` -> native backend")
        if self.ctx.target.neuron:
            new_value = with_string_value(backend.value, "neuron")
            new = updated_node.with_changes(
                args=[a.with_changes(value=new_value) if a is backend else a for a in updated_node.args]
            )
        else:
            new = updated_node.with_changes(args=fix_trailing_comma([a for a in updated_node.args if a is not backend]))
        if arg_value(new, None, "dynamic") is None and not has_star_args(new):
            # XLA compiled one graph per shape; the Neuron backend rejects dynamic shapes.
            new = new.with_changes(args=append_arg(new, new.args, keyword_arg("dynamic", cst.Name("False"))))
        return new
