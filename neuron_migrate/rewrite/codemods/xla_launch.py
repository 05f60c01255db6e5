"""NM005: `xmp.spawn` / `torch_xla.launch` become a torchrun entry point; the `xla` process group goes."""

from __future__ import annotations

import ast
import itertools
import json
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    Visitor,
    arg_value,
    code_of,
    dotted_name,
    expr,
    fix_trailing_comma,
    has_star_args,
    is_main_guard,
    stmt,
    string_value,
    with_string_value,
)
from neuron_migrate.rewrite.codemods.parent_process import (
    ParentOnly,
    parent_only_statements,
    print_call,
)
from neuron_migrate.rewrite.codemods.xla_collectives import BROADCAST_MASTER_PARAM_HELPER
from neuron_migrate.rewrite.effects import has_effects

XMP_SPAWN = "torch_xla.distributed.xla_multiprocessing.spawn"
SERIAL_EXECUTOR = "torch_xla.distributed.xla_multiprocessing.MpSerialExecutor"
SPAWN = (XMP_SPAWN, "torch_xla.launch")
INIT_PROCESS_GROUP = ("torch.distributed.init_process_group",)
XLA_DEVICE = ("torch_xla.core.xla_model.xla_device", "torch_xla.device")
XLA_INIT_METHODS = ("xla://", "pjrt://")
# What torchrun puts in each worker's environment: a test of one tells its runs from plain `python` ones.
TORCHRUN_VARIABLES = frozenset({"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "GROUP_RANK"})
TORCHRUN_PROBES = ("torch.distributed.is_torchelastic_launched", "torch.distributed.elastic.utils.distributed.is_torchelastic_launched")
SPAWN_BESIDE_TORCHRUN = (
    "`{call}` runs only without torchrun: remove it and its import, or call `{fn}(0, ...)` in a group of one"
)

RUN_ON_EACH_PROCESS = '''\
def {name}(fn, *args):
    """Run `fn(rank, *args)` in each process `notebook_launcher` starts, as `xmp.spawn` did."""
    if "RANK" in {os}.environ:
        {dist}.init_process_group({backend}){pin}
    else:  # a single process: notebook_launcher ran it in the kernel itself
        {dist}.init_process_group({backend_first}store={dist}.HashStore(), rank=0, world_size=1)
    try:
        fn({dist}.get_rank(), *args)
        {dist}.barrier()
    finally:
        {dist}.destroy_process_group()
'''

# For a function that creates its process group itself. Alone in the kernel, it has no
# launcher's variables to make it from: a group of one on a free port is described to it.
RUN_WITH_RANK = '''\
def {name}(fn, *args):
    """Run `fn(rank, *args)` in each process `notebook_launcher` starts, as `xmp.spawn` did."""{pin}
    if "RANK" in {os}.environ:
        fn(int({os}.environ["RANK"]), *args)
        return
    # A single process: notebook_launcher ran it in the kernel itself
    with {socket}.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    given = {{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}}
    {os}.environ.update(given)
    try:
        fn(0, *args)
    finally:
        if {dist}.is_initialized():
            {dist}.destroy_process_group()
        for variable in given:
            del {os}.environ[variable]
'''

LAUNCH_HELPER_DOCSTRING = ast.get_docstring(
    ast.parse(RUN_WITH_RANK.format(name="f", os="os", pin="", dist="dist", socket="socket")).body[0]  # type: ignore[arg-type]
)

# In each process of several, before the work: its own accelerator, as each process of `xmp.spawn`
# had its own device (the lookup that replaced `xm.xla_device()` names no index).
PIN_IN_HELPER = """
    if {torch}.accelerator.is_available() and "LOCAL_RANK" in {os}.environ:
        {torch}.accelerator.set_device_index(int({os}.environ["LOCAL_RANK"]) % {torch}.accelerator.device_count())"""

PARENT_ONLY = {
    ParentOnly.BEFORE: (
        "ran once in the parent, now on every rank: if once, run it on rank 0 after `init_process_group()`"
    ),
    ParentOnly.AFTER: (
        'ran once in the parent after the workers; now every rank runs it: if once, guard it with `if int(os.environ.get("RANK", 0)) == 0:`'
    ),
}
PARENT_ONLY_SEVERAL = {
    ParentOnly.BEFORE: (
        "this and what follows up to the spawn ran once in the parent, now on every rank: run once-only work on rank 0"
    ),
    ParentOnly.AFTER: (
        "this and what follows ran once in the parent after the workers; now every rank runs them: guard "
        "once-only work with a `RANK == 0` test"
    ),
}


MP_MODEL_WRAPPER = "torch_xla.distributed.xla_multiprocessing.MpModelWrapper"
SHARED_MODEL_COPY = '''\
def {name}(model, device):
    """`model` copied to `device` with rank 0's weights, as `xmp.MpModelWrapper(model).to(device)`
    gave each spawned process the model its parent built: every process builds its own natively,
    and a model trained here must not become the next run's start."""
    model = {copy}.deepcopy(model).to(device)
    {broadcast}(model)
    return model
'''

class XlaLaunch(Codemod):
    """Turns XLA process launchers into a torchrun-ready entry point.

    ## What it does
    `xmp.spawn(_mp_fn, args=(flags,), nprocs=8)` and `torch_xla.launch(_mp_fn, args=(flags,))`
    become: initialize the process group, call `_mp_fn(index, flags)` once, destroy the process
    group. The index is what torch_xla passed: the global rank for `xmp.spawn` (`RANK`), the
    local rank for `torch_xla.launch` (under torchrun it passed `LOCAL_RANK`).
    `dist.init_process_group("xla", init_method="xla://")` loses its XLA backend and rendezvous
    (`env://`, what torchrun provides, is the default); so does a backend given as a variable
    holding the XLA device (`device = "xla"`, `init_process_group(device)`), and the older
    `init_method="pjrt://"`. A script whose entry point (the last call under
    `if __name__ == "__main__":`) creates that group, and which never destroys it, destroys the
    native one after that call, once every rank is there: gloo can abort a process whose group
    is still alive at interpreter shutdown.
    The entry point creates the process group for every run, as torch_xla's launcher joined the
    processes for every run; a file whose own `init_process_group` runs only on some runs
    (`if args.ddp:`) keeps it, under `if not dist.is_initialized():`, for the runs that do not
    come through the entry point. `xmp.MpModelWrapper(model)`, which shared one copy of the
    weights between forked processes, becomes `model`: each torchrun process builds its own, and
    its `.to(device)` becomes `shared_model_copy(model, device)`, a copy with rank 0's weights, as
    each forked process got the parent's untrained model. A spawn inside a loop (once per fold)
    creates the process group on its first pass and keeps it. A spawn in the branch a script takes when torchrun did not
    launch it (`if os.environ.get("WORLD_SIZE"): ... else: xmp.spawn(...)`) becomes
    `raise SystemExit("launch with torchrun: ...")`: torchrun launches it now.

    In a notebook the kernel cannot be launched with torchrun, so the spawn becomes accelerate's
    `notebook_launcher(run_on_each_process, args=(_mp_fn, flags), num_processes=N)`: it forks
    one process per device, and a small helper creates the process group in each and calls
    `_mp_fn(rank, flags)` (a function that creates its process group itself is only given its
    rank, by `run_with_rank`).

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
        _mp_fn(int(os.environ.get("RANK", 0)), flags)
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
    The statements next to the spawn ran once, in the parent process; under torchrun every
    rank runs them. Argument parsing, imports, definitions and plain assignments are the same on
    every rank; a `print` is kept to rank 0; anything else gets a TODO (if it must run once,
    run it on rank 0 once the process group exists, then `dist.barrier()`). In a notebook,
    `notebook_launcher` forks the kernel: no cell may use the accelerator before it (the
    report says so). A spawn under a test of whether torchrun started the script ran only where
    torchrun did not, to start the workers itself: natively only torchrun starts them and the
    torch_xla import it needs fails, so it gets a TODO: launch with torchrun
    (`--nproc_per_node=<processes>`), or for one process create a group of one
    (`dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)`) and call the
    worker function with rank 0. An `init_process_group("xla", rank=..., world_size=...)` passed
    ranks the XLA group ignored and a native group waits for.
    """

    code = "NM005"
    name = "xla-launch"
    summary = "`xmp.spawn`/`torch_xla.launch` -> torchrun entry point; `xla` process group -> native"
    triggers = (*SPAWN, *INIT_PROCESS_GROUP, MP_MODEL_WRAPPER)
    markers = XLA_INIT_METHODS
    manual: ClassVar[dict[str, str]] = {
        MP_MODEL_WRAPPER: "shared the model across spawned processes; under torchrun each builds its own",
        SERIAL_EXECUTOR: "use `dist.barrier()` around rank-ordered work instead",
        "torch_xla.distributed.xla_backend": "registers the `xla` process group, which native PyTorch does not need",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._xla_device_names: frozenset[str] = frozenset()
        self._self_initializing: set[str] = set()  # functions that surely create the process group
        # The launch becomes an entry point (or a notebook helper) that creates the process group
        # for every run, as torch_xla's launcher joined the processes for every run: the file's
        # own `init_process_group` calls, which only some runs made, would create it twice.
        self._launcher_creates_group = False
        self._pinned_inits: dict[int, cst.BaseStatement] = {}  # init call -> the pin that follows it
        # Statements under `if not dist.is_initialized():` already (a migrated notebook cell).
        self._guarded_by_initialized: set[int] = set()
        self._parent_only: dict[int, ParentOnly] = {}  # statements next to a spawn, by id
        self._parent_leads: dict[int, int] = {}  # the first of them in a block: how many it leads
        # Launches under a test of torchrun's environment: they ran only without torchrun, and stay.
        self._beside_torchrun: set[int] = set()
        self._loops = 0  # loops around the statement being rewritten
        self._wrapped_models: set[object] = set()  # variables an `xmp.MpModelWrapper(...)` is bound to
        # `flag = ...` lines right before the `torch_xla.launch(..., debug_single_process=flag)` that
        # is their only reader, by the variable's name.
        self._launch_options: dict[str, cst.SimpleStatementLine] = {}
        # The `main()` at the end of `if __name__ == "__main__":` whose function creates an `xla`
        # process group: the native group is torn down after it, by id of the guard.
        self._torn_down_after: int | None = None

    # -- what the file holds -------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        finder = XlaDeviceNames(self.qualify)
        finder.scan(node)
        self._xla_device_names = finder.names()
        self._self_initializing = {
            statement.name.value
            for statement in node.body
            if isinstance(statement, cst.FunctionDef) and self._creates_group(statement)
        }
        beside = _LaunchesBesideTorchrun(lambda call: self.called(call, *SPAWN), self.qualify)
        beside.scan(node)
        self._beside_torchrun = beside.found
        # Functions another runtime runs in its own worker (`@ray.remote`): no torchrun starts them.
        self._run_remotely = {
            statement.name.value
            for statement in node.body
            if isinstance(statement, cst.FunctionDef)
            and any(_remote(decorator.decorator) for decorator in statement.decorators)
        }
        if not self.ctx.notebook:
            self._parent_only, self._parent_leads = parent_only_statements(node, self._is_spawn_statement)
        launched = _SpawnedFunctions(lambda call: self.called(call, *SPAWN) and id(call) not in self._beside_torchrun)
        launched.scan(node)
        self._launch_options = _launch_options(node, lambda call: self.called(call, "torch_xla.launch"), self.ctx.source)
        if self.ctx.notebook:
            self._launcher_creates_group = any(f not in self._self_initializing for f in launched.functions)
        else:
            # The file creates the group itself only if every launched function (or the module,
            # which every rank now runs) surely does, directly or through a function it surely calls.
            surely = self.ctx.facts.surely_called_by
            self._launcher_creates_group = bool(launched.functions) and not (
                set(INIT_PROCESS_GROUP) & surely.get("", frozenset())
                or all(set(INIT_PROCESS_GROUP) & surely.get(f, frozenset()) for f in launched.functions)
            )

        if not (self.ctx.notebook or self._launcher_creates_group):
            self._torn_down_after = self._entry_creating_xla_group(node)

    def _entry_creating_xla_group(self, module: cst.Module) -> int | None:
        """The script's `if __name__ == "__main__":` guard when its last statement is a plain call of
        a module function that surely creates an `xla` process group, and nothing in the file
        destroys one: the native group must be destroyed before the process exits, or gloo can
        abort it at interpreter shutdown."""
        destroys = _FindsCall(lambda call: self.qualify(call.func) == "torch.distributed.destroy_process_group")
        destroys.scan(module)
        guards = [s for s in module.body if isinstance(s, cst.If) and s.orelse is None and is_main_guard(s.test)]
        if destroys.found or len(guards) != 1:
            return None
        last = guards[0].body.body[-1]
        small = last.body[0] if isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 else None
        if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and isinstance(small.value.func, cst.Name)):
            return None
        name = small.value.func.value
        functions = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
        if len(functions) != 1 or name not in self._self_initializing:
            return None
        xla = _FindsCall(
            lambda call: self.qualify(call.func) in INIT_PROCESS_GROUP and any(self._xla_arguments(call))
        )
        for statement in functions[0].body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                xla.scan(statement)
        return id(guards[0]) if xla.found else None

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if id(original_node) != self._torn_down_after:
            return updated_node
        dist = self.ctx.dist()
        self.changed("the native process group is destroyed once the script's entry point returns")
        body = updated_node.body
        assert isinstance(body, cst.IndentedBlock)
        # Wait for every rank first: gloo can abort a process that exits while a peer is
        # still finishing its last collective.
        teardown = [stmt(f"{dist}.barrier()\n"), stmt(f"{dist}.destroy_process_group()\n")]
        return updated_node.with_changes(body=body.with_changes(body=[*body.body, *teardown]))

    def _creates_group(self, function: cst.FunctionDef) -> bool:
        """Does every call of `function` create the process group (no branch decides)?"""
        finder = _FindsCall(lambda call: self.qualify(call.func) in INIT_PROCESS_GROUP)
        for statement in function.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                finder.scan(statement)
        return finder.found

    def _is_spawn_statement(self, statement: cst.BaseStatement) -> bool:
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            return False
        small = statement.body[0]
        return isinstance(small, cst.Expr) and self.called(small.value, *SPAWN) and id(small.value) not in self._beside_torchrun

    # -- statements that ran once, in the parent process ---------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._flag_parent_only(node)

    def visit_If(self, node: cst.If) -> None:
        self._flag_parent_only(node)
        test = node.test
        if (
            isinstance(test, cst.UnaryOperation)
            and isinstance(test.operator, cst.Not)
            and self.called(test.expression, "torch.distributed.is_initialized")
        ):
            self._guarded_by_initialized.update(id(s) for s in node.body.body)

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self.qualify(node.value.func) == MP_MODEL_WRAPPER:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._wrapped_models.add(self.ctx.binding_key(target.target.value))

    def _wrapped_to(self, wrapper: str, device: cst.BaseExpression) -> cst.BaseExpression:
        """`WRAPPED.to(device)`: torch_xla moved the model the parent built into each forked
        process, untrained and the same on every rank; natively each process builds its own, so
        each gets a copy with rank 0's weights."""
        broadcast = self.ctx.unused_name("broadcast_master_param")
        self.ctx.need_helper(
            broadcast, BROADCAST_MASTER_PARAM_HELPER.format(name=broadcast, dist=self.ctx.dist(), torch=self.ctx.torch())
        )
        name = self.ctx.unused_name("shared_model_copy")
        self.ctx.need_helper(
            name, SHARED_MODEL_COPY.format(name=name, copy=self.ctx.need_import("copy"), broadcast=broadcast)
        )
        self.changed(f"`{wrapper}.to(device)` -> `{name}({wrapper}, device)`: a copy with rank 0's weights, as each spawned process got")
        return expr(f"{name}({wrapper}, {code_of(device)})")

    def visit_For(self, node: cst.For) -> None:
        self._flag_parent_only(node)
        self._loops += 1

    def visit_While(self, node: cst.While) -> None:
        self._flag_parent_only(node)
        self._loops += 1

    def visit_With(self, node: cst.With) -> None:
        self._flag_parent_only(node)

    def visit_Try(self, node: cst.Try) -> None:
        self._flag_parent_only(node)

    def _flag_parent_only(self, node: cst.BaseStatement) -> None:
        when = self._parent_only.get(id(node))
        leads = self._parent_leads.get(id(node), 0)
        if when is None or not leads:
            return  # a print is kept to rank 0; a later statement is covered by the first's TODO
        self.todo(PARENT_ONLY[when] if leads == 1 else PARENT_ONLY_SEVERAL[when])

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Any:
        small = updated_node.body[0] if len(updated_node.body) == 1 else None
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and self.called(small.value, SERIAL_EXECUTOR)
            and not self._read_elsewhere(small.targets[0].target.value, 0)
        ):
            self.changed(f"removed `{small.targets[0].target.value} = MpSerialExecutor()`, which nothing uses")
            return self.ctx.remove(updated_node)
        if (
            self._launcher_creates_group
            and isinstance(small, cst.Expr)
            and self.called(small.value, *INIT_PROCESS_GROUP)
            and not self._in_notebook_launcher_helper()
        ):
            assert isinstance(small.value, cst.Call)
            return self._created_by_launcher(updated_node, small.value, id(original_node) in self._guarded_by_initialized)
        if id(original_node) not in self._parent_only or print_call(updated_node) is None:
            return updated_node
        self.changed("a `print` the parent process made once -> `print` on rank 0")
        # The line itself goes in the block, so a call spread over lines keeps its layout.
        return cst.If(
            test=cst.parse_expression(f"{self.ctx.env_rank_expr()} == 0"),
            body=cst.IndentedBlock(body=[updated_node.with_changes(leading_lines=[])]),
            leading_lines=updated_node.leading_lines,
        )

    # -- the launch ----------------------------------------------------------------------------
    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = updated_node.value
        if not (isinstance(call, cst.Call) and self.qualify(call.func) in SPAWN) or has_star_args(call):
            return updated_node
        fn = arg_value(call, 0, "fn")
        if fn is None:
            return updated_node
        runner = self._enclosing_function()
        if runner in self._run_remotely:
            written = code_of(call.func)
            self.todo(
                f"`{written}` in `{runner}` runs on a remote worker, not under torchrun: start its processes there",
                explains=(written,),
            )
            return updated_node
        if id(original_node.value) in self._beside_torchrun:
            written = code_of(call.func)
            if self.ctx.notebook:
                self.todo(SPAWN_BESIDE_TORCHRUN.format(call=written, fn=code_of(fn.value)), explains=(written,))
                return updated_node
            # The branch the script took when torchrun had not launched it: torchrun launches it now.
            self.changed(f"`{written}(...)` beside a torchrun launch -> an exit that says to launch with torchrun")
            command = f"launch with torchrun: torchrun --nproc_per_node=<processes> {self.ctx.script_name}"
            return cst.Raise(exc=cst.parse_expression(f"SystemExit({json.dumps(command)})"))
        args = arg_value(call, 1, "args")
        user_args: list[str] = []
        if args is not None:
            value = args.value
            if isinstance(value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
                user_args = [code_of(e.value) for e in value.elements]
            else:
                user_args = [f"*{code_of(value)}"]
        if self.ctx.notebook:
            return updated_node.with_changes(value=cst.parse_expression(self._notebook_launch(call, fn, user_args)))
        index = self.ctx.env_rank_expr() if self.qualify(call.func) == XMP_SPAWN else self.ctx.local_rank_expr()
        self._torchrun_entry(call)
        return updated_node.with_changes(value=cst.parse_expression(f"{code_of(fn.value)}({', '.join([index, *user_args])})"))

    def _in_notebook_launcher_helper(self) -> bool:
        """Is this in a function that `notebook_launcher` runs first in each process (the helper a
        migration wrote, `run_on_each_process`)? It is what creates the group: it stays as it is."""
        scope = self.ctx.scope
        while scope.parent is not None and scope.kind != "FunctionDef":
            scope = scope.parent
        return scope.kind == "FunctionDef" and scope.parent is not None and scope.parent.kind == "Module" and scope.name in _launched_first(self.ctx.source)

    def _created_by_launcher(self, line: cst.SimpleStatementLine, call: cst.Call, guarded: bool) -> cst.BaseStatement:
        """The file's own `init_process_group(...)`, which only some runs reached: the launch now
        creates the group for every run, so on those runs this one must not create it again
        (`guarded`: it is under that test already)."""
        backend = arg_value(call, 0, "backend")
        if any(a is not backend or string_value(a.value) != "neuron" for a in call.args):
            self.todo(
                f"`{code_of(call)}`: the launch now creates the process group first: pass these arguments to "
                "the entry point's `init_process_group`"
            )
        if guarded:
            return line
        pin = [self._pinned_inits[id(call)]] if id(call) in self._pinned_inits else []
        self.changed("`init_process_group(...)` runs only where the launch has not created the group")
        return cst.If(
            test=expr(f"not {self.ctx.dist()}.is_initialized()"),
            body=cst.IndentedBlock(body=[line.with_changes(leading_lines=[]), *pin]),
            leading_lines=line.leading_lines,
        )

    def _torchrun_entry(self, call: cst.Call) -> None:
        """Create the process group around the call, and say how to launch the script."""
        nprocs = arg_value(call, 2, "nprocs") if self.qualify(call.func) == XMP_SPAWN else None
        count = code_of(nprocs.value) if nprocs is not None and isinstance(nprocs.value, cst.Integer) else "<processes>"
        if nprocs is not None and isinstance(nprocs.value, cst.Name) and self._read_elsewhere(nprocs.value.value):
            name = nprocs.value.value
            self.todo(
                f"`{name}` no longer sets the process count (`torchrun --nproc_per_node` does): to count workers use `{self.ctx.dist()}.get_world_size()`"
            )
        single = self._single_process(call)
        if single == "True":
            count = "1"
        script = self.ctx.script_name
        launch = f"torchrun --nproc_per_node={count} {script}"
        one = f" (--nproc_per_node=1 where `{single}`)" if single not in (None, "True", "False") else ""
        self.ctx.comment(f"# Launch with: {launch}{one}")
        if self._launcher_creates_group:
            dist = self.ctx.dist()
            if self._loops:
                # Spawned once per pass: the group is made on the first and kept for the next
                # (made again, a group is not reliably ready on every rank).
                self.ctx.insert_before(stmt(f"if not {dist}.is_initialized():\n    {self._init_call()}\n"))
            else:
                self.ctx.insert_before(stmt(f"{self._init_call()}\n"))
            pin = self._pin_device()
            if pin is not None:
                self.ctx.insert_before(pin)
            # Wait for every rank before tearing down: gloo can abort a process that exits
            # while a peer is still finishing its last collective.
            teardown = [] if self._loops else [stmt(f"{dist}.destroy_process_group()\n")]
            self.ctx.insert_after(stmt(f"{dist}.barrier()\n"), *teardown)
        self.changed(f"`{code_of(call.func)}(...)` -> direct call under torchrun")
        self.ctx.note(self.code, f"launch with `{launch}` instead of `python {script}`")

    def _enclosing_function(self) -> str | None:
        """The module-level function the node being rewritten is in."""
        scope = self.ctx.scope
        while scope.parent is not None and scope.parent.kind != "Module":
            scope = scope.parent
        return scope.name if scope.kind == "FunctionDef" else None

    def _read_elsewhere(self, name: str, here: int = 1) -> bool:
        """Does the file read `name` more than the `here` times a caller knows of (the `nprocs=`
        of the spawn)?"""
        try:
            tree = ast.parse(self.ctx.source)
        except SyntaxError:
            return True
        reads = sum(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in all_nodes(tree))
        return reads > here

    def _single_process(self, call: cst.Call) -> str | None:
        """The condition under which `torch_xla.launch(..., debug_single_process=...)` ran one process,
        as code: the value of a variable that only fed the launch (which then goes)."""
        single = arg_value(call, 3, "debug_single_process") if self.qualify(call.func) != XMP_SPAWN else None
        if single is None:
            return None
        value = single.value
        assignment = self._launch_options.get(code_of(value)) if isinstance(value, cst.Name) else None
        if assignment is not None:
            self.ctx.remove(assignment)
            self.changed(f"`{code_of(value)} = ...`, which only chose the number of processes, -> the launch command")
            assert isinstance(assignment.body[0], cst.Assign)
            value = assignment.body[0].value
        return code_of(value)

    def _notebook_launch(self, call: cst.Call, fn: cst.Arg, user_args: list[str]) -> str:
        """`notebook_launcher` forks the kernel into one process per device; a helper joins them."""
        os = self.ctx.os()
        pin = "" if self.ctx.target.neuron else PIN_IN_HELPER.format(torch=self.ctx.torch(), os=os)
        dist = self.ctx.dist()
        backend = 'backend="neuron"' if self.ctx.target.neuron else ""
        if isinstance(fn.value, cst.Name) and fn.value.value in self._self_initializing:
            helper = self.ctx.unused_name("run_with_rank")
            source = RUN_WITH_RANK.format(name=helper, os=os, pin=pin, dist=dist, socket=self.ctx.need_import("socket"))
            self.ctx.need_helper(helper, source)
        else:
            helper = self.ctx.unused_name("run_on_each_process")
            source = RUN_ON_EACH_PROCESS.format(
                name=helper, dist=dist, os=os, backend=backend, backend_first=f"{backend}, " if backend else "", pin=pin.replace("\n    ", "\n        ")
            )
            self.ctx.need_helper(helper, source)
        launcher = self.ctx.need_from("accelerate", "notebook_launcher")
        nprocs = arg_value(call, 2, "nprocs") if self.qualify(call.func) == XMP_SPAWN else None
        if nprocs is not None and not (isinstance(nprocs.value, cst.Name) and nprocs.value.value == "None"):
            count = code_of(nprocs.value)  # the program's own count (`FLAGS["nprocs"]`), which it may read again
        else:
            count = f"{self.ctx.torch()}.accelerator.device_count()"
        self.changed(f"`{code_of(call.func)}(...)` -> `notebook_launcher(...)`")
        self.ctx.note(
            self.code,
            "`notebook_launcher` forks the kernel once per process: no cell may use the accelerator before it runs",
        )
        launched = ", ".join([code_of(fn.value), *user_args]) + ("," if not user_args else "")
        return f"{launcher}({helper}, args=({launched}), num_processes={count})"

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

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        self._loops -= 1
        return updated_node

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        self._loops -= 1
        return updated_node

    # -- init_process_group("xla") -------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.qualify(updated_node.func) == MP_MODEL_WRAPPER and len(updated_node.args) == 1 and not updated_node.args[0].star:
            # It shared one copy of the weights between the processes `xmp.spawn` forked; each
            # torchrun process builds its own model, and `.to(device)` moved the model it held.
            self.changed("`xmp.MpModelWrapper(model)` -> `model`: each torchrun process holds its own")
            return updated_node.args[0].value
        func = updated_node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "to"
            and isinstance(func.value, cst.Name)
            and self.ctx.binding_key(func.value.value) in self._wrapped_models
            and len(updated_node.args) == 1
        ):
            return self._wrapped_to(func.value.value, updated_node.args[0].value)
        if self.qualify(updated_node.func) not in INIT_PROCESS_GROUP:
            return updated_node
        backend = arg_value(updated_node, 0, "backend")
        init_method = arg_value(updated_node, 1, "init_method")
        xla_backend, xla_init = self._xla_arguments(original_node)
        if not (xla_backend or xla_init):
            return updated_node
        ranks = [
            f"{name}={code_of(given.value)}"
            for name, position in (("rank", 4), ("world_size", 3))
            if (given := arg_value(updated_node, position, name)) is not None
        ]
        if ranks:
            self.todo(
                f"`{', '.join(ranks)}`: a native group waits for these ranks: drop them under torchrun"
            )
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
                arg = arg.with_changes(value=_neuron_backend(arg.value))
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
            if pin is not None and self._launcher_creates_group:
                self._pinned_inits[id(new)] = pin  # it goes under the init's guard
            elif pin is not None:
                self.ctx.insert_after(pin)
        self.changed("`init_process_group('xla')` -> native process group")
        return new

    def _xla_arguments(self, call: cst.Call) -> tuple[bool, bool]:
        """Whether `init_process_group(...)` names the XLA backend, and an XLA rendezvous."""
        backend = arg_value(call, 0, "backend")
        init_method = arg_value(call, 1, "init_method")
        return (
            backend is not None and self._names_xla(call, backend.value),
            init_method is not None and (string_value(init_method.value) or "").startswith(XLA_INIT_METHODS),
        )

    def _names_xla(self, call: cst.Call, value: cst.BaseExpression) -> bool:
        """Is the backend `"xla"`, or a variable that holds the XLA device (or its name)?"""
        if string_value(value) == "xla":
            return True
        original = arg_value(call, 0, "backend")
        return (
            original is not None
            and isinstance(original.value, cst.Name)
            and original.value.value in self._xla_device_names
        )


class _SpawnedFunctions(Visitor):
    """The names of the functions a launch call starts (`xmp.spawn(_mp_fn, ...)`)."""

    def __init__(self, is_launch: Any) -> None:
        self.is_launch = is_launch
        self.functions: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if self.is_launch(node) and not has_star_args(node):
            fn = arg_value(node, 0, "fn")
            if fn is not None:
                self.functions.add(code_of(fn.value))


class _LaunchesBesideTorchrun(Visitor):
    """The launch calls (by id) inside an `if` whose test reads torchrun's environment
    (`if os.environ.get("WORLD_SIZE"):`, `if not dist.is_torchelastic_launched():`)."""

    def __init__(self, is_launch: Any, qualify: Any) -> None:
        self.is_launch = is_launch
        self.qualify = qualify
        self.found: set[int] = set()
        self._tests: list[bool] = []  # per enclosing `if`: does its test read torchrun's environment?

    def visit_If(self, node: cst.If) -> None:
        probes = _FindsCall(lambda call: self.qualify(call.func) in TORCHRUN_PROBES)
        probes.scan(node.test)
        strings = _StringsIn()
        strings.scan(node.test)
        self._tests.append(probes.found or bool(strings.found & TORCHRUN_VARIABLES))

    def leave_If(self, original_node: cst.If) -> None:
        self._tests.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if any(self._tests) and self.is_launch(node):
            self.found.add(id(node))


class _StringsIn(Visitor):
    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None:
            self.found.add(value)


def _launch_options(module: cst.Module, is_launch: Any, source: str) -> dict[str, cst.SimpleStatementLine]:
    """`flag = value` right before a launch that passes `debug_single_process=flag`, where nothing
    else reads `flag` and computing `value` does nothing else."""
    found: dict[str, cst.SimpleStatementLine] = {}
    names = [node.id for node in all_nodes(ast.parse(source)) if isinstance(node, ast.Name)]
    for block in _Blocks.of(module):
        for before, statement in itertools.pairwise(block):
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            call = small.value if isinstance(small, cst.Expr) else None
            single = arg_value(call, 3, "debug_single_process") if isinstance(call, cst.Call) and is_launch(call) else None
            if single is None or not isinstance(single.value, cst.Name):
                continue
            name = single.value.value
            assign = before.body[0] if isinstance(before, cst.SimpleStatementLine) and len(before.body) == 1 else None
            if (
                isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
                and assign.targets[0].target.value == name
                and not has_effects(assign.value, lambda dotted: None)
                and names.count(name) == 2  # this assignment and the launch
            ):
                found[name] = before  # type: ignore[assignment]
    return found


class _Blocks(Visitor):
    """Every statement list of a module: its body and each indented block."""

    def __init__(self) -> None:
        self.found: list[list[cst.BaseStatement]] = []

    @classmethod
    def of(cls, module: cst.Module) -> list[list[cst.BaseStatement]]:
        blocks = cls()
        blocks.found.append(list(module.body))
        blocks.scan(module)
        return blocks.found

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.found.append(list(node.body))


def _neuron_backend(value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(value, cst.SimpleString):
        return with_string_value(value, "neuron")
    return cst.SimpleString('"neuron"')


class _FindsCall(Visitor):
    def __init__(self, matches: Any) -> None:
        self.matches = matches
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        self.found = self.found or self.matches(node)


class XlaDeviceNames(Visitor):
    """Variables only ever assigned the XLA device, or its name `"xla"`."""

    def __init__(self, qualify: Any) -> None:
        self.qualify = qualify
        self.xla: set[str] = set()
        self.other: set[str] = set()

    def names(self) -> frozenset[str]:
        return frozenset(self.xla - self.other)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                (self.xla if self._is_xla(node.value) else self.other).add(target.target.value)

    def _is_xla(self, value: cst.BaseExpression) -> bool:
        text = string_value(value)
        if text is not None:
            return text == "xla" or text.startswith("xla:")
        if isinstance(value, cst.Call):
            name = self.qualify(value.func)
            if name in XLA_DEVICE:
                return True
            if name == "torch.device" and value.args:
                return self._is_xla(value.args[0].value)
        return False


def _launched_first(source: str) -> frozenset[str]:
    """The functions `notebook_launcher(fn, ...)` calls in this source (by name), and the helpers
    a migration wrote for it (by their docstring): in a notebook applied one cell at a time, the
    helper is written before the cell whose spawn it runs is."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    called = {
        node.args[0].id
        for node in all_nodes(tree)
        if isinstance(node, ast.Call)
        and (ast_dotted_name(node.func) or "").rsplit(".", 1)[-1] == "notebook_launcher"
        and node.args
        and isinstance(node.args[0], ast.Name)
    }
    written = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) == LAUNCH_HELPER_DOCSTRING
    }
    return frozenset(called | written)


def _remote(decorator: cst.BaseExpression) -> bool:
    """`@ray.remote`, `@ray.remote(num_gpus=1)`, `@remote`."""
    target = decorator.func if isinstance(decorator, cst.Call) else decorator
    return (dotted_name(target) or "").rpartition(".")[2] == "remote"
