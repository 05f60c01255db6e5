"""NM013: torch_xla's small utilities (throughput tracker, fake data, test printing, activation
checkpointing, serialization, copies to the CPU) become native code with the same behaviour."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from string import Template
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    append_arg,
    arg_value,
    code_of,
    expr,
    has_star_args,
    keyword_arg,
    stmt,
)
from neuron_migrate.rewrite.effects import has_effects
from neuron_migrate.rewrite.spelling import State, state

XM = "torch_xla.core.xla_model"
TEST_UTILS = "torch_xla.test.test_utils"
XSER = "torch_xla.utils.serialization"
XP = "torch_xla.debug.profiler"

RATE_TRACKER = f"{XM}.RateTracker"
SAMPLE_GENERATOR = "torch_xla.utils.utils.SampleGenerator"
TO_CPU = f"{XM}._maybe_convert_to_cpu"
CHECKPOINT = "torch_xla.utils.checkpoint.checkpoint"
TORCH_CHECKPOINT = "torch.utils.checkpoint.checkpoint"
XSER_LOAD = f"{XSER}.load"
NOW = f"{TEST_UTILS}.now"
WRITE_TO_SUMMARY = f"{TEST_UTILS}.write_to_summary"
CLOSE_SUMMARY_WRITER = f"{TEST_UTILS}.close_summary_writer"
START_SERVER = f"{XP}.start_server"

RATE_TRACKER_CLASS = '''\
class $name:
    """Samples per second, as torch_xla's `xm.RateTracker` measured them (`rate()` is smoothed)."""

    def __init__(self, smooth_factor=None):
        self._smooth_factor = 0.4 if smooth_factor is None else smooth_factor
        self._start_time = $time.time()
        self._partial_time = self._start_time
        self._partial_count = 0.0
        self._partial_rate = None
        self._count = 0.0

    def add(self, count):
        self._count += count

    def rate(self):
        now = $time.time()
        delta = now - self._partial_time
        if delta <= 0:
            return 0.0
        rate = self._count / delta
        if self._partial_rate is not None:
            rate = (1 - self._smooth_factor) * rate + self._smooth_factor * self._partial_rate
        self._partial_count += self._count
        self._count = 0.0
        self._partial_time = now
        self._partial_rate = rate
        return rate

    def global_rate(self):
        delta = $time.time() - self._start_time
        return (self._partial_count + self._count) / delta if delta > 0 else 0.0
'''

SAMPLE_GENERATOR_CLASS = '''\
class $name:
    """Returns `data` `sample_count` times, as torch_xla's `SampleGenerator` did (synthetic batches)."""

    def __init__(self, data, sample_count):
        self._data = data
        self._sample_count = sample_count
        self._count = 0

    def __len__(self):
        return self._sample_count

    def __iter__(self):
        return type(self)(self._data, self._sample_count)

    def __next__(self):
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data
'''

TO_CPU_FUNCTION = '''\
def $name(data):
    """`data` with its tensors copied to the CPU, as torch_xla's `xm._maybe_convert_to_cpu` made it."""
    # As there, containers are rebuilt (tuples as lists) and a tensor met twice is copied once.
    copies = {}

    def convert(value):
        if id(value) in copies:
            return copies[id(value)]
        if isinstance(value, $torch.Tensor):
            result = value.cpu()
        elif isinstance(value, dict):
            result = {convert(key): convert(item) for key, item in value.items()}
        elif isinstance(value, set):
            result = {convert(item) for item in value}
        elif isinstance(value, (list, tuple)):
            result = [convert(item) for item in value]
        else:
            return value
        copies[id(value)] = result
        return result

    return convert(data)
'''

PRINT_TRAINING_UPDATE = '''\
def $name(device, step, loss, rate, global_rate, epoch=None, summary_writer=None):
    """Prints a line of training progress, as torch_xla's `test_utils.print_training_update` did."""
    rank = int($os.environ.get("RANK", 0))
    update_data = [
        "Training",
        f"Device={device}/{rank}",
        f"Epoch={epoch}" if epoch is not None else None,
        f"Step={step}",
        f"Loss={loss:.5f}",
        f"Rate={rate:.2f}",
        f"GlobalRate={global_rate:.2f}",
        f"Time={$datetime.now():%H:%M:%S}",
    ]
    print("|", " ".join(item for item in update_data if item), flush=True)
    if summary_writer is not None:
        summary_writer.add_scalar("examples/sec", rate)
        summary_writer.add_scalar("average_examples/sec", global_rate)
'''

PRINT_TEST_UPDATE = '''\
def $name(device, accuracy, epoch=None, step=None):
    """Prints a line of test results, as torch_xla's `test_utils.print_test_update` did."""
    rank = int($os.environ.get("RANK", 0))
    update_data = [
        "Test",
        f"Device={device}/{rank}",
        f"Step={step}" if step is not None else None,
        f"Epoch={epoch}" if epoch is not None else None,
        f"Accuracy={accuracy:.2f}" if accuracy is not None else None,
        f"Time={$datetime.now():%H:%M:%S}",
    ]
    print("|", " ".join(item for item in update_data if item), flush=True)
'''

GET_SUMMARY_WRITER = '''\
def $name(logdir):
    """A TensorBoard writer for `logdir` (None without one), as torch_xla's `test_utils` made it."""
    if not logdir:
        return None
    from torch.utils.tensorboard import SummaryWriter  # TensorBoard is needed only to log

    writer = SummaryWriter(log_dir=logdir)
    writer.add_scalar("TensorboardStartTimestamp", $time.time(), 0)
    return writer
'''

WRITE_TO_SUMMARY_FUNCTION = '''\
def $name(summary_writer, global_step=None, dict_to_write=None):
    """Writes the scalars of `dict_to_write` to TensorBoard, as torch_xla's `test_utils` did."""
    if summary_writer is None or not dict_to_write:
        return
    for name, value in dict_to_write.items():
        summary_writer.add_scalar(name, value, global_step)
'''

# Calls that become a call of a helper added to the file, with the same arguments.
HELPERS = {
    RATE_TRACKER: ("RateTracker", RATE_TRACKER_CLASS),
    SAMPLE_GENERATOR: ("SampleGenerator", SAMPLE_GENERATOR_CLASS),
    f"{TEST_UTILS}.print_training_update": ("print_training_update", PRINT_TRAINING_UPDATE),
    f"{TEST_UTILS}.print_test_update": ("print_test_update", PRINT_TEST_UPDATE),
    f"{TEST_UTILS}.get_summary_writer": ("get_summary_writer", GET_SUMMARY_WRITER),
    WRITE_TO_SUMMARY: ("write_to_summary", WRITE_TO_SUMMARY_FUNCTION),
    TO_CPU: ("to_cpu", TO_CPU_FUNCTION),
}

TRACE_ADVICE = "profile the steps with `torch.profiler.profile(on_trace_ready=tensorboard_trace_handler(logdir))`"


@dataclass(frozen=True)
class FileReads:
    """What the whole file reads and replaces, which decides whether a rewrite may drop a name."""

    names: frozenset[str]  # every variable read somewhere (a conservative "is it used?")
    # Assigns to `torch.utils.checkpoint.checkpoint` something that may call it.
    replaces_torch_checkpoint: bool
    imported_modules: frozenset[str]  # `import a.b` anywhere: `a.b` is loaded when the code runs

    @classmethod
    def of(cls, source: str, resolve: Callable[[str], str | None]) -> FileReads:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return cls(frozenset(), replaces_torch_checkpoint=True, imported_modules=frozenset())
        names: set[str] = set()
        modules: set[str] = set()
        replaced = False
        for node in all_nodes(tree):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Assign):
                replaced |= _replaces_torch_checkpoint(node, resolve)
        return cls(frozenset(names), replaced, frozenset(modules))


class XlaUtils(Codemod):
    """Rewrites torch_xla's utility APIs into native code that behaves the same.

    ## What it does
    | torch_xla | native |
    |---|---|
    | `xm.RateTracker()`, `.add(n)`, `.rate()`, `.global_rate()` | a `RateTracker` class added to the file (same smoothing, `time.time()` based) |
    | `xu.SampleGenerator(data=..., sample_count=n)` | a `SampleGenerator` class added to the file (yields `data` n times, has `len()`) |
    | `test_utils.print_training_update(...)`, `print_test_update(...)` | functions added to the file that print the same line (`Device=<device>/<rank>`) |
    | `test_utils.get_summary_writer(logdir)`, `write_to_summary(...)` | functions over `torch.utils.tensorboard.SummaryWriter` |
    | `test_utils.close_summary_writer(w)` | `if w is not None: w.close()` |
    | `test_utils.now()` | `datetime.now().strftime("%H:%M:%S")` |
    | `xm._maybe_convert_to_cpu(data)` | `to_cpu(data)`, a function added to the file |
    | `checkpoint(fn, *args)` (`torch_xla.utils.checkpoint`) | `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=True)` |
    | `xser.load(path)` | `torch.load(path, map_location="cpu", weights_only=False)` |
    | `server = xp.start_server(port)`, `server` never read | removed |

    `xser.save(obj, path)` becomes `torch.save` on the master process, as `xm.save` does (NM006).
    `checkpoint` handed on as a value (`checkpoint_method = checkpoint`) becomes
    `functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=True)`.

    ## Why
    These utilities live in torch_xla, which is gone; each is a few lines of plain Python or has a
    native counterpart.

    ## Example
    ```python
    tracker = xm.RateTracker()
    train_loader = xu.SampleGenerator(data=(x, y), sample_count=100)
    test_utils.print_training_update(device, step, loss.item(), tracker.rate(), tracker.global_rate())
    ```

    ## Use instead
    ```python
    tracker = RateTracker()
    train_loader = SampleGenerator(data=(x, y), sample_count=100)
    print_training_update(device, step, loss.item(), tracker.rate(), tracker.global_rate())
    ```

    ## Fix safety
    Safe: the added classes and functions are torch_xla's own logic. The rate tracker no longer
    reads `RATE_TRACKER_SMOOTHING`; the printed device is the native one; TensorBoard logs need
    the `tensorboard` package where torch_xla used `tensorboardX`; `write_xla_metrics=True` no
    longer writes the XLA runtime's metrics, which are gone (the report says so). torch_xla's
    checkpoint was reentrant only, so `use_reentrant=True` keeps its behaviour; where the file
    replaces `torch.utils.checkpoint.checkpoint` with code that may call it, torch's own function
    is bound by a `from` import, or the call gets a TODO. `xser.load` also read torch_xla's own
    format (a file plus a `<path>.tensors` folder): the rewritten call gets a TODO, since such
    checkpoints must be converted once on the old stack. `xm.get_rng_state()` (a running XLA
    seed with no native counterpart), `xm.get_memory_info()`, `xp.trace` and `xp.trace_detached`
    get a TODO. Natively, save and restore `torch.get_rng_state()` and
    `torch.get_device_module(device).get_rng_state()` (or use
    `torch.random.fork_rng(device_type=...)`; `torch.initial_seed()` is the last seed set);
    `get_memory_info()`'s `bytes_used`, `peak_bytes_used` and `bytes_limit` are
    `torch.accelerator.memory_allocated(device)`, `max_memory_allocated(device)` and
    `get_memory_info(device)` (free and total bytes). `xser.save(..., master_only=False)` saved
    on every process, `global_master=True` on global rank 0 only.
    """

    code = "NM013"
    name = "xla-utils"
    summary = "`RateTracker`, `SampleGenerator`, `test_utils`, checkpoint, `xser` -> native code"
    triggers = (*HELPERS, TEST_UTILS, CHECKPOINT, XSER_LOAD, START_SERVER)
    manual: ClassVar[dict[str, str]] = {
        RATE_TRACKER: "torch_xla's throughput tracker: use the `RateTracker` class this file's calls were migrated to",
        SAMPLE_GENERATOR: "torch_xla's fake-data iterable: use the `SampleGenerator` class this file's calls were migrated to",
        TO_CPU: "`{name}(data, convert=...)`: call `.cpu()` on the tensors in `data` where `convert` is true",
        f"{XM}.get_rng_state": "`{name}`: save and restore `torch.get_rng_state()` (and the device module's), or use `torch.random.fork_rng`",
        f"{XM}.get_memory_info": "`{name}`: use `torch.accelerator.memory_allocated(device)` and `torch.accelerator.get_memory_info(device)`",
        TEST_UTILS: "`{name}` is a torch_xla test helper with no native counterpart: write this part in plain Python",
        WRITE_TO_SUMMARY: "`{name}`: use `summary_writer.add_scalar(name, value, global_step)`; XLA runtime metrics are gone",
        CLOSE_SUMMARY_WRITER: "use `writer.close()` under `if writer is not None:`",
        CHECKPOINT: "`{name}`: use `functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=True)`, bound before any patch",
        f"{XSER}.save": 'use `torch.save(obj, path)` under `if int(os.environ.get("LOCAL_RANK", 0)) == 0:`',
        XSER_LOAD: '`{name}`: load what `torch.save` wrote with `torch.load(path, map_location="cpu", weights_only=False)`',
        f"{XP}.trace": f"`{{name}}`: {TRACE_ADVICE}",
        f"{XP}.trace_detached": f"`{{name}}`: {TRACE_ADVICE}",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._file_reads: FileReads | None = None

    # -- calls ---------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name is None:
            return updated_node
        if name in HELPERS:
            return self._helper_call(name, updated_node)
        if name == CHECKPOINT:
            return self._checkpoint_call(updated_node)
        if name == XSER_LOAD:
            return self._xser_load(updated_node)
        if name == NOW:
            return self._now(updated_node)
        return updated_node

    def _helper_call(self, name: str, call: cst.Call) -> cst.BaseExpression:
        if name == TO_CPU:
            convert = arg_value(call, 1, "convert")
            if not _converts(call):
                return call
            if convert is not None:
                call = call.with_changes(args=_without(call.args, convert))
        if name == WRITE_TO_SUMMARY:
            written = self._without_xla_metrics(call)
            if written is None:
                return call
            call = written
        helper = self._helper(*HELPERS[name])
        self.changed(f"`{code_of(call.func)}(...)` -> `{helper}(...)`, added to the file")
        return call.with_changes(func=cst.Name(helper))

    def _without_xla_metrics(self, call: cst.Call) -> cst.Call | None:
        """`write_to_summary` without `write_xla_metrics`: those metrics were diagnostics of the
        XLA runtime, which is gone (as `met.metrics_report()` is removed, NM007)."""
        metrics = arg_value(call, 3, "write_xla_metrics")
        if has_star_args(call):
            return None
        if metrics is None:
            return call
        if has_effects(metrics.value, self.ctx.resolve_dotted):
            return None
        if code_of(metrics.value) != "False":
            self.ctx.note(
                self.code,
                "`write_to_summary(..., write_xla_metrics=True)` also wrote XLA runtime metrics to TensorBoard; "
                "they no longer exist and are not written (compile counts: `torch._dynamo.utils.counters`)",
            )
        return call.with_changes(args=_without(call.args, metrics))

    def _helper(self, name: str, template: str) -> str:
        helper = self.ctx.unused_name(name)
        modules = {
            "torch": self.ctx.torch,
            "os": self.ctx.os,
            "time": lambda: self.ctx.need_import("time"),
            "datetime": lambda: self.ctx.need_from("datetime", "datetime"),
        }
        spellings = {key: spell() for key, spell in modules.items() if f"${key}" in template}
        return self.ctx.need_helper(helper, Template(template).substitute(spellings, name=helper))

    def _checkpoint_call(self, call: cst.Call) -> cst.BaseExpression:
        native = self._native_checkpoint(assigned_to_torch=False)
        if native is None:
            return call
        self.changed(
            "`checkpoint(fn, ...)` (torch_xla) -> `torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=True)`"
        )
        given = arg_value(call, None, "use_reentrant") is not None
        if given or any(arg.star == "**" for arg in call.args):
            # Left to the caller, or maybe in `**kwargs`: native checkpoint also defaults to reentrant.
            return call.with_changes(func=expr(native))
        reentrant = keyword_arg("use_reentrant", cst.Name("True"))
        return call.with_changes(func=expr(native), args=append_arg(call, call.args, reentrant))

    def _native_checkpoint(self, assigned_to_torch: bool) -> str | None:
        """How to name torch's checkpoint here; None where no spelling is safe.

        A name bound by `from torch.utils.checkpoint import checkpoint` stays torch's function when
        the file later replaces `torch.utils.checkpoint.checkpoint` (as shims for torch_xla did);
        spelled through the module it would find the replacement, which may call this very line.
        A value assigned to that attribute is read before it is replaced, so any spelling is safe.
        """
        torch = self.ctx.torch()  # spelled first: helpers then respell `torch` as torch itself
        # Module-level code may run before the import block ends, where a new import goes.
        in_function = any(
            scope.kind in ("FunctionDef", "Lambda") for scope in self.ctx.scope.chain()
        )
        free = (
            state(self.ctx.scope, self.ctx.statement, "checkpoint", TORCH_CHECKPOINT)
            is not State.TAKEN
        )
        if in_function and free:
            return self.ctx.need_from("torch.utils.checkpoint", "checkpoint")
        if self._reads().replaces_torch_checkpoint and not assigned_to_torch:
            return None
        if "torch.utils.checkpoint" in self._reads().imported_modules:
            return f"{torch}.utils.checkpoint.checkpoint"
        return f"{self.ctx.need_import('torch.utils.checkpoint')}.checkpoint"

    def _xser_load(self, call: cst.Call) -> cst.BaseExpression:
        path = arg_value(call, 0, "path")
        if path is None or has_star_args(call) or len(call.args) != 1:
            return call
        self.changed(
            '`xser.load(path)` -> `torch.load(path, map_location="cpu", weights_only=False)`'
        )
        self.todo(
            "convert old `xser` checkpoints once on the old stack: `torch.save(xser.load(path), new_path)`"
        )
        torch = self.ctx.torch()
        return expr(f'{torch}.load({code_of(path.value)}, map_location="cpu", weights_only=False)')

    def _now(self, call: cst.Call) -> cst.BaseExpression:
        fmt = arg_value(call, 0, "format")
        if has_star_args(call) or len(call.args) > 1:
            return call
        pattern = code_of(fmt.value) if fmt is not None else '"%H:%M:%S"'
        self.changed("`test_utils.now()` -> `datetime.now().strftime(...)`")
        return expr(f"{self.ctx.need_from('datetime', 'datetime')}.now().strftime({pattern})")

    # -- checkpoint handed on as a value ---------------------------------------------------------
    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        targets = {self.qualify(target.target) for target in original_node.targets}
        value = self._checkpoint_value(updated_node.value, TORCH_CHECKPOINT in targets)
        return updated_node if value is None else updated_node.with_changes(value=value)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        value = self._checkpoint_value(updated_node.value, assigned_to_torch=False)
        return updated_node if value is None else updated_node.with_changes(value=value)

    def _checkpoint_value(
        self, value: cst.BaseExpression, assigned_to_torch: bool
    ) -> cst.BaseExpression | None:
        """torch_xla's checkpoint handed on as a value: torch's, with torch_xla's default of reentrant."""
        if self.qualify(value) != CHECKPOINT:
            return None
        native = self._native_checkpoint(assigned_to_torch)
        if native is None:
            return None
        self.changed(
            "torch_xla's `checkpoint` -> `functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=True)`"
        )
        return expr(f"{self.ctx.need_import('functools')}.partial({native}, use_reentrant=True)")

    # -- statements ----------------------------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Any:
        if len(updated_node.body) != 1 or id(updated_node.body[0]) in self.ctx.removed:
            return updated_node
        small = updated_node.body[0]
        call = small.value if isinstance(small, cst.Expr | cst.Assign) else None
        if not isinstance(call, cst.Call):
            return updated_node
        if isinstance(small, cst.Expr) and self.called(call, CLOSE_SUMMARY_WRITER):
            return self._close_summary_writer(updated_node, call)
        if isinstance(small, cst.Assign) and self.called(call, START_SERVER):
            return self._unused_server(updated_node, small, call)
        return updated_node

    def _close_summary_writer(self, line: cst.SimpleStatementLine, call: cst.Call) -> Any:
        writer = arg_value(call, 0, "summary_writer")
        if (
            writer is None
            or len(call.args) != 1
            or not isinstance(writer.value, cst.Name | cst.Attribute)
        ):
            return line
        name = code_of(writer.value)
        self.changed("`test_utils.close_summary_writer(w)` -> `w.close()`")
        new = stmt(f"if {name} is not None:\n    {name}.close()\n")
        assert isinstance(new, cst.If) and isinstance(new.body, cst.IndentedBlock)
        close = new.body.body[0]
        assert isinstance(close, cst.SimpleStatementLine)
        body = new.body.with_changes(
            body=[close.with_changes(trailing_whitespace=line.trailing_whitespace)]
        )
        return new.with_changes(body=body, leading_lines=line.leading_lines)

    def _unused_server(
        self, line: cst.SimpleStatementLine, assign: cst.Assign, call: cst.Call
    ) -> Any:
        """The profiler server lives as long as its variable; with no native server, a variable
        that nothing reads can go with it."""
        targets = assign.targets
        if len(targets) != 1 or not isinstance(targets[0].target, cst.Name):
            return line
        if targets[0].target.value in self._reads().names:
            return line
        if any(has_effects(arg.value, self.ctx.resolve_dotted) for arg in call.args):
            return line
        self.changed("removed `xp.start_server(...)`")
        # The profile it let a client record is gone with it (a TODO would keep an emptied block).
        self.ctx.note(self.code, "the XLA profiler server went with `xp.start_server`: record a profile with `torch.profiler.profile(...)` where one is wanted")
        return self.ctx.remove(line)

    def _reads(self) -> FileReads:
        if self._file_reads is None:
            self._file_reads = FileReads.of(self.ctx.source, self.ctx.imports.resolve_dotted)
        return self._file_reads


def _replaces_torch_checkpoint(assign: ast.Assign, resolve: Callable[[str], str | None]) -> bool:
    """Does `assign` put something that may call `torch.utils.checkpoint.checkpoint` in its place?

    torch_xla's own checkpoint does not (its rewrite wraps torch's function as it is then).
    """
    targets = [ast_dotted_name(target) for target in assign.targets]
    if not any(dotted is not None and resolve(dotted) == TORCH_CHECKPOINT for dotted in targets):
        return False
    value = ast_dotted_name(assign.value)
    return value is None or resolve(value) != CHECKPOINT


def _converts(call: cst.Call) -> bool:
    """`xm._maybe_convert_to_cpu(data)` copies to the CPU unless told `convert=False`."""
    if has_star_args(call):
        return False
    convert = arg_value(call, 1, "convert")
    return convert is None or code_of(convert.value) == "True"


def _without(args: Sequence[cst.Arg], dropped: cst.Arg) -> list[cst.Arg]:
    """`args` less `dropped`; a new last argument ends as the dropped one did (no comma left over)."""
    kept = [arg for arg in args if arg is not dropped]
    if kept and args[-1] is dropped:
        kept[-1] = kept[-1].with_changes(comma=dropped.comma)
    return kept
