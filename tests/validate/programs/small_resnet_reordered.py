"""The faithful copy of `small_resnet_train.py`: the same model and training, but every
convolution sums over its input channels in two halves, as a backend with another reduction order
does. Its results differ from the original's by float32 rounding alone.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SplitConv2d(nn.Conv2d):
    """A convolution computed as the sum of two, over each half of the input channels."""

    def forward(self, x):
        half = self.in_channels // 2
        low = F.conv2d(x[:, :half], self.weight[:, :half], None, self.stride, self.padding)
        high = F.conv2d(x[:, half:], self.weight[:, half:], self.bias, self.stride, self.padding)
        return low + high


class Block(nn.Module):
    def __init__(self, channels_in, channels, stride):
        super().__init__()
        self.conv1 = SplitConv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = SplitConv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or channels_in != channels:
            self.down = nn.Sequential(
                SplitConv2d(channels_in, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = SplitConv2d(3, 16, 3, 1, 1, bias=False)
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
