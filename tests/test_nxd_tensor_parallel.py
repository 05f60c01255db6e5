"""Migrated neuronx-distributed tensor parallelism computes what one unsharded process does.

NxD-style programs (written here) are migrated, then run under torchrun on the CPU with gloo: at
tensor-parallel size 2 the losses, the first step's gradients and the final parameters gathered
from the shards equal those of the same program in one process (a mesh of one, where every layer
is whole). With four processes (DP=2 x TP=2), each rank has the tensor- and data-parallel ranks
NxD gave it, and the data-parallel replicas average their shards' gradients as NxD programs did.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from neuron_migrate.cli import main
from neuron_migrate.rewrite.codemods.nxd_program import MESH_MODULE_TEXT
from neuron_migrate.rewrite.engine import rewrite_source
from tests.helpers import torchrun as torchrun_helper

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4

# Every layout NxD's layers offer with a native counterpart: gathered and split outputs,
# split and whole inputs, a vocabulary-sharded and an embedding-sharded table, initializers of
# the whole weight; a plain LayerNorm beside them, and the gradients clipped over all of them.
PROGRAM = f"""\
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from neuronx_distributed.parallel_layers import layers, parallel_state
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from neuronx_distributed.parallel_layers.utils import divide
from torch import nn

from recording import gradients


def scaled_normal(weight):
    nn.init.normal_(weight, std=0.3)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.vocab = layers.ParallelEmbedding(32, 8, init_method=scaled_normal)
        self.wide = layers.ParallelEmbedding(32, 8, shard_across_embedding=True)
        self.up = layers.ColumnParallelLinear(8, 16, gather_output=False, init_method=scaled_normal)
        self.local_width = divide(16, parallel_state.get_tensor_model_parallel_size())
        self.down = layers.RowParallelLinear(16, 8, input_is_parallel=True)
        self.norm = nn.LayerNorm(8)
        self.mix = layers.ColumnParallelLinear(8, 8)
        self.out = layers.RowParallelLinear(8, 32, bias=False)

    def forward(self, ids):
        x = self.vocab(ids) + self.wide(ids)
        hidden = torch.tanh(self.up(x))
        assert hidden.shape[-1] == self.local_width  # this rank's part
        x = x + self.down(hidden)
        return self.out(self.mix(self.norm(x)))


def whole(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def main():
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(os.environ["TP"]))
    model_parallel_xla_manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.randint(0, 32, (4, 6), generator=torch.Generator().manual_seed(1))
    record = {{
        "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
        "dp_rank": parallel_state.get_data_parallel_rank(),
        "dp_size": parallel_state.get_data_parallel_size(),
        "losses": [],
    }}
    for step in range({STEPS}):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        if step == 0:
            record["grads"] = gradients(model)
        record.setdefault("norms", []).append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5).item())
        optimizer.step()
        record["losses"].append(loss.item())
    record["params"] = {{name: whole(p.detach()).tolist() for name, p in model.named_parameters()}}
    with open(os.path.join(os.environ["RESULTS"], f"rank{{dist.get_rank()}}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
"""


# Sequence parallelism (norms, column and row layers along the sequence), every region mapping
# around computations on this rank's part, and NxD's per-token loss of vocabulary-split logits,
# ignored (-100) targets included.
SEQUENCE_PROGRAM = f"""\
import json
import os

import torch
import torch.distributed as dist
from neuronx_distributed.parallel_layers import grads, layers, mappings, parallel_state
from neuronx_distributed.parallel_layers.layer_norm import LayerNorm
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from torch import nn

from recording import gradients

SEQ_DIM = 1  # activations are (batch, sequence, hidden)


class Block(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = LayerNorm(hidden, sequence_parallel_enabled=True)
        self.up = layers.ColumnParallelLinear(
            hidden, 4 * hidden, gather_output=False, sequence_parallel_enabled=True, sequence_dimension=SEQ_DIM
        )
        self.down = layers.RowParallelLinear(
            4 * hidden, hidden, input_is_parallel=True, sequence_parallel_enabled=True, sequence_dimension=SEQ_DIM
        )

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, vocab=32, hidden=8):
        super().__init__()
        self.embed = layers.ParallelEmbedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(2))
        self.norm = LayerNorm(hidden, sequence_parallel_enabled=True)
        self.head = layers.ColumnParallelLinear(hidden, vocab, bias=False, gather_output=False)
        self.mix = layers.ColumnParallelLinear(hidden, hidden, gather_output=False)
        self.proj = layers.RowParallelLinear(hidden, hidden, input_is_parallel=True)

    def forward(self, ids):
        tp = parallel_state.get_tensor_model_parallel_size()
        rank = parallel_state.get_tensor_model_parallel_rank()
        x = mappings.scatter_to_sequence_parallel_region(self.embed(ids), sequence_dimension=SEQ_DIM)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        # this rank's share of the hidden features of the whole sequence, summed back over the ranks
        whole_sequence = mappings.gather_from_sequence_parallel_region(x, SEQ_DIM)
        mask = torch.zeros(x.shape[-1])
        mask.chunk(tp)[rank].fill_(1.0)
        back = mappings.reduce_scatter_to_sequence_parallel_region(whole_sequence * mask, SEQ_DIM)
        x = mappings.gather_from_sequence_parallel_region(x + back, SEQ_DIM, to_model_parallel=False)
        # the Megatron mappings around computations on this rank's part
        h = mappings.gather_from_tensor_model_parallel_region(self.mix(x))
        mine = mappings.copy_to_tensor_model_parallel_region(h).chunk(tp, -1)[rank]
        energy = mappings.reduce_from_tensor_model_parallel_region((mine**2).sum(-1))
        energy = energy + self.proj(mappings.scatter_to_tensor_model_parallel_region(h)).sum(-1)
        return self.head(x), energy


def whole(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def main():
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(os.environ["TP"]))
    model_parallel_xla_manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.randint(0, 32, (4, 6), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, -1] = -100  # padding the loss ignores
    record = {{"losses": [], "raw": []}}
    for step in range({STEPS}):
        optimizer.zero_grad()
        logits, energy = model(ids)
        per_token = parallel_cross_entropy(logits, labels)
        valid = (labels != -100).float()
        loss = (per_token * valid).sum() / valid.sum() + 1e-3 * energy.mean()
        loss.backward()
        grads.allreduce_sequence_parallel_gradients(optimizer)
        if step == 0:
            record["grads"] = gradients(model)
            record["raw"] = per_token.tolist()  # includes the -100 positions
        optimizer.step()
        record["losses"].append(loss.item())
    record["params"] = {{name: whole(p.detach()).tolist() for name, p in model.named_parameters()}}
    with open(os.path.join(os.environ["RESULTS"], f"rank{{dist.get_rank()}}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
"""

# Data parallelism beside tensor parallelism: each data-parallel replica its own batch, its
# gradients averaged over the data-parallel groups as torch_xla did (the sum over the group,
# divided by the world size), the logged loss all-reduced over them.
DATA_PARALLEL_PROGRAM = f"""\
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
from neuronx_distributed.parallel_layers import layers, parallel_state
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = layers.ParallelEmbedding(32, 8)
        self.up = layers.ColumnParallelLinear(8, 16, gather_output=False)
        self.down = layers.RowParallelLinear(16, 8, input_is_parallel=True)
        self.norm = nn.LayerNorm(8)
        self.out = layers.ColumnParallelLinear(8, 32, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        return self.out(self.norm(x + self.down(torch.tanh(self.up(x)))))


def whole(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def main():
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(os.environ["TP"]))
    dp_rank = parallel_state.get_data_parallel_rank()
    model_parallel_xla_manual_seed(0)
    model = Net()
    # torch_xla's average divides by the world size: keep the step size of one replica per shard.
    lr = 0.5 * dist.get_world_size() / parallel_state.get_data_parallel_size()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    data = torch.randint(0, 32, (2, 4, 6), generator=torch.Generator().manual_seed(1))
    ids = data[dp_rank]  # each data-parallel replica its own batch
    record = {{"losses": [], "tp_rank": parallel_state.get_tensor_model_parallel_rank(), "dp_rank": dp_rank}}
    for step in range({STEPS}):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        xm.reduce_gradients(optimizer, groups=parallel_state.get_data_parallel_replica_groups())
        optimizer.step()
        mean = xm.all_reduce(xm.REDUCE_SUM, loss.detach(), groups=parallel_state.get_data_parallel_replica_groups())
        record["losses"].append(mean.item() / parallel_state.get_data_parallel_size())
    record["params"] = {{name: whole(p.detach()).tolist() for name, p in model.named_parameters()}}
    with open(os.path.join(os.environ["RESULTS"], f"rank{{dist.get_rank()}}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
"""

# A program of two files, as NxD examples are laid out: the model code builds parallel layers and
# asks for the tensor-parallel size; the script sets the groups up and trains.
MODEL_FILE = """\
# A small decoder written for NxD's local shards.

import torch.nn.functional as F
from neuronx_distributed.parallel_layers import layers, parallel_state
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads // parallel_state.get_tensor_model_parallel_size()  # this rank's heads
        self.head_dim = hidden // heads
        self.qkv = layers.ColumnParallelLinear(hidden, 3 * hidden, gather_output=False)
        self.out = layers.RowParallelLinear(hidden, hidden, input_is_parallel=True)

    def forward(self, x):
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, self.heads, 3 * self.head_dim).transpose(1, 2).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class Decoder(nn.Module):
    def __init__(self, vocab=64, hidden=32, heads=4):
        super().__init__()
        self.embed = layers.ParallelEmbedding(vocab, hidden)
        self.attn = Attention(hidden, heads)
        self.norm = nn.LayerNorm(hidden)
        self.head = layers.ColumnParallelLinear(hidden, vocab, bias=False, gather_output=False)

    def forward(self, ids, labels):
        x = self.embed(ids)
        x = x + self.attn(self.norm(x))
        return parallel_cross_entropy(self.head(x), labels).mean()
"""
SCRIPT_FILE = """\
import argparse

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
from neuronx_distributed.parallel_layers import parallel_state
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed

from modeling import Decoder


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor_parallel_size", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tensor_parallel_size)
    device = xm.xla_device()
    model_parallel_xla_manual_seed(0)
    model = Decoder().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 64, (4, 2, 9), generator=torch.Generator().manual_seed(1))
    for step in range(4):
        optimizer.zero_grad()
        loss = model(data[step, :, :-1].to(device), data[step, :, 1:].to(device))
        loss.backward()
        optimizer.step()
        xm.mark_step()
        if parallel_state.get_tensor_model_parallel_rank() == 0:
            print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
"""


def migrate(source: str, name: str = "train.py", todos: int = 0) -> str:
    """The migrated program, with no NxD left and `todos` TODOs (ones that leave its numbers alone)."""
    result = rewrite_source(source, name)
    assert result.error is None, result.error
    assert not re.search(r"^\s*(import|from) neuronx_distributed", result.migrated, re.M), result.migrated
    assert result.migrated.count("TODO(neuron-migrate") == todos, result.migrated
    return result.migrated


def torchrun(tmp: Path, script: str, processes: int, *args: str, **env: str) -> str:
    """Run `script` (in `tmp`) under torchrun on the CPU; its standard output."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0", **env)
    environment.pop("PJRT_DEVICE", None)
    launch = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", script, *args,
    ]
    done = torchrun_helper.run(launch, cwd=tmp, env=environment, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# What the programs record of the gradients, whole: a module of the test's own beside them, so
# the programs themselves read no gradient (NxD's were this rank's slices, DTensors natively).
RECORDING = """\
def gradients(model):
    return {
        name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).tolist()
        for name, p in model.named_parameters()
    }
"""


def run_program(tmp: Path, processes: int, tp: int, program: str = PROGRAM, todos: int = 0, **env: str) -> list[dict]:
    """Each rank's record of the migrated `program` (run with the environment variables `env`)."""
    (tmp / "recording.py").write_text(RECORDING)
    (tmp / "train.py").write_text(migrate(program, str(tmp / "train.py"), todos))
    results = tmp / f"results-{processes}-{tp}"
    results.mkdir()
    torchrun(tmp, "train.py", processes, TP=str(tp), RESULTS=str(results), **env)
    return [json.loads((results / f"rank{rank}.json").read_text()) for rank in range(processes)]


def assert_close(actual: object, expected: object) -> None:
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=1e-5, atol=1e-6)


pytestmark = pytest.mark.slow


def test_tensor_parallel_run_equals_one_process(tmp_path: Path) -> None:
    (one,) = run_program(tmp_path, processes=1, tp=1)
    ranks = run_program(tmp_path, processes=2, tp=2)
    for record in ranks:
        assert_close(record["losses"], one["losses"])
        assert_close(record["norms"], one["norms"])
        for name, grad in one["grads"].items():
            assert_close(record["grads"][name], grad)
        for name, value in one["params"].items():
            assert_close(record["params"][name], value)
    # The check can fail: training moved the parameters, and clipping scaled the gradients.
    assert one["losses"][0] != one["losses"][-1]
    assert min(one["norms"]) > 0.5


def test_sequence_parallelism_mappings_and_loss_equal_one_process(tmp_path: Path) -> None:
    (one,) = run_program(tmp_path, processes=1, tp=1, program=SEQUENCE_PROGRAM)
    ranks = run_program(tmp_path, processes=2, tp=2, program=SEQUENCE_PROGRAM)
    for record in ranks:
        assert_close(record["losses"], one["losses"])
        assert_close(record["raw"], one["raw"])
        for name, grad in one["grads"].items():
            assert_close(record["grads"][name], grad)
        for name, value in one["params"].items():
            assert_close(record["params"][name], value)
    assert one["losses"][0] != one["losses"][-1]
    # NxD's loss of an ignored target is the log-sum-exp of the shifted logits, not 0.
    assert min(row[-1] for row in one["raw"]) > 0


# Fused projections: q, k and v in one layer (`stride=3`), gate and up in another (`stride=2`), two
# branches whose parts a strided row layer takes as they are; the model code splits each rank's
# share of the parts. A checkpoint of NxD's trainer API is written after the third step.
FUSED_PROGRAM = f"""\
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from neuronx_distributed.parallel_layers import layers, parallel_state
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from neuronx_distributed.trainer import load_checkpoint, save_checkpoint
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads // parallel_state.get_tensor_model_parallel_size()  # this rank's heads
        self.head_dim = hidden // heads
        self.qkv = layers.ColumnParallelLinear(hidden, 3 * hidden, gather_output=False, stride=3)
        self.out = layers.RowParallelLinear(hidden, hidden, input_is_parallel=True)

    def forward(self, x):
        batch, seq, _ = x.shape
        q, k, v = (
            part.view(batch, seq, self.heads, self.head_dim).transpose(1, 2) for part in self.qkv(x).chunk(3, dim=-1)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.gate_up = layers.ColumnParallelLinear(hidden, 2 * 4 * hidden, bias=False, gather_output=False, stride=2)
        self.down = layers.RowParallelLinear(4 * hidden, hidden, bias=False, input_is_parallel=True)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Branches(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.split = layers.ColumnParallelLinear(hidden, 2 * hidden, gather_output=False, stride=2)
        self.merge = layers.RowParallelLinear(2 * hidden, hidden, input_is_parallel=True, stride=2)

    def forward(self, x):
        a, b = self.split(x).chunk(2, dim=-1)
        return self.merge(torch.cat([torch.tanh(a), torch.sigmoid(b)], dim=-1))


class Net(nn.Module):
    def __init__(self, vocab=32, hidden=16, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.attn = Attention(hidden, heads)
        self.norm = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)
        self.branches = Branches(hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.attn(x)
        x = x + self.mlp(self.norm(x))
        return self.head(x + self.branches(x))


def main():
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(os.environ["TP"]))
    model_parallel_xla_manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 32, ({STEPS + 1}, 4, 9), generator=torch.Generator().manual_seed(1))
    start = 0
    if os.environ.get("RESUME"):
        start = load_checkpoint(os.environ["CHECKPOINTS"], model=model, optimizer=optimizer)["step"] + 1
    losses = []
    for step in range(start, {STEPS + 1}):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data[step, :, :-1]).flatten(0, 1), data[step, :, 1:].flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step == 2 and not os.environ.get("RESUME"):
            save_checkpoint(os.environ["CHECKPOINTS"], f"step_{{step}}", model=model, optimizer=optimizer, user_content={{"step": step}})
    with open(os.path.join(os.environ["RESULTS"], f"rank{{dist.get_rank()}}.json"), "w") as f:
        json.dump({{"losses": losses}}, f)


if __name__ == "__main__":
    main()
"""


def test_fused_projections_train_as_one_process_and_reload_at_another_size(tmp_path: Path) -> None:
    """`stride=` layers at TP=2 train as in one process, and a checkpoint written at TP=2 resumes at TP=1."""
    one_folder, two_folder, resumed_folder = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    for folder in (one_folder, two_folder, resumed_folder):
        folder.mkdir()
    (one,) = run_program(one_folder, processes=1, tp=1, program=FUSED_PROGRAM, CHECKPOINTS=str(one_folder / "ck"))
    assert "ColwiseParallel(output_layouts=strided_shard(3))" in (one_folder / "train.py").read_text()
    ranks = run_program(two_folder, processes=2, tp=2, program=FUSED_PROGRAM, CHECKPOINTS=str(two_folder / "ck"))
    assert len(one["losses"]) == STEPS + 1
    for record in ranks:
        assert_close(record["losses"], one["losses"])
    assert one["losses"][0] != one["losses"][-1]
    (resumed,) = run_program(resumed_folder, processes=1, tp=1, program=FUSED_PROGRAM, CHECKPOINTS=str(two_folder / "ck"), RESUME="1")
    assert_close(resumed["losses"], one["losses"][3:])


# Sequence parallelism with a fused projection: the column layer's `stride=2` gate and up parts of
# a gated MLP, the row layer taking the product as it is, both along the sequence.
SEQUENCE_FUSED_PROGRAM = SEQUENCE_PROGRAM.replace(
    "hidden, 4 * hidden, gather_output=False, sequence_parallel_enabled=True, sequence_dimension=SEQ_DIM",
    "hidden, 2 * 4 * hidden, gather_output=False, stride=2, sequence_parallel_enabled=True, sequence_dimension=SEQ_DIM",
).replace(
    "        return x + self.down(torch.tanh(self.up(self.norm(x))))\n",
    "        gate, up = self.up(self.norm(x)).chunk(2, dim=-1)\n"
    "        return x + self.down(torch.tanh(gate) * torch.sigmoid(up))\n",
)


def test_fused_projections_along_the_sequence_equal_one_process(tmp_path: Path) -> None:
    (one,) = run_program(tmp_path, processes=1, tp=1, program=SEQUENCE_FUSED_PROGRAM)
    migrated = (tmp_path / "train.py").read_text()
    assert "ColwiseParallel(input_layouts=Shard(SEQ_DIM), output_layouts=strided_shard(2))" in migrated
    ranks = run_program(tmp_path, processes=2, tp=2, program=SEQUENCE_FUSED_PROGRAM)
    for record in ranks:
        assert_close(record["losses"], one["losses"])
        for name, grad in one["grads"].items():
            assert_close(record["grads"][name], grad)
    assert one["losses"][0] != one["losses"][-1]


# The same program with its layers' sequence parallelism read from the run's configuration.
SEQUENCE_AT_RUN_TIME_PROGRAM = SEQUENCE_PROGRAM.replace(
    "sequence_parallel_enabled=True", "sequence_parallel_enabled=SEQUENCE_PARALLEL"
).replace("SEQ_DIM = 1", 'SEQUENCE_PARALLEL = os.environ.get("SEQUENCE_PARALLEL", "1") == "1"\nSEQ_DIM = 1')


def test_sequence_parallelism_chosen_at_run_time_equals_one_process(tmp_path: Path) -> None:
    (one,) = run_program(tmp_path, processes=1, tp=1, program=SEQUENCE_AT_RUN_TIME_PROGRAM)
    migrated = " ".join((tmp_path / "train.py").read_text().split())  # the choice may span lines
    assert "ColwiseParallel(input_layouts=Shard(SEQ_DIM)) if SEQUENCE_PARALLEL else" in migrated
    ranks = run_program(tmp_path, processes=2, tp=2, program=SEQUENCE_AT_RUN_TIME_PROGRAM)
    for record in ranks:
        assert_close(record["losses"], one["losses"])
        for name, grad in one["grads"].items():
            assert_close(record["grads"][name], grad)
    assert one["losses"][0] != one["losses"][-1]


def test_data_parallel_replicas_average_their_shards_as_nxd_did(tmp_path: Path) -> None:
    """NxD's groups are [PP, DP, TP] with TP contiguous: rank r is TP rank r % tp, DP rank r // tp.
    DP=2 x TP=2 (four processes) trains as DP=2 alone does, every rank ending with the same model."""
    two = run_program(tmp_path, processes=2, tp=1, program=DATA_PARALLEL_PROGRAM)
    four = run_program(tmp_path, processes=4, tp=2, program=DATA_PARALLEL_PROGRAM)
    assert [(r["tp_rank"], r["dp_rank"]) for r in four] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    for record in [*two, *four]:
        assert_close(record["losses"], two[0]["losses"])
        for name, value in two[0]["params"].items():
            assert_close(record["params"][name], value)
    assert two[0]["losses"][0] != two[0]["losses"][-1]


# NxD's ZeRO-1 optimizer built directly over NxD's AdamW: gradients averaged over the data-parallel
# ranks, their whole norm clipped (to 0.05, so that it clips), the optimizer stepped.
ZERO1_PROGRAM = (
    DATA_PARALLEL_PROGRAM.replace(
        "from torch import nn\n",
        "from neuronx_distributed.optimizer import NeuronZero1Optimizer\n"
        "from neuronx_distributed.utils.adamw_fp32_optim_params import AdamW_FP32OptimParams\n"
        "from torch import nn\n",
    )
    .replace(
        "    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n",
        "    optimizer = NeuronZero1Optimizer(\n"
        "        model.parameters(), AdamW_FP32OptimParams, lr=0.01, max_norm=0.05, pin_layout=False,\n"
        "        sharding_groups=parallel_state.get_data_parallel_replica_groups(),\n"
        "    )\n",
    )
    .replace("        xm.reduce_gradients(optimizer, groups=parallel_state.get_data_parallel_replica_groups())\n", "")
    .replace('record["losses"].append(', 'record.setdefault("norms", []).append(optimizer.grad_norm.item())\n        record["losses"].append(')
    .replace(
        "    record[\"params\"] = ",
        "    optimizer.save_sharded_state_dict(os.environ[\"RESULTS\"])\n"
        "    optimizer.load_sharded_state_dict(os.environ[\"RESULTS\"])\n"
        "    optimizer.step()  # with the state read back\n"
        "    record[\"params\"] = ",
    )
)


def test_zero1_optimizer_averages_and_clips_as_nxd_did(tmp_path: Path) -> None:
    """DP=2 x TP=2 trains as DP=2 alone, with the same clipped norms: ZeRO-1's sharded state changes
    where the optimizer's state lives, not what it computes."""
    two = run_program(tmp_path, processes=2, tp=1, program=ZERO1_PROGRAM, todos=2)  # its memory (FSDP2), AdamW's eps
    four = run_program(tmp_path, processes=4, tp=2, program=ZERO1_PROGRAM, todos=2)
    for record in [*two, *four]:
        assert_close(record["losses"], two[0]["losses"])
        assert_close(record["norms"], two[0]["norms"])
        for name, value in two[0]["params"].items():
            assert_close(record["params"][name], value)
    assert min(two[0]["norms"]) > 0.05  # every step clipped
    assert two[0]["losses"][0] != two[0]["losses"][-1]


def example_losses(tmp: Path, example: str, processes: int, tp: int, *args: str) -> list[float]:
    """The `step N loss X` lines of the migrated example."""
    return [numbers[0] for numbers in example_steps(tmp, example, processes, tp, *args)]


def example_steps(tmp: Path, example: str, processes: int, tp: int, *args: str) -> list[tuple[float, ...]]:
    """The numbers of each `step N loss X [norm Y]` line of the migrated example."""
    script = tmp / example
    if not script.exists():
        script.write_text(migrate((ROOT / "examples" / example).read_text(), example))
    out = torchrun(tmp, example, processes, "--tensor_parallel_size", str(tp), *args)
    return [tuple(float(n) for n in found if n) for found in re.findall(r"^step \d+ loss (\S+)(?: norm (\S+))?$", out, re.M)]


def test_example_trains_the_same_at_every_size(tmp_path: Path) -> None:
    one = example_losses(tmp_path, "nxd_tensor_parallel_gpt.py", 1, 1)
    assert len(one) == 5
    assert_close(example_losses(tmp_path, "nxd_tensor_parallel_gpt.py", 2, 2), one)
    # both data-parallel replicas print
    assert_close(sorted(example_losses(tmp_path, "nxd_tensor_parallel_gpt.py", 4, 2)), sorted(one + one))


def test_sequence_parallel_example_trains_the_same_at_every_size(tmp_path: Path) -> None:
    one = example_losses(tmp_path, "nxd_sequence_parallel_gpt.py", 1, 1)
    assert len(one) == 5
    assert_close(example_losses(tmp_path, "nxd_sequence_parallel_gpt.py", 2, 2), one)


def _program(folder: Path, model: str = MODEL_FILE) -> Path:
    folder.mkdir()
    (folder / "modeling.py").write_text(model)
    (folder / "train.py").write_text(SCRIPT_FILE)
    return folder


def assert_trains_as_one_process(folder: Path) -> None:
    """The migrated `train.py` of `folder`: its four losses at TP=2 are those of one process."""

    def losses(processes: int) -> list[float]:
        out = torchrun(folder, "train.py", processes, "--tensor_parallel_size", str(processes))
        return [float(value) for value in re.findall(r"^step \d+ loss (\S+)$", out, re.M)]

    one = losses(1)
    assert len(one) == 4
    assert_close(losses(2), one)


def test_a_script_and_its_model_file_migrate_together_and_train_as_one_process(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    assert main(["rewrite", str(folder), "-q"]) == 0
    assert (folder / "parallel_mesh.py").read_text() == MESH_MODULE_TEXT
    model, script = (folder / "modeling.py").read_text(), (folder / "train.py").read_text()
    assert "neuronx_distributed" not in model + script
    assert 'parallel_mesh.mesh["tp"]' in model and "parallel_mesh.mesh = init_device_mesh(" in script
    assert_trains_as_one_process(folder)
    # A second run finds nothing left to do.
    assert main(["rewrite", str(folder), "--check", "-q"]) == 0


# The same script on NxD's trainer API: its configuration sets the groups up, as
# `initialize_model_parallel` does, so it is the file of the program that builds the mesh.
TRAINER_SCRIPT_FILE = (
    SCRIPT_FILE.replace("import torch_xla.core.xla_model as xm\n", "import neuronx_distributed as nxd\nimport torch_xla.core.xla_model as xm\n")
    .replace(
        "    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tensor_parallel_size)\n",
        "    config = nxd.neuronx_distributed_config(tensor_parallel_size=args.tensor_parallel_size)\n",
    )
    .replace(
        "    model = Decoder().to(device)\n    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)\n",
        "    model = nxd.initialize_parallel_model(config, Decoder, False)\n"
        "    optimizer = nxd.initialize_parallel_optimizer(config, torch.optim.AdamW, model.parameters(), lr=1e-2)\n",
    )
)


def test_a_trainer_script_and_its_model_file_migrate_together_and_train_as_one_process(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    (folder / "train.py").write_text(TRAINER_SCRIPT_FILE)
    assert "nxd.neuronx_distributed_config(" in TRAINER_SCRIPT_FILE and "initialize_model_parallel" not in TRAINER_SCRIPT_FILE
    assert main(["rewrite", str(folder), "-q"]) == 0
    model, script = (folder / "modeling.py").read_text(), (folder / "train.py").read_text()
    assert "neuronx_distributed" not in model + script
    assert "parallel_mesh.mesh = init_device_mesh(" in script
    assert_trains_as_one_process(folder)


def test_one_file_left_to_a_person_leaves_the_whole_program(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program", MODEL_FILE.replace("gather_output=False)", "gather_output=False, skip_bias_add=True)"))
    assert main(["rewrite", str(folder), "-q"]) == 1
    assert not (folder / "parallel_mesh.py").exists()
    script = (folder / "train.py").read_text()
    assert "parallel_state.initialize_model_parallel(" in script
    assert "`modeling.py`, which shares its mesh, is left to a person (`ColumnParallelLinear(skip_bias_add=True)`" in script
    assert "layers.ColumnParallelLinear(" in (folder / "modeling.py").read_text()


def test_the_script_alone_is_left_while_its_model_file_uses_nxd(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    assert main(["rewrite", str(folder / "train.py"), "-q"]) == 1
    assert "`modeling` next to this file uses neuronx-distributed as well: migrate the two together" in (folder / "train.py").read_text()
    assert not (folder / "parallel_mesh.py").exists()


def test_a_mesh_module_of_the_user_s_own_is_never_touched(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    (folder / "parallel_mesh.py").write_text("MESH = 'mine'\n")
    assert main(["rewrite", str(folder), "-q"]) == 1
    assert (folder / "parallel_mesh.py").read_text() == "MESH = 'mine'\n"
    assert "`parallel_mesh.py` is in the folder already and was not written by this tool" in (folder / "train.py").read_text()


def test_the_mesh_module_is_shown_and_written_where_the_copies_go(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _program(tmp_path / "program")
    assert main(["rewrite", str(folder), "--diff"]) == 1
    assert "+mesh = None" in capsys.readouterr().out
    assert not (folder / "parallel_mesh.py").exists()
    assert main(["rewrite", str(folder), "--output-dir", str(tmp_path / "out"), "-q"]) == 0
    assert (tmp_path / "out" / "parallel_mesh.py").read_text() == MESH_MODULE_TEXT
    assert not (folder / "parallel_mesh.py").exists()


def test_trainer_example_tensor_parallel_and_a_checkpoint_reloaded_at_another_size(tmp_path: Path) -> None:
    """The NxD trainer API (configuration, model, optimizer that averages and clips) migrated:
    TP=2 trains as one process does, and a checkpoint written at TP=2 resumes at TP=1."""
    example = "nxd_trainer_zero1.py"
    one = example_steps(tmp_path, example, 1, 1)
    assert len(one) == 4 and min(norm for _, norm in one) > 0.5  # clipping acted
    assert_close(example_steps(tmp_path, example, 2, 2, "--checkpoint-dir", "ck", "--save-at", "1"), one)
    assert (tmp_path / "ck" / "newest").read_text() == "step_1"
    assert_close(example_steps(tmp_path, example, 1, 1, "--checkpoint-dir", "ck", "--resume"), one[2:])


def test_trainer_example_zero1_trains_as_plain_data_parallelism(tmp_path: Path) -> None:
    """NxD's ZeRO-1 (FSDP2 over the data-parallel ranks natively) beside TP=2, four processes,
    gives the losses and norms of two data-parallel replicas averaging their gradients."""
    example = "nxd_trainer_zero1.py"
    plain = example_steps(tmp_path, example, 2, 1)
    assert len(plain) == 4
    assert_close(example_steps(tmp_path, example, 4, 2, "--zero1"), plain)


# A gradient read for its value: NxD's was this rank's slice of the sharded weight.
GRADIENT_READ_PROGRAM = """\
import json
import os

import torch
import torch.distributed as dist
from neuronx_distributed.parallel_layers import layers, parallel_state
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed


def main():
    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=int(os.environ["TP"]))
    model_parallel_xla_manual_seed(0)
    model = layers.ColumnParallelLinear(6, 8, gather_output=True)
    model(torch.arange(12.0).view(2, 6) / 10).square().sum().backward()
    squares = {name: torch.square(p.grad).sum().item() for name, p in model.named_parameters()}
    shapes = {name: list(p.grad.shape) for name, p in model.named_parameters() if p.grad is not None}
    with open(os.path.join(os.environ["RESULTS"], f"rank{dist.get_rank()}.json"), "w") as out:
        json.dump({"squares": squares, "shapes": shapes}, out)


if __name__ == "__main__":
    main()
"""


def test_a_gradient_read_is_this_rank_s_slice_as_in_nxd(tmp_path: Path) -> None:
    (one,) = run_program(tmp_path, processes=1, tp=1, program=GRADIENT_READ_PROGRAM)
    ranks = run_program(tmp_path, processes=2, tp=2, program=GRADIENT_READ_PROGRAM)
    assert one["shapes"] == {"weight": [8, 6], "bias": [8]}
    for record in ranks:
        assert record["shapes"] == {"weight": [4, 6], "bias": [4]}  # each rank's rows
    for name, whole in one["squares"].items():
        assert_close(sum(record["squares"][name] for record in ranks), whole)  # the slices make the whole
        assert min(record["squares"][name] for record in ranks) > 0
