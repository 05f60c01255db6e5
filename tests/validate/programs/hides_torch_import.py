"""Imports torch past validate's import hook (it takes the hook off sys.meta_path), then trains:
the capture cannot attach."""

import sys

sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_ImportWatcher"]
import torch  # noqa: E402

model = torch.nn.Linear(4, 2)
loss = model(torch.randn(3, 4)).pow(2).mean()
loss.backward()
