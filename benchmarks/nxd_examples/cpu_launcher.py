"""Runs a migrated NxD BERT example on the CPU with a tiny model, without touching its code.

    python -m torch.distributed.run ... -m cpu_launcher SCRIPT [ARGS ...]

`benchmarks/nxd_examples.py` puts this folder on PYTHONPATH and starts every worker through it.
Before running SCRIPT as `__main__` it patches, from outside:

- `BertForPreTraining.from_pretrained` builds a seeded tiny model (the example asks the hub for
  bert-large-uncased and keeps only its config); dropout is off, because each tensor-parallel
  rank draws its own dropout mask for its heads and no two parallel sizes could then agree;
- the first `tie_weights()` of a model holding DTensors (the one the example calls once its
  attention layers are parallel) sets every parameter to values drawn from the parameter's name,
  each rank keeping its slice: the example draws its parallel layers' weights per rank with a std
  scaled by the tensor-parallel size, so its own initialisation differs between sizes by design;
- `torch.utils.tensorboard.SummaryWriter` records `add_scalar` as JSON lines in
  $NXD_EXAMPLES_SCALARS (full precision; the example prints its loss to four places), and
  tensorboard, not installed here, is not needed;
- `requests` answers the EC2 metadata address at once with a connection error, as off EC2.

Two controls, each off unless its variable is set: NXD_EXAMPLES_DTYPE=float64 turns the model to
float64 once its parameters are set (rounding can then not explain a difference), and
NXD_EXAMPLES_GRADIENT_MEAN runs SCRIPT's definitions, replaces its `average_gradients_in_group`
by the mean over the data-parallel group, then runs its `__main__` block.
"""

from __future__ import annotations

import ast
import json
import os
import runpy
import sys
import types
import zlib

import torch

TINY_BERT = dict(
    vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)  # fmt: skip
METADATA_HOST = "169.254.169.254"


def tiny_from_pretrained(cls, *args, **kwargs):
    import transformers

    torch.manual_seed(0)
    return cls(transformers.BertConfig(**TINY_BERT))


def deterministic_value(name: str, shape: torch.Size) -> torch.Tensor:
    """The whole (unsharded) value of parameter `name`: the same at every parallel size."""
    if name.endswith("bias"):
        return torch.zeros(shape)
    if "LayerNorm" in name:
        return torch.ones(shape)
    generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return torch.randn(shape, generator=generator) * 0.02


def set_parameters_by_name(model: torch.nn.Module) -> float:
    """Every parameter from its name, each DTensor keeping its slice; returns a checksum."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    checksum = 0.0
    with torch.no_grad():
        for name, param in model.named_parameters():
            full = deterministic_value(name, param.shape)
            if isinstance(param, DTensor):
                local = distribute_tensor(full, param.device_mesh, param.placements).to_local()
                param.to_local().copy_(local)
                checksum += float(param.full_tensor().double().abs().sum())
            else:
                param.copy_(full)
                checksum += float(param.double().abs().sum())
    return checksum


def patch_transformers() -> None:
    import transformers
    from torch.distributed.tensor import DTensor

    model_class = transformers.BertForPreTraining
    model_class.from_pretrained = classmethod(tiny_from_pretrained)
    tie_weights = model_class.tie_weights

    def tie_then_set(self, *args, **kwargs):
        result = tie_weights(self, *args, **kwargs)
        has_dtensors = any(isinstance(p, DTensor) for p in self.parameters())
        if has_dtensors and not getattr(self, "_nxd_examples_set", False):
            self._nxd_examples_set = True
            record("init checksum", set_parameters_by_name(self), 0)
            if os.environ.get("NXD_EXAMPLES_DTYPE") == "float64":
                self.to(torch.float64)
        return result

    model_class.tie_weights = tie_then_set


def record(tag: str, value, step) -> None:
    path = os.environ.get("NXD_EXAMPLES_SCALARS")
    if path and int(os.environ.get("RANK", "0")) == 0:
        with open(path, "a") as out:
            out.write(json.dumps({"tag": tag, "value": float(value), "step": int(step)}) + "\n")


class SummaryWriter:
    """What the example uses of tensorboard's writer; scalars go to $NXD_EXAMPLES_SCALARS."""

    def __init__(self, *args, **kwargs):
        pass

    def add_scalar(self, tag, value, step=None, *args, **kwargs):
        record(tag, value, -1 if step is None else step)

    def add_text(self, *args, **kwargs):
        pass

    def flush(self):
        pass

    def close(self):
        pass


def patch_tensorboard() -> None:
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = SummaryWriter
    sys.modules["torch.utils.tensorboard"] = module


def patch_requests() -> None:
    import requests

    for verb in ("get", "put"):
        original = getattr(requests, verb)

        def offline(url, *args, _original=original, **kwargs):
            if METADATA_HOST in str(url):
                raise requests.ConnectionError(f"{METADATA_HOST} is not reachable off EC2")
            return _original(url, *args, **kwargs)

        setattr(requests, verb, offline)


def main() -> None:
    script, *args = sys.argv[1:]
    patch_tensorboard()
    patch_requests()
    patch_transformers()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    if os.environ.get("NXD_EXAMPLES_GRADIENT_MEAN"):
        run_with_gradient_mean(script)
    else:
        runpy.run_path(script, run_name="__main__")


def average_gradients_over_replicas(optimizer, group):
    """The migrated `average_gradients_in_group`, dividing by the group's size instead of the
    world's, as NxD's own `bucket_allreduce_gradients` divides by the data-parallel size."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for param_group in optimizer.param_groups:
        for param in param_group["params"]:
            if param.grad is not None:
                grad = param.grad.to_local() if isinstance(param.grad, DTensor) else param.grad
                dist.all_reduce(grad, group=group)
                grad /= dist.get_world_size(group)


def run_with_gradient_mean(script: str) -> None:
    """Runs SCRIPT's definitions, swaps its `average_gradients_in_group` for the mean, then
    runs its `if __name__ == "__main__":` block: a control, the file itself is left as it is."""
    with open(script) as source:
        tree = ast.parse(source.read(), script)
    is_main = [
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body
    ]
    module = types.ModuleType("__main__")
    module.__file__ = script
    sys.modules["__main__"] = module
    definitions = [node for node, main in zip(tree.body, is_main, strict=True) if not main]
    exec(compile(ast.Module(definitions, []), script, "exec"), module.__dict__)
    if "average_gradients_in_group" not in module.__dict__:
        raise SystemExit(f"{script} defines no average_gradients_in_group to replace")
    module.average_gradients_in_group = average_gradients_over_replicas
    blocks = [node for node, main in zip(tree.body, is_main, strict=True) if main]
    exec(compile(ast.Module(blocks, []), script, "exec"), module.__dict__)


if __name__ == "__main__":
    main()
