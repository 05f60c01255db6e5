"""torch_xla SPMD programs, migrated to DTensor, train as torch_xla did: the losses of a few steps
under torchrun (gloo, CPU) equal those of one unsharded process."""

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
TEMPLATE = """\
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
    mesh = xs.Mesh(np.arange(devices), MESH)
    device = xm.xla_device()
    model = make_model().to(device)
    LAYERS
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(6, 4, generator=generator).to(device)
        y = torch.randn(6, 2, generator=generator).to(device)
        BATCH
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
"""
TENSOR_PARALLEL = """\
xs.mark_sharding(model[0].weight, mesh, ("model", None))
    xs.mark_sharding(model[0].bias, mesh, ("model",))
    xs.mark_sharding(model[2].weight, mesh, (None, "model"))"""


def program(mesh: str, layers: str, batch: str) -> str:
    replaced = {"STEPS": str(STEPS), "MESH": mesh, "LAYERS": layers, "BATCH": batch}
    source = TEMPLATE
    for placeholder, value in replaced.items():
        source = source.replace(placeholder, value)
    return source


PROGRAM = program('(1, devices), ("data", "model")', TENSOR_PARALLEL, 'xs.mark_sharding(x, mesh, ("data", None))')
BATCH = 'xs.mark_sharding(x, mesh, ("data", None))\n        xs.mark_sharding(y, mesh, ("data", None))'
# Two data replicas of a 2-way tensor-parallel model: every batch tensor split over "data".
TWO_BY_TWO = program('(2, devices // 2), ("data", "model")', TENSOR_PARALLEL, BATCH)
# Data parallel only: every parameter whole on each device, the batch split over all of them.
DATA_ONLY = program('(devices,), ("data",)', "# every parameter whole on each device", BATCH)
# `xm.optimizer_step` under SPMD: one process, nothing averaged at the step.
STEPPED_BY_XM = TWO_BY_TWO.replace("optimizer.step()", "xm.optimizer_step(optimizer)")


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


def train_under_torchrun(tmp_path: Path, source: str, processes: int) -> list[dict]:
    """What each process of `torchrun --nproc_per_node=<processes>` wrote running `source`."""
    (tmp_path / "train.py").write_text(source)
    results = tmp_path / "results"
    results.mkdir()
    env = dict(os.environ, RESULTS=str(results), OMP_NUM_THREADS="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop("PJRT_DEVICE", None)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", "train.py"]
    done = torchrun_helper.run(launch, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads((results / f"rank{rank}.json").read_text()) for rank in range(processes)]


def test_batch_split_over_the_data_axis_is_sliced_and_averaged() -> None:
    migrated = migrate(TWO_BY_TWO)
    assert 'x = batch_slice(x, mesh["data"])' in migrated and 'y = batch_slice(y, mesh["data"])' in migrated
    assert 'loss.backward()\n        average_gradients_over(model, mesh["data"])\n        loss = mean_over(loss, mesh["data"])\n' in migrated
    assert "x = batch_slice(x, mesh)" in migrate(DATA_ONLY)
    # `y` is not split: the loss of a slice of `x` against the whole `y` is no loss SPMD computed.
    assert "batch_slice" not in migrate(PROGRAM)


@pytest.mark.slow
def test_migrated_spmd_program_trains_as_one_process(tmp_path: Path) -> None:
    reference = one_process_losses()
    for found in train_under_torchrun(tmp_path, migrate(PROGRAM), 2):
        assert found["devices"] == 2 and close(found["losses"], reference), (found, reference)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "processes"), [(DATA_ONLY, 2), (TWO_BY_TWO, 4), (STEPPED_BY_XM, 4)], ids=["data", "2x2", "2x2-optimizer_step"]
)
def test_migrated_batch_split_trains_as_one_process(tmp_path: Path, source: str, processes: int) -> None:
    """Each process on its slice of the batch (tensor parallel over "model" on the 2 x 2 mesh),
    gradients and loss averaged over "data": the losses of one process on the whole batch."""
    reference = one_process_losses()
    for found in train_under_torchrun(tmp_path, migrate(source), processes):
        assert found["devices"] == processes and close(found["losses"], reference), (found, reference)


@pytest.mark.slow
@pytest.mark.parametrize(("source", "devices"), [(PROGRAM, 2), (DATA_ONLY, 2), (TWO_BY_TWO, 4)], ids=["1x2", "data", "2x2"])
def test_original_spmd_program_trains_as_one_process_on_torch_xla(tmp_path: Path, source: str, devices: int) -> None:
    """The same program on torch_xla 2.9, one process driving virtual CPU devices, gives the
    losses the migrated one gives."""
    from neuron_migrate.validate import refenv

    python = refenv.default_python()
    if python is None or not python.exists():
        pytest.skip("no reference environment (torch 2.9 + torch_xla 2.9) to run the original")
    (tmp_path / "train.py").write_text(source)
    env = dict(os.environ, RESULTS=str(tmp_path), PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices), XLA_USE_SPMD="1")
    done = subprocess.run([str(python), "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "rank0.json").read_text())
    assert found["devices"] == devices and close(found["losses"], one_process_losses()), found


# The same program seeding nothing: one SPMD program drew one set of weights and batches, which
# every process must now draw alike.
UNSEEDED = PROGRAM.replace("    torch.manual_seed(0)\n", "").replace(
    "generator = torch.Generator().manual_seed(1)", "generator = None"
)


@pytest.mark.slow
def test_an_unseeded_spmd_program_draws_the_same_numbers_on_every_process(tmp_path: Path) -> None:
    migrated = migrate(UNSEEDED)
    assert "manual_seed" not in UNSEEDED and "    seed_alike()\n" in migrated
    first, second = train_under_torchrun(tmp_path, migrated, 2)
    assert first["losses"] == second["losses"]
    assert first["losses"][0] != first["losses"][-1]
