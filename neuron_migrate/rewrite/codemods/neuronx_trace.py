"""NM023: `torch_neuronx.trace` becomes `torch.compile` on the device, warmed up on the example shapes."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any, ClassVar

import libcst as cst
import libcst.matchers

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.core.oldstack import INF1_IMPORT
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    FileFacts,
    arg_value,
    code_of,
    dotted_name,
    expr,
    fix_trailing_comma,
    stmt,
)
from neuron_migrate.rewrite.codemods.optimum.support import (
    PLATFORM_TARGET,
    literal,
    mark_named_module,
    mark_run_time_import,
    mark_star_import,
    note_run_time_import,
    one_per_line,
)

ROOTS = ("torch_neuronx",)

TRACE = ("torch_neuronx.trace", "torch_neuronx.xla_impl.trace.trace")
JIT_SAVE = ("torch.jit.save",)
JIT_LOAD = ("torch.jit.load",)
PASS_THROUGH = {  # wrappers whose argument is what the migrated code uses
    "torch_neuronx.async_load": "loaded the compiled model onto the device ahead of the first call; the compiled model is already on its device",
    "torch_neuronx.lazy_load": "deferred loading the compiled model; torch.compile compiles on the first call anyway",
    "torch_neuronx.move_trace_to_device": "moved a compiled model to a NeuronCore; the model was moved with `.to(device)` before compiling",
}
PATH_BUILDERS = ("os.path.join", "pathlib.Path", "str")
TRACE_OPTIONS = (
    "compiler_workdir",
    "inline_weights_to_neff",
    "partitioner_config",
    "input_output_aliases",
    "cpu_backend",
)
# NxD models' RMSNorm kernel: `RmsNorm.apply(x, weight, eps, dim)`, torch's `F.rms_norm` over the last dimension.
RMS_NORM = ("torch_neuronx.xla_impl.ops.RmsNorm.apply",)
DATA_PARALLEL = ("torch_neuronx.DataParallel", "torch_neuronx.xla_impl.data_parallel.DataParallel")
DYNAMIC_BATCH = ("torch_neuronx.dynamic_batch",)
# A comment above a rewritten `torch.jit.save`/`torch.jit.load` that speaks of TorchScript gets
# this tail: what the file holds is the weights now.
TORCHSCRIPT_WORD = re.compile(r"torch ?script", re.IGNORECASE)
WEIGHTS_NOW = " (its weights now: a compiled model is no TorchScript file)"
LOAD_TODO = "a compiled model cannot be loaded: rebuild it, `load_state_dict(torch.load(path))`, then `torch.compile` it"
TENSOR_FACTORIES = (
    "torch.rand",
    "torch.randn",
    "torch.zeros",
    "torch.ones",
    "torch.randint",
    "torch.tensor",
    "torch.full",
    "torch.empty",
    "torch.arange",
)

# Tensor methods that return a tensor again: `torch.randn(...).type(dtype)` is one tensor.
TENSOR_METHODS = frozenset(
    {"type", "to", "float", "half", "bfloat16", "double", "int", "long", "contiguous", "clone", "detach", "unsqueeze", "squeeze"}
)


def _tensor_expression(node: ast.expr) -> bool:
    """A tensor factory's call, with tensor methods called on it (`torch.zeros(2).to(dtype)`)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TENSOR_METHODS:
        node = node.func.value
    return isinstance(node, ast.Call) and (ast_dotted_name(node.func) or "") in TENSOR_FACTORIES

# torch_neuronx's device functions (also reached as `torch.neuron`, which it installed), by the
# name `torch.accelerator` gives each: a portable program calls them there.
DEVICE_FUNCTIONS = {
    **{name: name for name in (
        "synchronize", "device_count", "is_available", "empty_cache", "memory_allocated", "max_memory_allocated",
        "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "memory_stats",
    )},
    "current_device": "current_device_index",
    "set_device": "set_device_index",
}
_DEVICE_CALLS = {f"{module}.{name}": name for module in ("torch.neuron", "torch_neuronx") for name in DEVICE_FUNCTIONS}


def _example_kind(tree: ast.AST, name: str) -> str:
    """ "tuple", "list", "tensor" or "" for the example inputs bound to `name`."""
    functions = {n.name: n for n in all_nodes(tree) if isinstance(n, ast.FunctionDef)}
    kinds = set()
    for node in all_nodes(tree):
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            continue
        value = node.value
        if isinstance(value, ast.Tuple):
            kinds.add("tuple")
        elif isinstance(value, ast.List):
            kinds.add("list")
        elif _tensor_expression(value):
            kinds.add("tensor")
        elif isinstance(value, ast.Call):
            dotted = ast_dotted_name(value.func) or ""
            if dotted in functions:
                returns = [
                    r.value
                    for r in ast.walk(functions[dotted])
                    if isinstance(r, ast.Return) and r.value is not None
                ]
                kinds.add(
                    "tuple" if returns and all(isinstance(r, ast.Tuple) for r in returns) else ""
                )
            else:
                kinds.add("")
        else:
            kinds.add("")
    return kinds.pop() if len(kinds) == 1 else ""


def _example_kind_of(example: cst.BaseExpression, tree: ast.AST | None) -> str:
    """ "tuple", "list", "tensor" or "" (unknown) for the example inputs given to `trace`. Only a
    tuple is several inputs: torch_neuronx, as `torch.jit.trace`, passes anything else (a list
    too) as the one argument."""
    if isinstance(example, cst.Tuple):
        return "tuple"
    if isinstance(example, cst.List):
        return "list"
    if isinstance(example, cst.Call) and _tensor_expression(ast.parse(code_of(example).strip(), mode="eval").body):
        return "tensor"
    if isinstance(example, cst.Name) and tree is not None:
        return _example_kind(tree, example.value)
    return ""


def _atom(node: cst.BaseExpression) -> str:
    """`node` as the owner of a method call: parenthesised unless it is a name, call or subscript."""
    text = code_of(node)
    return text if isinstance(node, cst.Name | cst.Attribute | cst.Call | cst.Subscript) else f"({text})"


# Members of a TorchScript module that an `nn.Module` (and so a compiled one) lacks.
TORCHSCRIPT_ONLY = frozenset(
    {"code", "graph", "inlined_graph", "code_with_constants", "original_name", "_c", "graph_for"}
)
TORCHSCRIPT_MAKERS = ("torch.jit.trace", "torch.jit.script", "torch.jit.freeze", "torch.jit.load")


def _maybe_traces(tree: ast.AST, traced: set[str]) -> set[str]:
    """Loop variables that may hold a traced model: `for m, f in zip((a_neuron, b_neuron), ...)`."""
    found = set()
    for node in all_nodes(tree):
        if isinstance(node, ast.For | ast.comprehension) and any(
            isinstance(n, ast.Name) and n.id in traced for n in ast.walk(node.iter)
        ):
            found |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return found


def _read_after_trace(tree: ast.AST, resolve: Any) -> list[str | None]:
    """For each `torch_neuronx.trace(model, ...)` in source order: a variable of `model` that the
    code reads again after the statement (None if none). The traced graph was a snapshot that
    left the module where it was; a module moved in place (`.to(device)`) and compiled is not."""
    parents: dict[int, ast.AST] = {}
    for node in all_nodes(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    calls = [
        n for n in all_nodes(tree)
        if isinstance(n, ast.Call) and resolve(ast_dotted_name(n.func) or "") in TRACE
    ]
    found: list[str | None] = []
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        model = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "func"), None)
        statement: ast.AST = call
        while not isinstance(statement, ast.stmt) and id(statement) in parents:
            statement = parents[id(statement)]
        scope = parents.get(id(statement))
        while scope is not None and not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            scope = parents.get(id(scope))
        targets = {t.id for t in getattr(statement, "targets", []) if isinstance(t, ast.Name)}
        callees = {id(n.func) for n in all_nodes(model) if isinstance(n, ast.Call)} if model else set()
        names = {
            n.id for n in (all_nodes(model) if model else ())
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in callees
        } - targets
        end = getattr(statement, "end_lineno", None) or call.lineno
        here = [n for n in (all_nodes(scope) if scope is not None else ()) if getattr(n, "lineno", 0) >= statement.lineno]  # type: ignore[attr-defined]
        later = {n.id for n in here if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno > end}
        # `model.graph = compiled`: stored on the very module it compiled, left to a person (NM023).
        stored_on = {
            n.value.id for n in here
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
        }
        # An instance's module (`self.base_model`) lives on after the method: other methods use it.
        used = (names & later) | (names & {"self", "cls"})
        stored = isinstance(model, ast.Name) and model.id in stored_on
        found.append(min(used) if used and not stored else None)
    return found


def flag_values(flags: list[str]) -> dict[str, str]:
    """Command-line flags as `name -> value`, from `--name=value` and `--name value` alike."""
    values: dict[str, str] = {}
    for position, flag in enumerate(flags):
        if not flag.startswith("-"):
            continue
        name, equals, value = flag.partition("=")
        if equals:
            values[name] = value
        elif position + 1 < len(flags) and not flags[position + 1].startswith("-"):
            values[name] = flags[position + 1]
    return values


# Code that trains: a model traced in it may be trained too, and must keep its gradients.
_TRAINS = re.compile(r"\.backward\(|\btorch\.optim\b|\boptim\.|Trainer\b")
# Code that reads tensors on the host only: a traced model's outputs were host tensors.
_HOST_ONLY = re.compile(r"\.numpy\(|\bnp\.|\bnumpy\.")


def _on_the_device(value: cst.BaseExpression) -> bool:
    """Does an argument visibly live on the device (moved there, or made there), or hold no tensor?"""
    if isinstance(value, cst.BaseNumber | cst.SimpleString | cst.FormattedString):
        return True
    code = code_of(value)
    return ".to(" in code or ".cuda(" in code or "device" in code.lower()


class NeuronxTrace(Codemod):
    """Replaces ahead-of-time `torch_neuronx.trace` with `torch.compile` on the device.

    ## What it does
    `traced = torch_neuronx.trace(model, example_inputs, compiler_args=..., compiler_workdir=...)`
    becomes `traced = torch.compile(model.to(device), dynamic=False)` followed by a warm-up call
    on `example_inputs`, which compiles for those shapes as `trace` did: a tuple of tensors is
    unpacked into positional inputs, a single tensor is passed as it is, and an example whose
    kind this tool cannot tell gets a TODO instead of a guess. Calls of the traced model keep
    their positional tensors. `torch.jit.save(traced, path)` and `traced.save(path)` save
    `model.state_dict()` instead, and a `torch.jit.load` of that same file in the script becomes
    `load_state_dict(torch.load(path))` + `torch.compile`. The
    `torchscript=True` a model was loaded with for tracing goes with the other keywords transformers
    5 removed (NM201).
    `m.forward = torch_neuronx.trace(m, ...)` compiles `m.forward` itself. A compiled module
    stored in an attribute of the module it compiles (`m.graph = torch_neuronx.trace(m, ...)`)
    gets a TODO: natively it would wrap, and so contain and call, itself.
    `torch_neuronx.async_load`, `lazy_load` and `move_trace_to_device` go; `DataParallel` and
    `dynamic_batch` keep the model they wrap, with a TODO. Star imports of torch_neuronx and
    modules named in strings (`importlib.import_module("torch_neuronx")`) get a TODO. With
    `--target neuron` the device is `"neuron"` and the backend is spelled out. The model is
    frozen (`requires_grad_(False)`), as a traced graph tracked no gradients; in a file that
    trains, where the same model may be trained, a TODO says to call it under
    `torch.inference_mode()` instead. `compiler_workdir=` becomes the `os.makedirs` of the
    folder the trace created. NxD model code's RMSNorm kernel,
    `RmsNorm.apply(x, weight, eps, len(x.shape) - 1)` from `torch_neuronx.xla_impl.ops`, becomes
    `F.rms_norm(x, x.shape[-1:], weight, eps)`: the same formula, which such files spell out
    beside the kernel for the CPU.

    ## Why
    TorchNeuron has no trace API: models run eagerly on the `neuron` device or compiled by
    `torch.compile` with the `neuron` backend, which rejects dynamic shapes. A compiled model is
    not a file: the weights are saved, and the compile cache makes recompiling cheap.

    ## Example
    ```python
    model_neuron = torch_neuronx.trace(model, example_inputs, compiler_args=["--auto-cast", "none"])
    torch.jit.save(model_neuron, "model.pt")
    ```

    ## Use instead
    ```python
    # Compiled for the shapes of the example inputs, as torch_neuronx.trace did.
    model_neuron = torch.compile(model.to(device).requires_grad_(False), dynamic=False)
    model_neuron(*example_inputs)
    torch.save(model.state_dict(), "model.pt")
    ```

    ## Fix safety
    `model.to(device)` moves the original module too (trace left it on the CPU), and freezes
    it; where the code uses the module again after the trace (a CPU reference, a second trace of
    the same module), a copy is compiled (`copy.deepcopy(model).to(device)`), a snapshot as the
    traced graph was. The warm-up call it writes moves the example inputs to the device (only
    Neuron copies host tensors into a graph). Inputs must be on the model's device: Neuron copies host tensors into compiled graphs itself,
    other devices do not. `--auto-cast` compiler options become a TODO to cast explicitly.
    A `torch.jit.load` of a file this script did not save gets a TODO: the model must be
    rebuilt from its Python class, given `load_state_dict(torch.load(path))` with weights
    saved by `torch.save(model.state_dict(), path)`, then compiled with `torch.compile(model,
    dynamic=False)`; a compiled model is no TorchScript graph and cannot be saved as one (save
    the compiled module's weights), nor read as one (`.graph`, `.code`:
    `torch._dynamo.explain(model)(*inputs)` describes the compiled graphs). The traced graph
    tracked no gradients and returned host tensors; the compiled model tracks gradients (use
    `torch.inference_mode()` where it only predicts) and returns device tensors.
    `torch_neuronx.trace` compiled on the spot, `torch.compile` only on the first call: the
    example inputs' shapes are compiled by a warm-up call (`model(*example)` for a tuple,
    `model(example)` for one tensor), and a line that only traced now compiles nothing. A
    compiled model stored as an attribute of the module it compiles (`model.neuron =
    torch.compile(model)`) makes the module its own submodule: `state_dict()` recurses without
    end and a forward calling it never returns. `torch_neuronx.DataParallel` ran one model copy
    per NeuronCore in one process; `dynamic_batch` split batches into traced-size pieces, where
    natively each new batch size compiles anew. `neuronxcc.nki` kernels no longer compile from
    Neuron 2.28 and TorchNeuron does not run them on `neuron` tensors: port them to the
    standalone `nki` package (`import nki`, `import nki.language as nl`) following the NKI
    kernel migration guide. NeuronPerf benchmarked the TorchScript files of
    `torch_neuronx.trace`, which the migrated code no longer writes. `torch_neuronx.analyze`
    reported operator support; unsupported ops fall back to the CPU natively
    (`torch_neuronx.get_fallback_ops()`).
    """

    code = "NM023"
    name = "neuronx-trace"
    summary = "`torch_neuronx.trace` -> `torch.compile(model.to(device), dynamic=False)` + warm-up"
    triggers = ROOTS
    markers = ROOTS  # also reached by `importlib.import_module("torch_neuronx")` or `import *`

    @classmethod
    def applies(cls, facts: FileFacts, text: str) -> bool:
        # Inf1's `import torch.neuron` registers what `torch.jit.load` of its artifacts needs.
        return super().applies(facts, text) or INF1_IMPORT.search(text) is not None

    @property
    def _neuron_artifacts(self) -> bool:
        """The file loads what Neuron compiled (torch_neuronx, or Inf1's `torch.neuron`)."""
        return self.ctx.facts.uses("torch_neuronx") or INF1_IMPORT.search(self.ctx.source) is not None
    manual: ClassVar[dict[str, str]] = {
        "neuronxcc.nki": "`{name}` (`neuronxcc.nki`) no longer compiles: port the kernel to the standalone `nki` package",
        "neuronxcc": "`{name}` is the Neuron compiler, absent natively: read it only where `importlib.util.find_spec` finds it",
        "torch_neuronx.xla_impl": "torch_neuronx XLA internals (custom ops, `nki_jit`) have no automatic migration; NKI needs the native integration",
        **dict.fromkeys(
            ("torch_neuronx.xla_impl.ops.nki_jit", "torch_neuronx.nki_jit"),
            "NKI kernels through `nki_jit` need TorchNeuron's native NKI integration; rewrite the kernel call by hand",
        ),
        "torch_neuronx.analyze": "`torch_neuronx.analyze` reported operator support: run the model eagerly on the `neuron` device instead",
        "torch_neuronx.replace_weights": "swap weights with `model.load_state_dict(weights)` on the compiled model's original module",
        "torch_neuronx.experimental": "experimental torch_neuronx API with no native counterpart",
        "torch_neuronx.xla": "torch_neuronx's XLA initialization is gone: the `neuron` device needs no set-up",
        "neuronperf": "`{name}` (NeuronPerf) benchmarks traced artifacts: time the compiled model with `torch.utils.benchmark.Timer`",
        "torch_neuronx.testing": "`{name}`: use `torch.testing.assert_close(actual, expected, rtol=..., atol=...)`",
        "torch_neuronx.utils.get_platform_target": PLATFORM_TARGET,
        "torch_neuronx.xla_impl.data_parallel": "`{name}`: run one process per NeuronCore (`torchrun --nproc_per_node=<cores>`), each with its share of the batch",
        "torch_neuronx.utils": "`{name}` is a torch_neuronx utility with no known native counterpart: replace it with plain PyTorch",
        "torch_neuronx": "`{name}` is torch_neuronx API with no automatic migration: use the `neuron` device and `torch.compile`",
    }

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._target: str | None = None  # the name or attribute the current statement assigns
        self._assigned_value: cst.BaseExpression | None = None  # ... and the value it assigns
        # traced name -> the module it compiled (None: an expression that cannot be repeated)
        # (keyed by `_place`: the same name in another function is another variable)
        self._traced: dict[tuple[object, str], str | None] = {}
        # path expression -> the source model expression, and its `_place` where it was saved
        self._saved: dict[str, tuple[str, tuple[object, str]]] = {}
        self._tree: ast.AST | None = None
        # Every variable (scope, dotted name) a traced graph was assigned to, even where a `del`
        # makes `_place` unsure: a `save` of one of them gets a TODO when it is not rewritten.
        self._traced_anywhere: set[tuple[object, str]] = set()
        self._known: tuple[set[str], set[tuple[object, str]]] = (set(), set())
        self._loop_traces: set[str] = set()  # loop variables that may hold a traced model
        self._returned_traces: set[str] = set()  # names bound to what a tracing function of the file returns
        self._traced_names: set[str] = set()  # names some `torch_neuronx.trace` result is bound to
        # The blocks around the statement being rewritten, and those around each trace (by the
        # module it compiled): a load outside them may run where the trace, and its move, did not.
        self._blocks: list[int] = []
        self._traced_in: dict[str, tuple[int, ...]] = {}
        self._scripted: set[str] = set()  # names bound to TorchScript modules (`torch.jit.script`)
        self._discarded: cst.BaseExpression | None = None  # the value of the expression statement
        self._saved_as_weights = False  # the statement being left saves or loads weights now
        self._read_after: list[str | None] = []  # per trace call: a variable of its model read later
        self._traces_seen = 0
        self._saved_whole: set[int] = set()  # traces saved as they are made (`torch.jit.save(trace(m, x), p)`)

    def visit_Module(self, node: cst.Module) -> None:
        try:
            self._tree = ast.parse(self.ctx.source)
        except SyntaxError:
            self._tree = None
            return
        traced: set[str] = set()
        self._scripted = set()
        for n in all_nodes(self._tree):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                callee = ast_dotted_name(n.value.func)
                qualified = self.ctx.imports.resolve_dotted(callee) if callee else None
                names = {t.id for t in n.targets if isinstance(t, ast.Name)}
                if qualified in TRACE:
                    traced |= names
                elif qualified in TORCHSCRIPT_MAKERS:
                    self._scripted |= names
        self._loop_traces = _maybe_traces(self._tree, traced)
        self._traced_names = traced
        self._returned_traces = _bound_to_returned_traces(self._tree, self.ctx.imports.resolve_dotted)
        self._read_after = _read_after_trace(self._tree, self.ctx.imports.resolve_dotted)

    def visit_Expr(self, node: cst.Expr) -> None:
        self._discarded = node.value

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        """`# Save the TorchScript ...` above a save that now writes the weights: say so."""
        if not self._saved_as_weights:
            return updated_node
        self._saved_as_weights = False
        lines = [
            line.with_changes(comment=cst.Comment(f"{line.comment.value}{WEIGHTS_NOW}"))
            if line.comment is not None
            and TORCHSCRIPT_WORD.search(line.comment.value)
            and WEIGHTS_NOW not in line.comment.value
            else line
            for line in updated_node.leading_lines
        ]
        return updated_node.with_changes(leading_lines=lines)

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        """`traced.code`, `traced.graph`: TorchScript's, which a compiled module does not have."""
        base = original_node.value
        if original_node.attr.value in TORCHSCRIPT_ONLY and isinstance(base, cst.Name) and self._maybe_trace(base.value):
            self.todo(
                f"`{code_of(original_node)}` is TorchScript-only; `{base.value}` is compiled natively: remove what reads it"
            )
        return updated_node

    def _maybe_trace(self, name: str) -> bool:
        """Does `name` hold a traced model here, or may it (a loop over traced models)?"""
        return self._variable(name) in self._traced_anywhere or name in self._loop_traces

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self._target = dotted_name(target) if target is not None else None
        self._assigned_value = node.value
        # What this statement records itself stays: only older entries are forgotten.
        self._known = (set(self._saved), set(self._traced))

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        known, self._known = self._known, (set(), set())
        result = self._assignment(original_node, updated_node)
        for assigned in original_node.targets:
            self._forget(assigned.target, known)
        return result

    def leave_Del(self, original_node: cst.Del, updated_node: cst.Del) -> cst.Del:
        self._forget(original_node.target, (set(self._saved), set(self._traced)))
        return updated_node

    def _forget(
        self,
        target: cst.BaseExpression,
        known: tuple[set[str], set[tuple[object, str]]],
    ) -> None:
        """A name bound anew (or deleted) no longer holds the module that was traced or saved."""
        if isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._forget(element.value, known)
            return
        if not isinstance(target, cst.Name):
            return
        name = target.value

        def about(dotted: str | None) -> bool:
            return dotted is not None and dotted.split(".")[0] == name

        self._saved = {
            path: saved
            for path, saved in self._saved.items()
            if path not in known[0] or not about(saved[0])
        }
        self._traced = {
            place: source
            for place, source in self._traced.items()
            if place not in known[1] or not (about(place[1]) or about(source))
        }

    def _assignment(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        target = self._target
        self._target = self._assigned_value = None
        value = original_node.value
        if (
            target is not None
            and self.called(value, *PASS_THROUGH, *DATA_PARALLEL, *DYNAMIC_BATCH)
            and dotted_name(updated_node.value) == target
        ):
            return self.ctx.remove(updated_node)  # `m = wrapper(m)` with the wrapper gone
        if (
            target is not None
            and isinstance(value, cst.Name)
            and self._place(value.value) in self._traced
        ):
            self._check_not_inside(target, self._traced[self._place(value.value)], value.value)
        if self.called(value, *JIT_LOAD):
            assert isinstance(value, cst.Call)
            path = arg_value(value, 0, "f")
            saved = self._saved.get(code_of(path.value)) if path is not None and target is not None else None
            source = saved[0] if saved is not None and self._place(saved[0]) == saved[1] else None
            if source is not None and path is not None:
                torch = self.ctx.torch()
                self.changed(
                    "`torch.jit.load` of the traced model -> `load_state_dict` + `torch.compile`"
                )
                self.ctx.insert_before(
                    stmt(f"{source}.load_state_dict({torch}.load({code_of(path.value)}))\n")
                )
                self._saved_as_weights = True
                blocks = self._traced_in.get(source.removesuffix("._orig_mod"))
                moved = blocks is not None and tuple(self._blocks[: len(blocks)]) == blocks
                model = source if moved else f"{source}.to({self._device()})"
                assert target is not None
                self._check_not_inside(target, source.removesuffix("._orig_mod"), f"torch.compile({source})")
                return updated_node.with_changes(value=cst.parse_expression(self._compile(model)))
            if self._neuron_artifacts:
                self.todo(LOAD_TODO)
        return updated_node

    def _variable(self, dotted: str) -> tuple[object, str]:
        """`dotted` with the scope that binds its first name, `del` or not."""
        return (self.ctx.scope.lookup(dotted.split(".")[0]), dotted)

    def _place(self, dotted: str) -> tuple[object, str]:
        """`dotted` with the variable its first name is here (a new object where none is sure)."""
        return (self.ctx.binding_key(dotted.split(".")[0]) or object(), dotted)

    def _check_not_inside(self, target: str, source: str | None, compiled: str) -> bool:
        """TODO when a compiled module is stored in an attribute of the module it compiled.

        A traced graph was a separate object; `torch.compile(m)` is a wrapper that calls `m`: as
        `m.attr` it makes `m` its own submodule (`state_dict()` recurses without end) and, if
        `m.forward` calls `self.attr`, a call that never returns.
        """
        owner = target.rpartition(".")[0]
        if source is None or not owner or not (owner == source or owner.startswith(source + ".")):
            return False
        self.todo(
            f"`{target}` would hold a compiled `{source}` inside itself: keep it in a variable of its own"
        )
        return True

    def _device(self) -> str:
        return '"neuron"' if self.ctx.target.neuron else self.ctx.device_expr()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._blocks.append(id(node))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        self._blocks.pop()
        return updated_node

    def _compile(self, model: str) -> str:
        backend = 'backend="neuron", ' if self.ctx.target.neuron else ""
        return f"{self.ctx.torch()}.compile({model}, {backend}dynamic=False)"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        mark_run_time_import(self, original_node, ROOTS)
        name = self.qualify(original_node.func)
        if id(original_node) in self._saved_whole:
            return updated_node  # the save around it writes the model's weights instead
        if name in TRACE:
            return self._trace(original_node, updated_node)
        if name in PASS_THROUGH and updated_node.args:
            self.changed(f"`{code_of(original_node.func)}(...)` removed: {PASS_THROUGH[name]}")
            return updated_node.args[0].value
        if name in DATA_PARALLEL and updated_node.args:
            self.todo(
                "`torch_neuronx.DataParallel`: run one process per NeuronCore (`torchrun --nproc_per_node=<cores>`)"
            )
            return updated_node.args[0].value
        if name in DYNAMIC_BATCH and updated_node.args:
            self.todo(
                "`dynamic_batch` split batches into traced-size pieces: pad or split batches to the warm-up size, or each size compiles anew"
            )
            return updated_node.args[0].value
        if name in _DEVICE_CALLS:
            return self._device_call(updated_node, _DEVICE_CALLS[name])
        if name in RMS_NORM:
            native = self._rms_norm(updated_node)
            if native is not None:
                return native
        if name in JIT_SAVE and len(updated_node.args) >= 2 and id(original_node.args[0].value) in self._saved_whole:
            return self._save_traced_whole(updated_node.args[0].value, updated_node.args[1].value)
        if name in JIT_SAVE and len(updated_node.args) >= 2:
            return self._save(updated_node, updated_node.args[0].value, updated_node.args[1].value)
        func = updated_node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "save" and updated_node.args:
            return self._save(updated_node, func.value, updated_node.args[0].value)
        if (
            not self.ctx.target.neuron
            and isinstance(func, cst.Name)
            and self._variable(func.value) in self._traced_anywhere
            and any(not _on_the_device(arg.value) for arg in updated_node.args)
        ):
            # Neuron copied host inputs into a traced graph; other devices take no host tensors.
            self.todo(f"`{func.value}` runs on the device: pass it inputs there (`.to(device)`), as its warm-up does")
        if (
            name in JIT_LOAD
            and self._neuron_artifacts
            and original_node is not self._assigned_value  # `x = torch.jit.load(...)`: leave_Assign
        ):
            self.todo(LOAD_TODO)
        return updated_node

    def _device_call(self, call: cst.Call, function: str) -> cst.Call:
        """`torch.neuron.synchronize()` (or `torch_neuronx.synchronize()`) -> the native device
        module's function: `torch.neuron`'s for Neuron, `torch.accelerator`'s where it is portable."""
        torch = self.ctx.torch()
        new = f"{torch}.neuron.{function}" if self.ctx.target.neuron else f"{torch}.accelerator.{DEVICE_FUNCTIONS[function]}"
        if code_of(call.func) == new:
            return call
        self.changed(f"`{code_of(call.func)}()` -> `{new}()`")
        return call.with_changes(func=expr(new))

    def _rms_norm(self, call: cst.Call) -> cst.BaseExpression | None:
        """`RmsNorm.apply(x, weight, eps, len(x.shape) - 1)` -> `F.rms_norm(x, x.shape[-1:], weight, eps)`:
        the same formula; over another dimension than the last, or with `x` an expression, it stays."""
        if len(call.args) != 4 or any(arg.keyword is not None or arg.star for arg in call.args):
            return None
        x, weight, eps, dim = (code_of(arg.value) for arg in call.args)
        if dotted_name(call.args[0].value) is None or dim.replace(" ", "") not in (
            f"len({x}.shape)-1", f"{x}.dim()-1", f"{x}.ndim-1", "-1"
        ):
            return None
        functional = "F" if self.ctx.resolve_dotted("F") == "torch.nn.functional" else f"{self.ctx.torch()}.nn.functional"
        self.changed("`RmsNorm.apply(x, weight, eps, last dim)` -> `F.rms_norm(x, x.shape[-1:], weight, eps)`")
        return expr(f"{functional}.rms_norm({x}, {x}.shape[-1:], {weight}, {eps})")

    def _save(
        self, call: cst.Call, saved: cst.BaseExpression, path: cst.BaseExpression
    ) -> cst.BaseExpression:
        """`torch.jit.save(traced, path)` / `traced.save(path)`: save the weights instead."""
        traced = dotted_name(saved)
        if traced is None or self._variable(traced) not in self._traced_anywhere:
            jit_save = self.qualify(call.func) in JIT_SAVE
            scripted = isinstance(saved, cst.Name) and saved.value in self._scripted
            if (jit_save and not scripted and self._traced_names) or (
                isinstance(saved, cst.Name) and saved.value in self._loop_traces | self._returned_traces
            ):
                self.todo(
                    f"`{code_of(saved)}` may be compiled natively, no TorchScript: save the compiled module's `state_dict()`"
                )
            return call
        source = self._traced.get(self._place(traced))
        if source is None or self.ctx.binding_key(source.split(".")[0]) is None:
            self.todo(
                f"`{traced}` is compiled natively, no TorchScript: save the compiled module's weights (`torch.save(module.state_dict(), {code_of(path)})`)"
            )
            return call
        self._saved[code_of(path)] = (source, self._place(source))
        self._saved_as_weights = True
        self.changed(
            "saving the traced model -> `torch.save(model.state_dict(), path)` (a compiled model is not a file)"
        )
        # Whoever reads the file, here or elsewhere (a serving script), reads a TorchScript module no more.
        elsewhere = "other readers build" if self._loaded_here(path) else "its loader builds"
        self.todo(
            f"{_short(path)} now holds weights, not TorchScript: {elsewhere} the model, then `load_state_dict(torch.load(...))`"
        )
        return cst.parse_expression(
            f"{self.ctx.torch()}.save({source}.state_dict(), {code_of(path)})"
        )

    def _save_traced_whole(self, trace: cst.BaseExpression, path: cst.BaseExpression) -> cst.BaseExpression:
        """`torch.jit.save(torch_neuronx.trace(model, x), path)`: a compiled model is no file, so
        the model's weights are what the file holds now."""
        assert isinstance(trace, cst.Call)
        model = trace.args[0].value
        self._saved_as_weights = True
        self.changed("saving a traced model -> `torch.save(model.state_dict(), path)` (a compiled model is not a file)")
        elsewhere = "other readers build" if self._loaded_here(path) else "its loader builds"
        self.todo(f"{_short(path)} now holds weights, not TorchScript: {elsewhere} the model, then `load_state_dict(torch.load(...))`")
        return cst.parse_expression(f"{self.ctx.torch()}.save({_atom(model)}.state_dict(), {code_of(path)})")

    def _loaded_here(self, path: cst.BaseExpression) -> bool:
        """Does this file `torch.jit.load` the very path it saves to (and so migrate that load too)?"""
        written = code_of(path)
        return self._tree is not None and any(
            isinstance(node, ast.Call)
            and (ast_dotted_name(node.func) or "").endswith("jit.load")
            and node.args
            and ast.unparse(node.args[0]) == ast.unparse(ast.parse(written, mode="eval").body)
            for node in all_nodes(self._tree)
        )

    def visit_Call(self, node: cst.Call) -> None:
        note_run_time_import(self, node)
        if self.qualify(node.func) in JIT_SAVE and len(node.args) >= 2 and not node.args[0].keyword:
            saved = node.args[0].value
            if isinstance(saved, cst.Call) and self.qualify(saved.func) in TRACE and saved.args and not saved.args[0].star:
                self._saved_whole.add(id(saved))

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.SimpleString:
        mark_named_module(self, original_node, ROOTS)
        return updated_node

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> Any:
        mark_star_import(self, original_node, ROOTS)
        return updated_node

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = original_node.value
        if isinstance(call, cst.Call) and self.qualify(call.func) in PASS_THROUGH:
            return self.ctx.remove(updated_node)
        if (
            isinstance(call, cst.Call)
            and self.qualify(call.func) in JIT_LOAD
            and self._neuron_artifacts
        ):
            self.todo(LOAD_TODO)
        return updated_node

    def _trace(self, original: cst.Call, call: cst.Call) -> cst.BaseExpression:
        index, self._traces_seen = self._traces_seen, self._traces_seen + 1
        read_after = self._read_after[index] if index < len(self._read_after) else None
        model = arg_value(call, 0, "func")
        example = arg_value(call, 1, "example_inputs")
        if model is None or example is None:
            return call
        target = self._target if original is self._assigned_value else None
        module = dotted_name(model.value)
        compiled_before = self._traced.get(self._place(module)) if module is not None else None
        if compiled_before is not None:
            # `trace(compiled, ...)` of a model traced before: compile the module itself again
            # (for the new shapes), not the compiled wrapper.
            module = compiled_before
            model = model.with_changes(value=cst.parse_expression(module))
        # `trace(m.forward, ...)` compiled a bound method: compile the method of the moved module.
        owner = module.removesuffix(".forward") if module and module.endswith(".forward") else None
        if module is not None and target == f"{module}.forward":
            owner = module  # `m.forward = trace(m, ...)`: the compiled method replaces the forward
        inside = (
            target is not None
            and owner is None
            and self._check_not_inside(target, module, f"torch_neuronx.trace({module}, ...)")
        )
        self._drop_trace_options(call)
        # A traced graph tracked no gradients (its weights were constants of the compiled graph):
        # frozen, the compiled model neither records autograd graphs nor returns outputs that do.
        # Not in a file that trains, where the same model may be trained too.
        frozen = "" if _TRAINS.search(self.ctx.source) else ".requires_grad_(False)"
        source = owner or code_of(model.value)
        copied = read_after is not None and owner is None
        if copied:
            # The code reads `read_after` again: compile a copy, as the trace was, so that the
            # module (and whatever shares its submodules) stays where it is, with its own weights.
            source = f"{self.ctx.need_import('copy')}.deepcopy({source})"
            self.changed(f"the traced module is compiled as a copy: `{read_after}` is used again after the trace")
        moved = f"{source}.to({self._device()}){frozen}" + (".forward" if owner else "")
        if not frozen:
            self.todo(
                "the compiled model tracks gradients: call it under `torch.inference_mode()` where it only predicts"
            )
        compiled = cst.parse_expression(self._compile(moved))
        if isinstance(compiled, cst.Call) and len(code_of(compiled)) > 88:
            compiled = one_per_line(compiled)
        self.changed("`torch_neuronx.trace` -> `torch.compile(model.to(device), dynamic=False)`")
        self.ctx.note(
            self.code,
            "inputs of compiled models must be on the model's device: Neuron copies host tensors into compiled graphs itself (unless TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1), other devices do not",
        )
        if _HOST_ONLY.search(self.ctx.source):
            self.todo(
                "the compiled model returns device tensors, not host ones: call `.cpu()` on its outputs before NumPy reads them"
            )
        if target is None and original is self._discarded:
            return self._compile_now(compiled, example.value)
        if target is None:
            self.todo(
                "warm the compiled model up once on the example inputs so their shapes compile, as `torch_neuronx.trace` did"
            )
            return compiled
        # `m = trace(m, ...)`: `m` is the compiled wrapper from here on; the module it compiled
        # (whose weights are saved and loaded) is `m._orig_mod`.
        self._traced[self._place(target)] = owner or (f"{module}._orig_mod" if module == target else module)
        if module is not None and not copied:  # a copy went to the device, the module stayed
            self._traced_in[module] = tuple(self._blocks)
        self._traced_anywhere.add(self._variable(target))
        if inside:
            return compiled  # no warm-up: it would start the recursion the TODO describes
        self._warm_up(target, example.value)
        return compiled

    def _compile_now(self, compiled: cst.BaseExpression, example: cst.BaseExpression) -> cst.BaseExpression:
        """`torch_neuronx.trace(model, x)` whose result is dropped compiled there and then (a
        compile-time measurement); `torch.compile` compiles on the first call, so call it."""
        kind = _example_kind_of(example, self._tree)
        if kind == "":
            self.todo(
                f"this line now compiles nothing (`torch.compile` waits for the first call): call the compiled model on `{code_of(example)}` here"
            )
            return compiled
        self.changed("a dropped `torch_neuronx.trace(...)` -> a compiled call on the example, which compiles")
        inputs = (
            [cst.Arg(e.value) for e in example.elements]
            if isinstance(example, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in example.elements)
            else [cst.Arg(example, star="*" if kind == "tuple" else "")]
        )
        return cst.Call(func=compiled, args=fix_trailing_comma(inputs))

    def _drop_trace_options(self, call: cst.Call) -> None:
        self._cast_options(call)
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in TRACE_OPTIONS:
                self.changed(f"dropped `{arg.keyword.value}=` (a neuronx-cc trace option)")
            if arg.keyword is not None and arg.keyword.value == "compiler_workdir" and self._path_only(arg.value):
                # The trace created the folder; what the program writes under it later needs it still.
                os_ = self.ctx.os()
                self.ctx.insert_after(
                    stmt(f"{os_}.makedirs({code_of(arg.value)}, exist_ok=True)  # the folder torch_neuronx.trace made\n")
                )
                self.changed("`compiler_workdir=` -> `os.makedirs(...)`: the folder the trace created, which later writes may need")

    def _path_only(self, node: cst.BaseExpression) -> bool:
        """An expression that only names a path (`os.path.join(root, "unet")`, an f-string, a
        name): evaluating it after the statement instead of within it changes nothing."""
        calls = cst.matchers.findall(node, cst.matchers.Call())
        return all(isinstance(c, cst.Call) and self.qualify(c.func) in PATH_BUILDERS for c in calls)

    def _warm_up(self, compiled: str, example: cst.BaseExpression) -> None:
        """Call the compiled model once on the example, as the traced graph was called: a tuple
        of tensors is unpacked into positional arguments, a list or a single tensor is passed as
        it is."""
        text = code_of(example)
        kind = _example_kind_of(example, self._tree)
        if kind == "":
            self.todo(
                f"warm `{compiled}` up once on `{text}` (`{compiled}(*{text})` if it is a tuple) so its shapes compile"
            )
            return
        # The inputs move to the model's device: only Neuron copies host tensors into a graph.
        device = self._device()
        elements = example.elements if isinstance(example, cst.Tuple | cst.List) else None
        plain = elements is not None and not any(isinstance(e, cst.StarredElement) for e in elements)
        if elements is not None and plain:
            moved = ", ".join(f"{_atom(e.value)}.to({device})" for e in elements)
            # a list is the one argument, as the trace passed it
            warm = f"{compiled}({moved})" if kind == "tuple" else f"{compiled}([{moved}])"
        elif kind == "tuple":
            warm = f"{compiled}(*(t.to({device}) for t in {text}))"
        elif kind == "list":
            warm = f"{compiled}([t.to({device}) for t in {text}])"
        else:
            warm = f"{compiled}({_atom(example)}.to({device}))"
        self.ctx.insert_after(stmt(f"{warm}\n"))
        self.changed("a warm-up call on the example inputs compiles their shapes, as the trace did")
        self.ctx.comment(
            "# Compiled for the shapes of the example inputs, as torch_neuronx.trace did: the first call compiles."
        )

    def _cast_options(self, call: cst.Call) -> None:
        options = arg_value(call, None, "compiler_args")
        if options is None:
            return
        value = literal(options.value)
        flags = (
            value.split()
            if isinstance(value, str)
            else list(value)
            if isinstance(value, list | tuple)
            else None
        )
        if flags is None:
            self.todo(
                "`compiler_args=` were neuronx-cc flags: turn any `--auto-cast` into a dtype (`model.to(torch.bfloat16)`) or `torch.autocast`"
            )
            return
        values = flag_values([str(f) for f in flags])
        cast = values.get("--auto-cast", values.get("--auto_cast"))
        cast_type = values.get("--auto-cast-type", values.get("--auto_cast_type", "bf16"))
        if cast is not None and cast != "none":
            dtype = {
                "bf16": "bfloat16",
                "fp16": "float16",
                "tf32": "float32",
                "fp8_e4m3": "float8_e4m3fn",
            }.get(str(cast_type), str(cast_type))
            self.todo(
                f"neuronx-cc `--auto-cast {cast}` computed in {cast_type}: cast explicitly (`model.to(torch.{dtype})`) or use `torch.autocast`"
            )
        self.changed(f"dropped `compiler_args={code_of(options.value)}` (neuronx-cc flags)")


def _short(node: cst.BaseExpression) -> str:
    """`node` quoted as code, where it is short enough for a TODO line; else what it names."""
    code = code_of(node)
    return f"`{code}`" if len(code) <= 32 and "\n" not in code else "the saved file"


def _bound_to_returned_traces(tree: ast.Module, resolve: Callable[[str], str | None]) -> set[str]:
    """Names assigned what a function of the file returns from `torch_neuronx.trace`
    (`def compile(m, x): return torch_neuronx.trace(m, x)`; `model_neuron = compile(model, x)`):
    a compiled model natively, with no `.save()`."""
    tracing: set[str] = set()
    for function in all_nodes(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        traced = {
            target.id
            for node in ast.walk(function)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _resolves(node.value.func, resolve) in TRACE
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None and (
                (isinstance(node.value, ast.Call) and _resolves(node.value.func, resolve) in TRACE)
                or (isinstance(node.value, ast.Name) and node.value.id in traced)
            ):
                tracing.add(function.name)
    return {
        target.id
        for node in all_nodes(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
        and node.value.func.id in tracing
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _resolves(func: ast.expr, resolve: Callable[[str], str | None]) -> str | None:
    dotted = ast_dotted_name(func)
    return resolve(dotted) if dotted else None
