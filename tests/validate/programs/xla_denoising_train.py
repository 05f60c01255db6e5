"""Trains a small denoiser of action trajectories, diffusion-planning style, on PyTorch/XLA.

Every step draws on the XLA device: the noise added to the trajectories (`torch.randn_like`),
the diffusion timestep of each sample (`torch.randint(..., device=device)`) and the dropout
masks, so two stacks given the same seed draw different numbers unless validate routes them.
"""

import argparse

import torch
import torch.nn as nn
import torch_xla.core.xla_model as xm


class Denoiser(nn.Module):
    def __init__(self, horizon=8, actions=3, width=32, steps=10):
        super().__init__()
        self.time = nn.Embedding(steps, width)
        self.inp = nn.Linear(horizon * actions, width)
        self.body = nn.Sequential(nn.GELU(), nn.Dropout(0.1), nn.Linear(width, width), nn.GELU())
        self.out = nn.Linear(width, horizon * actions)

    def forward(self, noisy, t):
        h = self.inp(noisy.flatten(1)) + self.time(t)
        return self.out(self.body(h)).view_as(noisy)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = xm.xla_device()
    model = Denoiser().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    alphas = torch.linspace(0.99, 0.5, 10).to(device)
    generator = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        plans = torch.randn(16, 8, 3, generator=generator).cumsum(dim=1).to(device)
        t = torch.randint(0, 10, (16,), device=device)
        noise = torch.randn_like(plans)
        a = alphas[t].view(-1, 1, 1)
        noisy = a.sqrt() * plans + (1 - a).sqrt() * noise
        loss = nn.functional.mse_loss(model(noisy, t), noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        xm.mark_step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
