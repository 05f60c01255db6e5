"""NM023: `torch_neuronx.trace` becomes `torch.compile` on the device, warmed up on the example shapes."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.codemods.base import Codemod, arg_value, code_of, stmt
from neuron_migrate.rewrite.codemods.optimum.support import literal, one_per_line, with_args

TRACE = ("torch_neuronx.trace", "torch_neuronx.xla_impl.trace.trace")
JIT_SAVE = ("torch.jit.save",)
JIT_LOAD = ("torch.jit.load",)
PASS_THROUGH = {  # wrappers whose argument is what the migrated code uses
    "torch_neuronx.async_load": "loaded the compiled model onto the device ahead of the first call; the compiled model is already on its device",
    "torch_neuronx.lazy_load": "deferred loading the compiled model; torch.compile compiles on the first call anyway",
    "torch_neuronx.move_trace_to_device": "moved a compiled model to a NeuronCore; the model was moved with `.to(device)` before compiling",
}
DATA_PARALLEL = ("torch_neuronx.DataParallel", "torch_neuronx.xla_impl.data_parallel.DataParallel")
DYNAMIC_BATCH = ("torch_neuronx.dynamic_batch",)
LOAD_TODO = "a compiled model cannot be loaded from a file: rebuild the model from its class, `load_state_dict(torch.load(path))` with weights saved by `torch.save(model.state_dict(), path)`, then `torch.compile(model, dynamic=False)`"
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


def _example_kind(tree: ast.AST, name: str) -> str:
    """ "tuple", "tensor" or "" for the example inputs bound to `name`."""
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    kinds = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            continue
        value = node.value
        if isinstance(value, ast.Tuple | ast.List):
            kinds.add("tuple")
        elif isinstance(value, ast.Call):
            dotted = ast_dotted_name(value.func) or ""
            if dotted.startswith("torch.") and dotted in TENSOR_FACTORIES:
                kinds.add("tensor")
            elif dotted in functions:
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


class NeuronxTrace(Codemod):
    """Replaces ahead-of-time `torch_neuronx.trace` with `torch.compile` on the device.

    ## What it does
    `traced = torch_neuronx.trace(model, example_inputs, compiler_args=..., compiler_workdir=...)`
    becomes `traced = torch.compile(model.to(device), dynamic=False)` followed by a warm-up call
    on `example_inputs`, which compiles for those shapes as `trace` did. `torch.jit.save` of the
    traced model saves `model.state_dict()` instead, and a `torch.jit.load` of that same file in
    the script becomes `load_state_dict(torch.load(path))` + `torch.compile`.
    `torch_neuronx.async_load`, `lazy_load` and `move_trace_to_device` go; `DataParallel` and
    `dynamic_batch` keep the model they wrap, with a TODO. With `--target neuron` the device is
    `"neuron"` and the backend is spelled out.

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
    model_neuron = torch.compile(model.to(device), dynamic=False)
    model_neuron(*example_inputs)
    torch.save(model.state_dict(), "model.pt")
    ```

    ## Fix safety
    `model.to(device)` moves the original module too (trace left it on the CPU), and inputs
    must be on the model's device: Neuron copies host tensors into compiled graphs itself,
    other devices do not. `--auto-cast` compiler options become a TODO to cast explicitly.
    A `torch.jit.load` of a file this script did not save gets a TODO: the model must be
    rebuilt from its Python class.
    """

    code = "NM023"
    name = "neuronx-trace"
    summary = "`torch_neuronx.trace` -> `torch.compile(model.to(device), dynamic=False)` + warm-up"
    triggers = ("torch_neuronx",)
    manual: ClassVar[dict[str, str]] = {
        "torch_neuronx.xla_impl": "torch_neuronx XLA internals (custom ops, NKI via `nki_jit`) have no automatic migration; NKI kernels need the native NKI integration",
        "torch_neuronx.xla_impl.ops.nki_jit": "NKI kernels through `nki_jit` need the native NKI integration of TorchNeuron; rewrite the kernel call by hand",
        "torch_neuronx.analyze": "`torch_neuronx.analyze` reported operator support for tracing; run the model eagerly on the `neuron` device (unsupported ops fall back to CPU, see `torch_neuronx.get_fallback_ops()`)",
        "torch_neuronx.replace_weights": "swap weights with `model.load_state_dict(weights)` on the compiled model's original module",
        "torch_neuronx.experimental": "experimental torch_neuronx API with no native counterpart",
        "torch_neuronx.xla": "torch_neuronx's XLA initialization is gone: the `neuron` device needs no set-up",
        "torch_neuronx": "`{name}` is torch_neuronx (XLA stack) API with no automatic migration; use the `neuron` device and `torch.compile`",
    }

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._target: str | None = None
        self._traced: dict[str, str] = {}  # traced var -> source model expression
        self._saved: dict[str, str] = {}  # path expression -> source model expression
        self._tree: ast.AST | None = None

    def visit_Module(self, node: cst.Module) -> None:
        try:
            self._tree = ast.parse(self.ctx.source)
        except SyntaxError:
            self._tree = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self._target = target.value if isinstance(target, cst.Name) else None

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        target = self._target
        self._target = None
        value = original_node.value
        if (
            target is not None
            and isinstance(updated_node.value, cst.Name)
            and updated_node.value.value == target
        ):
            return self.ctx.remove(updated_node)  # `m = wrapper(m)` with the wrapper gone
        if target is not None and self.called(value, *JIT_LOAD):
            assert isinstance(value, cst.Call)
            path = arg_value(value, 0, "f")
            source = self._saved.get(code_of(path.value)) if path is not None else None
            if source is not None and path is not None:
                torch = self.ctx.torch()
                self.changed(
                    "`torch.jit.load` of the traced model -> `load_state_dict` + `torch.compile`"
                )
                self.ctx.insert_before(
                    stmt(f"{source}.load_state_dict({torch}.load({code_of(path.value)}))\n")
                )
                return updated_node.with_changes(value=cst.parse_expression(self._compile(source)))
            if self.ctx.facts.uses("torch_neuronx"):
                self.todo(LOAD_TODO)
        return updated_node

    def _device(self) -> str:
        return '"neuron"' if self.ctx.target.neuron else self.ctx.device_expr()

    def _compile(self, model: str) -> str:
        backend = 'backend="neuron", ' if self.ctx.target.neuron else ""
        return f"{self.ctx.torch()}.compile({model}, {backend}dynamic=False)"

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(original_node.func)
        if name in TRACE:
            return self._trace(updated_node)
        if name in PASS_THROUGH and updated_node.args:
            self.changed(f"`{code_of(original_node.func)}(...)` removed: {PASS_THROUGH[name]}")
            return updated_node.args[0].value
        if name in DATA_PARALLEL and updated_node.args:
            self.todo(
                "`torch_neuronx.DataParallel` ran one model copy per NeuronCore in this process; natively run one process per core (`torchrun --nproc_per_node=<cores>`), each with its share of the batch"
            )
            return updated_node.args[0].value
        if name in DYNAMIC_BATCH and updated_node.args:
            self.todo(
                "`dynamic_batch` split batches into traced-size pieces; natively each new batch size compiles anew, so pad or split batches to the size used at warm-up"
            )
            return updated_node.args[0].value
        if name in JIT_SAVE and len(updated_node.args) >= 2:
            saved = updated_node.args[0].value
            if isinstance(saved, cst.Name) and saved.value in self._traced:
                source = self._traced[saved.value]
                path = code_of(updated_node.args[1].value)
                self._saved[path] = source
                self.changed(
                    "`torch.jit.save` of the traced model -> `torch.save(model.state_dict(), path)`"
                )
                return cst.parse_expression(
                    f"{self.ctx.torch()}.save({source}.state_dict(), {path})"
                )
        if (
            isinstance(updated_node.func, cst.Attribute)
            and updated_node.func.attr.value == "from_pretrained"
            and any(
                a.keyword is not None and a.keyword.value == "torchscript"
                for a in updated_node.args
            )
        ):
            self.changed(
                "dropped `torchscript=True`: transformers 5 removed it; outputs are a `ModelOutput`, and `[0]` still gives the first one"
            )
            return with_args(
                updated_node,
                [
                    a
                    for a in updated_node.args
                    if not (a.keyword is not None and a.keyword.value == "torchscript")
                ],
            )
        if name in JIT_LOAD and self.ctx.facts.uses("torch_neuronx") and not self._target:
            self.todo(LOAD_TODO)
        return updated_node

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        call = original_node.value
        if isinstance(call, cst.Call) and self.qualify(call.func) in PASS_THROUGH:
            return self.ctx.remove(updated_node)
        if (
            isinstance(call, cst.Call)
            and self.qualify(call.func) in JIT_LOAD
            and self.ctx.facts.uses("torch_neuronx")
        ):
            self.todo(LOAD_TODO)
        return updated_node

    def _trace(self, call: cst.Call) -> cst.BaseExpression:
        model = arg_value(call, 0, "func")
        example = arg_value(call, 1, "example_inputs")
        if model is None or example is None:
            return call
        self._cast_options(call)
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in (
                "compiler_workdir",
                "inline_weights_to_neff",
                "partitioner_config",
                "input_output_aliases",
                "cpu_backend",
            ):
                self.changed(f"dropped `{arg.keyword.value}=` (a neuronx-cc trace option)")
        source = code_of(model.value)
        compiled = cst.parse_expression(self._compile(f"{source}.to({self._device()})"))
        if isinstance(compiled, cst.Call) and len(code_of(compiled)) > 88:
            compiled = one_per_line(compiled)
        self.changed(
            "`torch_neuronx.trace` -> `torch.compile(model.to(device), dynamic=False)` + warm-up"
        )
        self.ctx.note(
            self.code,
            "inputs of compiled models must be on the model's device: Neuron copies host tensors into compiled graphs itself (unless TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1), other devices do not",
        )
        if self._target is None:
            self.todo(
                "warm the compiled model up once on the example inputs: the first call compiles for their shapes, as `torch_neuronx.trace` did"
            )
            return compiled
        if isinstance(model.value, cst.Name):
            self._traced[self._target] = source
        example_code = code_of(example.value)
        kind = "tuple" if isinstance(example.value, cst.Tuple | cst.List) else ""
        if not kind and isinstance(example.value, cst.Name) and self._tree is not None:
            kind = _example_kind(self._tree, example.value.value)
        if kind == "tuple":
            warm = f"{self._target}(*{example_code})"
        elif kind == "tensor":
            warm = f"{self._target}({example_code})"
        else:
            warm = f"{self._target}(*{example_code})"
            self.todo(
                f"check the warm-up call: `{example_code}` is unpacked as a tuple of inputs; call `{self._target}({example_code})` if it is a single tensor"
            )
        comment = "# Compiled for the shapes of the example inputs, as torch_neuronx.trace did: the first call compiles.\n"
        self.ctx.insert_after(stmt(f"{warm}\n"))
        self.ctx.comment(comment.strip())
        return compiled

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
                f"`compiler_args={code_of(options.value)}` were neuronx-cc flags: a `--auto-cast` in them becomes an explicit dtype (`model.to(torch.bfloat16)`) or `torch.autocast`"
            )
            return
        cast = next(
            (
                flags[i + 1]
                for i, f in enumerate(flags[:-1])
                if str(f) in ("--auto-cast", "--auto_cast")
            ),
            None,
        )
        cast_type = next(
            (
                flags[i + 1]
                for i, f in enumerate(flags[:-1])
                if str(f) in ("--auto-cast-type", "--auto_cast_type")
            ),
            "bf16",
        )
        if cast is not None and cast != "none":
            dtype = {
                "bf16": "bfloat16",
                "fp16": "float16",
                "tf32": "float32",
                "fp8_e4m3": "float8_e4m3fn",
            }.get(str(cast_type), str(cast_type))
            self.todo(
                f"neuronx-cc `--auto-cast {cast}` computed in {cast_type}: cast explicitly (`model.to(torch.{dtype})` and the inputs) or wrap calls in `torch.autocast(device_type=..., dtype=torch.{dtype})`"
            )
        self.changed(f"dropped `compiler_args={code_of(options.value)}` (neuronx-cc flags)")
