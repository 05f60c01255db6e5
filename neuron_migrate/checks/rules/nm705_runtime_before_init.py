"""NM705: the Neuron runtime used before `init_process_group`."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, constant

RUNTIME = (
    "torch.neuron.",
    "torch.accelerator.set_device_index",
    "torch.accelerator.current_device_index",
    "torch.accelerator.synchronize",
)


class RuntimeBeforeInit(Rule):
    """Flags Neuron device use that comes before `init_process_group` in the same function.

    ## What it does
    In each function (and at module level), finds the first statement that touches the Neuron
    runtime (a `"neuron"` device, `torch.neuron.*`, `torch.accelerator.set_device_index`...)
    when a later statement of the same block calls `init_process_group`.

    ## Why
    The Neuron backend asserts "Neuron runtime should not be initialized before the
    init_process_group".

    ## Example
    ```python
    def main():
        model = Net().to("neuron")
        dist.init_process_group(backend="neuron")
    ```

    ## Use instead
    ```python
    def main():
        dist.init_process_group(backend="neuron")
        model = Net().to("neuron")
    ```

    ## Fix safety
    No automatic fix: moving statements may change what the program does.
    """

    code = "NM705"
    name = "runtime-before-init"
    summary = "Neuron runtime used before `init_process_group`"
    requires = ("init_process_group",)
    nodes = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)
    VALID = (
        "import torch.distributed as dist\n\ndef main():\n    dist.init_process_group(backend='neuron')\n    m = Net().to('neuron')\n",
    )
    INVALID = (
        Invalid(
            "import torch.distributed as dist\n\ndef main():\n    m = Net().to('neuron')\n    dist.init_process_group(backend='neuron')\n",
            line=4,
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        if "neuron" in ctx.text:
            self.visit(ctx.tree)  # the module body: the walker starts below the Module node

    def visit(self, node: ast.AST) -> None:
        if "neuron" not in self.ctx.text:
            return
        body = node.body  # type: ignore[attr-defined]
        init_at = next((i for i, s in enumerate(body) if self._calls_init(s)), None)
        if init_at is None:
            return
        for statement in body[:init_at]:
            use = self._runtime_use(statement)
            if use is not None:
                self.report(
                    use,
                    "the Neuron runtime is used before `init_process_group`, which the backend refuses; initialize the process group first",
                )
                return

    def _calls_init(self, statement: ast.stmt) -> bool:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and (self.ctx.qualify(node.func) or "").endswith(
                "init_process_group"
            ):
                return True
        return False

    def _runtime_use(self, statement: ast.stmt) -> ast.AST | None:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return None
        for node in ast.walk(statement):
            value = constant(node)
            if isinstance(value, str) and (value == "neuron" or value.startswith("neuron:")):
                return node
            if isinstance(node, ast.Attribute):
                qualified = self.ctx.qualify(node) or ""
                if qualified.startswith(RUNTIME):
                    return node
        return None
