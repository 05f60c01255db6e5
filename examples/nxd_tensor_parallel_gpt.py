"""Train a small GPT-style decoder with neuronx-distributed tensor parallelism.

Attention and MLP use column-parallel then row-parallel linears (the Megatron layout), the token
embedding and the output head are split across the vocabulary, and the loss is computed from the
split logits. Each rank holds 1/TP of the attention heads and of the MLP, so the model code
divides its head count by the tensor-parallel size.

Launch on Trainium (old stack):
    torchrun --nproc_per_node=2 nxd_tensor_parallel_gpt.py --tensor_parallel_size 2
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)
from neuronx_distributed.parallel_layers import grads, layers, parallel_state
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from torch import nn

VOCAB, HIDDEN, HEADS, LAYERS, SEQ = 64, 32, 4, 2, 16


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        # Heads held by this rank.
        self.heads = heads // parallel_state.get_tensor_model_parallel_size()
        self.head_dim = hidden // heads
        self.q = layers.ColumnParallelLinear(hidden, hidden, bias=False, gather_output=False)
        self.k = layers.ColumnParallelLinear(hidden, hidden, bias=False, gather_output=False)
        self.v = layers.ColumnParallelLinear(hidden, hidden, bias=False, gather_output=False)
        self.out = layers.RowParallelLinear(hidden, hidden, input_is_parallel=True)

    def forward(self, x):
        batch, seq, _ = x.shape
        q, k, v = (
            proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden)
        self.up = layers.ColumnParallelLinear(hidden, 4 * hidden, gather_output=False)
        self.down = layers.RowParallelLinear(4 * hidden, hidden, input_is_parallel=True)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = layers.ParallelEmbedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(SEQ, HIDDEN)
        self.blocks = nn.ModuleList(Block(HIDDEN, HEADS) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = layers.ColumnParallelLinear(HIDDEN, VOCAB, bias=False, gather_output=False)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor_parallel_size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    args = parser.parse_args()

    dist.init_process_group("xla")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tensor_parallel_size)
    device = xm.xla_device()

    model_parallel_xla_manual_seed(0)  # every rank builds the same full weights and keeps its slice
    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = torch.randint(0, VOCAB, (args.steps, args.batch_size, SEQ + 1), generator=torch.Generator().manual_seed(1))

    for step in range(args.steps):
        ids, labels = data[step, :, :-1].to(device), data[step, :, 1:].to(device)
        optimizer.zero_grad()
        loss = parallel_cross_entropy(model(ids), labels).mean()  # from this rank's slice of the vocabulary
        loss.backward()
        grads.clip_grad_norm(model.parameters(), args.max_grad_norm)  # the norm of the whole model
        optimizer.step()
        xm.mark_step()
        if parallel_state.get_tensor_model_parallel_rank() == 0:
            print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
