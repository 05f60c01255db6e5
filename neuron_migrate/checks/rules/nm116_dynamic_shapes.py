"""NM116: dynamic shapes switched on: `dynamic=True`, `mark_dynamic`, automatic dynamic shapes."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import (
    Invalid,
    Rule,
    constant,
    is_compile,
    is_compile_config,
    keyword,
)

MARKS = frozenset(
    {
        "torch._dynamo.mark_dynamic",
        "torch._dynamo.maybe_mark_dynamic",
        "torch._dynamo.decorators.mark_dynamic",
    }
)
STATIC_OFF = re.compile(r"automatic_dynamic_shapes\s*=\s*False")


class DynamicShapes(Rule):
    """Flags code that asks for dynamic shapes, which the Neuron backend rejects.

    ## What it does
    Finds `torch.compile(..., dynamic=True)`; `torch.compile(...)` and `CompileConfig(...)`
    without `dynamic=False` (unless the file sets `automatic_dynamic_shapes = False`);
    `torch._dynamo.mark_dynamic` / `maybe_mark_dynamic`; and
    `torch._dynamo.config.automatic_dynamic_shapes = True` /
    `assume_static_by_default = False`.

    ## Why
    Neuron compiles static shapes only: "dynamic=True is rejected during compilation". With the
    default `dynamic=None`, automatic dynamic shapes mark a dimension symbolic as soon as a
    second shape is seen (measured: the second distinct length produced a symbolic graph),
    which the backend rejects. `dynamic=False` turns automatic dynamic shapes off for that
    compile: each new shape compiles a new static graph instead.

    ## Example
    ```python
    model = torch.compile(model, backend="neuron")
    torch._dynamo.mark_dynamic(batch, 1)
    ```

    ## Use instead
    ```python
    model = torch.compile(model, backend="neuron", dynamic=False)
    ```
    and pad inputs to a few fixed sizes (NM301, NM302).

    ## Fix safety
    Safe: `dynamic=True`/`None` becomes `dynamic=False`, `dynamic=False` is added when missing,
    `mark_dynamic` calls are deleted, and the config switches are set back to their static
    values. On CUDA or CPU the program computes the same; it may compile once per shape.
    """

    code = "NM116"
    name = "dynamic-shapes"
    summary = "`dynamic=True`, `mark_dynamic` or automatic dynamic shapes left on"
    severity = Severity.ERROR
    requires = (
        "compile",
        "CompileConfig",
        "mark_dynamic",
        "automatic_dynamic_shapes",
        "assume_static_by_default",
    )
    calls = frozenset({"compile", "CompileConfig", "mark_dynamic", "maybe_mark_dynamic"})
    nodes = (ast.Assign, ast.FunctionDef, ast.AsyncFunctionDef)
    VALID = (
        "import torch\n\nmodel = torch.compile(model, backend='neuron', dynamic=False)\n",
        "import torch\n\ntorch._dynamo.config.automatic_dynamic_shapes = False\nmodel = torch.compile(model)\n",
        "import re\n\npattern = re.compile('x')\n",
        "import torch\n\ntorch._dynamo.mark_static(x, 0)\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\nmodel = torch.compile(model, dynamic=True)\n",
            severity="error",
            fixed="import torch\n\nmodel = torch.compile(model, dynamic=False)\n",
        ),
        Invalid(
            "import torch\n\nmodel = torch.compile(model, backend='neuron')\n",
            severity="warning",
            fixed="import torch\n\nmodel = torch.compile(model, backend='neuron', dynamic=False)\n",
        ),
        Invalid(
            "import torch\n\n@torch.compile\ndef step(x):\n    return x\n",
            line=3,
            fixed="import torch\n\n@torch.compile(dynamic=False)\ndef step(x):\n    return x\n",
        ),
        Invalid(
            "import torch\n\nmodel.compile(\n    backend='neuron',\n    fullgraph=True,\n)\n",
            fixed="import torch\n\nmodel.compile(\n    backend='neuron',\n    fullgraph=True,\n    dynamic=False,\n)\n",
        ),
        Invalid(
            "import torch\n\ntorch._dynamo.mark_dynamic(batch, 1)\nout = model(batch)\n",
            fixed="import torch\n\nout = model(batch)\n",
        ),
        Invalid(
            "import torch\n\ntorch._dynamo.config.automatic_dynamic_shapes = True\n",
            fixed="import torch\n\ntorch._dynamo.config.automatic_dynamic_shapes = False\n",
        ),
        Invalid(
            "from transformers import CompileConfig\n\ncc = CompileConfig(backend='neuron', mode='default')\n",
            fixed="from transformers import CompileConfig\n\ncc = CompileConfig(backend='neuron', mode='default', dynamic=False)\n",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        ctx = self.ctx
        if name in ("mark_dynamic", "maybe_mark_dynamic"):
            if ctx.qualify(node.func) not in MARKS:
                return
            statement = ctx.parent()
            fix = (
                ctx.fix(ctx.delete_statement(statement), "delete the call")
                if isinstance(statement, ast.Expr)
                else None
            )
            self.report(
                node,
                f"`{name}` makes a dimension symbolic, which Neuron rejects; remove it (or `mark_static`)",
                fix=fix,
            )
            return
        if not (is_compile(ctx, node) if name == "compile" else is_compile_config(ctx, node)):
            return
        if any(k.arg is None for k in node.keywords):
            return  # `**options` may carry `dynamic=`
        given = keyword(node, "dynamic")
        if given is not None:
            value = constant(given.value)
            if value is False:
                return
            if value is True:
                fix = ctx.fix(ctx.replace(given.value, "False"), "set `dynamic=False`")
                self.report(
                    given,
                    "`dynamic=True` is rejected by the Neuron backend; use `dynamic=False`",
                    fix=fix,
                )
                return
            if value is not None:
                return  # a variable: the author decides
            fix = ctx.fix(ctx.replace(given.value, "False"), "set `dynamic=False`")
        else:
            if STATIC_OFF.search(ctx.text):
                return
            fix = ctx.fix(ctx.set_keyword(node, "dynamic", "False"), "add `dynamic=False`")
        self.report(
            node,
            "without `dynamic=False`, automatic dynamic shapes make a dimension symbolic on the second input "
            "shape, which Neuron rejects; pass `dynamic=False`",
            fix=fix,
            severity=Severity.WARNING,
        )

    def visit(self, node: ast.AST) -> None:
        if not isinstance(node, ast.Assign):
            self._decorators(node)  # type: ignore[arg-type]
            return
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Attribute):
            return
        target = node.targets[0]
        bad = {"automatic_dynamic_shapes": True, "assume_static_by_default": False}
        if target.attr not in bad or constant(node.value) != bad[target.attr]:
            return
        if not (self.ctx.qualify(target) or "").startswith("torch._dynamo.config"):
            return
        fix = self.ctx.fix(
            self.ctx.replace(node.value, str(not bad[target.attr])), "restore the static default"
        )
        self.report(
            node,
            f"`{target.attr} = {bad[target.attr]}` makes shapes dynamic, which Neuron rejects",
            fix=fix,
        )

    def _decorators(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            if (
                not isinstance(decorator, ast.Call)
                and self.ctx.qualify(decorator) in ("torch.compile", "torch.compiler.compile")
                and not STATIC_OFF.search(self.ctx.text)
            ):
                fix = self.ctx.fix(
                    self.ctx.replace(decorator, f"{self.ctx.source(decorator)}(dynamic=False)"),
                    "add `dynamic=False`",
                )
                self.report(
                    decorator,
                    "without `dynamic=False`, automatic dynamic shapes make a dimension symbolic on the second input "
                    "shape, which Neuron rejects; use `@torch.compile(dynamic=False)`",
                    fix=fix,
                    severity=Severity.WARNING,
                )
