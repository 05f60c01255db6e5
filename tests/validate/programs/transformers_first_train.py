"""One training step of a script that imports transformers before torch (transformers looks torch
up with `importlib.util.find_spec` while it imports)."""

# ruff: noqa: I001  (the order of these two imports is the point)
import transformers  # noqa: F401
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.randn(3, 4)).pow(2).mean()
loss.backward()
optimizer.step()
