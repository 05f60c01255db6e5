"""NM006: ranks, world size and collectives move from torch_xla to `torch.distributed`."""

from __future__ import annotations

from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    arg_value,
    code_of,
    expr,
    stmt,
    string_value,
)

XM = "torch_xla.core.xla_model"
XR = "torch_xla.runtime"

WORLD_SIZE = (f"{XM}.xrt_world_size", f"{XR}.world_size", f"{XR}.process_count")
RANK = (f"{XM}.get_ordinal", f"{XR}.global_ordinal", f"{XR}.process_index")
LOCAL_RANK = (f"{XM}.get_local_ordinal", f"{XR}.local_ordinal")
LOCAL_WORLD_SIZE = (f"{XR}.local_process_count",)
IS_MASTER = (f"{XM}.is_master_ordinal",)
MASTER_PRINT = (f"{XM}.master_print",)
RENDEZVOUS = (f"{XM}.rendezvous",)
ALL_REDUCE = (f"{XM}.all_reduce",)
MESH_REDUCE = (f"{XM}.mesh_reduce",)
SAVE = (f"{XM}.save",)
MANUAL_SEED = (f"{XM}.set_rng_state", "torch_xla.manual_seed")

REDUCE_OPS = {
    "REDUCE_SUM": "SUM",
    "REDUCE_MUL": "PRODUCT",
    "REDUCE_MIN": "MIN",
    "REDUCE_MAX": "MAX",
    "REDUCE_AND": "BAND",
    "REDUCE_OR": "BOR",
}
# The values of those constants, which some scripts pass as literals.
REDUCE_LITERALS = {"sum": "SUM", "mul": "PRODUCT", "min": "MIN", "max": "MAX", "and": "BAND", "or": "BOR"}

MESH_REDUCE_HELPER = '''\
def mesh_reduce(data, reduce_fn):
    """Gather `data` from every process and reduce it, as `xm.mesh_reduce` did."""
    if not {dist}.is_initialized():
        return reduce_fn([data])
    gathered = [None] * {dist}.get_world_size()
    {dist}.all_gather_object(gathered, data)
    return reduce_fn(gathered)
'''


class XlaCollectives(Codemod):
    """Moves ranks, world size, printing, barriers and collectives to `torch.distributed`.

    ## What it does
    | torch_xla | native |
    |---|---|
    | `xm.xrt_world_size()`, `xr.world_size()` | `dist.get_world_size()` |
    | `xm.get_ordinal()`, `xr.global_ordinal()` | `dist.get_rank()` |
    | `xm.get_local_ordinal()`, `xr.local_ordinal()` | `int(os.environ.get("LOCAL_RANK", 0))` |
    | `xm.is_master_ordinal()` (local by default) | `int(os.environ.get("LOCAL_RANK", 0)) == 0` |
    | `xm.is_master_ordinal(local=False)` | `dist.get_rank() == 0` |
    | `xm.master_print(x)` (global by default) | `if dist.get_rank() == 0: print(x)` |
    | `xm.rendezvous("tag")` | `dist.barrier()` |
    | `y = xm.all_reduce(xm.REDUCE_SUM, x)` | `y = x.clone()`; `dist.all_reduce(y, op=dist.ReduceOp.SUM)` |
    | `xm.mesh_reduce("tag", v, np.mean)` | `mesh_reduce(v, np.mean)` (a helper over `all_gather_object`) |
    | `xm.save(obj, path)` | `if <local rank 0>: torch.save(obj, path)` |
    | `xm.set_rng_state(s)`, `torch_xla.manual_seed(s)` | `torch.manual_seed(s)` |

    In a file that does not set up the process group itself, ranks and sizes fall back to a
    single process (`dist.get_rank() if dist.is_initialized() else 0`).

    ## Why
    `xm.xrt_world_size()` and `xm.get_ordinal()` were removed in torch_xla 2.7, so scripts using
    them already fail on the old stack; the rest of the API has direct `torch.distributed`
    counterparts once a process group exists. The defaults differ and are kept:
    `is_master_ordinal` means the *local* master, `master_print` the *global* one, and
    `xm.all_reduce` returns a new tensor where `dist.all_reduce` works in place.

    ## Example
    ```python
    sampler = DistributedSampler(ds, num_replicas=xm.xrt_world_size(), rank=xm.get_ordinal())
    xm.master_print(f"epoch {epoch}")
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=dist.get_rank())
    if dist.get_rank() == 0:
        print(f"epoch {epoch}")
    ```

    ## Fix safety
    Safe for the forms above. Replica `groups=`, `rendezvous` payloads, `all_gather`,
    `reduce_scatter`, `all_to_all`, `send`/`recv` and `RateTracker` get a TODO naming the
    native call to use. `xm.all_reduce(op, tensors)` whose result is dropped reduced a list in
    place: it becomes a loop over `tensors`, with a TODO to confirm it is a list. In a file
    that creates no process group, collectives run only once one exists (torch_xla skipped
    them in a single process) and a TODO says where ranks fall back to a single process.
    `torch.save` keeps tensors on their device, where `xm.save` moved them to the CPU (the
    report says so).
    """

    code = "NM006"
    name = "xla-collectives"
    summary = "ranks, world size, master checks, barriers and collectives -> `torch.distributed`"
    triggers = (
        *WORLD_SIZE, *RANK, *LOCAL_RANK, *LOCAL_WORLD_SIZE, *IS_MASTER, *MASTER_PRINT,
        *RENDEZVOUS, *ALL_REDUCE, *MESH_REDUCE, *SAVE, *MANUAL_SEED,
        *(f"{XM}.{op}" for op in REDUCE_OPS),
    )
    manual: ClassVar[dict[str, str]] = {
        f"{XM}.all_gather": "returns the concatenation over processes; use `dist.all_gather_into_tensor(out, x)` (or `torch.cat` of `dist.all_gather`)",
        f"{XM}.all_gather_bucketized": "use `dist.all_gather_into_tensor` per tensor",
        f"{XM}.reduce_scatter": "use `dist.reduce_scatter_tensor(out, x, op=...)`",
        f"{XM}.reduce_scatter_bucketized": "use `dist.reduce_scatter_tensor` per tensor",
        f"{XM}.all_to_all": "use `dist.all_to_all_single(out, x)`",
        f"{XM}.collective_permute": "use `dist.send`/`dist.recv` (or `dist.batch_isend_irecv`)",
        f"{XM}.collective_broadcast": "use `dist.broadcast(t, src=0)` for each tensor",
        f"{XM}.broadcast_master_param": "DDP broadcasts parameters at construction; otherwise `dist.broadcast(p.data, src=0)` for each parameter",
        f"{XM}.send": "use `dist.send(tensor, dst)`",
        f"{XM}.recv": "use `dist.recv(tensor, src)`",
        f"{XM}.all_reduce": "`{name}` returns a new tensor (a list is reduced in place); use `dist.all_reduce(t, op=...)` on a clone, with `group=dist.new_group(ranks)` for replica `groups=`",
        f"{XM}.rendezvous": "`{name}(tag, payload)` returned every process's payload; use `replies = [None] * dist.get_world_size()` and `dist.all_gather_object(replies, payload)`",
        f"{XM}.do_on_ordinals": "run the function under `if dist.get_rank() in ordinals:` followed by `dist.barrier()`",
        f"{XM}.RateTracker": "torch_xla's throughput tracker; count samples and divide by `time.perf_counter()` deltas",
        f"{XM}.get_rng_state": "use `torch.get_rng_state()` (host) or the accelerator's generator state",
        f"{XM}.is_master_ordinal": "use `int(os.environ.get(\"LOCAL_RANK\", 0)) == 0` (local) or `dist.get_rank() == 0` (global)",
        f"{XM}.master_print": "use `print(...)` under `if dist.get_rank() == 0:`",
        f"{XM}.save": "use `torch.save` under `if int(os.environ.get(\"LOCAL_RANK\", 0)) == 0:`",
        "torch_xla.distributed.xla_multiprocessing.create_optimized_replica_groups": "replica groups become `dist.new_group(ranks)`",
        # Left only where the torch_xla call they are passed to is left for a person.
        **{
            f"{XM}.{constant}": f"`{{name}}` is a torch_xla reduce type; native collectives take `dist.ReduceOp.{op}`"
            for constant, op in REDUCE_OPS.items()
        },
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._xla_arguments: dict[int, cst.CSTNode] = {}
        self._warned_no_group = False

    def _single_process_fallback(self) -> None:
        """Ranks and sizes fall back to one process in a file that creates no process group:
        say so once, since torch_xla knew the processes of a torchrun launch without one."""
        if self.ctx.facts.distributed or self._warned_no_group:
            return
        self._warned_no_group = True
        self.todo(
            "no process group is created in this file: when it runs as several processes (torchrun), "
            "call `dist.init_process_group()` at start-up, or ranks, sizes and collectives act as one process"
        )

    # -- expressions ---------------------------------------------------------------------------
    def _is_master(self, local: bool) -> str:
        if local:
            return f"{self.ctx.local_rank_expr()} == 0"
        dist = self.ctx.dist()
        if self.ctx.facts.distributed:
            return f"{dist}.get_rank() == 0"
        return f"not {dist}.is_initialized() or {dist}.get_rank() == 0"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name is None:
            return updated_node
        old = code_of(updated_node.func)
        if name in WORLD_SIZE:
            self.changed(f"`{old}()` -> `dist.get_world_size()`")
            self._single_process_fallback()
            return self.ctx.group(expr(self.ctx.world_size_expr()))
        if name in RANK:
            self.changed(f"`{old}()` -> `dist.get_rank()`")
            self._single_process_fallback()
            return self.ctx.group(expr(self.ctx.rank_expr()))
        if name in LOCAL_RANK:
            self.changed(f"`{old}()` -> `LOCAL_RANK`")
            return expr(self.ctx.local_rank_expr())
        if name in LOCAL_WORLD_SIZE:
            self.changed(f"`{old}()` -> `LOCAL_WORLD_SIZE`")
            return expr(f'int({self.ctx.os()}.environ.get("LOCAL_WORLD_SIZE", 1))')
        if name in IS_MASTER:
            local = arg_value(updated_node, 0, "local")
            is_local = local is None or code_of(local.value) != "False"
            if local is not None and code_of(local.value) not in ("True", "False"):
                return updated_node
            self.changed(f"`{old}()` -> {'local' if is_local else 'global'} rank-0 test")
            return self.ctx.group(expr(self._is_master(is_local)))
        if name in MESH_REDUCE and len(updated_node.args) >= 3:
            helper = self.ctx.need_helper("mesh_reduce", MESH_REDUCE_HELPER.format(dist=self.ctx.dist()))
            data = arg_value(updated_node, 1, "data")
            fn = arg_value(updated_node, 2, "reduce_fn")
            if data is None or fn is None:
                return updated_node
            self.changed("`xm.mesh_reduce(tag, data, fn)` -> `mesh_reduce(data, fn)`")
            return expr(f"{helper}({code_of(data.value)}, {code_of(fn.value)})")
        if name in MANUAL_SEED and updated_node.args:
            self.changed(f"`{old}(seed)` -> `torch.manual_seed(seed)`")
            return expr(f"{self.ctx.torch()}.manual_seed({code_of(updated_node.args[0].value)})")
        return updated_node

    def visit_Call(self, node: cst.Call) -> None:
        # A reduce constant handed to a torch_xla call keeps its torch_xla spelling: the call is
        # either rewritten as a whole (which maps the constant itself) or left for a person.
        name = self.qualify(node.func)
        if name and name.startswith("torch_xla."):
            for arg in node.args:
                self._xla_arguments[id(arg.value)] = arg.value

    def _reduce_op(self, node: cst.BaseExpression) -> str:
        """The `dist.ReduceOp` for a torch_xla reduce type (a constant, a literal, or a name)."""
        name = self.qualify(node)
        if name and name.startswith(XM + ".") and name.rsplit(".", 1)[-1] in REDUCE_OPS:
            return f"{self.ctx.dist()}.ReduceOp.{REDUCE_OPS[name.rsplit('.', 1)[-1]]}"
        literal = string_value(node)
        if literal in REDUCE_LITERALS:
            return f"{self.ctx.dist()}.ReduceOp.{REDUCE_LITERALS[literal]}"
        return code_of(node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if id(original_node) in self._xla_arguments:
            return updated_node
        name = self.qualify(updated_node)
        if name and name.startswith(XM + ".") and name.rsplit(".", 1)[-1] in REDUCE_OPS:
            op = REDUCE_OPS[name.rsplit(".", 1)[-1]]
            self.changed(f"`{code_of(updated_node)}` -> `dist.ReduceOp.{op}`")
            return expr(f"{self.ctx.dist()}.ReduceOp.{op}")
        return updated_node

    # -- statements ----------------------------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Any:
        if len(updated_node.body) != 1:
            return updated_node
        small = updated_node.body[0]
        if id(small) in self.ctx.removed:
            return updated_node  # another codemod dropped it (a metrics report, say)
        call = small.value if isinstance(small, cst.Expr | cst.Assign) else None
        if not isinstance(call, cst.Call):
            return updated_node
        name = self.qualify(call.func)
        if isinstance(small, cst.Expr):
            if name in MASTER_PRINT:
                return self._master_print(updated_node, call)
            if name in RENDEZVOUS:
                return self._rendezvous(updated_node, call)
            if name in SAVE:
                return self._save(updated_node, call)
        if name in ALL_REDUCE:
            return self._all_reduce(updated_node, small, call)
        return updated_node

    def _guarded(self, line: cst.SimpleStatementLine, condition: str, body: str) -> cst.BaseStatement:
        new = stmt(f"if {condition}:\n    {body}\n")
        comment = line.trailing_whitespace
        if isinstance(new, cst.If) and isinstance(new.body, cst.IndentedBlock) and comment.comment is not None:
            inner = new.body.body[0]
            assert isinstance(inner, cst.SimpleStatementLine)
            new = new.with_changes(body=new.body.with_changes(body=[inner.with_changes(trailing_whitespace=comment)]))
        return new.with_changes(leading_lines=line.leading_lines)

    def _master_print(self, line: cst.SimpleStatementLine, call: cst.Call) -> Any:
        local = arg_value(call, None, "local")
        if local is not None and code_of(local.value) not in ("True", "False"):
            return line
        is_local = local is not None and code_of(local.value) == "True"
        parts = []
        for arg in call.args:
            if arg.keyword is None:
                parts.append(("*" if arg.star == "*" else "") + code_of(arg.value))
            elif arg.keyword.value == "fd":
                parts.append(f"file={code_of(arg.value)}")
            elif arg.keyword.value == "flush":
                parts.append(f"flush={code_of(arg.value)}")
        self.changed(f"`xm.master_print(...)` -> `print` on {'local' if is_local else 'global'} rank 0")
        return self._guarded(line, self._is_master(is_local), f"print({', '.join(parts)})")

    def _rendezvous(self, line: cst.SimpleStatementLine, call: cst.Call) -> Any:
        if len(call.args) > 1:
            return line  # payload or replicas: a TODO from the manual table
        dist = self.ctx.dist()
        self.changed("`xm.rendezvous(tag)` -> `dist.barrier()`")
        if self.ctx.facts.distributed:
            return line.with_changes(body=[cst.Expr(expr(f"{dist}.barrier()"))])
        self._single_process_fallback()
        return self._guarded(line, f"{dist}.is_initialized()", f"{dist}.barrier()")

    def _save(self, line: cst.SimpleStatementLine, call: cst.Call) -> Any:
        data, path = arg_value(call, 0, "data"), arg_value(call, 1, "file_or_path")
        if data is None or path is None:
            return line
        master_only = arg_value(call, 2, "master_only")
        global_master = arg_value(call, 3, "global_master")
        save = f"{self.ctx.torch()}.save({code_of(data.value)}, {code_of(path.value)})"
        self.changed("`xm.save(obj, path)` -> `torch.save` on the master process")
        self.ctx.note(
            self.code,
            "`torch.save` writes tensors on the device they live on, where `xm.save` moved them to the CPU "
            'first: load such checkpoints on another machine with `torch.load(path, map_location="cpu")`',
        )
        if master_only is not None and code_of(master_only.value) == "False":
            return line.with_changes(body=[cst.Expr(expr(save))])
        is_global = global_master is not None and code_of(global_master.value) == "True"
        return self._guarded(line, self._is_master(local=not is_global), save)

    def _all_reduce(self, line: cst.SimpleStatementLine, small: cst.BaseSmallStatement, call: cst.Call) -> Any:
        reduce_type, inputs = arg_value(call, 0, "reduce_type"), arg_value(call, 1, "inputs")
        if reduce_type is None or inputs is None or arg_value(call, None, "groups") is not None:
            return line
        scale = arg_value(call, 2, "scale")
        scaling = scale is not None and code_of(scale.value) not in ("1.0", "1")
        dist = self.ctx.dist()
        op = self._reduce_op(reduce_type.value)
        op_kw = "" if op.endswith("ReduceOp.SUM") else f", op={op}"
        before: list[str] = []
        reduce: list[str] = []  # the collective, which needs a process group
        if isinstance(inputs.value, cst.List | cst.Tuple):
            # torch_xla reduces a list in place too.
            if isinstance(small, cst.Assign) or any(isinstance(e, cst.StarredElement) for e in inputs.value.elements):
                return line
            for element in inputs.value.elements:
                target = code_of(element.value)
                reduce.append(f"{dist}.all_reduce({target}{op_kw})")
                if scaling:
                    reduce.append(f"{target} *= {code_of(scale.value)}")  # type: ignore[union-attr]
        elif isinstance(small, cst.Assign):
            # One tensor: torch_xla returned the result and left the input alone.
            if len(small.targets) != 1:
                return line
            tensor = inputs.value
            result = code_of(small.targets[0].target)
            if result != code_of(tensor):
                source = code_of(tensor) if _is_atom(tensor) else f"({code_of(tensor)})"
                before.append(f"{result} = {source}.clone()")
            reduce.append(f"{dist}.all_reduce({result}{op_kw})")
            if scaling:
                reduce.append(f"{result} *= {code_of(scale.value)}")  # type: ignore[union-attr]
        else:
            # The result is dropped, so the input is a list of tensors, reduced in place.
            tensors = code_of(inputs.value)
            self.todo(
                f"`xm.all_reduce` reduced the tensors of `{tensors}` in place; "
                "if it is one tensor, the old call did nothing (its result was dropped): delete this"
            )
            body = f"    {dist}.all_reduce(tensor{op_kw})\n"
            if scaling:
                body += f"    tensor *= {code_of(scale.value)}\n"  # type: ignore[union-attr]
            reduce.append(f"for tensor in {tensors}:\n{body}")
        if not self.ctx.facts.distributed:
            # torch_xla skipped the collective (and the scaling) in a single process.
            self._single_process_fallback()
            inner = "".join(f"    {line_}\n" for part in reduce for line_ in part.rstrip("\n").split("\n"))
            reduce = [f"if {dist}.is_initialized():\n{inner}"]
        self.changed("`xm.all_reduce(...)` -> `dist.all_reduce(...)` (in place)")
        new = [stmt(source if source.endswith("\n") else source + "\n") for source in [*before, *reduce]]
        new[0] = new[0].with_changes(leading_lines=line.leading_lines)
        for extra in new[1:]:
            self.ctx.insert_after(extra)
        return new[0]


def _is_atom(node: cst.BaseExpression) -> bool:
    """Can `.clone()` follow `node` without parentheses?"""
    return isinstance(node, cst.Name | cst.Attribute | cst.Call | cst.Subscript) or bool(node.lpar)
