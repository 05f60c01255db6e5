"""NM503: complex dtypes and ops (complex RoPE, FFT), which the Neuron lowering lacks."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, constant, keyword

DTYPES = frozenset(
    {
        "torch.complex64",
        "torch.complex128",
        "torch.complex32",
        "torch.cfloat",
        "torch.cdouble",
        "torch.chalf",
    }
)
FUNCTIONS = frozenset({"torch.view_as_complex", "torch.polar", "torch.complex"})


class ComplexNumbers(Rule):
    """Flags complex dtypes, `view_as_complex`, `torch.polar`, `torch.fft.*` and complex `stft`.

    ## What it does
    Finds complex dtypes and the ops that produce complex tensors, in hot code as warnings and
    elsewhere (audio feature extraction on the host, say) as information.

    ## Why
    The Neuron lowering (torch-mlir) lacked complex numbers; Neuron ships real-valued RoPE
    patches for Llama and GPT-OSS, and newer releases decompose complex ops only when
    `TORCH_NEURONX_COMPLEX_DECOMPOSE=1`. Dynamo itself traces them, so the failure comes from
    the backend.

    ## Example
    ```python
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    ```

    ## Use instead
    The real-valued rotate-half form:
    ```python
    q_embed = q * cos + rotate_half(q) * sin
    ```

    ## Fix safety
    No automatic fix.
    """

    code = "NM503"
    name = "complex-numbers"
    summary = "complex dtypes and ops (complex RoPE, FFT)"
    contextual = True
    attributes = frozenset({"complex64", "complex128", "complex32", "cfloat", "cdouble", "chalf"})
    calls = frozenset(
        {
            "view_as_complex",
            "polar",
            "complex",
            "stft",
            "fft",
            "ifft",
            "rfft",
            "irfft",
            "fft2",
            "ifft2",
            "rfft2",
            "irfft2",
            "fftn",
            "ifftn",
            "rfftn",
            "irfftn",
            "hfft",
            "ihfft",
        }
    )
    VALID = (
        "import torch\n\ndef forward(q, cos, sin):\n    return q * cos + rotate_half(q) * sin\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\ndef forward(x):\n    return torch.view_as_complex(x)\n",
            severity="warning",
        ),
        Invalid("import torch\n\ndef forward(x):\n    return torch.fft.rfft(x)\n", line=4),
        Invalid("import torch\n\ndef forward(x):\n    return x.to(torch.cfloat)\n", line=4),
        Invalid(
            "import torch\n\ndef extract_features(w):\n    return torch.stft(w, 400, return_complex=True)\n",
            severity="info",
        ),
    )

    def visit_attribute(self, node: ast.Attribute) -> None:
        qualified = self.ctx.qualify(node)
        if qualified in DTYPES:
            self.report(
                node,
                f"`{qualified}` is a complex dtype, which the Neuron compiler does not lower; use real-valued math",
            )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is None:
            return
        if name == "stft":
            complex_out = keyword(node, "return_complex")
            if (
                qualified != "torch.stft"
                or complex_out is None
                or constant(complex_out.value) is not True
            ):
                return
        elif not (qualified in FUNCTIONS or qualified.startswith("torch.fft.")):
            return
        self.report(
            node,
            f"`{qualified}` works with complex tensors, which the Neuron compiler does not lower; use real-valued math (e.g. rotate-half RoPE)",
        )
