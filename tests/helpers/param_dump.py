"""Runs a training script unchanged and, at exit, saves what its optimizers trained.

Used as `torchrun ... -m tests.helpers.param_dump script.py args...`: each process writes
`$PARAM_DUMP_DIR/rank<R>.pt` with the parameters of every optimizer it stepped, so a test can
check that ranks agree after training on different shards (gradients were averaged).
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys

import torch

_optimizers: list[torch.optim.Optimizer] = []
_original_step = torch.optim.Optimizer.step


def _dump() -> None:
    out = os.environ["PARAM_DUMP_DIR"]
    rank = int(os.environ.get("RANK", 0))
    params = [p.detach().cpu().clone() for opt in _optimizers for g in opt.param_groups for p in g["params"]]
    torch.save(params, os.path.join(out, f"rank{rank}.pt"))


def _patch_optimizer_init() -> None:
    original_init = torch.optim.Optimizer.__init__

    def init(self: torch.optim.Optimizer, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)  # type: ignore[arg-type]
        _optimizers.append(self)

    torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    _patch_optimizer_init()
    atexit.register(_dump)
    script, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
