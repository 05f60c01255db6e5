"""Train a small GPT-style decoder with neuronx-distributed tensor and sequence parallelism.

Between the attention and MLP blocks each rank holds only its part of the sequence: the norms and
residual adds work on that part, the column-parallel linears all-gather it on the way in and the
row-parallel linears reduce-scatter it on the way out (Megatron's sequence parallelism). The
embedding and the output head are split across the vocabulary; the loss is computed from the
split logits, with the last position of each sequence ignored (-100).

Launch on Trainium (old stack):
    torchrun --nproc_per_node=2 nxd_sequence_parallel_gpt.py --tensor_parallel_size 2
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)
from neuronx_distributed.parallel_layers import grads, layers, mappings, parallel_state
from neuronx_distributed.parallel_layers.layer_norm import LayerNorm
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from torch import nn

VOCAB, HIDDEN, HEADS, LAYERS, SEQ = 64, 32, 4, 2, 16
SEQUENCE_DIM = 1  # activations are (batch, sequence, hidden)


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        # Heads held by this rank.
        self.heads = heads // parallel_state.get_tensor_model_parallel_size()
        self.head_dim = hidden // heads
        self.qkv = layers.ColumnParallelLinear(
            hidden,
            3 * hidden,
            bias=False,
            gather_output=False,
            sequence_parallel_enabled=True,
            sequence_dimension=SEQUENCE_DIM,
        )
        self.out = layers.RowParallelLinear(
            hidden, hidden, input_is_parallel=True, sequence_parallel_enabled=True, sequence_dimension=SEQUENCE_DIM
        )

    def forward(self, x):
        qkv = self.qkv(x)  # the whole sequence, this rank's heads
        batch, seq, _ = qkv.shape
        q, k, v = qkv.view(batch, seq, self.heads, 3 * self.head_dim).transpose(1, 2).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = LayerNorm(hidden, sequence_parallel_enabled=True)
        self.attn = Attention(hidden, heads)
        self.norm2 = LayerNorm(hidden, sequence_parallel_enabled=True)
        self.up = layers.ColumnParallelLinear(
            hidden, 4 * hidden, gather_output=False, sequence_parallel_enabled=True, sequence_dimension=SEQUENCE_DIM
        )
        self.down = layers.RowParallelLinear(
            4 * hidden, hidden, input_is_parallel=True, sequence_parallel_enabled=True, sequence_dimension=SEQUENCE_DIM
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = layers.ParallelEmbedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(SEQ, HIDDEN)
        self.blocks = nn.ModuleList(Block(HIDDEN, HEADS) for _ in range(LAYERS))
        self.norm = LayerNorm(HIDDEN, sequence_parallel_enabled=True)
        self.head = layers.ColumnParallelLinear(HIDDEN, VOCAB, bias=False, gather_output=False)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        # Enter the sequence-parallel region: keep this rank's part of the sequence.
        x = mappings.scatter_to_sequence_parallel_region(x, sequence_dimension=SEQUENCE_DIM)
        for block in self.blocks:
            x = block(x)
        # Leave it: the head needs the whole sequence.
        x = mappings.gather_from_sequence_parallel_region(self.norm(x), SEQUENCE_DIM, to_model_parallel=False)
        return self.head(x)


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
        ids, labels = data[step, :, :-1].to(device), data[step, :, 1:].clone().to(device)
        labels[:, -1] = -100  # not scored
        optimizer.zero_grad()
        per_token = parallel_cross_entropy(model(ids), labels)
        scored = (labels != -100).float()
        loss = (per_token * scored).sum() / scored.sum()
        loss.backward()
        grads.allreduce_sequence_parallel_gradients(optimizer)  # the norms saw only part of the sequence
        grads.clip_grad_norm(model.parameters(), args.max_grad_norm)
        optimizer.step()
        xm.mark_step()
        if parallel_state.get_tensor_model_parallel_rank() == 0:
            print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
