"""NM502: integer constants beyond the int32 range in tensor code."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Invalid, Rule

INT32 = 2**31
CALLS = frozenset(
    {
        "full",
        "full_like",
        "new_full",
        "tensor",
        "fill_",
        "masked_fill",
        "masked_fill_",
        "fill",
        "clamp",
        "clamp_",
        "where",
        "randint",
        "arange",
    }
)


def large(node: ast.AST) -> int | None:
    """The value of an int literal (or `2**n`, `1 << n`) outside the int32 range."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = large(node.operand)
        return -value if value is not None else None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value if abs(node.value) >= INT32 else None
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.right, ast.Constant)
    ):
        left, right = node.left.value, node.right.value
        if type(left) is int and type(right) is int and 0 <= right < 128:
            if isinstance(node.op, ast.Pow) and left == 2 and right >= 31:
                return 2**right
            if isinstance(node.op, ast.LShift) and left == 1 and right >= 31:
                return 1 << right
    return None


class Int64Range(Rule):
    """Points at integer constants that do not fit in int32, in tensor calls (informational).

    ## What it does
    Finds literals of 2**31 or more (also written `2**40` or `1 << 40`) passed to tensor
    creation and filling calls (`torch.full`, `torch.tensor`, `masked_fill`, `clamp`, ...).
    Informational: shown with `--min-severity info`.

    ## Why
    The Neuron compiler downcasts int64 to int32 in the compiled path, so such values overflow.
    The same applies to flattened index arithmetic past 2**31, which syntax cannot see.

    ## Example
    ```python
    ids = ids.masked_fill(pad, 2**40)
    ```

    ## Use instead
    ```python
    ids = ids.masked_fill(pad, torch.iinfo(torch.int32).max)
    ```

    ## Fix safety
    No automatic fix.
    """

    code = "NM502"
    name = "int64-range"
    summary = "integer constants beyond int32 (int64 is downcast on Neuron)"
    severity = Severity.INFO
    calls = CALLS
    VALID = ("import torch\n\nx = torch.full((2,), 2**20)\n",)
    INVALID = (
        Invalid("import torch\n\nx = torch.full((2,), 2**40)\n", severity="info"),
        Invalid("def forward(ids, pad):\n    return ids.masked_fill(pad, -9223372036854775808)\n"),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is not None and not qualified.startswith("torch."):
            return
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            value = large(arg)
            if value is not None:
                self.report(
                    arg,
                    f"{value} does not fit in int32; Neuron computes int64 as int32 in compiled code",
                )
                return
