"""Single-core Trainium training loop on the old PyTorch/XLA stack.

Old-stack patterns shown here:
  * ``import torch_xla.core.xla_model as xm`` and ``device = xm.xla_device()``
  * a host ``DataLoader`` wrapped in ``pl.MpDeviceLoader(loader, device)``
    (and ``len()`` taken on the device loader for the progress print)
  * ``xm.optimizer_step(optimizer)`` instead of ``optimizer.step()``
  * ``xm.mark_step()`` to cut the lazy graph once per step

Launch (one NeuronCore, or CPU for testing):
    PJRT_DEVICE=NEURON python xla_single_mpdeviceloader.py --steps 8
    PJRT_DEVICE=CPU    python xla_single_mpdeviceloader.py --steps 8
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


class MLP(nn.Module):
    def __init__(self, in_dim=32, hidden=64, num_classes=4):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.net(x)


def make_dataset(num_samples, in_dim=32, num_classes=4):
    # synthetic classification data, labels come from a fixed random projection
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(num_samples, in_dim, generator=g)
    w = torch.randn(in_dim, num_classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def parse_args():
    parser = argparse.ArgumentParser(description="single core MLP on XLA")
    parser.add_argument("--steps", type=int, default=8, help="number of training steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)

    # grab the XLA device (a NeuronCore on trn1)
    device = xm.xla_device()

    model = MLP().to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    # drop_last=True keeps every batch the same shape -> no recompiles
    dataset = make_dataset(args.steps * args.batch_size)
    train_loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, drop_last=True)
    # MpDeviceLoader moves the batches to the device in a background thread
    train_device_loader = pl.MpDeviceLoader(train_loader, device)
    num_batches = len(train_device_loader)
    print(f"training on {device} for {num_batches} batches")

    model.train()
    for step, (data, target) in enumerate(train_device_loader):
        if step >= args.steps:
            break
        optimizer.zero_grad()
        output = model(data)
        loss = loss_fn(output, target)
        loss.backward()
        xm.optimizer_step(optimizer)  # no gradient all-reduce needed with one replica
        xm.mark_step()  # execute the graph for this step
        print(f"step {step} loss {loss.item():.6f}")

    print("done ({}/{} batches)".format(min(args.steps, num_batches), num_batches))


if __name__ == "__main__":
    main()
