"""Data-parallel training with xmp.spawn on the old PyTorch/XLA stack.

Old-stack patterns shown here:
  * ``xmp.spawn(_mp_fn, args=(flags,))`` with the classic ``def _mp_fn(index, flags)``
  * ``DistributedSampler(num_replicas=xr.world_size(), rank=xr.global_ordinal())``
  * ``xm.optimizer_step(optimizer)``, which all-reduces the gradients across replicas
  * ``xm.master_print(...)``, ``xm.is_master_ordinal()``, ``xm.rendezvous('init')``
  * ``xm.save(model.state_dict(), path)`` (only the master ordinal writes)

Launch (one replica per NeuronCore; xmp.spawn picks the device count itself):
    PJRT_DEVICE=NEURON NEURON_RT_NUM_CORES=2 python xla_spawn_multiprocess.py
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=2 python xla_spawn_multiprocess.py   # testing
``--nprocs`` is passed straight to xmp.spawn; torch_xla 2.9 only accepts 1 or None.
"""
import argparse
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


class MLP(nn.Module):
    def __init__(self, in_dim=16, hidden=32, num_classes=3, seed=0):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        # explicit generator so every replica starts from identical weights
        g = torch.Generator().manual_seed(seed)
        for p in self.parameters():
            nn.init.normal_(p, std=0.2, generator=g)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def get_dataset(n, in_dim=16, num_classes=3):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(n, in_dim, generator=g)
    y = (x[:, :num_classes] * 2.0 + 0.1 * torch.randn(n, num_classes, generator=g)).argmax(1)
    return TensorDataset(x, y)


def _mp_fn(index, flags):
    torch.manual_seed(flags.seed)
    device = xm.xla_device()
    world_size = xr.world_size()
    rank = xr.global_ordinal()

    # each replica only sees its shard of the data
    dataset = get_dataset(flags.steps * flags.batch_size * world_size)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=flags.batch_size, sampler=sampler, drop_last=True)
    device_loader = pl.MpDeviceLoader(loader, device)

    model = MLP(seed=flags.seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=flags.lr)
    loss_fn = nn.CrossEntropyLoss()

    # wait for every replica before starting the loop
    xm.rendezvous('init')
    xm.master_print(f"world_size={world_size} index={index} device={device}")

    model.train()
    for step, (x, y) in enumerate(device_loader):
        if step >= flags.steps:
            break
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)  # all-reduce grads + step
        xm.mark_step()
        xm.master_print(f"step {step} loss {loss.item():.6f}")

    if xm.is_master_ordinal():
        print(f"[ordinal {rank}] saving checkpoint to {flags.ckpt}", flush=True)
    xm.save(model.state_dict(), flags.ckpt)


def parse_flags():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8, help="per replica")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nprocs", type=int, default=None,
                        help="passed to xmp.spawn (None = all devices)")
    parser.add_argument("--ckpt", default=os.path.join(tempfile.gettempdir(), "xla_spawn_mlp.pt"))
    return parser.parse_args()


if __name__ == '__main__':
    flags = parse_flags()
    xmp.spawn(_mp_fn, args=(flags,), nprocs=flags.nprocs)
