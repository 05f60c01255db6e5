"""NM505: FP8 dtypes and kernels (torchao float8, TransformerEngine), not generally available on Neuron."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule

DTYPES = frozenset(
    {
        "torch.float8_e4m3fn",
        "torch.float8_e5m2",
        "torch.float8_e4m3fnuz",
        "torch.float8_e5m2fnuz",
        "torch.float8_e8m0fnu",
    }
)
FUNCTIONS = {
    "torch._scaled_mm": "`torch._scaled_mm`",
    "torchao.float8.convert_to_float8_training": "torchao float8 training",
    "transformer_engine.pytorch.fp8_autocast": "TransformerEngine `fp8_autocast`",
    "transformer_engine.pytorch.autocast": "TransformerEngine autocast",
}


class Fp8(Rule):
    """Flags FP8 dtypes, `torch._scaled_mm`, torchao float8 and TransformerEngine FP8.

    ## What it does
    Finds `torch.float8_*` dtypes and FP8 training entry points.

    ## Why
    FP8 is not generally available on Trainium through PyTorch: Neuron's NKI kernels reject
    `float8_e4m3fn`, and torchao float8 and TransformerEngine are CUDA libraries.

    ## Example
    ```python
    convert_to_float8_training(model)
    ```

    ## Use instead
    Train in bfloat16.

    ## Fix safety
    No automatic fix.
    """

    code = "NM505"
    name = "fp8"
    summary = "FP8 dtypes and CUDA FP8 libraries"
    attributes = frozenset(
        {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"}
    )
    calls = frozenset({"_scaled_mm", "convert_to_float8_training", "fp8_autocast", "autocast"})
    VALID = ("import torch\n\nx = x.to(torch.bfloat16)\n",)
    INVALID = (
        Invalid("import torch\n\nw8 = w.to(torch.float8_e4m3fn)\n", line=3),
        Invalid(
            "from torchao.float8 import convert_to_float8_training\n\nconvert_to_float8_training(model)\n",
            line=3,
        ),
        Invalid(
            "import transformer_engine.pytorch as te\n\nwith te.fp8_autocast(enabled=True):\n    y = m(x)\n",
            line=3,
        ),
    )

    def visit_attribute(self, node: ast.Attribute) -> None:
        qualified = self.ctx.qualify(node)
        if qualified in DTYPES:
            self.report(
                node, f"`{qualified}`: FP8 is not generally available on Neuron; use bfloat16"
            )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in FUNCTIONS:
            self.report(
                node,
                f"{FUNCTIONS[qualified]}: FP8 is not generally available on Neuron; use bfloat16",
            )
