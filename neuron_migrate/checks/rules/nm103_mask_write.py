"""NM103: assigning through a boolean mask (`x[mask] = v`), which Neuron's compiler refuses."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import SAFE, UNSAFE, Severity
from neuron_migrate.checks.rules.base import (
    Confirm,
    Invalid,
    Rule,
    mask_kind,
    numpy_value,
    plain_reference,
    scalar_literal,
    trace_time_branch,
)

BAD = """
def forward(x):
    y = x * 2
    y[y < 0] = 0
    return y
"""
GOOD = """
def forward(x):
    y = x * 2
    y.masked_fill_(y < 0, 0)
    return y
"""


class MaskWrite(Rule):
    """Flags `x[mask] = value` and `x[mask] += value` with a boolean mask.

    ## What it does
    Finds assignments whose target is indexed by a boolean tensor (a comparison, `.bool()`,
    `isnan`, or a name such as `mask`). An error in `forward`, compiled functions and
    training loops; informational in data preparation.

    ## Why
    A boolean-index write is `aten.index_put` with a bool index. Neuron's compiler refuses it:
    "Boolean index_put is not supported in torch.compile on Neuron. Boolean indices require
    nonzero() which produces dynamic shapes."

    ## Example
    ```python
    scores[scores < threshold] = float("-inf")
    ```

    Under an `if` whose test reads only Python values fixed when the code is traced (attributes
    of `self` or of a configuration, `is None` tests), the message says the write is compiled
    only when that test holds: Dynamo evaluates it once and compiles only the branch taken. When
    the test compares an id with a vocabulary size (`if self.config.image_token_id >=
    self.vocab_size:`, a guard for out-of-range ids that real checkpoints do not have), the
    finding is information.

    ## Use instead
    ```python
    scores.masked_fill_(scores < threshold, float("-inf"))
    ```

    ## Fix safety
    Safe when the mask is made from the target itself (`x[x < t]`, `x[x.isnan()]`) and the
    value is a number literal, `float("inf")`, `math.inf` or `torch.finfo(...).min`:
    `masked_fill_` writes the same values in place, so aliases see the change as before.
    Unsafe when the mask comes from elsewhere: indexing lines a shorter mask up with the
    tensor's leading dimensions, `masked_fill_` broadcasts it from the trailing ones (a
    `(B, T)` mask on a `(B, T, H)` tensor). Unsafe too when the mask is only a name (it may hold
    integer indices) or the value is a variable (it must be a scalar or a 0-d tensor for
    `masked_fill_`). No fix for augmented assignments or multi-dimensional indices. NumPy
    arrays and CPU copies are not flagged.
    """

    code = "NM103"
    name = "boolean-mask-write"
    summary = "`x[mask] = v` is a boolean index_put, refused by the Neuron compiler"
    severity = Severity.ERROR
    contextual = True
    nodes = (ast.Assign, ast.AugAssign)
    VALID = (
        GOOD,
        "def forward(x, idx):\n    x[idx] = 0\n    x[:, 0] = 1\n    return x\n",
        "def forward(x):\n    y = x[x > 0]\n    return y\n",  # a read: NM102
        "import numpy as np\n\ndef forward(n, length):\n    idx = np.random.randint(0, 9, size=(n, 4))\n"
        "    idx = idx + np.arange(4)\n    if idx.max() > length - 1:\n        idx[idx > length - 1] = length - 1\n"
        "    return idx\n",
    )
    INVALID = (
        Invalid(BAD, line=4, severity="error", fixed=GOOD),
        Invalid(
            "def forward(s, t):\n    s[s < t] = float('-inf')\n    return s\n",
            fixed="def forward(s, t):\n    s.masked_fill_(s < t, float('-inf'))\n    return s\n",
        ),
        Invalid(
            "def forward(x, mask):\n    x[mask] = 0.0\n",
            fixed=None,
            unsafe_fixed="def forward(x, mask):\n    x.masked_fill_(mask, 0.0)\n",
        ),
        Invalid(
            "def forward(x, value):\n    x[x.isnan()] = value\n",
            unsafe_fixed="def forward(x, value):\n    x.masked_fill_(x.isnan(), value)\n",
        ),
        Invalid("def forward(x):\n    x[x > 1] += 1\n", line=2),
        Invalid(
            "class Model:\n    def forward(self, input_ids):\n"
            "        if input_ids is not None and self.config.image_token_id >= self.vocab_size:\n"
            "            ids = input_ids.clone()\n            ids[input_ids == self.config.image_token_id] = 0\n"
            "        return ids\n",
            line=5,
            severity="info",
            message="only when `self.config.image_token_id >= self.vocab_size`",
        ),
        Invalid(
            "class Model:\n    def forward(self, x):\n        if self.config.clip_negative:\n"
            "            x[x < 0] = 0\n        return x\n",
            line=4,
            severity="error",
            message="only when `self.config.clip_negative`",
            fixed="class Model:\n    def forward(self, x):\n        if self.config.clip_negative:\n"
            "            x.masked_fill_(x < 0, 0)\n        return x\n",
        ),
        Invalid(
            "import torch\n\ndef forward(features, idx):\n"
            "    keep = torch.tensor(idx, dtype=torch.bool)\n    features[keep] = 0\n    return features\n",
            line=5,
            fixed=None,
            unsafe_fixed="import torch\n\ndef forward(features, idx):\n"
            "    keep = torch.tensor(idx, dtype=torch.bool)\n    features.masked_fill_(keep, 0)\n    return features\n",
        ),
        Invalid("def forward(x, mask):\n    x[:, mask] = 0\n", line=2),
        Invalid(
            "import torch\n\ndef collate(batch):\n    batch[batch < 0] = 0\n    return batch\n",
            severity="info",
            fixed="import torch\n\ndef collate(batch):\n    batch.masked_fill_(batch < 0, 0)\n    return batch\n",
        ),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", fullgraph="rejected", partial="rejected")

    def _mask_of(self, target: ast.AST, mask: ast.AST) -> bool:
        """The mask is made from the target itself (`x[x < 0]`, `x[x.isnan()]`), so it has the
        target's shape: `masked_fill_` broadcasts a mask from the right, where indexing lines a
        shorter mask up from the left (a `(B, T)` mask on a `(B, T, H)` tensor)."""
        ctx = self.ctx
        name = ctx.source(target)
        while isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert):
            mask = mask.operand
        if isinstance(mask, ast.Compare):
            return ctx.source(mask.left) == name and all(
                scalar_literal(ctx, c) or plain_reference(c) for c in mask.comparators
            )
        if isinstance(mask, ast.Call):
            func = mask.func
            if isinstance(func, ast.Attribute) and not mask.args and ctx.source(func.value) == name:
                return True
            return len(mask.args) == 1 and ctx.source(mask.args[0]) == name
        return False

    def visit(self, node: ast.AST) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
        for target in targets:
            if not isinstance(target, ast.Subscript):
                continue
            index = target.slice
            parts = index.elts if isinstance(index, ast.Tuple) else [index]
            kinds = [mask_kind(self.ctx, p) for p in parts]
            if "certain" not in kinds and "named" not in kinds:
                continue
            if numpy_value(self.ctx, target.value):
                continue  # NumPy (or a CPU copy): written on the host
            fix = None
            value = node.value  # type: ignore[attr-defined]
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and not isinstance(index, ast.Tuple)
                and plain_reference(target.value)
            ):
                scalar = scalar_literal(self.ctx, value)
                if scalar or plain_reference(value):
                    safe = scalar and kinds[0] == "certain" and self._mask_of(target.value, index)
                    ctx = self.ctx
                    text = f"{ctx.source(target.value)}.masked_fill_({ctx.source(index)}, {ctx.source(value)})"
                    fix = ctx.fix(
                        ctx.replace(node, text), "use `masked_fill_`", SAFE if safe else UNSAFE
                    )
            message = (
                "assigning through a boolean mask is a boolean `index_put`, which Neuron's compiler refuses; "
                "use `x.masked_fill_(mask, value)` or `torch.where(mask, value, x)`"
            )
            severity = None
            branch = trace_time_branch(self.ctx)
            if branch is not None:
                message += f"; only when `{branch.condition}` (decided when traced: otherwise never compiled)"
                if branch.out_of_range_guard:
                    severity = Severity.INFO  # a guard for ids that real configurations keep in range
            self.report(node, message, fix=fix, severity=severity)
