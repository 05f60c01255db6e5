"""NM104: `masked_select`, whose output size depends on the data."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule

BAD = """
import torch

def forward(x):
    return torch.masked_select(x, x > 0) * 2
"""
GOOD = """
import torch

def forward(x):
    return torch.where(x > 0, x, 0) * 2
"""


class MaskedSelect(Rule):
    """Flags `torch.masked_select(x, m)` and `x.masked_select(m)` in hot code.

    ## What it does
    Finds `masked_select` calls, as a function or a method.

    ## Why
    The result holds one element per `True` in the mask, so its size depends on the data: a
    graph break (GB0036), or an unbacked symbol that Neuron rejects under `fullgraph=True`.

    ## Example
    ```python
    positives = torch.masked_select(scores, labels == 1)
    ```

    ## Use instead
    ```python
    positives = torch.where(labels == 1, scores, 0)  # plus a mask-aware reduction
    ```

    ## Fix safety
    No automatic fix: the shape of the result changes.
    """

    code = "NM104"
    name = "masked-select"
    summary = "`masked_select` has a data-dependent output size"
    contextual = True
    graph_breaks = ("GB0036",)
    calls = frozenset({"masked_select"})
    VALID = (GOOD,)
    INVALID = (
        Invalid(BAD, line=5, severity="warning"),
        Invalid("def forward(x, m):\n    return x.masked_select(m)\n", line=2),
        Invalid(
            "import torch\n\ndef prepare_data(x, m):\n    return torch.masked_select(x, m)\n",
            severity="info",
        ),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0036",), fullgraph="rejected")

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified not in (None, "torch.masked_select") or (
            qualified is None and not isinstance(node.func, ast.Attribute)
        ):
            return
        self.report(
            node,
            "`masked_select` has a data-dependent output size: a graph break (GB0036), or a dynamic shape "
            "Neuron rejects; use `torch.where(mask, x, 0)` with a mask-aware reduction",
            start=self.ctx.method_start(node) if qualified is None else None,
        )
