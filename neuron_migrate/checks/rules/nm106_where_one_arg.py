"""NM106: single-argument `torch.where(cond)`, which is `nonzero(as_tuple=True)`."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule

BAD = """
import torch

def forward(x):
    return torch.where(x > 0)[0] * 2
"""
GOOD = """
import torch

def forward(x):
    return torch.where(x > 0, x, 0) * 2
"""


class WhereOneArgument(Rule):
    """Flags `torch.where(condition)` with a single argument.

    ## What it does
    Finds `torch.where` called with one argument. The three-argument form is fine.
    In the `forward` of a transformers experts class decorated with `@use_experts_implementation`,
    findings are information that names the setting: that per-expert loop runs only with
    `experts_implementation="eager"`; by default the decorator runs `grouped_mm` instead.

    ## Why
    With one argument `torch.where(c)` is `torch.nonzero(c, as_tuple=True)`: index tensors
    whose length depends on the data. A graph break (GB0036), or a dynamic shape Neuron
    rejects under `fullgraph=True`.

    ## Example
    ```python
    rows, cols = torch.where(attention > 0.5)
    ```

    ## Use instead
    ```python
    kept = torch.where(attention > 0.5, attention, 0)
    ```

    ## Fix safety
    No automatic fix: the result is a different kind of value.
    """

    code = "NM106"
    name = "where-one-argument"
    summary = "single-argument `torch.where(cond)` is `nonzero`"
    contextual = True
    graph_breaks = ("GB0036",)
    calls = frozenset({"where"})
    VALID = (GOOD, "import numpy as np\n\ndef forward(a):\n    return np.where(a)\n")
    INVALID = (
        Invalid(BAD, line=5, severity="warning"),
        Invalid("from torch import where\n\ndef forward(x):\n    return where(x)\n", line=4),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0036",), fullgraph="rejected")

    def visit_call(self, node: ast.Call, name: str) -> None:
        if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
            return
        if self.ctx.qualify(node.func) != "torch.where":
            return
        self.report(
            node,
            "`torch.where(cond)` with one argument is `nonzero(as_tuple=True)`: a data-dependent size "
            "(GB0036); use the three-argument `torch.where(cond, a, b)`",
        )
