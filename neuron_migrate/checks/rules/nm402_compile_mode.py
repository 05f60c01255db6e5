"""NM402: compile modes and inductor options that Neuron ignores."""

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


class CompileMode(Rule):
    """Flags `mode=` other than `"default"`, inductor `options=`, and `CompileConfig` without `mode`.

    ## What it does
    Finds `torch.compile(..., mode="reduce-overhead" | "max-autotune" |
    "max-autotune-no-cudagraphs")`, `options={...}`, and transformers' `CompileConfig(...)`
    without `mode=` (its default is `"reduce-overhead"`).

    ## Why
    Neuron supports only the default mode: "Other modes log a warning and fall back to default".
    Inductor options mean nothing to the Neuron backend.

    ## Example
    ```python
    model = torch.compile(model, mode="max-autotune")
    config = CompileConfig(backend="neuron", dynamic=False)
    ```

    ## Use instead
    ```python
    model = torch.compile(model)
    config = CompileConfig(backend="neuron", dynamic=False, mode="default")
    ```

    ## Fix safety
    Adding `mode="default"` to `CompileConfig` is safe. Removing `mode=` from `torch.compile` is
    safe with `--target neuron` and unsafe for the portable target, where CUDA users lose the
    mode they chose. No fix for `options=`.
    """

    code = "NM402"
    name = "compile-mode"
    summary = "compile `mode`/`options` that Neuron ignores"
    calls = frozenset({"compile", "CompileConfig"})
    VALID = (
        "import torch\n\nmodel = torch.compile(model, mode='default', dynamic=False)\n",
        "from transformers import CompileConfig\n\ncc = CompileConfig(backend='neuron', dynamic=False, mode='default')\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\nmodel = torch.compile(model, mode='max-autotune', dynamic=False)\n",
            fixed=None,
            unsafe_fixed="import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
        ),
        Invalid(
            "import torch\n\nmodel = torch.compile(model, dynamic=False, mode='reduce-overhead')\n",
            target="neuron",
            fixed="import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
        ),
        Invalid(
            "from transformers import CompileConfig\n\ncc = CompileConfig(backend='neuron', dynamic=False)\n",
            fixed="from transformers import CompileConfig\n\ncc = CompileConfig(backend='neuron', dynamic=False, mode=\"default\")\n",
        ),
        Invalid(
            "import torch\n\nm = torch.compile(m, dynamic=False, options={'triton.cudagraphs': True})\n",
            line=3,
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        ctx = self.ctx
        config = name == "CompileConfig"
        if not (is_compile_config(ctx, node) if config else is_compile(ctx, node)):
            return
        mode = keyword(node, "mode")
        if mode is None:
            if config and all(k.arg for k in node.keywords):
                fix = ctx.fix(ctx.add_argument(node, 'mode="default"'), 'add `mode="default"`')
                self.report(
                    node,
                    '`CompileConfig` defaults to `mode="reduce-overhead"`, which Neuron ignores with a warning; pass `mode="default"`',
                    fix=fix,
                )
        else:
            value = constant(mode.value)
            if isinstance(value, str) and value != "default":
                if config:
                    quote = ctx.source(mode.value)[0]
                    fix = ctx.fix(
                        ctx.replace(mode.value, f"{quote}default{quote}"), 'use `mode="default"`'
                    )
                else:
                    fix = ctx.fix(
                        ctx.remove_keyword(node, mode),
                        "remove `mode`",
                        SAFE if ctx.neuron_target else UNSAFE,
                    )
                self.report(
                    mode,
                    f"`mode={value!r}` is not supported by Neuron (it warns and uses the default)",
                    fix=fix,
                )
        options = keyword(node, "options")
        if options is not None and not config and constant(options.value) is not None:
            self.report(options, "inductor `options=` mean nothing to the Neuron backend")
