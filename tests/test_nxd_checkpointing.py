"""Migrated NxD per-rank checkpoints: the files NxD wrote, and training that resumes from them.

An NxD-style program (written here) saves its model, optimizer and scheduler with
`parallel_layers.checkpointing.save` and resumes with `checkpointing.load`. Migrated and run under
torchrun at tensor-parallel size 2, it writes NxD's layout (one `tp_rank_XX_pp_rank_00` file per
tensor-parallel rank, holding that rank's slices as plain tensors), and a run resumed from them
continues with the losses of the run that never stopped, Adam's moments included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.test_nxd_tensor_parallel import assert_close, migrate, torchrun

PROGRAM = """\
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from neuronx_distributed.parallel_layers import checkpointing, layers, parallel_state
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = layers.ParallelEmbedding(32, 8)
        self.up = layers.ColumnParallelLinear(8, 16, gather_output=False)
        self.down = layers.RowParallelLinear(16, 8, input_is_parallel=True)
        self.norm = nn.LayerNorm(8)
        self.out = layers.ColumnParallelLinear(8, 32)

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.down(torch.tanh(self.up(x)))
        return self.out(self.norm(x))


def main():
    start, stop, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(os.environ["TP"]))
    model_parallel_xla_manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    if start:
        state_dict = checkpointing.load(folder, model)
        # the same weights again, from this rank's own file
        model.load_state_dict(torch.load(os.path.join(folder, f"weights{parallel_state.get_tensor_model_parallel_rank()}.pt")))
        optimizer.load_state_dict(state_dict["optimizer"])
        scheduler_state_dict = state_dict["scheduler"]
        scheduler.load_state_dict(scheduler_state_dict)
        assert state_dict["step"] == start
    data = torch.randint(0, 32, (6, 4, 6), generator=torch.Generator().manual_seed(1))
    losses = []
    for step in range(start, stop):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data[step]).flatten(0, 1), data[step].flatten())
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    if not start:
        state_dict = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": stop,
        }
        checkpointing.save(state_dict, folder)
        weights = os.path.join(folder, f"weights{parallel_state.get_tensor_model_parallel_rank()}.pt")
        if parallel_state.get_data_parallel_rank() == 0:
            torch.save(model.state_dict(), weights)
    with open(os.path.join(folder, f"losses{start}-rank{dist.get_rank()}.json"), "w") as f:
        json.dump(losses, f)


if __name__ == "__main__":
    main()
"""

pytestmark = pytest.mark.slow


def losses(tmp: Path, processes: int, start: int, stop: int, folder: str, tp: int | None = None) -> list[float]:
    """The losses of steps `start` to `stop`, the same on every rank (`tp`: the processes)."""
    (tmp / folder).mkdir(exist_ok=True)
    torchrun(tmp, "train.py", processes, str(start), str(stop), folder, TP=str(tp or processes))
    ranks = [json.loads((tmp / folder / f"losses{start}-rank{rank}.json").read_text()) for rank in range(processes)]
    assert all(rank == ranks[0] for rank in ranks)
    return ranks[0]


def test_per_rank_checkpoint_resumes_training_as_if_it_never_stopped(tmp_path: Path) -> None:
    migrated = migrate(PROGRAM)
    assert "checkpointing.load(" not in migrated and "checkpointing.save(" not in migrated
    assert "scheduler.load_state_dict(scheduler_state_dict)" in migrated  # a scheduler holds no shards
    (tmp_path / "train.py").write_text(migrated)
    whole = losses(tmp_path, 1, 0, 6, "whole")
    assert_close(losses(tmp_path, 2, 0, 3, "ck") + losses(tmp_path, 2, 3, 6, "ck"), whole)
    assert whole[0] != whole[-1]

    # NxD's layout: each tensor-parallel rank's own slices, plain tensors on the CPU.
    ranks = [torch.load(tmp_path / "ck" / f"tp_rank_0{r}_pp_rank_00" / "checkpoint.pt", weights_only=False) for r in (0, 1)]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir() if p.is_dir()) == ["tp_rank_00_pp_rank_00", "tp_rank_01_pp_rank_00"]
    model = ranks[0]["model"]
    assert type(model["up.weight"]) is torch.Tensor and model["up.weight"].device.type == "cpu"
    assert [tuple(model[k].shape) for k in ("embed.weight", "up.weight", "down.weight", "down.bias")] == [(16, 8), (8, 8), (8, 8), (8,)]
    assert not torch.equal(model["up.weight"], ranks[1]["model"]["up.weight"])
    moments = ranks[0]["optimizer"]["state"]
    assert any(type(s["exp_avg"]) is torch.Tensor and tuple(s["exp_avg"].shape) == (8, 8) for s in moments.values())
    assert ranks[0]["step"] == 3 and ranks[0]["scheduler"]["last_epoch"] == 3
    # and a `state_dict()` saved by hand holds the same slices
    weights = torch.load(tmp_path / "ck" / "weights1.pt")
    assert torch.equal(weights["up.weight"], ranks[1]["model"]["up.weight"])


def test_first_data_parallel_replica_writes_and_every_replica_resumes(tmp_path: Path) -> None:
    """DP=2 x TP=2 (four processes): NxD's `master_dp_only` default, one file per tensor-parallel
    rank written by the first replica, read back by both."""
    (tmp_path / "train.py").write_text(migrate(PROGRAM))
    whole = losses(tmp_path, 1, 0, 6, "whole", tp=1)
    assert_close(losses(tmp_path, 4, 0, 3, "ck", tp=2) + losses(tmp_path, 4, 3, 6, "ck", tp=2), whole)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir() if p.is_dir()) == ["tp_rank_00_pp_rank_00", "tp_rank_01_pp_rank_00"]
