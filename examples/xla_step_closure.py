"""Newer torch_xla (2.5+) API style with step closures and autocast.

Old-stack patterns shown here:
  * ``device = torch_xla.device()`` (the non-deprecated spelling of xm.xla_device)
  * ``torch.autocast('xla', dtype=torch.bfloat16)`` around the forward pass
  * ``xm.add_step_closure(_log, args=(step, loss))``: ``_log`` calls ``loss.item()``
    only after the step's graph has executed, so logging does not force an early sync
  * ``torch_xla.sync()`` at the end of each step instead of ``xm.mark_step()``
  * ``xm.optimizer_step(optimizer)``

Launch:
    PJRT_DEVICE=NEURON python xla_step_closure.py --steps 8
    PJRT_DEVICE=CPU    python xla_step_closure.py --steps 8      # testing
"""
import argparse
import time

import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm


class ResidualMLP(nn.Module):
    def __init__(self, dim=32, depth=3):
        super().__init__()
        self.inp = nn.Linear(8, dim)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.SiLU()) for _ in range(depth)
        )
        self.out = nn.Linear(dim, 1)

    def forward(self, x):
        h = self.inp(x)
        for blk in self.blocks:
            h = h + blk(h)
        return self.out(h).squeeze(-1)


def target_fn(x):
    # smooth regression target
    return torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] - 0.25 * x[:, 3:].sum(dim=1)


_t0 = time.time()


def _log(step, loss):
    # runs after the graph for `step` has been executed -> .item() is cheap here
    print(f"step {step} loss {loss.item():.6f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--no-autocast", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()

    model = ResidualMLP().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    # fixed pool of data generated up front on the host
    g = torch.Generator().manual_seed(99)
    xs = torch.randn(args.steps, args.batch_size, 8, generator=g)

    for step in range(args.steps):
        x = xs[step].to(device)
        y = target_fn(x)
        optimizer.zero_grad()
        with torch.autocast("xla", dtype=torch.bfloat16, enabled=not args.no_autocast):
            pred = model(x)
        loss = nn.functional.mse_loss(pred.float(), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.add_step_closure(_log, args=(step, loss))
        torch_xla.sync()

    xm.wait_device_ops()
    print(f"finished {args.steps} steps in {time.time() - _t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
