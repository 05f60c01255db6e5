"""NM112: Python control flow decided by tensor values (`if t.sum() > 0:`)."""

from __future__ import annotations

import ast

from neuron_migrate.checks import values
from neuron_migrate.checks.rules.base import (
    Confirm,
    Invalid,
    Rule,
    depends_on_values,
    tensor_truth,
)

BAD = """
def forward(x):
    if x.sum() > 0:
        return x * 2
    return x
"""
GOOD = """
import torch

def forward(x):
    return torch.where(x.sum() > 0, x * 2, x)
"""


class DataDependentBranch(Rule):
    """Flags `if`, `while`, `assert`, conditional expressions and `range()` driven by tensor values.

    ## What it does
    Finds conditions that read tensor values: reductions and predicates such as `.any()`,
    `.all()`, `.sum()`, `.max()`, `.item()`, `torch.equal`, `torch.isnan(...)`. Shapes
    (`.shape`, `.size()`, `len()`), `is None` tests and `isinstance` are static and fine.
    Also `for i in range(t.item())`.

    ## Why
    Dynamo cannot trace a jump on a tensor: "Data-dependent branching" (GB0170). Without
    `fullgraph` the graph splits and every branch combination compiles separately; with
    `fullgraph=True` compilation fails.

    ## Example
    ```python
    if (attention_mask == 0).any():
        scores = scores.masked_fill(attention_mask == 0, -1e9)
    ```

    ## Use instead
    Make it branchless, or use `torch.cond`; turn asserts into `torch._check(...)`:
    ```python
    scores = scores.masked_fill(attention_mask == 0, -1e9)
    ```

    ## Fix safety
    No automatic fix: rewriting a branch as `torch.where` computes both sides.
    """

    code = "NM112"
    name = "data-dependent-branch"
    summary = "`if`/`while`/`assert` on tensor values"
    contextual = True
    graph_breaks = ("GB0170",)
    nodes = (ast.If, ast.While, ast.Assert, ast.IfExp, ast.For, ast.comprehension)
    VALID = (
        GOOD,
        "def forward(self, x, mask=None):\n    if mask is not None and x.shape[0] > 1 and self.training:\n        x = x * mask\n    return x\n",
        "import torch\n\ndef forward(x):\n    if torch.jit.is_tracing() or len(x) == 0:\n        return x\n    return x\n",
        "import numpy as np\n\ndef forward(n):\n    idx = np.arange(n)\n    if idx.max() > 3:\n        n = 3\n    return n\n",
    )
    INVALID = (
        Invalid(BAD, line=3, severity="warning"),
        Invalid(
            "def forward(x, m):\n    while (m != 0).any():\n        m = m - 1\n    return m\n",
            line=2,
        ),
        Invalid("def forward(x):\n    assert (x >= 0).all()\n    return x\n", line=2),
        Invalid(
            "import torch\n\ndef forward(x, y):\n    return x if torch.equal(x, y) else y\n", line=4
        ),
        Invalid(
            "def forward(x, n):\n    for i in range(n.item()):\n        x = x * 2\n    return x\n",
            line=2,
        ),
        Invalid(
            "import torch\n\ndef load(x):\n    if x.max() > 1:\n        x = x / 255\n    return x\n",
            severity="info",
        ),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0170",), fullgraph="unsupported"
    )

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.For):
            if self._ragged_loop(node.iter):
                return
            iterator = node.iter
            if not (
                isinstance(iterator, ast.Call)
                and isinstance(iterator.func, ast.Name)
                and iterator.func.id == "range"
            ):
                return
            self._branch(iterator, "`range()` bound", "use `torch.where` or `torch.cond`")
            return
        if isinstance(node, ast.comprehension):
            if self._ragged_loop(node.iter):
                return
            for condition in node.ifs:
                self._branch(condition, "comprehension filter", "keep every element and mask")
            return
        kind = {
            ast.If: "`if`",
            ast.While: "`while`",
            ast.Assert: "`assert`",
            ast.IfExp: "conditional expression",
        }[type(node)]
        hint = (
            "use `torch._check(...)` or drop it"
            if isinstance(node, ast.Assert)
            else "use `torch.where` or `torch.cond`"
        )
        self._branch(node.test, kind, hint)  # type: ignore[attr-defined]

    def _branch(self, test: ast.AST, kind: str, hint: str) -> None:
        source = depends_on_values(self.ctx, test) or tensor_truth(self.ctx, test)
        if source is None:
            return
        for child in ast.walk(test):
            self.ctx.claimed.add(id(child))
        self.report(
            source,
            f"{kind} decided by tensor values: data-dependent branching (GB0170), a graph split per branch, "
            f"and a failure under fullgraph=True; {hint}",
        )

    def _ragged_loop(self, iterator: ast.AST) -> bool:
        """`for expert_idx in expert_hit:` over a tensor whose length its values decide."""
        if self.ctx.kind(iterator) != values.RAGGED:
            return False
        shown = self.ctx.source(iterator)
        self.report(
            iterator,
            f"a loop over `{shown}`, whose length depends on tensor values (`nonzero`, `unique`, a mask): "
            "Dynamo cannot unroll it, a failure under fullgraph=True; loop over a fixed range and mask",
        )
        return True
