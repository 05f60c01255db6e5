"""NM703: process groups and device meshes for `nccl`/`xla`/`cuda` instead of Neuron."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import SAFE, UNSAFE, Severity
from neuron_migrate.checks.rules.base import Invalid, Rule, argument, constant

WRONG = {
    "nccl": "NCCL is CUDA's",
    "xla": "the `xla` backend belongs to torch_xla",
    "gloo": "gloo runs collectives on the CPU",
}


class ProcessGroupBackend(Rule):
    """Flags `init_process_group("nccl" | "xla")`, and `init_device_mesh("cuda", ...)` / `DeviceMesh("cuda", ...)`.

    ## What it does
    Finds process-group backends and mesh device types meant for other devices. `gloo` in code
    that also uses an accelerator is informational (it may be meant for CPU-side groups).

    ## Why
    On Trainium the collectives backend and the mesh device type are `neuron`.

    ## Example
    ```python
    dist.init_process_group(backend="nccl")
    mesh = init_device_mesh("cuda", (2, 4))
    ```

    ## Use instead
    ```python
    dist.init_process_group()  # portable: PyTorch picks the backend per device
    dist.init_process_group(backend="neuron")  # --target neuron
    mesh = init_device_mesh("neuron", (2, 4))
    ```

    ## Fix safety
    With `--target neuron` the string becomes `"neuron"` (safe). For the portable target the
    backend argument is removed so PyTorch picks the one for each device (unsafe: a CUDA job
    that relied on NCCL alone now also gets a CPU group). Mesh device types are fixed with
    `--target neuron` only.
    """

    code = "NM703"
    name = "process-group-backend"
    summary = "process group / mesh for `nccl`, `xla` or `cuda`"
    calls = frozenset({"init_process_group", "new_group", "init_device_mesh", "DeviceMesh"})
    VALID = (
        "import torch.distributed as dist\n\ndist.init_process_group(backend='neuron')\n",
        "import torch.distributed as dist\n\ndist.init_process_group()\n",
    )
    INVALID = (
        Invalid(
            "import torch.distributed as dist\n\ndist.init_process_group(backend='nccl')\n",
            fixed=None,
            unsafe_fixed="import torch.distributed as dist\n\ndist.init_process_group()\n",
        ),
        Invalid(
            "import torch.distributed as dist\n\ndist.init_process_group('xla', rank=0)\n",
            target="neuron",
            fixed="import torch.distributed as dist\n\ndist.init_process_group('neuron', rank=0)\n",
        ),
        Invalid(
            "from torch.distributed.device_mesh import init_device_mesh\n\nmesh = init_device_mesh('cuda', (2, 4))\n",
            target="neuron",
            fixed="from torch.distributed.device_mesh import init_device_mesh\n\nmesh = init_device_mesh('neuron', (2, 4))\n",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func) or ""
        if not qualified.startswith("torch.distributed"):
            return
        ctx = self.ctx
        if name in ("init_device_mesh", "DeviceMesh"):
            value_node = argument(node, 0, "device_type")
            if value_node is not None and constant(value_node) == "cuda":
                fix = (
                    ctx.fix(
                        ctx.replace(value_node, ctx.source(value_node).replace("cuda", "neuron")),
                        'use "neuron"',
                    )
                    if ctx.neuron_target
                    else None
                )
                self.report(
                    value_node,
                    f'`{name}` on "cuda": the mesh device type on Trainium is "neuron"',
                    fix=fix,
                )
            return
        value_node = argument(node, 0, "backend")
        value = constant(value_node)
        if not isinstance(value, str) or value_node is None:
            return
        kinds = [part.split(":")[-1].strip() for part in value.split(",")]
        wrong = next((k for k in kinds if k in WRONG), None)
        if wrong is None:
            return
        severity = None
        if wrong == "gloo":
            if "neuron" not in ctx.text and "cuda" not in ctx.text:
                return
            severity = Severity.INFO
        if ctx.neuron_target:
            fix = ctx.fix(
                ctx.replace(
                    value_node, ctx.source(value_node)[0] + "neuron" + ctx.source(value_node)[0]
                ),
                'use "neuron"',
                SAFE,
            )
        elif value_node in node.args:
            fix = (
                None
                if node.args.index(value_node) != 0 or len(node.args) > 1
                else ctx.fix(_remove_only_arg(ctx, node), "let PyTorch pick the backend", UNSAFE)
            )
        else:
            keyword = next(k for k in node.keywords if k.arg == "backend")
            fix = ctx.fix(ctx.remove_keyword(node, keyword), "let PyTorch pick the backend", UNSAFE)
        self.report(
            value_node,
            f'backend {value!r}: {WRONG[wrong]}; on Trainium use "neuron" (or leave it out)',
            fix=fix,
            severity=severity,
        )


def _remove_only_arg(ctx, node: ast.Call):
    from neuron_migrate.checks.model import Edit

    start, _ = ctx.span(node.args[0])
    if node.keywords:
        return Edit(start, ctx.span(node.keywords[0])[0], "")
    _, end = ctx.span(node)
    return Edit(start, end - 1, "")
