"""NM704: `init_process_group(device_id=...)` and `split_group`, which need split support Neuron lacks."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, keyword


class DeviceIdSplitGroup(Rule):
    """Flags `init_process_group(..., device_id=...)` and `torch.distributed.split_group(...)`.

    ## What it does
    Finds the `device_id=` argument of `init_process_group` and calls of `split_group`.

    ## Why
    With `device_id`, later `DeviceMesh` creation uses `split_group`, which "fails on backends
    without split support (e.g. Neuron)"; transformers avoids `device_id` for non-NCCL backends
    for this reason.

    ## Example
    ```python
    dist.init_process_group(backend="neuron", device_id=torch.device("neuron", local_rank))
    ```

    ## Use instead
    ```python
    dist.init_process_group(backend="neuron")
    ```

    ## Fix safety
    Safe for `device_id=`, which is removed: the process group still binds to the current
    device when first used. No fix for `split_group`.
    """

    code = "NM704"
    name = "device-id-split-group"
    summary = "`device_id=`/`split_group` need group splitting, which Neuron lacks"
    calls = frozenset({"init_process_group", "split_group"})
    VALID = ("import torch.distributed as dist\n\ndist.init_process_group(backend='neuron')\n",)
    INVALID = (
        Invalid(
            "import torch.distributed as dist\n\ndist.init_process_group(backend='neuron', device_id=dev)\n",
            fixed="import torch.distributed as dist\n\ndist.init_process_group(backend='neuron')\n",
        ),
        Invalid(
            "import torch.distributed as dist\n\ng = dist.split_group(parent, [[0, 1]])\n", line=3
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func) or ""
        if not qualified.startswith("torch.distributed"):
            return
        if name == "split_group":
            self.report(
                node, "`split_group` fails on backends without split support, Neuron's included"
            )
            return
        given = keyword(node, "device_id")
        if given is not None:
            fix = self.ctx.fix(self.ctx.remove_keyword(node, given), "remove `device_id`")
            self.report(
                given,
                "`device_id=` makes device meshes split the group, which Neuron's backend cannot do; remove it",
                fix=fix,
            )
