"""torchrun + the 'xla' process group on the old PyTorch/XLA stack.

Old-stack patterns shown here:
  * ``import torch_xla.distributed.xla_backend`` (registers the 'xla' c10d backend)
  * ``dist.init_process_group('xla', init_method='xla://')``
  * ``xm.xla_device()``, ``xr.world_size()``, ``xr.global_ordinal()``
  * no DDP wrapper: ``xm.optimizer_step(optimizer)`` all-reduces the gradients
  * ``xm.all_reduce(xm.REDUCE_SUM, tensor)`` for an accuracy metric
  * ``xm.mark_step()`` once per step

Launch (one process per NeuronCore):
    PJRT_DEVICE=NEURON torchrun --nproc_per_node=2 xla_torchrun_pg.py
    PJRT_DEVICE=CPU    torchrun --nproc_per_node=2 xla_torchrun_pg.py   # testing
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
import torch_xla.distributed.xla_backend  # noqa: F401  (registers 'xla' backend)


class TinyConvNet(nn.Module):
    """2 conv layers + linear head on 1x16x16 'images'"""

    def __init__(self, num_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.head = nn.Linear(16 * 8 * 8, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(x.flatten(1))


def synthetic_batch(step, rank, batch_size, num_classes=4):
    # deterministic per (step, rank) so every launch sees the same data
    g = torch.Generator().manual_seed(1000 * step + rank)
    y = torch.randint(0, num_classes, (batch_size,), generator=g)
    x = torch.randn(batch_size, 1, 16, 16, generator=g) * 0.5
    # make the class visible in one quadrant of the image
    for c in range(num_classes):
        r, col = divmod(c, 2)
        x[y == c, :, r * 8:(r + 1) * 8, col * 8:(col + 1) * 8] += 1.0
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=8)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--lr', type=float, default=0.05)
    args = parser.parse_args()

    dist.init_process_group('xla', init_method='xla://')

    device = xm.xla_device()
    world_size = xr.world_size()
    rank = xr.global_ordinal()
    if rank == 0:
        print(f'world_size {world_size} (dist says {dist.get_world_size()})', flush=True)

    torch.manual_seed(0)  # same init on every rank
    model = TinyConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for step in range(args.steps):
        x, y = synthetic_batch(step, rank, args.batch_size)
        x, y = x.to(device), y.to(device)

        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        # gradients are summed over ranks in here, no DDP needed
        xm.optimizer_step(optimizer)

        correct = (logits.argmax(dim=1) == y).sum().float()
        correct = xm.all_reduce(xm.REDUCE_SUM, correct)
        xm.mark_step()

        if rank == 0:
            acc = correct.item() / (args.batch_size * world_size)
            print(f'step {step} loss {loss.item():.6f} acc {acc:.4f}', flush=True)

    dist.destroy_process_group()


if __name__ == '__main__':
    main()
