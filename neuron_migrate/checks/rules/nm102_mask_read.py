"""NM102: reading through a boolean mask (`x[mask]`), whose result size depends on the data."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, mask_kind

BAD = """
def forward(x):
    return x[x > 0].sum() * 2
"""
GOOD = """
import torch

def forward(x):
    return torch.where(x > 0, x, 0).sum() * 2
"""


class MaskRead(Rule):
    """Flags boolean-mask indexing such as `x[x > 0]` or `x[mask]` in hot code.

    ## What it does
    Finds subscripts whose index is a boolean tensor: a comparison (`x[x > 0]`), `.bool()`,
    `isnan`/`isinf`, `~`/`&`/`|` combinations of those, or a name that says it is a mask
    (`mask`, `keep`, `valid`; reported with that caveat). Assignments through a mask are NM103.

    ## Why
    `x[mask]` is `aten.index` with a boolean index, which is `nonzero` underneath: the result
    has as many elements as the mask has `True` values. Dynamo breaks the graph there (GB0036);
    under `fullgraph=True` the size becomes an unbacked symbol and Neuron rejects the graph.

    ## Example
    ```python
    loss = per_token[labels != -100].mean()
    ```

    ## Use instead
    Reduce with the mask instead of selecting with it:
    ```python
    valid = labels != -100
    loss = (per_token * valid).sum() / valid.sum()
    ```

    ## Fix safety
    No automatic fix: the result has a different shape, so the code after it must change too.
    """

    code = "NM102"
    name = "boolean-mask-read"
    summary = "`x[mask]` has a data-dependent output size"
    contextual = True
    graph_breaks = ("GB0036",)
    nodes = (ast.Subscript,)
    VALID = (
        GOOD,
        "def forward(x, idx):\n    return x[idx] + x[:, 0] + x[..., None]\n",
        "def forward(batch):\n    return batch['attention_mask']\n",
        "def forward(x, mask):\n    x[mask] = 0\n    return x\n",  # a write: NM103
    )
    INVALID = (
        Invalid(BAD, line=3, severity="warning"),
        Invalid("def forward(x, y):\n    return x[(x > 0) & ~y.isnan()]\n", line=2),
        Invalid(
            "def forward(x, mask):\n    return x[mask]\n", line=2, message="judging by its name"
        ),
        Invalid("def forward(x, keep):\n    return x[:, keep.bool()]\n", line=2),
        Invalid(
            "import torch\n\ndef collate(batch):\n    return batch[batch > 0]\n",
            line=4,
            severity="info",
        ),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0036",), fullgraph="rejected")

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Subscript)
        if not isinstance(node.ctx, ast.Load):
            return
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        kinds = [mask_kind(self.ctx, part) for part in parts]
        if "certain" in kinds:
            hedge = ""
        elif "named" in kinds:
            hedge = " (judging by its name)"
        else:
            return
        self.report(
            node,
            f"indexing with a boolean mask{hedge} gives a data-dependent size: a graph break (GB0036), or a "
            "dynamic shape Neuron rejects; use `torch.where(mask, x, 0)` or a masked reduction",
        )
