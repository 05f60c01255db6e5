"""NM107: `one_hot` without `num_classes`, whose width comes from the data."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import SAFE, UNSAFE
from neuron_migrate.checks.rules.base import (
    Confirm,
    Invalid,
    Rule,
    bound_in_scope,
    constant,
    keyword,
    self_attribute_assigned,
)

BAD = """
import torch.nn.functional as F

def forward(t):
    return F.one_hot(t) * 2
"""
GOOD = """
import torch.nn.functional as F

def forward(t):
    return F.one_hot(t, num_classes=4) * 2
"""
LIKELY = (
    "num_classes",
    "n_classes",
    "num_labels",
    "num_class",
    "n_labels",
    "vocab_size",
    "num_experts",
)


class OneHotWithoutNumClasses(Rule):
    """Flags `F.one_hot(t)` without `num_classes` (or with `num_classes=-1`).

    ## What it does
    Finds `torch.nn.functional.one_hot` calls that leave the number of classes to the data.

    ## Why
    Without `num_classes` the width is `t.max() + 1`, read from the tensor: Dynamo breaks the
    graph (GB0246, "one_hot with data-dependent output shape") and `fullgraph=True` fails.

    ## Example
    ```python
    targets = F.one_hot(labels)
    ```

    ## Use instead
    ```python
    targets = F.one_hot(labels, num_classes=num_classes)
    ```

    ## Fix safety
    Safe when a `num_classes` variable is in scope (a parameter, a local or module-level
    assignment, or `self.num_classes` assigned in the class): the fix passes it. Unsafe with
    other likely names (`num_labels`, `n_classes`, `vocab_size`, `num_experts`, as variables
    or `self.` attributes): the author must confirm it is the class count. Note that the width
    then no longer shrinks when a batch lacks the top class, which is usually the intent.
    """

    code = "NM107"
    name = "one-hot-num-classes"
    summary = "`one_hot` without `num_classes` takes its width from the data"
    contextual = True
    graph_breaks = ("GB0246",)
    calls = frozenset({"one_hot"})
    VALID = (
        GOOD,
        "import torch.nn.functional as F\n\ndef forward(t, k):\n    return F.one_hot(t, k)\n",
    )
    INVALID = (
        Invalid(BAD, line=5, severity="warning"),
        Invalid(
            "import torch.nn.functional as F\n\ndef forward(t, num_classes):\n    return F.one_hot(t)\n",
            fixed="import torch.nn.functional as F\n\ndef forward(t, num_classes):\n    return F.one_hot(t, num_classes=num_classes)\n",
        ),
        Invalid(
            "import torch.nn.functional as F\n\nclass Head:\n    def __init__(self):\n        self.num_classes = 10\n\n"
            "    def forward(self, t):\n        return F.one_hot(t, num_classes=-1)\n",
            fixed="import torch.nn.functional as F\n\nclass Head:\n    def __init__(self):\n        self.num_classes = 10\n\n"
            "    def forward(self, t):\n        return F.one_hot(t, num_classes=self.num_classes)\n",
        ),
        Invalid(
            "import torch\n\ndef forward(t, num_labels):\n    return torch.nn.functional.one_hot(t)\n",
            fixed=None,
            unsafe_fixed="import torch\n\ndef forward(t, num_labels):\n    return torch.nn.functional.one_hot(t, num_classes=num_labels)\n",
        ),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.tensor([1, 0, 2, 3])", breaks=("GB0246",), fullgraph="unsupported"
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        if self.ctx.qualify(node.func) != "torch.nn.functional.one_hot":
            return
        given = keyword(node, "num_classes")
        positional = node.args[1] if len(node.args) > 1 else None
        value = given.value if given is not None else positional
        if value is not None and constant(value) != -1:
            return
        fix = None
        if not any(isinstance(a, ast.Starred) for a in node.args) and all(
            k.arg for k in node.keywords
        ):
            for candidate in LIKELY:
                source = None
                if bound_in_scope(self.ctx, candidate):
                    source = candidate
                elif self_attribute_assigned(self.ctx, candidate):
                    source = f"self.{candidate}"
                if source is not None:
                    safety = SAFE if candidate == "num_classes" else UNSAFE
                    edit = (
                        self.ctx.replace(positional, source)
                        if positional is not None and given is None
                        else self.ctx.set_keyword(node, "num_classes", source)
                    )
                    fix = self.ctx.fix(edit, f"pass `num_classes={source}`", safety)
                    break
        self.report(
            node,
            "`one_hot` without `num_classes` reads its width from the data: a graph break (GB0246) and a "
            "failure under fullgraph=True; pass `num_classes=`",
            fix=fix,
        )
