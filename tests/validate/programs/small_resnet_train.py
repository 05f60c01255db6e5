"""Trains a small ResNet (BatchNorm, batch 4) on random images: a model where BatchNorm over a
small batch amplifies float32 rounding step by step, so that two faithful runs part by more than
float32 tolerances within a few steps.

`small_resnet_reordered.py` is its faithful copy, whose convolutions sum over their input
channels in another order (tests/validate/test_validate_perturbation_floor.py).
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, channels_in, channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or channels_in != channels:
            self.down = nn.Sequential(
                nn.Conv2d(channels_in, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.layer1 = Block(16, 16, 1)
        self.layer2 = Block(16, 32, 2)
        self.layer3 = Block(32, 64, 2)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.relu(self.bn(self.stem(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.head(x.mean(dim=(2, 3)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = ResNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        g = torch.Generator().manual_seed(step)
        images = torch.randn(4, 3, 4, 4, generator=g)
        labels = torch.randint(0, 10, (4,), generator=g)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
