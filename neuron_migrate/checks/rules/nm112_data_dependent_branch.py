"""NM112: Python control flow decided by tensor values (`if t.sum() > 0:`)."""

from __future__ import annotations

import ast

from neuron_migrate.checks import values
from neuron_migrate.checks.context import FileContext
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


def _seq_length(node: ast.AST) -> bool:
    """`cache.get_seq_length(...)` (not a cache's own `self.get_seq_length()`, whose kind its
    class decides)."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get_seq_length"
    ):
        return False
    receiver = node.func.value
    return not (isinstance(receiver, ast.Name) and receiver.id == "self")


def _dynamic_cache_only(test: ast.AST) -> bool:
    """`isinstance(cache, DynamicCache) and ...`: a dynamic cache counts its length in shapes."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return False
    for part in test.values:
        if (
            isinstance(part, ast.Call)
            and isinstance(part.func, ast.Name)
            and part.func.id == "isinstance"
            and len(part.args) == 2
            and "Dynamic" in ast.unparse(part.args[1])
        ):
            return True
    return False


def _holds_seq_length(value: ast.AST) -> bool:
    """`cache.get_seq_length()`, `... if cache is not None else 0`, `cache.get_seq_length() + n`."""
    if _seq_length(value):
        return True
    if isinstance(value, ast.IfExp):
        return _holds_seq_length(value.body) or _holds_seq_length(value.orelse)
    if isinstance(value, ast.BinOp):
        return _holds_seq_length(value.left) or _holds_seq_length(value.right)
    return False


class DataDependentBranch(Rule):
    """Flags `if`, `while`, `assert`, conditional expressions and `range()` driven by tensor values.

    ## What it does
    Finds conditions that read tensor values: reductions and predicates such as `.any()`,
    `.all()`, `.sum()`, `.max()`, `.item()`, `torch.equal`, `torch.isnan(...)`. Shapes
    (`.shape`, `.size()`, `len()`), `is None` tests and `isinstance` are static and fine.
    Also `for i in range(t.item())`, and comparisons of a KV cache's length
    (`past_key_values.get_seq_length()`, directly or through a local assigned from it), which
    transformers' static caches keep in a 0-d tensor.
    In the `forward` of a transformers experts class decorated with `@use_experts_implementation`,
    findings are information that names the setting: that per-expert loop runs only with
    `experts_implementation="eager"`; by default the decorator runs `grouped_mm` instead.

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
        # The cache's length used as a number, not to decide a branch.
        "import torch\n\ndef forward(ids, past_key_values):\n    start = past_key_values.get_seq_length()\n"
        "    if past_key_values is None:\n        return ids\n    return torch.arange(ids.shape[1], device=ids.device) + start\n",
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
        Invalid(
            "import torch\n\nclass Decoder(torch.nn.Module):\n    def forward(self, embeds, past_key_values=None):\n"
            "        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0\n"
            "        if past_length != 0:\n            embeds = embeds[:, -1:]\n        return embeds\n",
            line=6,
            severity="warning",
            message="get_seq_length",
        ),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0170",), fullgraph="unsupported"
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.lengths = "get_seq_length" in ctx.text  # a cache's length is read somewhere

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
            length = self._cache_length(test)
            if length is None:
                return
            for child in ast.walk(test):
                self.ctx.claimed.add(id(child))
            self.report(
                length,
                f"{kind} decided by the cache's length (`get_seq_length()`), a tensor with a static cache: "
                "data-dependent branching (GB0170), a graph split per branch, and a failure under "
                "fullgraph=True (with a sliding-window cache, a Python int: a recompile per length); "
                "decide from static shapes, or pass the decision in",
            )
            return
        for child in ast.walk(test):
            self.ctx.claimed.add(id(child))
        self.report(
            source,
            f"{kind} decided by tensor values: data-dependent branching (GB0170), a graph split per branch, "
            f"and a failure under fullgraph=True; {hint}",
        )

    def _cache_length(self, test: ast.AST) -> ast.AST | None:
        """`past_length != 0` where `past_length = past_key_values.get_seq_length()` (directly, or
        through a local assigned from it): in transformers' static caches the length is a 0-d tensor
        (`cumulative_length`), so comparing it is a branch on a tensor value."""
        if not self.lengths or _dynamic_cache_only(test):
            return None
        stack = [test]
        while stack:
            current = stack.pop()
            cls = current.__class__
            if cls is ast.BoolOp:
                stack.extend(current.values)  # type: ignore[attr-defined]
            elif cls is ast.UnaryOp:
                stack.append(current.operand)  # type: ignore[attr-defined]
            elif cls is ast.BinOp:
                stack.extend((current.left, current.right))  # type: ignore[attr-defined]
            elif cls is ast.Compare:
                if any(op.__class__ in (ast.Is, ast.IsNot, ast.In, ast.NotIn) for op in current.ops):  # type: ignore[attr-defined]
                    continue
                stack.extend((current.left, *current.comparators))  # type: ignore[attr-defined]
            elif _seq_length(current):
                return current
            elif cls is ast.Name and self.ctx.functions:
                made = self.ctx.values.assigned(current, self.ctx.functions[-1])  # type: ignore[arg-type]
                if made is not None and _holds_seq_length(made):
                    return current
        return None

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
