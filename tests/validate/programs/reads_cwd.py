"""Trains with the learning rate in ./lr.txt and writes ./trained.txt: both relative to its
working directory, like a script that keeps its data and checkpoints beside it."""

from pathlib import Path

import torch
import torch.nn as nn

if __name__ == "__main__":
    lr = float(Path("lr.txt").read_text())
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for _ in range(3):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    Path("trained.txt").write_text(f"{loss.item():.6f}\n")
