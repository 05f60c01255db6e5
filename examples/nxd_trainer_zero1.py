"""Train a small decoder with neuronx-distributed's trainer API: ZeRO-1, clipping, checkpoints.

`neuronx_distributed_config` sets up tensor and data parallelism, `initialize_parallel_model`
builds the model on the device, and `initialize_parallel_optimizer` gives an optimizer that
averages the gradients over the data-parallel ranks, clips their norm to 0.5 and, with
`--zero1`, shards its state across those ranks. Each data-parallel replica trains on its own
batches. `--save-at N` writes a checkpoint after step N; `--resume` continues from the newest.

Launch on Trainium (old stack):
    torchrun --nproc_per_node=8 nxd_trainer_zero1.py --tensor_parallel_size 2 --zero1
"""

import argparse

import neuronx_distributed as nxd
import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)
from neuronx_distributed.parallel_layers import layers, parallel_state
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy
from neuronx_distributed.parallel_layers.random import model_parallel_xla_manual_seed
from torch import nn

VOCAB, HIDDEN, SEQ = 64, 32, 16


class Decoder(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = layers.ParallelEmbedding(vocab, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.up = layers.ColumnParallelLinear(hidden, 4 * hidden, gather_output=False)
        self.down = layers.RowParallelLinear(4 * hidden, hidden, input_is_parallel=True)
        self.head = layers.ColumnParallelLinear(hidden, vocab, bias=False, gather_output=False)

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.down(torch.relu(self.up(self.norm(x))))
        return self.head(x)  # logits split across the vocabulary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor_parallel_size", type=int, default=2)
    parser.add_argument("--zero1", action="store_true")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--save-at", type=int, default=-1)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("xla")
    nxd_config = nxd.neuronx_distributed_config(
        tensor_parallel_size=args.tensor_parallel_size,
        optimizer_config={"zero_one_enabled": args.zero1, "grad_clipping": True, "max_grad_norm": 0.5},
    )
    model_parallel_xla_manual_seed(0)
    model = nxd.initialize_parallel_model(nxd_config, Decoder, False, VOCAB, HIDDEN)
    optimizer = nxd.initialize_parallel_optimizer(nxd_config, torch.optim.AdamW, model.parameters(), lr=args.lr)

    start = 0
    if args.resume and nxd.has_checkpoint(args.checkpoint_dir):
        user_content = nxd.load_checkpoint(args.checkpoint_dir, model=model, optimizer=optimizer)
        start = user_content["step"] + 1

    device = xm.xla_device()
    replica = parallel_state.get_data_parallel_rank()
    data = torch.randint(0, VOCAB, (args.steps, 8, 4, SEQ + 1), generator=torch.Generator().manual_seed(1))
    for step in range(start, args.steps):
        batch = data[step, replica].to(device)
        loss = parallel_cross_entropy(model(batch[:, :-1]), batch[:, 1:]).mean()
        loss.backward()
        optimizer.step()  # averages over the data-parallel ranks, clips, steps
        optimizer.zero_grad()
        xm.mark_step()
        xm.master_print(f"step {step} loss {loss.item():.6f} norm {optimizer.grad_norm.item():.6f}")
        if step == args.save_at:
            nxd.save_checkpoint(args.checkpoint_dir, tag=f"step_{step}", model=model, optimizer=optimizer, user_content={"step": step})


if __name__ == "__main__":
    main()
