"""Why the optimizers of partly sharded models get `foreach=False`: torch's multi-tensor kernels,
the default on accelerators, refuse DTensor and plain parameters in one list; the loop takes both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from neuron_migrate.rewrite.engine import rewrite_source

PROGRAM = """\
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
model = nn.Sequential(parallelize_module(nn.Linear(4, 4), mesh, ColwiseParallel()), nn.LayerNorm(4))
for foreach in (False, True):
    optimizer = torch.optim.AdamW(model.parameters(), foreach=foreach)
    model(torch.randn(2, 4)).sum().backward()
    try:
        optimizer.step()
        print(f"foreach={foreach}: stepped")
    except Exception as error:
        print(f"foreach={foreach}: {type(error).__name__}")
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_multi_tensor_kernels_refuse_dtensor_and_plain_parameters_together() -> None:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["foreach=False: stepped", "foreach=True: RuntimeError"]


def test_an_optimizer_of_a_tensor_parallel_program_is_built_without_them() -> None:
    source = """\
import torch
from neuronx_distributed.parallel_layers import layers, parallel_state
from transformers import AdamW


def main():
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    model = torch.nn.Sequential(layers.ColumnParallelLinear(4, 4), torch.nn.LayerNorm(4))
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    chosen = torch.optim.AdamW(model.parameters(), fused=False)
    upgraded = AdamW(model.parameters(), lr=1e-3)  # transformers 4's, torch's natively
    return plain, chosen, upgraded
"""
    migrated = rewrite_source(source, "train.py").migrated
    assert "torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)" in migrated
    assert "torch.optim.AdamW(model.parameters(), fused=False)" in migrated  # the call chose
    assert "AdamW(model.parameters(), lr=1e-3, foreach=False, eps=1e-6, weight_decay=0.0)" in migrated
    assert "from torch.optim import AdamW" in migrated
    assert migrated.count("# foreach=False: torch's multi-tensor kernels") == 2
