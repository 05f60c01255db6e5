"""NM501: float64 tensors, which Neuron silently computes in float32."""

from __future__ import annotations

import ast

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import UNSAFE, Severity
from neuron_migrate.checks.rules.base import Invalid, Rule

DTYPES = frozenset({"torch.float64", "torch.double"})


class Float64(Rule):
    """Flags `torch.float64`, `torch.double` and `.double()`.

    ## What it does
    Finds the float64 dtype and `.double()` casts. In hot code they are warnings, elsewhere
    informational; `torch.set_default_dtype(torch.float64)` is always a warning, since it
    changes every tensor created afterwards.

    ## Why
    Trainium has no native 64-bit floats: compiled inputs are downcast to float32 and eager
    ops cast float64 to float32. The program silently runs at a lower precision than it asks
    for, with extra casts.

    ## Example
    ```python
    freqs = torch.arange(dim, dtype=torch.float64) / dim
    ```

    ## Use instead
    ```python
    freqs = torch.arange(dim, dtype=torch.float32) / dim
    ```

    ## Fix safety
    Unsafe: `float32` (and `.float()`) changes numerics, which is what happens on Neuron anyway,
    but should be a decision.
    """

    code = "NM501"
    name = "float64"
    summary = "float64 is downcast to float32 on Neuron"
    contextual = True
    eager_severity = Severity.WARNING  # eager ops downcast float64 too
    quiet_when_cold = False  # `torch.set_default_dtype(torch.float64)` counts anywhere
    attributes = frozenset({"float64", "double"})
    calls = frozenset({"double"})
    VALID = (
        "import torch\n\ndef forward(x):\n    return x.to(torch.float32)\n",
        "import torch\n\ndef forward(t):\n    return t if t.dtype in (torch.float32, torch.float64) else t.float()\n",
        "import torch\n\ndef get_time_embed(self, sample, timestep):\n"
        "    dtype = dtype_for_device(torch.float64 if isinstance(timestep, float) else torch.int64, sample.device)\n"
        "    return torch.tensor([timestep], dtype=dtype, device=sample.device)\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\ndef forward(x):\n    return x.to(torch.float64)\n",
            severity="warning",
            unsafe_fixed="import torch\n\ndef forward(x):\n    return x.to(torch.float32)\n",
        ),
        Invalid(
            "def forward(x):\n    return x.double()\n",
            unsafe_fixed="def forward(x):\n    return x.float()\n",
        ),
        Invalid("import torch\n\ntorch.set_default_dtype(torch.float64)\n", severity="warning"),
        Invalid(
            "import torch\n\ndef load(a):\n    return torch.tensor(a, dtype=torch.double)\n",
            severity="info",
        ),
    )

    def visit_attribute(self, node: ast.Attribute) -> None:
        qualified = self.ctx.qualify(node)
        if qualified not in DTYPES:
            return
        parent = self.ctx.parent()
        if isinstance(parent, ast.Compare) or (
            isinstance(parent, ast.Tuple | ast.List | ast.Set)
            and isinstance(self.ctx.parent(2), ast.Compare)
        ):
            return  # `x.dtype == torch.float64` tests a dtype, it creates nothing
        if self._mapped_per_device():
            return
        global_default = (
            isinstance(parent, ast.Call)
            and self.ctx.qualify(parent.func) == "torch.set_default_dtype"
        )
        fix = self.ctx.fix(
            self.ctx.replace(node, f"{self.ctx.source(node.value)}.float32"), "use float32", UNSAFE
        )
        self.report(
            node,
            f"`{qualified}` is computed in float32 on Neuron (64-bit floats are downcast); use float32 or bfloat16",
            fix=fix,
            severity=Severity.WARNING if global_default else None,
        )

    def _mapped_per_device(self) -> bool:
        """Handed to a helper that picks the dtype per device (`maybe_adjust_dtype_for_device(
        torch.float64, x.device)`): the helper, not this line, decides what the device gets."""
        for node in reversed(self.ctx.stack[:-1]):
            if isinstance(node, ast.stmt):
                return False
            if isinstance(node, ast.Call):
                callee = (dotted(node.func) or "").rsplit(".", 1)[-1].lower()
                if "dtype" in callee and self.ctx.qualify(node.func) is None and any(
                    "device" in self.ctx.source(a) for a in (*node.args, *(k.value for k in node.keywords))
                ):
                    return True
        return False

    def visit_call(self, node: ast.Call, name: str) -> None:
        func = node.func
        if (
            node.args
            or node.keywords
            or not isinstance(func, ast.Attribute)
            or self.ctx.qualify(func.value) is not None
        ):
            return
        start = self.ctx.method_start(node)
        assert start is not None
        from neuron_migrate.checks.model import Edit

        end = start + len("double")
        fix = self.ctx.fix(Edit(start, end, "float"), "use `.float()`", UNSAFE)
        self.report(
            node,
            "`.double()` is computed in float32 on Neuron (64-bit floats are downcast)",
            fix=fix,
            start=start,
        )
