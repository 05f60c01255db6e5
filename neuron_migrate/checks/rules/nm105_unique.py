"""NM105: `unique`, `unique_consecutive` and `bincount`, whose output size depends on the values."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule

BAD = """
import torch

def forward(t):
    return torch.bincount(t) * 2
"""
GOOD = """
import torch
import torch.nn.functional as F

def forward(t):
    return F.one_hot(t, num_classes=4).sum(0) * 2
"""
TORCH = frozenset({"torch.unique", "torch.unique_consecutive", "torch.bincount"})


class Unique(Rule):
    """Flags `torch.unique`, `unique_consecutive` and `bincount` (functions and methods) in hot code.

    ## What it does
    Finds calls of `unique`, `unique_consecutive` and `bincount` on tensors; NumPy and pandas
    functions (resolved through the imports) are left alone. Method calls such as `s.unique()`
    cannot be told apart from pandas by syntax, so outside hot code they are informational.

    ## Why
    The number of distinct values, or the largest value for `bincount`, decides the output
    size: a graph break (GB0036), or an unbacked symbol Neuron rejects under `fullgraph=True`.
    PyTorch/XLA's recompilation notes name `torch.unique` for the same reason.

    ## Example
    ```python
    counts = torch.bincount(labels)
    ```

    ## Use instead
    With the number of classes K known:
    ```python
    counts = torch.zeros(K, dtype=torch.long).scatter_add_(0, labels, torch.ones_like(labels))
    counts = F.one_hot(labels, num_classes=K).sum(0)
    ```

    ## Fix safety
    No automatic fix: K is only known to the author. (`bincount(t, minlength=K)` is still
    data-dependent: values above K - 1 grow the output.)
    """

    code = "NM105"
    name = "unique-bincount"
    summary = "`unique`/`bincount` have a value-dependent output size"
    contextual = True
    graph_breaks = ("GB0036",)
    calls = frozenset({"unique", "unique_consecutive", "bincount"})
    VALID = (
        GOOD,
        "import numpy as np\n\ndef forward(a):\n    return np.unique(a)\n",
    )
    INVALID = (
        Invalid(BAD, line=5, severity="warning"),
        Invalid(
            "import torch\n\ndef forward(t):\n    return torch.unique(t, return_counts=True)\n",
            line=4,
        ),
        Invalid("def forward(t):\n    return t.unique_consecutive()\n", line=2),
        Invalid(
            "import torch\n\ndef load_labels(df):\n    return df['label'].unique()\n",
            severity="info",
        ),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.tensor([1, 0, 2, 3])", breaks=("GB0036",), fullgraph="rejected"
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is None and not isinstance(node.func, ast.Attribute):
            return
        if qualified is not None and qualified not in TORCH:
            return
        shown = qualified or f".{name}()"
        self.report(
            node,
            f"`{shown}` has a value-dependent output size: a graph break (GB0036), or a dynamic shape Neuron "
            "rejects; with a known number of classes use `scatter_add_` or `one_hot(..., num_classes=K).sum(0)`",
            start=self.ctx.method_start(node) if qualified is None else None,
        )
