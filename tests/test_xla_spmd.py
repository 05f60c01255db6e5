"""torch_xla SPMD programs, migrated to DTensor, train as torch_xla did: the losses of a few steps
under torchrun (two processes, gloo, CPU) equal those of one unsharded process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from neuron_migrate.rewrite.codemods.xla_spmd.specs import MeshShape, placements
from neuron_migrate.rewrite.engine import rewrite_source
from tests.helpers import torchrun as torchrun_helper

STEPS = 4

# A 2-layer MLP split Megatron-style over the mesh's "model" axis, its batch over "data".
PROGRAM = """\
import json
import os

import numpy as np
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch import nn

xr.use_spmd()


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def main():
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (1, devices), ("data", "model"))
    device = xm.xla_device()
    model = make_model().to(device)
    xs.mark_sharding(model[0].weight, mesh, ("model", None))
    xs.mark_sharding(model[0].bias, mesh, ("model",))
    xs.mark_sharding(model[2].weight, mesh, (None, "model"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(6, 4, generator=generator).to(device)
        y = torch.randn(6, 2, generator=generator).to(device)
        xs.mark_sharding(x, mesh, ("data", None))
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        xm.mark_step()
        losses.append(loss.item())
    with open(os.path.join(os.environ["RESULTS"], f"rank{os.environ.get('RANK', 0)}.json"), "w") as f:
        json.dump({"devices": devices, "losses": losses}, f)


if __name__ == "__main__":
    main()
""".replace("STEPS", str(STEPS))


def migrate(source: str) -> str:
    result = rewrite_source(source, "train.py")
    assert result.error is None, result.error
    return result.migrated


def one_process_losses() -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(6, 4, generator=generator), torch.randn(6, 2, generator=generator)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-5 * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))


def test_specs_become_one_placement_per_mesh_dimension() -> None:
    mesh = MeshShape(2, ("data", "model"))
    assert placements([("data",), ()], mesh) == ["Shard(0)", "Replicate()"]
    assert placements([(), ("model",)], mesh) == ["Replicate()", "Shard(1)"]
    assert placements([(1,), (0,)], mesh) == ["Shard(1)", "Shard(0)"]
    assert placements([("data", "model"), ()], mesh) == ["Shard(0)", "Shard(0)"]
    assert placements([(), ()], mesh) == ["Replicate()", "Replicate()"]
    assert isinstance(placements([("model", "data")], mesh), str)  # not the mesh's order
    assert isinstance(placements([("data",), ("data",)], mesh), str)  # one axis, two dimensions
    assert isinstance(placements([("pipe",)], mesh), str)


def test_spmd_program_becomes_dtensor() -> None:
    migrated = migrate(PROGRAM)
    assert "torch_xla" not in migrated
    assert 'parallelize_module(model[0], mesh["model"], ColwiseParallel(output_layouts=Replicate()))' in migrated
    assert 'parallelize_module(model[2], mesh["model"], RowwiseParallel(input_layouts=Replicate()))' in migrated
    assert 'mesh_dim_names=("data", "model")' in migrated


@pytest.mark.slow
def test_migrated_spmd_program_trains_as_one_process(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(migrate(PROGRAM))
    results = tmp_path / "results"
    results.mkdir()
    env = dict(os.environ, RESULTS=str(results), OMP_NUM_THREADS="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop("PJRT_DEVICE", None)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]
    done = torchrun_helper.run(launch, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    reference = one_process_losses()
    for rank in (0, 1):
        found = json.loads((results / f"rank{rank}.json").read_text())
        assert found["devices"] == 2 and close(found["losses"], reference), (found, reference)


@pytest.mark.slow
def test_original_spmd_program_trains_as_one_process_on_torch_xla(tmp_path: Path) -> None:
    """The same program on torch_xla 2.9, one process driving two virtual CPU devices, gives the
    losses the migrated one gives."""
    from neuron_migrate.validate import refenv

    python = refenv.default_python()
    if python is None or not python.exists():
        pytest.skip("no reference environment (torch 2.9 + torch_xla 2.9) to run the original")
    (tmp_path / "train.py").write_text(PROGRAM)
    env = dict(os.environ, RESULTS=str(tmp_path), PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2", XLA_USE_SPMD="1")
    done = subprocess.run([str(python), "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "rank0.json").read_text())
    assert found["devices"] == 2 and close(found["losses"], one_process_losses()), found
