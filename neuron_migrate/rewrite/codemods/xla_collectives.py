"""NM006: ranks, world size and collectives move from torch_xla to `torch.distributed`."""

from __future__ import annotations

import ast
import re
from string import Template
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.oldstack import PACKAGES as OLD_STACK_PACKAGES
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    Visitor,
    arg_value,
    code_of,
    expr,
    fix_trailing_comma,
    has_star_args,
    stmt,
    string_value,
)
from neuron_migrate.rewrite.codemods.group_lifetime import calls_before_group
from neuron_migrate.rewrite.codemods.replica_groups import groups_argument, process_group
from neuron_migrate.rewrite.codemods.seeding import seeded_already
from neuron_migrate.rewrite.codemods.xla_utils import TO_CPU_FUNCTION

XM = "torch_xla.core.xla_model"
XR = "torch_xla.runtime"

# One device per process natively: the devices of every process and host are the world's size.
WORLD_SIZE = (
    f"{XM}.xrt_world_size",
    f"{XR}.world_size",
    f"{XR}.process_count",
    f"{XR}.global_device_count",
    f"{XR}.global_runtime_device_count",
)
# A program that shards one process's work over every device (its counts are of devices, not processes).
SPMD = (f"{XR}.use_spmd", "torch_xla.distributed.spmd", "torch_xla.experimental.xla_sharding")
# Every device of every host: under SPMD these count devices, not processes.
DEVICE_COUNTS = (f"{XR}.global_device_count", f"{XR}.global_runtime_device_count")
RANK = (f"{XM}.get_ordinal", f"{XR}.global_ordinal", f"{XR}.process_index")
LOCAL_RANK = (f"{XM}.get_local_ordinal", f"{XR}.local_ordinal")
LOCAL_WORLD_SIZE = (f"{XR}.local_process_count", f"{XR}.local_device_count")
IS_MASTER = (f"{XM}.is_master_ordinal",)
MASTER_PRINT = (f"{XM}.master_print",)
RENDEZVOUS = (f"{XM}.rendezvous",)
ALL_REDUCE = (f"{XM}.all_reduce",)
MESH_REDUCE = (f"{XM}.mesh_reduce",)
SAVE = (f"{XM}.save", "torch_xla.utils.serialization.save")
INIT_PROCESS_GROUP = ("torch.distributed.init_process_group",)
LAUNCH = ("torch_xla.distributed.xla_multiprocessing.spawn", "torch_xla.launch")
MANUAL_SEED = (f"{XM}.set_rng_state", "torch_xla.manual_seed")
BROADCAST_MASTER_PARAM = (f"{XM}.broadcast_master_param",)

BROADCAST_MASTER_PARAM_HELPER = '''\
def {name}(model):
    """Copy rank 0's parameters and buffers to every process, as `xm.broadcast_master_param` did."""
    if not {dist}.is_initialized() or {dist}.get_world_size() == 1:
        return
    with {torch}.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            {dist}.broadcast(tensor, src=0)
'''

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

MASTER_PRINT_HELPER = '''\
def {name}(*args, **kwargs):
    """`print` on the main process only, as `xm.master_print` did."""
    if int({os}.environ.get("RANK", 0)) == 0:
        print(*args, **kwargs)
'''
# From this many `xm.master_print` calls in a file on, one helper reads better than a guard each.
MASTER_PRINT_HELPER_FROM = 2
MASTER_PRINT_DOCSTRING = ast.get_docstring(ast.parse(MASTER_PRINT_HELPER.format(name="f", os="os")).body[0])  # type: ignore[arg-type]

MESH_REDUCE_HELPER = '''\
def {name}(data, reduce_fn):
    """Gather `data` from every process and reduce it, as `xm.mesh_reduce` did."""

    def on_cpu(value):
        if isinstance(value, {torch}.Tensor):
            return value.cpu()
        if isinstance(value, dict):
            return {{key: on_cpu(item) for key, item in value.items()}}
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(on_cpu(item) for item in value)
        return value

    # Tensors travel on the CPU, as with torch_xla, so every process can read them.
    data = on_cpu(data)
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
    | `xm.xrt_world_size()`, `xr.world_size()`, `xr.global_runtime_device_count()` | `dist.get_world_size()` (one device per process) |
    | `xm.get_ordinal()`, `xr.global_ordinal()` | `dist.get_rank()` |
    | `xm.get_local_ordinal()`, `xr.local_ordinal()`, `xm.get_ordinal(local=True)` | `int(os.environ.get("LOCAL_RANK", 0))` |
    | `xm.is_master_ordinal()` (local by default) | `LOCAL_RANK == 0` |
    | `xm.is_master_ordinal(local=False)` | `dist.get_rank() == 0` |
    | `xm.master_print(x)` (global by default) | `if dist.get_rank() == 0: print(x)`; from two calls on, one `master_print` helper |
    | `xm.broadcast_master_param(model)` | `broadcast_master_param(model)` (a helper over `dist.broadcast` from rank 0) |
    | `xm.rendezvous("tag")` | `dist.barrier()` |
    | `y = xm.all_reduce(xm.REDUCE_SUM, x, scale=s)` | `y = x.clone()`; `dist.all_reduce(y)`; `y *= s` |
    | `xm.all_reduce(op, x, groups=[[0, 1], [2, 3]])` | `dist.all_reduce(y, op=..., group=replica_group(groups))` |
    | `xm.mesh_reduce("tag", v, np.mean)` | `mesh_reduce(v, np.mean)` (a helper over `all_gather_object`) |
    | `xm.save(obj, path)` | `if <local rank 0>: torch.save(obj, path)` |
    | `xm.set_rng_state(s)`, `torch_xla.manual_seed(s)` | `if device.type != "cpu": torch.get_device_module(device).manual_seed(s)` (`torch.neuron.manual_seed(s)` with `--target neuron`); nothing right after `torch.manual_seed(s)` |

    In a script, torchrun's `LOCAL_RANK`, `RANK` and `WORLD_SIZE` are read once into module-level
    constants of those names (`LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))`); in a notebook,
    or a file that writes its own environment, where it is read. Where no process group exists
    yet (at module level, in a parameter's default value or a decorator, or in a function before
    its own `init_process_group`), ranks and sizes come from that environment (`RANK`, `WORLD_SIZE`). Elsewhere, in
    a file that does not set up the process group itself, they fall back to a single process
    (`dist.get_rank() if dist.is_initialized() else 0`).

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
    Safe for the forms above. `xm.all_reduce` on one tensor always works on a copy, even when
    the result is bound to the input's name, since another reference may still see the input.
    In a world of one process torch_xla skipped the collective and the scaling; so does the
    migrated code (`if dist.get_world_size() > 1:`). Replica `groups=` become the process group
    holding this rank (`replica_group`, a helper that has every rank create every group once,
    in the same order). `xm.save(..., master_only=m, global_master=g)` with flags known only at
    run time keeps them in its test. `xm.master_print(..., **kwargs)` passes `kwargs` on to
    `print`: an `fd` or `local` key in them now fails there (say `file=`, or test the rank).
    `mesh_reduce` gathers on the CPU, as torch_xla did, and takes another name where the file
    already has a `mesh_reduce`. `rendezvous` payloads, `all_gather`, `reduce_scatter`,
    `all_to_all`, `send`/`recv`, an `all_reduce` inside a larger expression and one whose
    arguments still call the old stack (replica groups from neuronx_distributed, say) get a TODO
    naming the native call to use. `xm.all_reduce(op, tensors)` whose result is dropped reduced a list
    in place: it becomes a loop over `tensors`, with a TODO to confirm it is a list. In a file
    that creates no process group, collectives run only once one exists (torch_xla skipped them
    in a single process) and a TODO says where ranks fall back to a single process, unless a
    script migrated in the same run imports the file and creates the group for its processes.
    `xm.all_gather` concatenated along `dim` within each replica group, and `xm.reduce_scatter`
    reduced over its replica groups, scaled by `scale` and kept this rank's slice along
    `scatter_dim`; the `*_tensor` forms of `torch.distributed` split along dim 0 only. Under
    SPMD one process drove every device, where natively each process has one. On the CPU
    fallback the device has no generator of its own, so a device seed seeds nothing there.
    `torch.save` is given the CPU copy `xm.save` wrote (`to_cpu`, a function added to the file).
    """

    code = "NM006"
    name = "xla-collectives"
    summary = "ranks, world size, master checks, barriers and collectives -> `torch.distributed`"
    triggers = (
        *WORLD_SIZE, *RANK, *LOCAL_RANK, *LOCAL_WORLD_SIZE, *IS_MASTER, *MASTER_PRINT,
        *RENDEZVOUS, *ALL_REDUCE, *MESH_REDUCE, *SAVE, *MANUAL_SEED, *BROADCAST_MASTER_PARAM,
        *(f"{XM}.{op}" for op in REDUCE_OPS),
    )
    manual: ClassVar[dict[str, str]] = {
        f"{XM}.all_gather": "`{name}`: use `dist.all_gather(parts, x, group=group)`, then `torch.cat(parts, dim=dim)`",
        f"{XM}.all_gather_bucketized": "use `dist.all_gather_into_tensor` per tensor",
        f"{XM}.reduce_scatter": "use `dist.reduce_scatter(out, list(x.chunk(n, dim=scatter_dim)), group=group)`, then `out.mul_(scale)`",
        f"{XM}.reduce_scatter_bucketized": "use `dist.reduce_scatter_tensor` per tensor",
        f"{XM}.all_to_all": "use `dist.all_to_all_single(out, x)`",
        f"{XM}.collective_permute": "use `dist.send`/`dist.recv` (or `dist.batch_isend_irecv`)",
        f"{XM}.collective_broadcast": "use `dist.broadcast(t, src=0)` for each tensor",
        f"{XM}.send": "use `dist.send(tensor, dst)`",
        f"{XM}.recv": "use `dist.recv(tensor, src)`",
        f"{XM}.all_reduce": "`{name}` returns a new tensor: use `dist.all_reduce(t, op=...)` on a clone (`group=dist.new_group(ranks)` for `groups=`)",
        f"{XM}.rendezvous": "`{name}(tag, payload)`: use `replies = [None] * dist.get_world_size()`, `dist.all_gather_object(replies, payload)`",
        f"{XM}.do_on_ordinals": "run the function under `if dist.get_rank() in ordinals:` followed by `dist.barrier()`",
        f"{XM}.is_master_ordinal": "use `int(os.environ.get(\"LOCAL_RANK\", 0)) == 0` (local) or `dist.get_rank() == 0` (global)",
        f"{XM}.master_print": "use `print(...)` under `if dist.get_rank() == 0:`",
        f"{XM}.save": "use `torch.save` under `if int(os.environ.get(\"LOCAL_RANK\", 0)) == 0:`",
        **{
            seeding: "`{name}` seeded only the device's generator: use `torch.get_device_module(device).manual_seed(seed)`"
            for seeding in MANUAL_SEED
        },
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
        self._print_helper = False  # the file prints through one `master_print` helper
        self._early: set[int] = set()  # calls that run before the process group exists
        self._seeded: set[int] = set()  # device seedings right after the same host seeding
        self._sequences: set[str] | None = None  # names bound to a list or tuple (`_may_be_a_list`)

    def visit_Module(self, node: cst.Module) -> None:
        prints = _CountsCalls(lambda call: self.qualify(call.func) in MASTER_PRINT)
        prints.scan(node)
        # A file that has the helper already (a notebook cell applied before the others) uses it.
        self._print_helper = prints.count >= MASTER_PRINT_HELPER_FROM or any(
            isinstance(s, cst.FunctionDef) and s.get_docstring() == MASTER_PRINT_DOCSTRING for s in node.body
        )
        self._early = calls_before_group(
            node,
            lambda call: self.qualify(call.func) in INIT_PROCESS_GROUP,
            lambda call: self.qualify(call.func) in LAUNCH,
        )
        self._seeded = seeded_already(node, self.qualify, MANUAL_SEED)
        writers = _SetsLauncherEnvironment()
        writers.scan(node)
        self._own_environment = writers.calls

    def _single_process_fallback(self) -> None:
        """Ranks and sizes fall back to one process in a file that creates no process group:
        say so once, since torch_xla knew the processes of a torchrun launch without one."""
        if self.ctx.facts.distributed or self.ctx.group_made_by or self._warned_no_group:
            return
        self._warned_no_group = True
        self.todo(self.ctx.facts.no_group_warning())

    # -- expressions ---------------------------------------------------------------------------
    def _rank(self, early: bool) -> str:
        if early:
            return self.ctx.env_rank_expr()
        self._single_process_fallback()
        return self.ctx.rank_expr()

    def _world_size(self, early: bool) -> str:
        if early:
            return self.ctx.env_world_size_expr()
        self._single_process_fallback()
        return self.ctx.world_size_expr()

    def _is_master(self, local: bool, early: bool) -> str:
        if local:
            return f"{self.ctx.local_rank_expr()} == 0"
        if early or not self.ctx.facts.distributed:
            # Before the group exists, or in a file that leaves it to a launcher or a framework
            # (Lightning creates it later): the launcher's `RANK` says it either way.
            return f"{self.ctx.env_rank_expr()} == 0"
        return f"{self.ctx.dist()}.get_rank() == 0"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name is None:
            return updated_node
        old = code_of(updated_node.func)
        early = id(original_node) in self._early
        if name in DEVICE_COUNTS and self.ctx.facts.uses(*SPMD):
            # Migrated SPMD runs one process per device (NM026): the devices are the processes,
            # known from the launcher before the mesh creates the process group.
            self.changed(f"`{old}()` -> `WORLD_SIZE`: one process per device")
            if not self.ctx.facts.uses(f"{XR}.use_spmd"):
                # The launch comment goes where SPMD is turned on; here it is turned on elsewhere.
                self.todo(
                    f"`{old}()` -> `WORLD_SIZE`, one process per device: launch with `torchrun --nproc_per_node=<devices>`"
                )
            return expr(self.ctx.env_world_size_expr())
        if name in (*WORLD_SIZE, *LOCAL_WORLD_SIZE) and self.ctx.facts.uses(*SPMD):
            self.todo(
                f"`{old}()` counted all devices of one SPMD process: natively one per process; size batches by the local device",
                explains=(old,),
            )
            return updated_node
        if name in RANK:
            local = arg_value(updated_node, None, "local")
            flag = code_of(local.value) if local is not None else "False"
            if flag == "True":
                name = LOCAL_RANK[0]  # this host's ordinal, as `xm.get_local_ordinal()`
            elif flag != "False":
                self.changed(f"`{old}(local={flag})` -> `LOCAL_RANK` or `dist.get_rank()`")
                return self.ctx.group(expr(f"{self.ctx.local_rank_expr()} if {flag} else {self._rank(early)}"))
        if name in WORLD_SIZE:
            self.changed(f"`{old}()` -> `dist.get_world_size()`")
            return self.ctx.group(expr(self._world_size(early)))
        if name in RANK:
            self.changed(f"`{old}()` -> `dist.get_rank()`")
            return self.ctx.group(expr(self._rank(early)))
        if name in (*LOCAL_RANK, *RANK, *IS_MASTER) and id(original_node) in self._own_environment:
            self.todo(
                f"`{old}()` is read before `LOCAL_RANK`/`RANK` are set here: pass the worker's index in (a spawn argument)",
                explains=(old,),
            )
            return updated_node
        if name in LOCAL_RANK:
            self.changed(f"`{old}()` -> `LOCAL_RANK`")
            return expr(self.ctx.local_rank_expr())
        if name in LOCAL_WORLD_SIZE:
            self.changed(f"`{old}()` -> `LOCAL_WORLD_SIZE`")
            return expr(self.ctx.local_world_size_expr())
        if name in IS_MASTER:
            local = arg_value(updated_node, 0, "local")
            is_local = local is None or code_of(local.value) != "False"
            if local is not None and code_of(local.value) not in ("True", "False"):
                return updated_node
            self.changed(f"`{old}()` -> {'local' if is_local else 'global'} rank-0 test")
            return self.ctx.group(expr(self._is_master(is_local, early)))
        if name in MESH_REDUCE:
            return self._mesh_reduce(updated_node)
        if name in BROADCAST_MASTER_PARAM and len(updated_node.args) == 1 and not has_star_args(updated_node):
            helper = self.ctx.unused_name("broadcast_master_param")
            self.ctx.need_helper(
                helper,
                BROADCAST_MASTER_PARAM_HELPER.format(name=helper, dist=self.ctx.dist(), torch=self.ctx.torch()),
            )
            self.changed(f"`{old}(model)` -> `{helper}(model)`, a `dist.broadcast` from rank 0")
            return updated_node.with_changes(func=cst.Name(helper))
        return updated_node

    def _mesh_reduce(self, call: cst.Call) -> cst.BaseExpression:
        data, fn = arg_value(call, 1, "data"), arg_value(call, 2, "reduce_fn")
        if data is None or fn is None or has_star_args(call):
            return call
        name = self.ctx.unused_name("mesh_reduce")
        helper = MESH_REDUCE_HELPER.format(name=name, dist=self.ctx.dist(), torch=self.ctx.torch())
        self.ctx.need_helper(name, helper)
        self.changed(f"`xm.mesh_reduce(tag, data, fn)` -> `{name}(data, fn)`")
        return expr(f"{name}({code_of(data.value)}, {code_of(fn.value)})")

    def visit_Call(self, node: cst.Call) -> None:
        # A reduce constant handed to a torch_xla call keeps its torch_xla spelling: the call is
        # either rewritten as a whole (which maps the constant itself) or left for a person.
        name = self.qualify(node.func)
        if name and name.startswith("torch_xla."):
            for arg in node.args:
                self._xla_arguments[id(arg.value)] = arg.value

    def _reduce_op(self, node: cst.BaseExpression) -> str | None:
        """The `dist.ReduceOp` for a torch_xla reduce type written as a constant or a literal;
        None for one known only at run time (a string such as `"sum"` that torch.distributed rejects)."""
        name = self.qualify(node)
        if name and name.startswith(XM + ".") and name.rsplit(".", 1)[-1] in REDUCE_OPS:
            return f"{self.ctx.dist()}.ReduceOp.{REDUCE_OPS[name.rsplit('.', 1)[-1]]}"
        literal = string_value(node)
        if literal in REDUCE_LITERALS:
            return f"{self.ctx.dist()}.ReduceOp.{REDUCE_LITERALS[literal]}"
        return None

    def leave_UnaryOperation(
        self, original_node: cst.UnaryOperation, updated_node: cst.UnaryOperation
    ) -> cst.BaseExpression:
        """`not xm.is_master_ordinal()` -> `rank != 0`, not `not (rank == 0)`."""
        test = updated_node.expression
        if not (
            isinstance(updated_node.operator, cst.Not)
            and self.called(original_node.expression, *IS_MASTER)
            and isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)
        ):
            return updated_node
        equal = test.comparisons[0]
        assert isinstance(equal.operator, cst.Equal)
        unequal = cst.NotEqual(
            whitespace_before=equal.operator.whitespace_before, whitespace_after=equal.operator.whitespace_after
        )
        return test.with_changes(
            comparisons=[equal.with_changes(operator=unequal)], lpar=updated_node.lpar, rpar=updated_node.rpar
        )

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if id(original_node) in self._xla_arguments:
            return updated_node
        name = self.qualify(updated_node)
        if name and name.startswith(XM + ".") and name.rsplit(".", 1)[-1] in REDUCE_OPS:
            # Wherever it goes (a function of the user's, of neuronx-distributed, a mock's
            # assertion), it went as torch_xla's string: the same string goes now.
            value = next(v for v, op in REDUCE_LITERALS.items() if op == REDUCE_OPS[name.rsplit(".", 1)[-1]])
            self.changed(f'`{code_of(updated_node)}` -> `"{value}"` (its value)')
            return cst.SimpleString(f'"{value}"')
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
        original = id(getattr(original_node.body[0], "value", None))
        early = original in self._early
        if isinstance(small, cst.Expr):
            if name in MASTER_PRINT:
                return self._master_print(updated_node, call, early)
            if name in RENDEZVOUS:
                return self._rendezvous(updated_node, call)
            if name in SAVE:
                return self._save(updated_node, call, early)
            if name in MANUAL_SEED:
                return self._seed_device(updated_node, call, original in self._seeded)
        if name in ALL_REDUCE:
            return self._all_reduce(updated_node, small, call)
        return updated_node

    def _guarded(
        self, line: cst.SimpleStatementLine, condition: str, body: str | cst.BaseExpression
    ) -> cst.BaseStatement:
        """`if condition:` over `body`, which keeps the line's comment (and, given as a node, the
        layout of a call spread over lines: its continuation lines follow the new indentation)."""
        value = expr(body) if isinstance(body, str) else body
        inner = cst.SimpleStatementLine(body=[cst.Expr(value)], trailing_whitespace=line.trailing_whitespace)
        return cst.If(
            test=expr(condition), body=cst.IndentedBlock(body=[inner]), leading_lines=line.leading_lines
        )

    def _master_print(self, line: cst.SimpleStatementLine, call: cst.Call, early: bool) -> Any:
        local = arg_value(call, None, "local")
        if local is not None and code_of(local.value) not in ("True", "False"):
            return line
        is_local = local is not None and code_of(local.value) == "True"
        args = []  # `**kwargs` goes on to `print`
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "fd":
                arg = arg.with_changes(keyword=cst.Name("file"))
            if arg is not local:
                args.append(arg)
        args = args if local is None else fix_trailing_comma(args)
        if self._print_helper and not is_local:
            # The launcher's RANK is the global rank wherever the call runs, before the process
            # group exists or without one.
            name = self.ctx.unused_name("master_print")
            self.ctx.need_helper(name, MASTER_PRINT_HELPER.format(name=name, os=self.ctx.os()))
            self.changed(f"`xm.master_print(...)` -> `{name}(...)`, a `print` on global rank 0")
            return line.with_changes(body=[cst.Expr(call.with_changes(func=cst.Name(name), args=args))])
        printed = call.with_changes(func=cst.Name("print"), args=args)
        self.changed(f"`xm.master_print(...)` -> `print` on {'local' if is_local else 'global'} rank 0")
        return self._guarded(line, self._is_master(is_local, early), printed)

    def _seed_device(self, line: cst.SimpleStatementLine, call: cst.Call, seeded: bool) -> Any:
        """torch_xla seeded the device's generator only, never the host's (model init, shuffling)."""
        seed, device = arg_value(call, 0, "seed"), arg_value(call, 1, "device")
        if seed is None or has_star_args(call):
            return line
        old = code_of(call.func)
        if seeded:
            self.changed(f"removed `{old}(seed)`: the `torch.manual_seed(seed)` just before seeds the device too")
            return self.ctx.remove(line)
        torch, value = self.ctx.torch(), code_of(seed.value)
        if self.ctx.target.neuron:
            self.changed(f"`{old}(seed)` -> `torch.neuron.manual_seed(seed)` (the device's generator only)")
            return line.with_changes(body=[cst.Expr(expr(f"{torch}.neuron.manual_seed({value})"))])
        given = device.value if device is not None and isinstance(device.value, cst.Name) else None
        variable = code_of(given) if given is not None else self.ctx.device_variable()
        if variable is not None:
            test, module = f'{variable}.type != "cpu"', f"{torch}.get_device_module({variable})"
        else:
            test = f"{torch}.accelerator.is_available()"
            module = f"{torch}.get_device_module({torch}.accelerator.current_accelerator())"
        self.todo(
            f"`{old}` seeds nothing on the CPU fallback: give random ops a `torch.Generator` if CPU runs must reproduce"
        )
        self.changed(f"`{old}(seed)` -> the accelerator's `manual_seed(seed)` (its generator only)")
        return self._guarded(line, test, f"{module}.manual_seed({value})")

    def _rendezvous(self, line: cst.SimpleStatementLine, call: cst.Call) -> Any:
        if len(call.args) > 1:
            return line  # payload or replicas: a TODO from the manual table
        dist = self.ctx.dist()
        self.changed("`xm.rendezvous(tag)` -> `dist.barrier()`")
        if self.ctx.facts.distributed:
            return line.with_changes(body=[cst.Expr(expr(f"{dist}.barrier()"))])
        self._single_process_fallback()
        return self._guarded(line, f"{dist}.is_initialized()", f"{dist}.barrier()")

    def _save(self, line: cst.SimpleStatementLine, call: cst.Call, early: bool) -> Any:
        data, path = arg_value(call, 0, "data"), arg_value(call, 1, "file_or_path")
        if data is None or path is None or has_star_args(call):
            return line
        torch = self.ctx.torch()
        to_cpu = self.ctx.unused_name("to_cpu")  # `xm.save` wrote CPU copies of the tensors
        self.ctx.need_helper(to_cpu, Template(TO_CPU_FUNCTION).substitute(torch=torch, name=to_cpu))
        save = f"{torch}.save({to_cpu}({code_of(data.value)}), {code_of(path.value)})"
        self.changed("`xm.save(obj, path)` -> `torch.save` of its CPU copy on the master process")
        master_only = arg_value(call, 2, "master_only")
        only = True if master_only is None else _literal_bool(master_only.value)
        if only is False:
            return line.with_changes(body=[cst.Expr(expr(save))])
        condition = self._save_master(arg_value(call, 3, "global_master"), early)
        if only is None:
            assert master_only is not None
            condition = f"{_negated(master_only.value)} or {condition}"
        return self._guarded(line, condition, save)

    def _save_master(self, global_master: cst.Arg | None, early: bool) -> str:
        """Who saves when only a master does: the local master, the global one, or as a flag says."""
        is_global = False if global_master is None else _literal_bool(global_master.value)
        if is_global is not None:
            return self._is_master(local=not is_global, early=early)
        assert global_master is not None
        flag = code_of(global_master.value)
        return f"({self._is_master(local=False, early=early)} if {flag} else {self._is_master(local=True, early=early)})"

    def _all_reduce(self, line: cst.SimpleStatementLine, small: cst.BaseSmallStatement, call: cst.Call) -> Any:
        reduce_type, inputs = arg_value(call, 0, "reduce_type"), arg_value(call, 1, "inputs")
        if reduce_type is None or inputs is None or has_star_args(call):
            return line
        if any(self._names_old_stack(arg.value) for arg in call.args if arg is not reduce_type):
            # What it still names of the old stack would land in statements of its own, where a
            # TODO could not follow it: leave the call whole for a person.
            return line
        if isinstance(small, cst.Expr) and _one_tensor(inputs.value):
            # torch_xla returned one tensor reduced anew and left the input alone: dropped, the
            # result was never seen.
            name = code_of(inputs.value)
            self.todo(f"removed: `xm.all_reduce` left `{name}` as it was (its new tensor was dropped); `dist.all_reduce({name})` reduces it")
            self.changed("removed an `xm.all_reduce(...)` of one tensor whose result was dropped (it reduced nothing)")
            return self.ctx.remove(line)
        op = self._reduce_op(reduce_type.value)
        plan = self._all_reduce_targets(small, inputs.value) if op is not None else None
        if op is None or plan is None:
            return line
        copies, targets, loop = plan
        dist = self.ctx.dist()
        options = [] if op.endswith("ReduceOp.SUM") else [f"op={op}"]
        groups = groups_argument(call, 3)
        if groups is not None:
            options.append(f"group={process_group(self.ctx, groups)}")
        scale = arg_value(call, 2, "scale")
        scaling = code_of(scale.value) if scale is not None and code_of(scale.value) not in ("1.0", "1") else None
        reduce = []
        for target in targets:
            reduce.append(f"{dist}.all_reduce({', '.join([target, *options])})")
            if scaling is not None:
                reduce.append(f"{target} *= {scaling}")
        if loop is not None:
            reduce = [_block(f"for {targets[0]} in {loop}:", reduce)]
        reduce = self._when_several_processes(reduce, scaled=scaling is not None)
        self.changed("`xm.all_reduce(...)` -> `dist.all_reduce(...)` (in place)")
        # The collective stands in for the call, so what its arguments still name of the old
        # stack (a `groups=` from neuronx_distributed, say) is seen and marked like the rest.
        self.ctx.insert_before(*(stmt(source + "\n") for source in copies))
        self.ctx.insert_after(*(stmt(source + "\n") for source in reduce[1:]))
        return stmt(reduce[0] + "\n").with_changes(leading_lines=line.leading_lines)

    def _may_be_a_list(self, tensors: cst.BaseExpression) -> bool:
        """A name the file binds to a list or tuple somewhere: torch_xla reduced such an input in
        place and returned it, where a tensor came back as a new reduced tensor."""
        if not isinstance(tensors, cst.Name):
            return False
        if self._sequences is None:
            self._sequences = set()
            try:
                tree = ast.parse(self.ctx.source)
            except SyntaxError:
                tree = ast.Module(body=[], type_ignores=[])
            for node in ast.walk(tree):
                value = getattr(node, "value", None)
                sequence = isinstance(value, ast.List | ast.Tuple | ast.ListComp) or (
                    isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "tuple")
                )
                if sequence and isinstance(node, ast.Assign | ast.AnnAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    self._sequences.update(t.id for t in targets if isinstance(t, ast.Name))
        return tensors.value in self._sequences

    def _names_old_stack(self, node: cst.CSTNode) -> bool:
        """Does `node` still read an old-stack name (`parallel_state`, say) no codemod rewrote?"""
        finder = _NamesFinder()
        finder.scan(node)
        return bool(finder.names & self.ctx.imports.names_under(OLD_STACK_PACKAGES))

    def _all_reduce_targets(
        self, small: cst.BaseSmallStatement, tensors: cst.BaseExpression
    ) -> tuple[list[str], list[str], str | None] | None:
        """(copies to make first, tensors to reduce in place, what they are looped over), or None
        to leave the call alone."""
        if isinstance(tensors, cst.List | cst.Tuple):
            # torch_xla reduces a list in place.
            if isinstance(small, cst.Assign) or any(isinstance(e, cst.StarredElement) for e in tensors.elements):
                return None
            return [], [code_of(e.value) for e in tensors.elements], None
        if isinstance(small, cst.Assign):
            # One tensor: torch_xla returned a new one and left the input alone, even when the
            # result is bound to the same name (another reference may still see the input).
            if len(small.targets) != 1 or self._may_be_a_list(tensors):
                return None
            result = code_of(small.targets[0].target)
            source = code_of(tensors) if _is_atom(tensors) else f"({code_of(tensors)})"
            return [f"{result} = {source}.clone()"], [result], None
        # The result is dropped, so the input is a list of tensors, reduced in place.
        name = code_of(tensors)
        self.todo(
            f"`xm.all_reduce` reduced the tensors of `{name}` in place; "
            "if it is one tensor, the old call did nothing: delete this"
        )
        return [], [self.ctx.unused_name("tensor")], name

    def _when_several_processes(self, reduce: list[str], scaled: bool) -> list[str]:
        """torch_xla skipped the collective, and the scaling, in a world of one process."""
        dist = self.ctx.dist()
        if self.ctx.facts.distributed:
            condition = f"{dist}.get_world_size() > 1" if scaled else None
        else:
            self._single_process_fallback()
            condition = f"{dist}.is_initialized()"
            if scaled:
                condition += f" and {dist}.get_world_size() > 1"
        return reduce if condition is None else [_block(f"if {condition}:", reduce)]


# Attributes of a tensor that are tensors themselves: `param.data`, `param.grad`.
TENSOR_ATTRIBUTES = frozenset({"data", "grad"})


def _one_tensor(node: cst.BaseExpression) -> bool:
    """An expression that is one tensor whatever the program (a parameter's `.data` or `.grad`)."""
    return isinstance(node, cst.Attribute) and node.attr.value in TENSOR_ATTRIBUTES


def _block(header: str, lines: list[str]) -> str:
    """`header` with `lines` (statements, maybe blocks themselves) indented under it."""
    body = "".join(f"    {line}\n" for statement in lines for line in statement.split("\n"))
    return f"{header}\n{body}".rstrip("\n")


class _SetsLauncherEnvironment(Visitor):
    """The calls inside functions that write torchrun's rank variables into the environment
    themselves (a harness that starts its own workers): there the variables do not yet hold
    what torch_xla's ordinals said."""

    def __init__(self) -> None:
        self.calls: set[int] = set()
        self.within = 0  # such functions the visit is in

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        code = code_of(node)
        if _WRITES_RANK.search(code) and ("LOCAL_RANK" in code or '"RANK"' in code or "'RANK'" in code):
            self.within += 1
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        code = code_of(original_node)
        if _WRITES_RANK.search(code) and ("LOCAL_RANK" in code or '"RANK"' in code or "'RANK'" in code):
            self.within -= 1

    def visit_Call(self, node: cst.Call) -> None:
        if self.within:
            self.calls.add(id(node))


_WRITES_RANK = re.compile(r"environ\s*\[[^\]]*RANK[^\]]*\]\s*=|environ\.(?:update|setdefault)\b")


class _CountsCalls(Visitor):
    def __init__(self, matches: Any) -> None:
        self.matches = matches
        self.count = 0

    def visit_Call(self, node: cst.Call) -> None:
        if self.matches(node):
            self.count += 1


class _NamesFinder(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _literal_bool(node: cst.BaseExpression) -> bool | None:
    """True or False for those literals, None for anything else (a flag known only at run time)."""
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def _negated(node: cst.BaseExpression) -> str:
    """`not node`, without a double negation."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not) and not node.lpar:
        inner = node.expression
        return code_of(inner) if _is_atom(inner) else f"({code_of(inner)})"
    return f"not {code_of(node)}" if _is_atom(node) else f"not ({code_of(node)})"


def _is_atom(node: cst.BaseExpression) -> bool:
    """Can `.clone()` follow `node` without parentheses?"""
    return isinstance(node, cst.Name | cst.Attribute | cst.Call | cst.Subscript) or bool(node.lpar)
