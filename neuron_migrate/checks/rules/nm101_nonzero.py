"""NM101: `nonzero` / `argwhere`, whose output size depends on the data."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule

BAD = """
import torch

def forward(x):
    return torch.nonzero(x > 0) * 2
"""
GOOD = """
import torch

def forward(x):
    return torch.where(x > 0, x, 0) * 2
"""
TORCH = frozenset(
    {"torch.nonzero", "torch.argwhere", "torch.Tensor.nonzero", "torch.Tensor.argwhere"}
)


class Nonzero(Rule):
    """Flags `torch.nonzero`, `x.nonzero()` and `torch.argwhere` in hot code.

    ## What it does
    Finds calls whose result has one row per nonzero element: `torch.nonzero(x)`,
    `x.nonzero()`, `nonzero(as_tuple=True)` and `torch.argwhere(x)`. Inside `forward`, compiled
    functions and training loops they are warnings; in data preparation they are informational.
    In the `forward` of a transformers experts class decorated with `@use_experts_implementation`,
    findings are information that names the setting: that per-expert loop runs only with
    `experts_implementation="eager"`; by default the decorator runs `grouped_mm` instead.

    ## Why
    The output shape depends on the values in the tensor. With `fullgraph=False` Dynamo breaks
    the graph there (GB0036, "Dynamic shape operator"): extra graphs and a host round-trip every
    step. With `fullgraph=True`, the setting Neuron recommends, Dynamo captures the size as an
    unbacked symbol (`u0`) instead, and the Neuron backend rejects the dynamic graph.

    ## Example
    ```python
    idx = torch.nonzero(mask)
    out = x[idx[:, 0]].sum()
    ```

    ## Use instead
    Keep the mask and compute with it, or bound the size:
    ```python
    out = torch.where(mask, x, 0).sum()
    idx = torch.nonzero_static(mask, size=K, fill_value=-1)  # K: a known upper bound
    ```

    ## Fix safety
    No automatic fix: `nonzero_static` needs an upper bound only the author knows.
    """

    code = "NM101"
    name = "nonzero"
    summary = "`nonzero`/`argwhere` have a data-dependent output size"
    contextual = True
    graph_breaks = ("GB0036",)
    calls = frozenset({"nonzero", "argwhere"})
    VALID = (
        GOOD,
        "import torch\n\ndef forward(m):\n    return torch.nonzero_static(m, size=4, fill_value=-1)\n",
        "import numpy as np\n\ndef forward(a):\n    return np.nonzero(a)\n",
    )
    INVALID = (
        Invalid(BAD, line=5, severity="warning"),
        Invalid(
            "def forward(self, x):\n    return x.nonzero(as_tuple=True)\n",
            line=2,
            severity="warning",
        ),
        Invalid("import torch\n\ndef forward(x):\n    return torch.argwhere(x)\n", line=4),
        Invalid(
            "import torch\n\ndef collate_fn(batch):\n    return torch.nonzero(batch)\n",
            line=4,
            severity="info",
            message="`torch.nonzero`",
        ),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0036",), fullgraph="rejected")

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is None and not isinstance(node.func, ast.Attribute):
            return  # a bare `nonzero(...)` that is not torch's
        if qualified is not None and qualified not in TORCH:
            return  # numpy and friends run on the host
        shown = qualified or f".{name}()"
        self.report(
            node,
            f"`{shown}` has a data-dependent output size: a graph break (GB0036), or a dynamic shape "
            "Neuron rejects under fullgraph=True; keep the mask (`torch.where`) or use `torch.nonzero_static`",
            start=self.ctx.method_start(node) if qualified is None else None,
        )
