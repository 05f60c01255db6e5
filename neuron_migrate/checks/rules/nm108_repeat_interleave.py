"""NM108: `repeat_interleave` with tensor repeats and no `output_size`."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.rules.base import (
    Confirm,
    Invalid,
    Rule,
    argument,
    is_tensor_call,
    keyword,
)

BAD = """
import torch

def forward(x, counts):
    return torch.repeat_interleave(x, counts) * 2
"""
GOOD = """
import torch

def forward(x, counts):
    return torch.repeat_interleave(x, counts, output_size=6) * 2
"""
COUNT_NAMES = re.compile(r"(?i)\w*(counts?|lengths|lens|repeats|sizes|_per_\w+)")


class RepeatInterleave(Rule):
    """Flags `repeat_interleave` whose repeats are a tensor, without `output_size`.

    ## What it does
    Finds `torch.repeat_interleave(x, repeats)` and `x.repeat_interleave(repeats)` without
    `output_size=` when `repeats` is a tensor: a torch call, a tensor method result, or a name
    such as `counts`, `lengths` or `repeats` (local names only: attributes such as
    `self.repeats` usually hold integers). Integer repeats (`n_rep`, `self.groups`) are fine.

    ## Why
    The output length is `repeats.sum()`, a value in a tensor: a graph break (GB0036), or a
    dynamic shape Neuron rejects under `fullgraph=True`. Given `output_size` the shape is static.

    ## Example
    ```python
    expanded = torch.repeat_interleave(tokens, counts)
    ```

    ## Use instead
    ```python
    expanded = torch.repeat_interleave(tokens, counts, output_size=MAX_TOKENS)
    ```

    ## Fix safety
    No automatic fix: the total size is only known to the author.
    """

    code = "NM108"
    name = "repeat-interleave-output-size"
    summary = "`repeat_interleave` with tensor repeats and no `output_size`"
    contextual = True
    graph_breaks = ("GB0036",)
    calls = frozenset({"repeat_interleave"})
    VALID = (
        GOOD,
        "def forward(self, h):\n    return h.repeat_interleave(self.n_rep, dim=1)\n",
        "import torch\n\ndef forward(self, h):\n    return torch.repeat_interleave(h, repeats=self.repeats, dim=1)\n",
        "import torch\n\ndef forward(x, n_rep):\n    return torch.repeat_interleave(x, n_rep, dim=0)\n",
    )
    INVALID = (
        Invalid(BAD, line=5, severity="warning"),
        Invalid(
            "def forward(x, lengths):\n    return x.repeat_interleave(lengths, dim=0)\n", line=2
        ),
        Invalid(
            "import torch\n\ndef forward(x, m):\n    return x.repeat_interleave(m.sum(-1))\n",
            line=4,
        ),
        Invalid(
            "import torch\n\ndef forward(counts):\n    return torch.repeat_interleave(counts)\n",
            line=4,
        ),
    )
    CONFIRM = Confirm(
        BAD,
        GOOD,
        inputs="torch.randn(4), torch.tensor([1, 2, 0, 3])",
        breaks=("GB0036",),
        fullgraph="rejected",
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        if keyword(node, "output_size") is not None:
            return
        qualified = self.ctx.qualify(node.func)
        if qualified == "torch.repeat_interleave":
            positional = [a for a in node.args if not isinstance(a, ast.Starred)]
            repeats = argument(node, 1, "repeats") or (
                positional[0] if len(positional) == 1 and not node.keywords else None
            )
        elif qualified is None and isinstance(node.func, ast.Attribute):
            repeats = argument(node, 0, "repeats")
        else:
            return
        if repeats is None or not self._tensor(repeats):
            return
        self.report(
            node,
            "`repeat_interleave` with tensor repeats has a data-dependent length (GB0036, or a dynamic shape "
            "Neuron rejects); pass `output_size=`",
        )

    def _tensor(self, node: ast.AST) -> bool:
        if is_tensor_call(self.ctx, node):
            return True
        if isinstance(node, ast.Subscript):
            node = node.value
        # A local name such as `counts` or `lengths`; attributes (`self.repeats`) are usually config ints.
        return isinstance(node, ast.Name) and bool(COUNT_NAMES.fullmatch(node.id))
