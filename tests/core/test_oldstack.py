"""`XLA_FLAGS` is PyTorch/XLA's only in a file that uses PyTorch/XLA: JAX and TensorFlow read it too."""

from __future__ import annotations

import pytest

from neuron_migrate.core.oldstack import is_xla_variable, uses_pytorch_xla


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("import torch_xla.core.xla_model as xm\n", True),
        ("    from optimum.neuron import NeuronTrainer\n", True),
        ('os.environ["PJRT_DEVICE"] = "NEURON"\nos.environ["XLA_FLAGS"] = "--x"\n', True),
        ('os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"\n', False),
        ('import jax\nos.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"\n', False),
        ('import tensorflow as tf\nos.environ["XLA_USE_BF16"] = "1"\n', False),
        ('os.environ["TF_XLA_FLAGS"] = "--tf_xla_auto_jit=2"\n', False),
    ],
)
def test_uses_pytorch_xla(text: str, expected: bool) -> None:
    assert uses_pytorch_xla(text) is expected


def test_shared_variables_belong_to_pytorch_xla_only_in_its_files() -> None:
    assert is_xla_variable("XLA_FLAGS", pytorch_xla_file=True)
    assert not is_xla_variable("XLA_FLAGS", pytorch_xla_file=False)
    assert not is_xla_variable("XLA_PYTHON_CLIENT_MEM_FRACTION", pytorch_xla_file=False)
    assert is_xla_variable("PJRT_DEVICE", pytorch_xla_file=False)
    assert not is_xla_variable("TF_XLA_FLAGS", pytorch_xla_file=True)
