"""NM005: `xmp.spawn` / `torch_xla.launch` become a torchrun entry point; the `xla` process group goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    arg_value,
    code_of,
    fix_trailing_comma,
    stmt,
    string_value,
    with_string_value,
)

SPAWN = (
    "torch_xla.distributed.xla_multiprocessing.spawn",
    "torch_xla.launch",
)
INIT_PROCESS_GROUP = ("torch.distributed.init_process_group",)


class XlaLaunch(Codemod):
    """Turns XLA process launchers into a torchrun-ready entry point.

    ## What it does
    `xmp.spawn(_mp_fn, args=(flags,), nprocs=8)` and `torch_xla.launch(_mp_fn, args=(flags,))`
    become: initialize the process group, call `_mp_fn(local_rank, flags)` once, destroy the
    process group. `dist.init_process_group("xla", init_method="xla://")` loses its XLA
    backend and rendezvous (`env://`, what torchrun provides, is the default).

    ## Why
    torch_xla started one process per device itself; native PyTorch leaves that to `torchrun`,
    which sets `RANK`, `LOCAL_RANK`, `WORLD_SIZE` and the rendezvous address for each process.

    ## Example
    ```python
    if __name__ == "__main__":
        xmp.spawn(_mp_fn, args=(flags,), nprocs=8)
    ```

    ## Use instead
    ```python
    if __name__ == "__main__":
        # Launch with: torchrun --nproc_per_node=8 train.py
        dist.init_process_group()
        _mp_fn(int(os.environ.get("LOCAL_RANK", 0)), flags)
        dist.barrier()
        dist.destroy_process_group()
    ```
    `--target neuron` writes `dist.init_process_group(backend="neuron")`. Without a backend,
    PyTorch creates the right one for each device type in use (gloo on CPU, nccl on CUDA, the
    registered `neuron` backend on Trainium). Portable code also pins each process to its own
    accelerator (`torch.accelerator.set_device_index`).

    ## Fix safety
    Safe for the code; the launch command changes (`python train.py` -> `torchrun ...`), which
    the report lists. `start_method`, `daemon` and `join` have no torchrun counterpart and go.
    """

    code = "NM005"
    name = "xla-launch"
    summary = "`xmp.spawn`/`torch_xla.launch` -> torchrun entry point; `xla` process group -> native"
    triggers = (*SPAWN, *INIT_PROCESS_GROUP)
    markers = ("xla://",)
    manual: ClassVar[dict[str, str]] = {
        "torch_xla.distributed.xla_multiprocessing.MpModelWrapper": "shares the model across spawned processes; under torchrun each process builds its own model",
        "torch_xla.distributed.xla_multiprocessing.MpSerialExecutor": "serialized per-process work; use `dist.barrier()` around rank-ordered work instead",
        "torch_xla.runtime.use_spmd": "SPMD has no native switch; shard with DTensor (`init_device_mesh`, `distribute_tensor`)",
        "torch_xla.distributed.spmd": "XLA SPMD sharding; use DTensor (`init_device_mesh`, `distribute_tensor`, `parallelize_module`)",
        "torch_xla.distributed.xla_backend": "registers the `xla` process group, which native PyTorch does not need",
    }

    def _pin_device(self) -> cst.BaseStatement | None:
        if self.ctx.target.neuron:
            return None
        torch = self.ctx.torch()
        return stmt(
            f"if {torch}.accelerator.is_available():\n"
            "    # One accelerator per process (on Trainium each process sees only its own core).\n"
            f"    {torch}.accelerator.set_device_index({self.ctx.local_rank_expr()} % {torch}.accelerator.device_count())\n"
        )

    def _init_call(self) -> str:
        backend = 'backend="neuron"' if self.ctx.target.neuron else ""
        return f"{self.ctx.dist()}.init_process_group({backend})"

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not (isinstance(call, cst.Call) and self.qualify(call.func) in SPAWN):
            return updated_node
        fn = arg_value(call, 0, "fn")
        if fn is None:
            return updated_node
        args = arg_value(call, 1, "args")
        call_args = [self.ctx.local_rank_expr()]
        if args is not None:
            value = args.value
            if isinstance(value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
                call_args += [code_of(e.value) for e in value.elements]
            else:
                call_args.append(f"*{code_of(value)}")
        nprocs = arg_value(call, 2, "nprocs")
        count = code_of(nprocs.value) if nprocs is not None and isinstance(nprocs.value, cst.Integer) else "<processes>"
        script = Path(self.ctx.path).name if self.ctx.path not in ("", "<stdin>") else "script.py"
        launch = f"torchrun --nproc_per_node={count} {script}"
        before: list[cst.BaseStatement] = []
        if not self.ctx.facts.inits_process_group:
            init = stmt(f"{self._init_call()}\n")
            before.append(init)
            pin = self._pin_device()
            if pin is not None:
                before.append(pin)
        self.ctx.comment(f"# Launch with: {launch}")
        self.ctx.insert_before(*before)
        if not self.ctx.facts.inits_process_group:
            # Wait for every rank before tearing down: gloo can abort a process that exits
            # while a peer is still finishing its last collective.
            dist = self.ctx.dist()
            self.ctx.insert_after(stmt(f"{dist}.barrier()\n"), stmt(f"{dist}.destroy_process_group()\n"))
        self.changed(f"`{code_of(call.func)}(...)` -> direct call under torchrun")
        self.ctx.note(self.code, f"launch with `{launch}` instead of `python {script}`")
        return updated_node.with_changes(value=cst.parse_expression(f"{code_of(fn.value)}({', '.join(call_args)})"))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.qualify(updated_node.func) not in INIT_PROCESS_GROUP:
            return updated_node
        backend = arg_value(updated_node, 0, "backend")
        init_method = arg_value(updated_node, 1, "init_method")
        xla_backend = backend is not None and string_value(backend.value) == "xla"
        xla_init = init_method is not None and (string_value(init_method.value) or "").startswith("xla://")
        if not (xla_backend or xla_init):
            return updated_node
        rename = xla_backend and self.ctx.target.neuron
        drop = [
            a
            for a in (backend if xla_backend and not rename else None, init_method if xla_init else None)
            if a is not None
        ]
        positional = [a for a in updated_node.args if a.keyword is None and not a.star]
        args: list[cst.Arg] = []
        for arg in updated_node.args:
            if rename and arg is backend:
                assert isinstance(arg.value, cst.SimpleString)
                arg = arg.with_changes(value=with_string_value(arg.value, "neuron"))
            elif any(arg is d for d in drop):
                later = positional[next((k for k, p in enumerate(positional) if p is arg), len(positional)) + 1 :]
                if any(all(p is not d for d in drop) for p in later):
                    # A positional argument after it must keep its place: pass the default.
                    arg = arg.with_changes(value=cst.Name("None"))
                else:
                    continue
            args.append(arg)
        new = updated_node.with_changes(args=fix_trailing_comma(args))
        if xla_backend:
            pin = self._pin_device()
            if pin is not None:
                self.ctx.insert_after(pin)
        self.changed("`init_process_group('xla')` -> native process group")
        return new
