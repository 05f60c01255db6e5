"""Older-style (torch_xla <= 2.6) data-parallel script with the removed ordinal APIs.

Old-stack patterns shown here:
  * ``from torch_xla.core import xla_model as xm`` (from-import spelling of the xm alias)
  * ``xm.xrt_world_size()`` and ``xm.get_ordinal()``: deprecated in torch_xla 2.5,
    REMOVED in 2.7, so on torch_xla 2.9 this script dies with
    ``AttributeError: module 'torch_xla.core.xla_model' has no attribute 'xrt_world_size'``
  * ``xm.get_local_ordinal()``, ``xm.is_master_ordinal()``, ``xm.master_print()``
  * ``pl.ParallelLoader(loader, [device]).per_device_loader(device)`` (pre-MpDeviceLoader style)
  * ``met.metrics_report()`` from ``torch_xla.debug.metrics`` printed at the end
  * ``xmp.spawn(_mp_fn, args=(flags,))``

Launch (as it was on torch_xla 2.1 / Neuron SDK 2.1x):
    PJRT_DEVICE=NEURON python xla_legacy_ordinals.py
    PJRT_DEVICE=CPU    python xla_legacy_ordinals.py    # fails on 2.9 (expected)
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from torch_xla.core import xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp


FLAGS = {}


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(20, 48)
        self.fc2 = nn.Linear(48, 48)
        self.fc3 = nn.Linear(48, 5)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=1)


def build_data(n):
    g = torch.Generator().manual_seed(7)
    x = torch.rand(n, 20, generator=g)
    y = (x[:, :5] + 0.05 * torch.randn(n, 5, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def train(flags):
    device = xm.xla_device()
    world_size = xm.xrt_world_size()
    rank = xm.get_ordinal()
    local_rank = xm.get_local_ordinal()
    print('rank {} (local {}) of {} on {}'.format(rank, local_rank, world_size, device))

    torch.manual_seed(flags.seed)
    model = Net().to(device)
    # scale the learning rate with the number of replicas, like the old samples did
    optimizer = torch.optim.SGD(model.parameters(), lr=flags.lr * world_size, momentum=0.5)

    dataset = build_data(flags.steps * flags.batch_size * world_size)
    sampler = None
    if world_size > 1:
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=flags.batch_size, sampler=sampler,
                        shuffle=False, drop_last=True)

    para_loader = pl.ParallelLoader(loader, [device])
    model.train()
    for step, (data, target) in enumerate(para_loader.per_device_loader(device)):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
        xm.master_print('step {} loss {:.6f}'.format(step, loss.item()))
        if step + 1 >= flags.steps:
            break

    if xm.is_master_ordinal():
        print(met.metrics_report())


def _mp_fn(index, flags):
    torch.set_default_dtype(torch.float32)
    train(flags)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=8)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--lr', type=float, default=0.1)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--nprocs', type=int, default=None)
    FLAGS = parser.parse_args()
    xmp.spawn(_mp_fn, args=(FLAGS,), nprocs=FLAGS.nprocs)
