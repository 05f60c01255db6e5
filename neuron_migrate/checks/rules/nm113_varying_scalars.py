"""NM113: Python scalars that change between calls of compiled code (each value recompiles)."""

from __future__ import annotations

import ast

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import UNSAFE
from neuron_migrate.checks.rules.base import Invalid, Rule, argument, constant, keyword

OPTIMIZER_PREFIX = "torch.optim."


def counters(loop: ast.For) -> set[str]:
    """The Python ints a loop counts with: `for i in range(...)`, `for i, x in enumerate(...)`."""
    iterator = loop.iter
    if not isinstance(iterator, ast.Call) or not isinstance(iterator.func, ast.Name):
        return set()
    if iterator.func.id == "range" and isinstance(loop.target, ast.Name):
        return {loop.target.id}
    if (
        iterator.func.id == "enumerate"
        and isinstance(loop.target, ast.Tuple)
        and isinstance(loop.target.elts[0], ast.Name)
    ):
        return {loop.target.elts[0].id}
    return set()


class VaryingScalars(Rule):
    """Flags Python numbers that change on every call of compiled code.

    ## What it does
    Two patterns. (1) A function compiled with `torch.compile` (assigned to a name) that is
    called inside a `for` loop with the loop variable as an argument: `cstep(x, step)`.
    (2) An optimizer built with a float `lr=` literal in a file that compiles `optimizer.step`
    (`torch.compile(opt.step)`) and changes the learning rate (a scheduler or `param_group`).

    ## Why
    With static shapes, Dynamo specialises on Python ints and floats: every new value is a new
    graph (a guard such as `n == 2` fails), and after 8 recompiles the function falls back to
    eager. Measured: `SGD` with a float lr decayed each step recompiled `optimizer.step` 3 times
    in 3 steps; with `lr=torch.tensor(0.1)` it compiled once.

    ## Example
    ```python
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_fn = torch.compile(opt.step)
    ```

    ## Use instead
    ```python
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3))
    ```
    and pass varying scalars to compiled functions as 0-d tensors.

    ## Fix safety
    Unsafe: `lr=torch.tensor(...)` changes what code that reads `param_group["lr"]` gets.
    No fix for loop variables.
    """

    code = "NM113"
    name = "varying-python-scalars"
    summary = "Python scalars that change per call of compiled code recompile it"
    requires = ("compile",)
    calls = frozenset({"compile"})
    nodes = (ast.Call,)
    INVALID = (
        Invalid(
            "import torch\n\ndef run(fn, x):\n    cfn = torch.compile(fn)\n    for step in range(10):\n        cfn(x, step)\n",
            line=6,
        ),
        Invalid(
            "import torch\n\nopt = torch.optim.SGD(params, lr=0.1)\nsched = torch.optim.lr_scheduler.StepLR(opt, 1)\n"
            "step = torch.compile(opt.step)\n",
            line=3,
            unsafe_fixed="import torch\n\nopt = torch.optim.SGD(params, lr=torch.tensor(0.1))\n"
            "sched = torch.optim.lr_scheduler.StepLR(opt, 1)\nstep = torch.compile(opt.step)\n",
        ),
    )
    VALID = (
        "import torch\n\ndef run(fn, xs):\n    cfn = torch.compile(fn)\n    for x in xs:\n        cfn(x)\n",
        "import torch\n\nopt = torch.optim.SGD(params, lr=torch.tensor(0.1))\nstep = torch.compile(opt.step)\n",
        "import torch\n\nopt = torch.optim.SGD(params, lr=0.1)\n",
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.compiled: set[str] = set()
        self.compiled_steps: set[str] = set()
        self.optimizers: list[tuple[ast.Call, str | None]] = []

    def visit_call(self, node: ast.Call, name: str) -> None:
        if self.ctx.qualify(node.func) != "torch.compile":
            return
        target = argument(node, 0, "model")
        if isinstance(target, ast.Attribute) and target.attr == "step":
            self.compiled_steps.add(dotted(target.value) or "")
        parent = self.ctx.parent()
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            assigned = dotted(parent.targets[0])
            if assigned:
                self.compiled.add(assigned)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        qualified = self.ctx.qualify(node.func)
        if qualified and qualified.startswith(OPTIMIZER_PREFIX) and qualified.count(".") == 2:
            parent = self.ctx.parent()
            assigned = (
                dotted(parent.targets[0])
                if isinstance(parent, ast.Assign) and len(parent.targets) == 1
                else None
            )
            self.optimizers.append((node, assigned))
            return
        called = dotted(node.func)
        if called is None or called not in self.compiled:
            return
        names = {
            name for loop in self.ctx.stack if isinstance(loop, ast.For) for name in counters(loop)
        }
        for arg in node.args:
            if isinstance(arg, ast.Name) and arg.id in names:
                self.report(
                    arg,
                    f"`{arg.id}` changes on every iteration and is passed as a Python number to compiled "
                    f"`{called}`: one recompile per value (8 at most, then eager); pass a 0-d tensor",
                )
                return

    def finish(self) -> None:
        if not self.compiled_steps:
            return
        changes_lr = (
            "lr_scheduler" in self.ctx.text
            or '["lr"]' in self.ctx.text
            or "['lr']" in self.ctx.text
        )
        torch_name = self.ctx.aliases.local_for("torch")
        for call, assigned in self.optimizers:
            if assigned not in self.compiled_steps and "" not in self.compiled_steps:
                continue
            lr = keyword(call, "lr")
            if lr is None or not isinstance(constant(lr.value), float):
                continue
            if not changes_lr:
                continue
            fix = None
            if torch_name:
                edit = self.ctx.replace(
                    lr.value, f"{torch_name}.tensor({self.ctx.source(lr.value)})"
                )
                fix = self.ctx.fix(edit, "make the learning rate a tensor", UNSAFE)
            self.report(
                call,
                "a float `lr` that a scheduler changes recompiles the compiled `optimizer.step` for every new "
                "value; pass `lr=torch.tensor(...)`",
                fix=fix,
            )
