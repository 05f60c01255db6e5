"""The RMSNorm kernel of NxD model code and the `F.rms_norm` that replaces it compute one formula.

NxD's model files call the kernel on the device and spell its formula out beside it for the
CPU (`weight * x * rsqrt(mean(x ** 2) + eps)`): the migrated branch must give those numbers.
"""

from __future__ import annotations

import pytest
import torch

from neuron_migrate.rewrite.engine import rewrite_source

ORIGINAL = """\
import torch
from torch import nn
from torch_neuronx.xla_impl.ops import RmsNorm


class Norm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, hidden))
        self.eps = eps

    def forward(self, hidden_states):
        if hidden_states.device.type == "xla":
            return RmsNorm.apply(hidden_states, self.weight, self.eps, len(hidden_states.shape) - 1)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.eps)

    def on_the_device(self, hidden_states):
        return RmsNorm.apply(hidden_states, self.weight, self.eps, len(hidden_states.shape) - 1)
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_migrated_kernel_gives_the_written_out_formula(dtype: torch.dtype) -> None:
    migrated = rewrite_source(ORIGINAL, "model.py").migrated
    assert "torch_neuronx" not in migrated and "rms_norm(" in migrated
    namespace: dict = {}
    exec(compile(migrated, "model.py", "exec"), namespace)
    norm = namespace["Norm"](16).to(dtype)
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(0)).to(dtype)
    tolerance = {"rtol": 1.3e-6, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(norm.on_the_device(x), norm(x), **tolerance)  # the formula NxD's file wrote out
