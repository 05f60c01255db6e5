"""A compiled training loop whose batches change length every step: one graph per length."""

import argparse

import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, tokens, mask):
        h = self.embed(tokens) * mask.unsqueeze(-1)
        return self.head(h.sum(1) / mask.sum(1, keepdim=True))


def batch(step, pad_to=None):
    g = torch.Generator().manual_seed(step)
    length = 5 + 2 * (step % 4)  # 5, 7, 9, 11, 5, ...
    tokens = torch.randint(1, 32, (4, length), generator=g)
    labels = (tokens.float().mean(1) > 16).long()
    mask = torch.ones(4, length)
    if pad_to is not None:
        tokens = nn.functional.pad(tokens, (0, pad_to - length))
        mask = nn.functional.pad(mask, (0, pad_to - length))
    return tokens, mask, labels


def main(pad_to=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Classifier()
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        tokens, mask, labels = batch(step, pad_to)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(compiled(tokens, mask), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
