"""Picks its device the way transformers (and its Trainer) does: the XLA device whenever torch_xla
is importable and USE_TORCH_XLA is not 0. A migration that still runs this way under a Python
with torch_xla trains on XLA."""

import torch
from transformers.utils import is_torch_xla_available

if is_torch_xla_available():
    import torch_xla

    device = torch_xla.device()
else:
    device = torch.device("cpu")

model = torch.nn.Linear(4, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(3, 4).to(device)
for _ in range(2):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    if device.type == "xla":
        torch_xla.sync()
print("trained on", device)
