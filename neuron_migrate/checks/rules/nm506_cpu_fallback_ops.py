"""NM506: linear-algebra ops that run on the CPU on Neuron."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule

LINALG = frozenset(
    {
        "qr",
        "svd",
        "svdvals",
        "eigh",
        "eigvalsh",
        "eig",
        "eigvals",
        "cholesky",
        "cholesky_ex",
        "inv",
        "inv_ex",
        "lu_factor",
        "lu_factor_ex",
        "lu",
        "ldl_factor",
        "ldl_factor_ex",
        "slogdet",
        "det",
        "solve",
        "lstsq",
        "pinv",
    }
)
TORCH = frozenset(
    {
        "qr",
        "svd",
        "cholesky",
        "cholesky_inverse",
        "triangular_solve",
        "inverse",
        "det",
        "logdet",
        "slogdet",
        "pinverse",
        "lu",
    }
)
METHODS = frozenset({"inverse", "det", "svd", "qr", "cholesky", "slogdet", "logdet", "pinverse"})


class CpuFallbackOps(Rule):
    """Flags `torch.linalg` decompositions and inverses, which fall back to the CPU on Neuron.

    ## What it does
    Finds `torch.linalg.{qr, svd, eigh, cholesky, inv, lu_factor, ldl_factor, slogdet, det, ...}`,
    `torch.cholesky_inverse`, `torch.triangular_solve`, `torch.inverse` and the tensor methods
    of the same names. Warnings in hot code, information elsewhere.

    ## Why
    TorchNeuron routes these ops to the CPU: the tensors are copied to the host and back, and a
    compiled graph is split around them. "Unsupported ops fall back to CPU by default, which is
    convenient for bring-up but costs performance."

    ## Example
    ```python
    def forward(self, x):
        return x @ torch.linalg.inv(self.weight)
    ```

    ## Use instead
    Precompute outside the hot loop (once, on the CPU), or reformulate (`torch.linalg.solve` is
    also a decomposition; orthogonal parametrizations avoid inverses).

    ## Fix safety
    No automatic fix.
    """

    code = "NM506"
    name = "cpu-fallback-ops"
    summary = "linear-algebra ops that fall back to the CPU"
    contextual = True
    calls = frozenset({*LINALG, *TORCH, *METHODS})
    VALID = (
        "import torch\n\ndef forward(x, w):\n    return x @ w.T\n",
        "import numpy as np\n\ndef forward(a):\n    return np.linalg.inv(a)\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\ndef forward(x, w):\n    return x @ torch.linalg.inv(w)\n",
            line=4,
            severity="warning",
        ),
        Invalid("def forward(x):\n    return x.inverse()\n", line=2),
        Invalid(
            "import torch\n\ndef init_weights(w):\n    q, r = torch.linalg.qr(w)\n    return q\n",
            severity="info",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is None:
            func = node.func
            if (
                name not in METHODS
                or not isinstance(func, ast.Attribute)
                or (node.args and name != "svd")
            ):
                return
            shown = f".{name}()"
        elif (qualified.startswith("torch.linalg.") and name in LINALG) or (
            qualified == f"torch.{name}" and name in TORCH
        ):
            shown = qualified
        else:
            return
        self.report(
            node,
            f"`{shown}` falls back to the CPU on Neuron: a copy to the host and back, and a split graph; "
            "keep it out of the training step",
            start=self.ctx.method_start(node) if qualified is None else None,
        )
