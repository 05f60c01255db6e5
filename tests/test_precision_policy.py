"""`XLA_USE_BF16=1` migrated: the bf16 policy must reach the models a script loads and moves.

The migrated scripts are run for real (transformers, a tiny Llama saved locally, no download).
Under XLA a model was built in float32 and became bf16 where it moved to the device; natively
the migrated script casts there, so its initial weights are the original's, rounded. A default
dtype would not do: it draws other initial weights, and does not reach `from_pretrained` (which
keeps the checkpoint's dtype) nor `from_config` (the dtype its config records).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate.rewrite.engine import Options, rewrite_source

pytest.importorskip("transformers")

TINY_LLAMA = "LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)"

BF16_SCRIPT = """\
import json
import os
import sys

os.environ["XLA_USE_BF16"] = "1"

import torch
import torch_xla.core.xla_model as xm
from transformers import AutoConfig, AutoModelForCausalLM

loaded = AutoModelForCausalLM.from_pretrained(sys.argv[1])
built = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1]))


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(64) * 0.02)


torch.manual_seed(0)
float32_draw = (torch.randn(64, dtype=torch.float32) * 0.02).bfloat16()
torch.manual_seed(0)
head = Head().to(xm.xla_device())
dtypes = {name: sorted({str(p.dtype) for p in m.parameters()}) for name, m in [("loaded", loaded), ("built", built), ("head", head)]}
dtypes["initial weights kept"] = bool((head.scale.detach().cpu().bfloat16() == float32_draw).all())
print(json.dumps(dtypes))
"""


def _run(source: str, *args: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", source, *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def float32_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-llama")
    program = (
        "import sys\nfrom transformers import AutoModelForCausalLM, LlamaConfig\n"
        f"AutoModelForCausalLM.from_config({TINY_LLAMA}).save_pretrained(sys.argv[1])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return path


def test_default_dtype_alone_does_not_reach_transformers_models(float32_checkpoint: Path) -> None:
    """Why the rule exists: `torch.set_default_dtype` leaves these models in float32."""
    source = (
        BF16_SCRIPT.replace('os.environ["XLA_USE_BF16"] = "1"', "")
        .replace("import torch_xla.core.xla_model as xm", "torch.set_default_dtype(torch.bfloat16)")
        .replace("Head().to(xm.xla_device())", "Head()")
    )
    dtypes = _run(source, str(float32_checkpoint))
    assert dtypes == {
        "loaded": ["torch.float32"],
        "built": ["torch.float32"],
        "head": ["torch.bfloat16"],
        # initialised in bf16: not the float32 draw the old stack made, rounded
        "initial weights kept": False,
    }


def test_migrated_bf16_script_loads_its_models_in_bf16(float32_checkpoint: Path) -> None:
    result = rewrite_source(BF16_SCRIPT, "train.py", Options())
    assert result.error is None
    assert "torch_xla" not in result.migrated
    assert "dtype=torch.bfloat16" in result.migrated
    assert "head = Head().to(torch.accelerator" in result.migrated and ", torch.bfloat16)" in result.migrated
    dtypes = _run(result.migrated, str(float32_checkpoint))
    assert dtypes == {
        "loaded": ["torch.bfloat16"],
        "built": ["torch.bfloat16"],
        "head": ["torch.bfloat16"],
        "initial weights kept": True,  # float32 init, cast where it moved, as under XLA
    }


def test_the_report_says_how_the_policy_changed_form() -> None:
    result = rewrite_source(BF16_SCRIPT, "train.py", Options())
    notes = " ".join(n.message for n in result.notes if n.code == "NM009")
    assert "builds everything in float32 as before and casts where data moves to the device" in notes
    assert "models loaded with `from_pretrained` get `dtype=torch.bfloat16`" in notes
    assert "integer tensors stay as they are" in notes


FACTORIES_SCRIPT = """\
import json
import os

os.environ["XLA_USE_BF16"] = "1"

import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
made = {
    "full": torch.full((2,), 0.1, device=device),
    "tensor": torch.tensor([0.1, 0.3], device=device),
    "arange": torch.arange(0.0, 0.3, 0.1, device=device),
    "linspace": torch.linspace(0, 0.3, 3, device=device),
    "zeros_float32": torch.zeros(2, dtype=torch.float32, device=device) + 0.1,
    "full_int": torch.full((1,), 3, device=device),
    "ids": torch.tensor([1, 2], device=device),
    "moved_float32": torch.tensor([0.1, 0.3]).to(device, dtype=torch.float32),
    "moved_positional": torch.tensor([0.1, 0.3]).to(device, torch.float32),
}
print(json.dumps({k: [t.cpu().tolist(), t.is_floating_point()] for k, t in made.items()}))
"""


def test_tensors_made_on_the_device_get_the_values_the_switch_gave_them() -> None:
    """Float tensors created on or moved to the device held bf16 values under the switch, whether
    float by default, by their data or by a float32 dtype; integer ones stayed integers. The migrated
    program makes them bf16 where it makes them, so its values are the original's."""
    from neuron_migrate.validate import refenv

    result = rewrite_source(FACTORIES_SCRIPT, "factories.py", Options())
    assert not result.error and "TODO" not in result.migrated, result.migrated
    migrated = _run(result.migrated)
    for name in ("full", "tensor", "arange", "linspace", "zeros_float32", "moved_float32", "moved_positional"):
        assert migrated[name][1] is True
    assert migrated["full_int"] == [[3], False] and migrated["ids"] == [[1, 2], False]
    python = refenv.default_python()
    if python is None or not python.exists():
        pytest.skip("no reference environment (torch 2.9 + torch_xla 2.9) to run the original")
    done = subprocess.run(
        [str(python), "-c", FACTORIES_SCRIPT], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PJRT_DEVICE": "CPU"},
    )
    assert done.returncode == 0, done.stderr
    original = json.loads(done.stdout.strip().splitlines()[-1])
    assert migrated == original
