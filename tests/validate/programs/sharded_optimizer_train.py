"""Trains with an optimizer that, like ZeRO-1, steps a local optimizer over copies of the
parameters (its shards) and copies the result back. Run as is: the plain SGD it stands for."""

import torch
import torch.nn as nn


class ShardedSGD(torch.optim.Optimizer):
    def __init__(self, params, lr):
        params = list(params)
        super().__init__(params, {"lr": lr})
        self.shards = [p.detach().clone().requires_grad_() for p in params]
        self.local = torch.optim.SGD(self.shards, lr=lr)

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"]]
        for param, shard in zip(params, self.shards, strict=True):
            shard.grad = param.grad
        self.local.step()
        for param, shard in zip(params, self.shards, strict=True):
            param.copy_(shard)


def main(sharded=True):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = (ShardedSGD if sharded else torch.optim.SGD)(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    for _ in range(4):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(sharded=False)
