"""NM401: `torch.compile` with a backend other than Neuron's (or none, for `--target neuron`)."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import SAFE, UNSAFE
from neuron_migrate.checks.rules.base import (
    Invalid,
    Rule,
    constant,
    is_compile,
    is_compile_config,
    keyword,
)

DEBUG_BACKENDS = frozenset({"eager", "aot_eager", "aot_eager_decomp_partition"})


class CompileBackend(Rule):
    """Flags compile backends that are not `neuron`.

    ## What it does
    Finds `torch.compile(..., backend="inductor" | "openxla" | "aot_eager" | "cudagraphs" | ...)`
    and the same in `model.compile(...)` and transformers' `CompileConfig(...)`. With
    `--target neuron` (or `target = "neuron"` in the configuration) it also flags calls without
    a backend.

    ## Why
    Trainium compiles through the `neuron` backend. Left out, `torch.compile` picks it only when
    the model runs on a Neuron device; the portable target relies on that, the neuron target
    spells it out. Other backends do not run on Trainium (`openxla` needs torch_xla, which is
    gone), and `CompileConfig` defaults to `inductor`.

    ## Example
    ```python
    model = torch.compile(model, backend="inductor")
    ```

    ## Use instead
    ```python
    model = torch.compile(model)  # portable: the device picks the backend
    model = torch.compile(model, backend="neuron")  # --target neuron
    ```

    ## Fix safety
    Safe for `inductor`/`openxla`-style backends: removed (portable target) or replaced by
    `"neuron"`. Unsafe for debugging backends (`eager`, `aot_eager`), which someone chose on
    purpose. Adding `backend="neuron"` under `--target neuron` is safe.
    """

    code = "NM401"
    name = "compile-backend"
    summary = "a compile backend other than `neuron`"
    calls = frozenset({"compile", "CompileConfig"})
    VALID = (
        "import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
        "import torch\n\nmodel = torch.compile(model, backend='neuron', dynamic=False)\n",
        "import torch\n\nmodel = torch.compile(model, backend=BACKEND)\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\nmodel = torch.compile(model, backend='inductor', dynamic=False)\n",
            fixed="import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
        ),
        Invalid(
            "import torch\n\nmodel = torch.compile(model, backend='inductor', dynamic=False)\n",
            target="neuron",
            fixed="import torch\n\nmodel = torch.compile(model, backend='neuron', dynamic=False)\n",
        ),
        Invalid(
            "import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
            target="neuron",
            fixed='import torch\n\nmodel = torch.compile(model, dynamic=False, backend="neuron")\n',
        ),
        Invalid(
            "import torch\n\nmodel = torch.compile(\n    model,\n    backend='inductor',  # the fast one\n    dynamic=False,\n)\n",
            fixed="import torch\n\nmodel = torch.compile(\n    model,\n      # the fast one\n    dynamic=False,\n)\n",
        ),
        Invalid(
            "import torch\n\nmodel = torch.compile(model, backend='aot_eager', dynamic=False)\n",
            fixed=None,
            unsafe_fixed="import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
        ),
        Invalid(
            "from transformers import CompileConfig\n\ncc = CompileConfig(dynamic=False, mode='default')\n",
            fixed="from transformers import CompileConfig\n\ncc = CompileConfig(dynamic=False, mode='default', backend=\"neuron\")\n",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        ctx = self.ctx
        config = name == "CompileConfig"
        if not (is_compile_config(ctx, node) if config else is_compile(ctx, node)):
            return
        given = keyword(node, "backend")
        if given is None:
            if (ctx.neuron_target or config) and all(k.arg for k in node.keywords):
                why = (
                    "`CompileConfig` defaults to `inductor`"
                    if config
                    else "the neuron target spells out the backend"
                )
                fix = ctx.fix(ctx.add_argument(node, 'backend="neuron"'), 'add `backend="neuron"`')
                self.report(node, f'no compile backend: {why}; pass `backend="neuron"`', fix=fix)
            return
        value = constant(given.value)
        if not isinstance(value, str) or value == "neuron":
            return
        safety = UNSAFE if value in DEBUG_BACKENDS else SAFE
        if ctx.neuron_target or config:
            quote = ctx.source(given.value)[0]
            edit = ctx.replace(given.value, f"{quote}neuron{quote}")
            message = 'use `backend="neuron"`'
        else:
            edit = ctx.remove_keyword(node, given)
            message = "remove the backend (the device picks it)"
        self.report(
            given,
            f"`backend={value!r}` does not compile for Trainium; {message}",
            fix=ctx.fix(edit, message, safety),
        )
