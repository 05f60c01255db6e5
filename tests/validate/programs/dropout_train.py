"""Trains a small MLP with dropout. It never seeds: `validate` seeds both programs the same way."""

import argparse

import torch
import torch.nn as nn


def main(p=0.5):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
