"""NM026: torch_xla SPMD programs become DTensor programs, one process per device."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    MigrationContext,
    arg_value,
    code_of,
    expr,
    keyword_arg,
)
from neuron_migrate.rewrite.codemods.xla_spmd.layers import Layer, Mark, mark_of, path, plan_layers
from neuron_migrate.rewrite.codemods.xla_spmd.meshes import (
    SPMD_MODULES,
    MeshFacts,
    identity_ids,
    mesh_facts,
    spmd_name,
)
from neuron_migrate.rewrite.codemods.xla_spmd.specs import (
    MeshShape,
    literal_spec,
    placements,
    written,
)

USE_SPMD = "torch_xla.runtime.use_spmd"
REDUCE_SCATTER = "torch_xla._XLAC._xla_spmd_reduce_scatter"
TODO_LIMIT = 130  # a TODO names the placements in one line a person reads at a glance (with its prefix, 160)

MANUAL_REGION = (
    "run the region on local shards with `local_map(fn, out_placements, in_placements, device_mesh=mesh)`"
)


class XlaSpmd(Codemod):
    """Rewrites torch_xla SPMD programs into DTensor programs run by torchrun, one process per device.

    ## What it does
    | torch_xla SPMD | native |
    |---|---|
    | `xr.use_spmd()` | removed; the script is launched with `torchrun --nproc_per_node=<devices>` |
    | `xs.Mesh(np.arange(n), shape, names)` | `init_device_mesh(device_type, shape, mesh_dim_names=names)` |
    | `xs.set_global_mesh(mesh)` / `xs.get_global_mesh()` | removed / `mesh` |
    | `xr.global_runtime_device_count()` | `WORLD_SIZE` (NM006): one process per device |
    | `xs.mark_sharding(layer.weight, mesh, ("model", None))` (and its bias) | `parallelize_module(layer, mesh["model"], ColwiseParallel(output_layouts=Replicate()))` |
    | `xs.mark_sharding(layer.weight, mesh, (None, "model"))` | `parallelize_module(layer, mesh["model"], RowwiseParallel(input_layouts=Replicate()))` |
    | any other `xs.mark_sharding(t, mesh, spec)` | removed, with a TODO naming the DTensor placements of `spec` |
    | `enable_manual_sharding`, `_xla_spmd_reduce_scatter`, ... | TODO |

    A partition spec maps to placements one per mesh dimension: `Shard(d)` where tensor dimension
    `d` names that mesh axis (by name or index), `Replicate()` where none does; a tuple of axes on
    one dimension shards it over each of them.

    ## Why
    torch_xla SPMD runs one process that drives every device and lets the compiler split the
    work; native PyTorch runs one process per device and says how tensors are split with DTensor.
    The program keeps its global view either way: a DTensor layer takes and returns whole tensors.

    ## Example
    ```python
    xr.use_spmd()
    mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), (1, 4), ("data", "model"))
    xs.mark_sharding(model.up.weight, mesh, ("model", None))
    xs.mark_sharding(model.down.weight, mesh, (None, "model"))
    xs.mark_sharding(batch, mesh, ("data", None))
    ```

    ## Use instead
    ```python
    mesh = init_device_mesh(device_type, (1, 4), mesh_dim_names=("data", "model"))
    parallelize_module(model.up, mesh["model"], ColwiseParallel(output_layouts=Replicate()))
    parallelize_module(model.down, mesh["model"], RowwiseParallel(input_layouts=Replicate()))
    # TODO(neuron-migrate NM026): `batch` is no longer split: each process holds it whole (DTensor: [Shard(0), Replicate()]) ...
    ```

    ## Fix safety
    Safe for the rewritten layers: the losses of a few training steps under torchrun match one
    process (tested). A weight whose module is not an `nn.Linear` fails at `parallelize_module`
    (an `nn.Embedding` takes it, split along the other dimension with the same results). The
    layers keep whole inputs and outputs, so two chained layers gather between them: drop
    `output_layouts`/`input_layouts` where one feeds the other directly. A mark that is removed
    changes no value (SPMD's view is global), but the tensor is no longer split, so memory and work
    are no longer shared: its TODO names the placements to shard it with. Marks on a mesh whose
    shape the file does not show, with a spec not written out, after an optimizer is made from the
    parameters, or inside `forward` (a hint to the compiler) get a TODO; the mesh of devices not in
    order (`device_ids` other than `np.arange(n)`) is kept with a TODO.
    """

    code = "NM026"
    name = "xla-spmd"
    summary = "torch_xla SPMD (`use_spmd`, `Mesh`, `mark_sharding`) -> DTensor (`init_device_mesh`, `parallelize_module`)"
    triggers = (USE_SPMD, *SPMD_MODULES, REDUCE_SCATTER)
    manual: ClassVar[dict[str, str]] = {
        USE_SPMD: "SPMD has no native switch: run one process per device under torchrun and shard with DTensor",
        **{module: "`{name}` is XLA SPMD sharding: use DTensor (`init_device_mesh`, `distribute_tensor`, `parallelize_module`)" for module in SPMD_MODULES},
        **{f"{module}.mark_sharding": "shard with DTensor: `distribute_tensor(t, mesh, placements)`, or `parallelize_module` for a layer" for module in SPMD_MODULES},
        **{f"{module}.enable_manual_sharding": MANUAL_REGION for module in SPMD_MODULES},
        **{f"{module}.disable_manual_sharding": MANUAL_REGION for module in SPMD_MODULES},
        **{f"{module}.get_global_mesh": "use the `DeviceMesh` variable itself (from `init_device_mesh`)" for module in SPMD_MODULES},
        **{f"{module}.set_global_mesh": "keep the `DeviceMesh` in a variable and pass it where the global mesh was read" for module in SPMD_MODULES},
        REDUCE_SCATTER: "use `dist.reduce_scatter_tensor(out, x, group=mesh.get_group(axis))`",
    }

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._facts = MeshFacts()
        self._layers: dict[int, Layer] = {}  # id of a mark statement -> the layer it is part of
        self._decided: dict[int, bool] = {}  # id of a layer -> whether it is rewritten
        self._functions: list[str] = []

    # -- what the file says ---------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self._facts = mesh_facts(self.ctx.source, self.ctx.imports.resolve_dotted)
        self._plan(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._plan(node.body)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated_node

    def _plan(self, body: Any) -> None:
        for layer in plan_layers(body, self._is_mark, self._mesh_of):
            for statement in layer.statements:
                self._layers[statement] = layer

    def _is_mark(self, call: cst.Call) -> bool:
        return spmd_name(self.qualify(call.func), "mark_sharding")

    def _global_mesh(self) -> str | None:
        """The variable `set_global_mesh` was given, if the file sets one global mesh only."""
        meshes = self._facts.global_meshes
        return meshes[0] if len(meshes) == 1 else None

    def _mesh_of(self, node: cst.BaseExpression) -> tuple[str, MeshShape] | None:
        """The mesh variable an argument names and its shape, where the file shows both."""
        name = node.value if isinstance(node, cst.Name) else None
        if isinstance(node, cst.Call) and spmd_name(self.qualify(node.func), "get_global_mesh") and not node.args:
            name = self._global_mesh()
        shape = self._facts.meshes.get(name) if name is not None else None
        return (name, shape) if name is not None and shape is not None else None

    # -- statements -----------------------------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> Any:
        if len(updated_node.body) != 1 or not isinstance(updated_node.body[0], cst.Expr):
            return updated_node
        call = updated_node.body[0].value
        if not isinstance(call, cst.Call):
            return updated_node
        name = self.qualify(call.func)
        if name == USE_SPMD and not call.args:
            self.changed("removed `use_spmd()`: one process per device runs the program under torchrun")
            self.ctx.comment(f"# Launch with: torchrun --nproc_per_node=<devices> {self.ctx.script_name}")
            self.ctx.note(
                self.code,
                "every process now runs the whole SPMD program: what a sharded layer reads (inputs, random numbers, "
                "the data order) must be the same on every process, so seed them alike",
            )
            return self.ctx.remove(updated_node)
        if spmd_name(name, "set_global_mesh"):
            return self._set_global_mesh(call, updated_node)
        if spmd_name(name, "mark_sharding"):
            layer = self._layers.get(id(original_node))
            if layer is not None and self._layer_applies(layer):
                return self._parallelize(layer, layer.statements[0] == id(original_node), updated_node)
            mark = mark_of(original_node, self._is_mark)
            if mark is not None:
                return self._mark(mark, updated_node)
        return updated_node

    def _set_global_mesh(self, call: cst.Call, line: cst.SimpleStatementLine) -> Any:
        given = arg_value(call, 0, "mesh")
        if given is None or not isinstance(given.value, cst.Name) or self._global_mesh() != given.value.value:
            return line
        if not self._visible(given.value.value):
            return line
        self.changed("removed `set_global_mesh(mesh)`: the mesh variable is read where the global mesh was")
        return self.ctx.remove(line)

    # -- layers ---------------------------------------------------------------------------------
    def _layer_applies(self, layer: Layer) -> bool:
        """Decided at its first statement: every mark of the layer is rewritten, or none."""
        if id(layer) not in self._decided:
            self._decided[id(layer)] = self._visible(layer.submesh.split("[")[0])
        return self._decided[id(layer)]

    def _visible(self, mesh: str) -> bool:
        """`mesh`, which the file binds once, is that variable here (nothing else by the name)."""
        return mesh in self._facts.meshes and self.ctx.binding_key(mesh) is not None

    def _parallelize(self, layer: Layer, first: bool, line: cst.SimpleStatementLine) -> Any:
        if not first:
            return self.ctx.remove(line)
        parallel = "torch.distributed.tensor.parallel"
        parallelize = self.ctx.need_from(parallel, "parallelize_module")
        style_class = layer.style.split("(")[0]
        style = layer.style.replace(style_class, self.ctx.need_from(parallel, style_class), 1)
        style = style.replace("Replicate()", f"{self.ctx.need_from('torch.distributed.tensor', 'Replicate')}()")
        kind = "column" if style_class == "ColwiseParallel" else "row"
        self.changed(f"`mark_sharding` of `{layer.owner}`'s parameters -> `parallelize_module(..., {style_class}(...))` ({kind}-parallel)")
        return line.with_changes(body=[cst.Expr(expr(f"{parallelize}({layer.owner}, {layer.submesh}, {style})"))])

    # -- other marks ------------------------------------------------------------------------------
    def _mark(self, mark: Mark, line: cst.SimpleStatementLine) -> Any:
        tensor = code_of(mark.tensor)
        spec = literal_spec(mark.spec)
        mesh = self._mesh_of(mark.mesh)
        found = placements(spec, mesh[1]) if spec is not None and mesh is not None else None
        if mesh is None or found is None or isinstance(found, str):
            why = found or ("its spec is not written out" if spec is None else "the file does not show its mesh's shape")
            self.todo(_fit(f"`{tensor}`'s sharding has no mechanical DTensor form: {why}"), explains=(self._callee(line),))
            return line
        where = written(found)
        if self._functions and self._functions[-1] == "forward":
            message = f"sharding hint on `{tensor}` removed: DTensor layouts follow the parameters; | as a DTensor: `{tensor}.redistribute({mesh[0]}, {where})`"
        elif isinstance(mark.tensor, cst.Attribute):
            message = f"`{tensor}` is now whole on each process (was {where} on `{mesh[0]}`); | shard its module with `parallelize_module`"
        else:
            message = f"`{tensor}` is now whole on each process (was {where} on `{mesh[0]}`); | feed each process its slice, `fully_shard` the model"
        if not _plain(mark.tensor) or (not _plain(mark.mesh) and self._mesh_of(mark.mesh) is None):
            message = message.replace(" removed:", ":").replace("is now whole on each process (was ", "can be split (")
            self.todo(_fit(message), explains=(self._callee(line),))
            return line
        self.todo(_fit(message))
        self.changed(f"removed `mark_sharding({tensor}, ...)`: SPMD's view is global, the values are the same")
        return self.ctx.remove(line)

    @staticmethod
    def _callee(line: cst.SimpleStatementLine) -> str:
        small = line.body[0]
        call = small.value if isinstance(small, cst.Expr) else None
        return code_of(call.func) if isinstance(call, cst.Call) else ""

    # -- expressions ----------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if spmd_name(name, "Mesh"):
            return self._device_mesh(updated_node)
        if spmd_name(name, "get_global_mesh") and not updated_node.args:
            mesh = self._global_mesh()
            if mesh is not None and self._visible(mesh):
                self.changed(f"`get_global_mesh()` -> `{mesh}`")
                return cst.Name(mesh)
        return updated_node

    def _device_mesh(self, call: cst.Call) -> cst.BaseExpression:
        ids, shape = arg_value(call, 0, "device_ids"), arg_value(call, 1, "mesh_shape")
        names = arg_value(call, 2, "axis_names")
        if ids is None or shape is None or any(arg.star for arg in call.args) or len(call.args) != (3 if names else 2):
            return call
        if not identity_ids(_ast(ids.value), self.ctx.imports.resolve_dotted, self._facts):
            self.todo(
                f"`{code_of(ids.value)}` may order devices unlike `init_device_mesh`: "
                "use `DeviceMesh(device_type, torch.tensor(ids).reshape(shape))`",
                explains=(code_of(call.func),),
            )
            return call
        init = self.ctx.need_from("torch.distributed.device_mesh", "init_device_mesh")
        args = [cst.Arg(expr(self.ctx.device_type_expr())), cst.Arg(shape.value)]
        if names is not None and code_of(names.value) != "None":
            args.append(keyword_arg("mesh_dim_names", names.value))
        self.changed("`xs.Mesh(...)` -> `init_device_mesh(device_type, shape, mesh_dim_names=...)`")
        return cst.Call(func=expr(init), args=_comma_separated(args))


def _comma_separated(args: list[cst.Arg]) -> list[cst.Arg]:
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [arg.with_changes(comma=comma) for arg in args[:-1]] + args[-1:]


def _ast(node: cst.BaseExpression) -> ast.expr:
    try:
        return ast.parse(code_of(node), mode="eval").body
    except SyntaxError:
        return ast.Constant(None)


def _plain(node: cst.BaseExpression) -> bool:
    """A name, attribute or literal index: reading it again, or not at all, changes nothing."""
    return path(node) is not None


def _fit(message: str) -> str:
    """The message in one line a person reads at a glance: its advice after `|` goes if too long."""
    head, _, advice = message.partition(" | ")
    whole = f"{head} {advice}" if advice else head
    return whole if len(whole) <= TODO_LIMIT else head.rstrip(";:")

