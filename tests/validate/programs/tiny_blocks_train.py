"""Trains a small residual network on token ids: embedding, three pre-norm blocks, a head.

Written to be migrated wrong on purpose (tests/validate/test_validate_localize.py): each test
plants one mistake in a copy and expects validate to name the step and module where it shows.
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=1e-12)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.fc(self.norm(x)))


class Net(nn.Module):
    def __init__(self, vocab=32, width=16, layers=3, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
        self.head = nn.Linear(width, classes)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h.mean(dim=1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        g = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, 32, (8, 6), generator=g)
        labels = torch.randint(0, 4, (8,), generator=g)
        loss = nn.functional.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
