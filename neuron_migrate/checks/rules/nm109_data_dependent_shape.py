"""NM109: shapes and slice bounds read from tensor values (`x[: t.item()]`, `torch.zeros(n.item())`)."""

from __future__ import annotations

import ast

from neuron_migrate.checks import values
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, is_tensor_call

BAD = """
def forward(x, t):
    return x[: t.sum().item()] * 2
"""
GOOD = """
import torch

def forward(x, t):
    keep = torch.arange(8) < t.sum()
    return torch.where(keep, x, 0) * 2
"""
# Calls whose positional arguments (all, or from the given index on) are sizes.
SIZE_CALLS = {
    "zeros": 0,
    "ones": 0,
    "empty": 0,
    "full": 0,
    "rand": 0,
    "randn": 0,
    "arange": 0,
    "linspace": 2,
    "randint": 1,
    "view": 0,
    "reshape": 0,
    "expand": 0,
    "new_zeros": 0,
    "new_ones": 0,
    "new_empty": 0,
    "new_full": 0,
    "narrow": 2,
    "split": 1,
    "tensor_split": 1,
    "repeat": 0,
    "tile": 0,
    "unflatten": 1,
    "topk": 0,
    "eye": 0,
    "tril_indices": 0,
    "triu_indices": 0,
}
SIZE_KEYWORDS = frozenset(
    {"size", "shape", "length", "split_size_or_sections", "sections", "k", "end", "steps"}
)
HOST_VALUES = frozenset({"item", "tolist"})


def value_source(ctx, node: ast.AST, tensor_ok: bool) -> ast.AST | None:
    """The sub-expression that reads a tensor value into a size, if any."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Call):
            func = current.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in HOST_VALUES
                and ctx.qualify(func.value) is None
            ):
                return current
            if (
                isinstance(func, ast.Name)
                and func.id in ("int", "float", "round")
                and len(current.args) == 1
                and is_tensor_call(ctx, current.args[0])
            ):
                return current
            if tensor_ok and is_tensor_call(ctx, current):
                return current
            if isinstance(func, ast.Name) and func.id == "len":
                continue  # a length is a shape, known when tracing
            if isinstance(func, ast.Name) and func.id in ("min", "max"):
                stack.extend(current.args)
                continue
            stack.extend(current.args)
            continue
        if isinstance(current, ast.Name):
            kind = ctx.kind(current)
            if kind == values.READ or (tensor_ok and kind in values.DEVICE_TENSORS):
                return current  # a local name that holds a value read from a tensor
            continue
        if isinstance(current, ast.Attribute) and current.attr in ("shape", "ndim"):
            continue
        if isinstance(
            current,
            ast.BinOp | ast.UnaryOp | ast.Tuple | ast.List | ast.Starred | ast.Slice | ast.IfExp,
        ):
            stack.extend(ast.iter_child_nodes(current))
    return None


class DataDependentShape(Rule):
    """Flags sizes and slice bounds computed from tensor values.

    ## What it does
    Finds `.item()`, `.tolist()` and `int(<tensor op>)` feeding a slice bound (`x[: t.item()]`),
    a shape argument of a factory or view (`torch.zeros(n.item())`, `x.view(n.item(), -1)`,
    `torch.arange(int(t.sum()))`) or split sizes (`torch.split(x, t.tolist())`), and tensors
    used directly as slice bounds (`x[: t.sum()]`).

    ## Why
    The shape then comes from a value in a tensor. Dynamo breaks the graph to read it (GB0124
    for `.item()`, GB0038 for a tensor slice bound); with `fullgraph=True` the size becomes an
    unbacked symbol (`u0`) and Neuron rejects the graph. PyTorch/XLA documented the same as a
    source of recompilation.

    ## Example
    ```python
    prompt = input_ids[:, : lengths.max().item()]
    ```

    ## Use instead
    Use a fixed maximum and a mask:
    ```python
    prompt = input_ids[:, :MAX_LEN] * (torch.arange(MAX_LEN) < lengths[:, None])
    ```

    ## Fix safety
    No automatic fix: the fixed maximum is only known to the author.
    """

    code = "NM109"
    name = "data-dependent-shape"
    summary = "a shape or slice bound read from tensor values"
    contextual = True
    graph_breaks = ("GB0038", "GB0124")
    calls = frozenset(SIZE_CALLS)
    nodes = (ast.Subscript,)
    VALID = (
        GOOD,
        "def forward(x):\n    return x.view(x.size(0), -1)[:, : x.shape[1] // 2]\n",
        "import torch\n\ndef forward(x, n):\n    return torch.zeros(n, len(x))\n",
        "import torch\n\ndef forward(logits: torch.Tensor):\n    return torch.arange(len(logits), device=logits.device)\n",
    )
    INVALID = (
        Invalid(BAD, line=3, severity="warning"),
        Invalid("import torch\n\ndef forward(t):\n    return torch.arange(int(t.sum()))\n", line=4),
        Invalid("import torch\n\ndef forward(x, n):\n    return x.view(n.item(), -1)\n", line=4),
        Invalid(
            "import torch\n\ndef forward(x, t):\n    return torch.split(x, t.tolist())\n", line=4
        ),
        Invalid("def forward(x, t):\n    return x[: t.sum()]\n", line=2),
        Invalid("import torch\n\ndef collate(x, n):\n    return x[: n.item()]\n", severity="info"),
        Invalid(
            "import torch\n\ndef forward(scores, lengths):\n    k = int(lengths.max())\n"
            "    return torch.topk(scores, k).values\n",
            line=5,
        ),
        Invalid(
            "def forward(x, lengths):\n    longest = lengths.max().item()\n    return x[:, :longest]\n",
            line=3,
        ),
    )
    CONFIRM = Confirm(
        BAD,
        GOOD,
        inputs="torch.randn(8), torch.tensor([1, 0, 2, 3])",
        breaks=("GB0124",),
        fullgraph="rejected",
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        start = SIZE_CALLS[name]
        qualified = self.ctx.qualify(node.func)
        if qualified is not None and not qualified.startswith("torch."):
            return
        if qualified is None and not isinstance(node.func, ast.Attribute):
            return
        sizes = [a for a in node.args[start:]] + [
            k.value for k in node.keywords if k.arg in SIZE_KEYWORDS
        ]
        for size in sizes:
            source = value_source(self.ctx, size, tensor_ok=name == "arange")
            if source is not None:
                self._claim(source)
                self.report(
                    source,
                    f"`{name}` gets a size read from tensor values: a graph break (GB0124) or a dynamic shape Neuron "
                    "rejects; use a fixed maximum size and a mask",
                )
                return

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Subscript)
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        for part in parts:
            if not isinstance(part, ast.Slice):
                continue
            for bound in (part.lower, part.upper, part.step):
                if bound is None:
                    continue
                source = value_source(self.ctx, bound, tensor_ok=True)
                if source is not None:
                    self._claim(source)
                    self.report(
                        source,
                        "a slice bound read from tensor values makes the shape data-dependent: a graph break "
                        "(GB0038/GB0124) or a dynamic shape Neuron rejects; slice to a fixed maximum and mask",
                    )
                    return

    def _claim(self, node: ast.AST) -> None:
        for child in ast.walk(node):
            self.ctx.claimed.add(id(child))
