"""NM114: in-place resizing (`resize_`, `resize_as_`), which Dynamo does not trace."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule

BAD = """
def forward(x):
    y = x.clone()
    y.resize_(4)
    return y * 2
"""
GOOD = """
def forward(x):
    return x[:4] * 2
"""


class InPlaceResize(Rule):
    """Flags `.resize_()`, `.resize_as_()` and `.sparse_resize_()` in hot code.

    ## What it does
    Finds in-place resize methods.

    ## Why
    Dynamo does not trace them: "Unsupported Tensor.resize_() call" (GB0126) and
    "resize_as_" (GB0127). The graph breaks, and `fullgraph=True` fails.

    ## Example
    ```python
    buffer.resize_(n, dim)
    ```

    ## Use instead
    Allocate a new tensor with a static shape, or slice a preallocated one:
    ```python
    buffer = buffer.new_zeros(MAX_N, dim)
    ```

    ## Fix safety
    No automatic fix.
    """

    code = "NM114"
    name = "in-place-resize"
    summary = "`resize_`/`resize_as_` are not traced by Dynamo"
    contextual = True
    graph_breaks = ("GB0126", "GB0127")
    calls = frozenset({"resize_", "resize_as_", "sparse_resize_", "sparse_resize_and_clear_"})
    VALID = (GOOD, "def forward(img):\n    return img.resize((4, 4))\n")
    INVALID = (
        Invalid(BAD, line=4, severity="warning"),
        Invalid("def forward(x, y):\n    x.resize_as_(y)\n    return x\n", line=2),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0126",), fullgraph="unsupported"
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        if (
            not isinstance(node.func, ast.Attribute)
            or self.ctx.qualify(node.func.value) is not None
        ):
            return
        gb = "GB0127" if name == "resize_as_" else "GB0126"
        self.report(
            node,
            f"`.{name}()` is not traced by Dynamo ({gb}): a graph break, and a failure under fullgraph=True; "
            "allocate a tensor with a static shape",
            start=self.ctx.method_start(node),
        )
