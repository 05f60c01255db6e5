"""Looks torch up before importing it, as libraries that ask what is installed do, then trains."""

import importlib.util

assert importlib.util.find_spec("torch") is not None
import torch  # noqa: E402

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    optimizer.zero_grad()
    loss = model(torch.randn(3, 4)).pow(2).mean()
    loss.backward()
    optimizer.step()
