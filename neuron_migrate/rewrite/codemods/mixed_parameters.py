"""Optimizers over a model whose parameters are partly DTensors (the sharded layers) and partly
plain tensors (the rest).

torch's optimizers run their multi-tensor (`foreach`) kernels by default on accelerators, and
those kernels refuse a list that mixes DTensors with plain tensors ("got mixed torch.Tensor and
DTensor"): the first `step()` fails on the device, while on the CPU, where the loop over the
parameters is the default, the same program trains. Built with `foreach=False`, it steps alike on
both. The codemods that shard some of a model's layers share this.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Codemod, append_arg
from neuron_migrate.rewrite.codemods.optimum.support import make_arg

# torch's optimizers that take `foreach=`, and transformers 4's AdamW, which becomes torch's.
FOREACH_OPTIMIZERS = frozenset(
    {
        *(
            f"torch.optim.{name}"
            for name in ("Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD")
        ),
        "transformers.AdamW",
        "transformers.optimization.AdamW",
    }
)
WHY = "# foreach=False: torch's multi-tensor kernels take DTensor and plain parameters only apart"
OPTION = "foreach=False"


def foreach_off(codemod: Codemod, optimizer: str | None, args: Sequence[cst.Arg]) -> bool:
    """Should an optimizer of class `optimizer` (qualified), built with `args`, get `foreach=False`?
    Says why above the statement when it should: not for a class that takes no such option, nor
    where the call chooses (`foreach=`, `fused=`)."""
    given = {a.keyword.value for a in args if a.keyword is not None}
    if optimizer not in FOREACH_OPTIMIZERS or given & {"foreach", "fused"} or any(a.star for a in args):
        return False
    codemod.ctx.comment(WHY)
    codemod.changed("`foreach=False`: the optimizer's parameters mix DTensors and plain tensors")
    return True


def without_foreach(codemod: Codemod, call: cst.Call) -> cst.Call:
    """`call`, a torch optimizer over a partly sharded model, with `foreach=False`."""
    if not foreach_off(codemod, codemod.qualify(call.func), call.args):
        return call
    return call.with_changes(args=append_arg(call, call.args, make_arg("foreach", "False")))
