"""bf16 training through the XLA_USE_BF16 environment variable (old PyTorch/XLA stack).

Old-stack patterns shown here:
  * ``os.environ["XLA_USE_BF16"] = "1"`` set at the top, *before* torch_xla is
    imported: the XLA bridge then stores every float32 tensor as bf16 on the device
  * code that reads ``XLA_USE_BF16`` back to decide behaviour (loss scaling off,
    looser grad clipping)
  * ``NEURON_CC_FLAGS`` / ``NEURON_RT_STOCHASTIC_ROUNDING_EN`` set next to it, as Trainium scripts do
  * ``xm.xla_device()``, ``xm.optimizer_step(optimizer)``, ``xm.mark_step()``

Launch:
    PJRT_DEVICE=NEURON python xla_bf16_env.py --steps 8
    PJRT_DEVICE=CPU    python xla_bf16_env.py --steps 8          # testing
    PJRT_DEVICE=CPU    python xla_bf16_env.py --no-bf16           # fp32 baseline
"""
import os
import sys

# must happen before torch_xla is imported
if "--no-bf16" not in sys.argv:
    os.environ["XLA_USE_BF16"] = "1"
os.environ.setdefault("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
os.environ["NEURON_CC_FLAGS"] = os.environ.get("NEURON_CC_FLAGS", "") + " --model-type=transformer"

import argparse

import torch
import torch.nn as nn

import torch_xla.core.xla_model as xm


class TinyAttentionBlock(nn.Module):
    """one pre-norm self-attention block + MLP + classifier, transformer-ish"""

    def __init__(self, vocab=64, dim=32, heads=4, seq_len=16, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, seq_len, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.cls = nn.Linear(dim, num_classes)

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos
        a = self.norm1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        h = h + self.mlp(self.norm2(h))
        return self.cls(h.mean(dim=1))


def make_batch(step, batch_size, seq_len=16, vocab=64):
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    # label: does the sequence contain more "high" tokens than "low" ones
    labels = ((tokens >= vocab // 2).sum(dim=1) > seq_len // 2).long()
    return tokens, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--no-bf16", action="store_true", help="do not set XLA_USE_BF16")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = xm.xla_device()

    # with XLA_USE_BF16 the weights live in bf16 on device: no loss scaling,
    # and clip a bit harder because bf16 grads are noisy
    if os.environ.get("XLA_USE_BF16") == "1":
        print("XLA_USE_BF16=1: training in bf16")
        max_grad_norm = 0.5
    else:
        print("training in fp32")
        max_grad_norm = 1.0

    model = TinyAttentionBlock().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()

    model.train()
    for step in range(args.steps):
        tokens, labels = make_batch(step, args.batch_size)
        tokens, labels = tokens.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(tokens), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        xm.optimizer_step(optimizer)
        xm.mark_step()
        print(f"step {step} loss {loss.item():.6f}")

    # note: the tensor still *reports* float32 even though XLA keeps it in bf16
    print("param dtype seen by PyTorch:", next(model.parameters()).dtype)


if __name__ == "__main__":
    main()
