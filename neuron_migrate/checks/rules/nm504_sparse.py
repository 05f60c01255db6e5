"""NM504: sparse tensors, which Dynamo does not compile and Neuron does not document."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, constant

BAD = """
def forward(x):
    return x.to_sparse() * 2
"""
GOOD = """
def forward(x):
    return x * 2
"""
CONVERSIONS = frozenset(
    {
        "to_sparse",
        "to_sparse_coo",
        "to_sparse_csr",
        "to_sparse_csc",
        "to_sparse_bsr",
        "to_sparse_bsc",
    }
)
CREATION = frozenset(
    {
        "sparse_coo_tensor",
        "sparse_csr_tensor",
        "sparse_csc_tensor",
        "sparse_bsr_tensor",
        "sparse_compressed_tensor",
    }
)
EMBEDDINGS = frozenset(
    {
        "torch.nn.Embedding",
        "torch.nn.EmbeddingBag",
        "torch.nn.functional.embedding",
        "torch.nn.functional.embedding_bag",
        "torch.nn.Embedding.from_pretrained",
    }
)


class SparseTensors(Rule):
    """Flags sparse tensors: conversions, creation, `torch.sparse.*`, sparse layouts,
    `Embedding(sparse=True)` and `torch.optim.SparseAdam`.

    ## What it does
    Finds `.to_sparse()` and friends, `torch.sparse_coo_tensor(...)`, `torch.sparse.*` calls,
    `layout=torch.sparse_*`, `sparse=True` on embeddings, and `SparseAdam`.

    ## Why
    Dynamo refuses sparse tensors ("Attempted to wrap sparse Tensor with VariableTracker",
    GB0277; "Sparse tensor creation not supported", GB0374); Neuron documents no sparse support.
    Sparse embedding gradients also need `SparseAdam`, which goes with them.

    ## Example
    ```python
    emb = nn.Embedding(vocab, dim, sparse=True)
    opt = torch.optim.SparseAdam(emb.parameters())
    ```

    ## Use instead
    ```python
    emb = nn.Embedding(vocab, dim)
    opt = torch.optim.AdamW(emb.parameters())
    ```

    ## Fix safety
    Safe for `sparse=True` on embeddings, which becomes `sparse=False`: the forward pass is the
    same and gradients become dense (an optimizer that requires sparse gradients, such as
    `SparseAdam`, is flagged too). No fix for the rest.
    """

    code = "NM504"
    name = "sparse-tensors"
    summary = "sparse tensors are not compiled (Dynamo) or supported (Neuron)"
    contextual = True
    quiet_when_cold = False  # sparse layouts fail wherever they are made
    graph_breaks = ("GB0277", "GB0374", "GB0015")
    calls = frozenset({*CONVERSIONS, *CREATION, "SparseAdam"})
    keywords = frozenset({"sparse", "layout"})
    attributes = frozenset({"sparse"})
    VALID = (GOOD, "import torch.nn as nn\n\nemb = nn.Embedding(10, 4, sparse=False)\n")
    INVALID = (
        Invalid(BAD, line=3, severity="warning"),
        Invalid(
            "import torch.nn as nn\n\nemb = nn.Embedding(10, 4, sparse=True)\n",
            fixed="import torch.nn as nn\n\nemb = nn.Embedding(10, 4, sparse=False)\n",
        ),
        Invalid("import torch\n\nopt = torch.optim.SparseAdam(params)\n", line=3, severity="error"),
        Invalid(
            "import torch\n\ndef forward(i, v):\n    return torch.sparse_coo_tensor(i, v, (4, 4))\n",
            line=4,
        ),
        Invalid("import torch\n\ndef forward(a, b):\n    return torch.sparse.mm(a, b)\n", line=4),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0277",), fullgraph="unsupported"
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if name == "SparseAdam":
            if qualified == "torch.optim.SparseAdam":
                self.report(
                    node,
                    "`SparseAdam` needs sparse gradients, which Neuron does not support; use a dense optimizer",
                    severity=Severity.ERROR,
                )
            return
        if name in CONVERSIONS:
            if qualified is not None or not isinstance(node.func, ast.Attribute):
                return
            self.report(
                node,
                f"`.{name}()` makes a sparse tensor: Dynamo refuses it (GB0277) and Neuron does not support it",
                start=self.ctx.method_start(node),
            )
            return
        if qualified == f"torch.{name}":
            self.report(
                node,
                f"`{qualified}` creates a sparse tensor: Dynamo refuses it (GB0374) and Neuron does not support it",
            )

    def visit_attribute(self, node: ast.Attribute) -> None:
        parent = self.ctx.parent()
        if (
            self.ctx.qualify(node) == "torch.sparse"
            and isinstance(parent, ast.Attribute)
            and isinstance(self.ctx.parent(2), ast.Call)
        ):
            self.report(
                parent,
                f"`torch.sparse.{parent.attr}` works on sparse tensors, which Dynamo refuses and Neuron does not support",
            )

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        if keyword.arg == "layout":
            qualified = self.ctx.qualify(keyword.value) or ""
            if qualified.startswith("torch.sparse_"):
                self.report(
                    keyword,
                    f"`layout={qualified}` makes a sparse tensor, which Dynamo refuses and Neuron does not support",
                )
            return
        if constant(keyword.value) is not True or self.ctx.qualify(call.func) not in EMBEDDINGS:
            return
        fix = self.ctx.fix(self.ctx.replace(keyword.value, "False"), "use dense gradients")
        self.report(
            keyword,
            "`sparse=True` gives the embedding sparse gradients, which Neuron does not support",
            fix=fix,
            severity=Severity.WARNING,
        )
