"""NM026: torch_xla SPMD programs become DTensor programs, one process per device."""

from __future__ import annotations

import ast
from string import Template
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    MigrationContext,
    arg_value,
    code_of,
    expr,
    keyword_arg,
    stmt,
)
from neuron_migrate.rewrite.codemods.mixed_parameters import FOREACH_OPTIMIZERS, without_foreach
from neuron_migrate.rewrite.codemods.seeding import HOST_SEEDERS
from neuron_migrate.rewrite.codemods.xla_spmd.batches import BatchSplit, plan_batch_split
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

BATCH_SLICE = '''\
def {name}(batch, mesh):
    """This process's slice of `batch` along its first dimension, by its place on `mesh`: the
    part SPMD gave its device. Equal slices only, so that their mean losses average to the batch's."""
    size = mesh.size()
    if batch.size(0) % size:
        raise ValueError(f"a batch of {{batch.size(0)}} does not split evenly over {{size}} processes")
    return batch.chunk(size)[mesh.get_local_rank()]
'''

AVERAGE_GRADIENTS_OVER = '''\
def {name}(model, mesh):
    """Average `model`'s gradients over `mesh`, each computed on one slice of the batch: the
    gradient of the whole batch's mean loss. A tensor-parallel gradient averages its own shard."""
    for parameter in model.parameters():
        if parameter.grad is not None:
            grad = parameter.grad.to_local() if isinstance(parameter.grad, {DTensor}) else parameter.grad
            {dist}.all_reduce(grad, group=mesh.get_group())
            grad /= mesh.size()
'''

MEAN_OVER = '''\
def {name}(value, mesh):
    """The mean of `value` over `mesh`, detached: the whole batch's loss, from each slice's."""
    value = value.detach().clone()
    {dist}.all_reduce(value, group=mesh.get_group())
    return value / mesh.size()
'''

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
    | `xs.mark_sharding(x, mesh, ("data", None))` on the batch of a step (see below) | `x = batch_slice(x, mesh["data"])`; after `loss.backward()`, `average_gradients_over(model, mesh["data"])`, `loss = mean_over(loss, mesh["data"])` |
    | any other `xs.mark_sharding(t, mesh, spec)` | removed, with a TODO naming the DTensor placements of `spec` |
    | `enable_manual_sharding`, `_xla_spmd_reduce_scatter`, ... | TODO |

    A partition spec maps to placements one per mesh dimension: `Shard(d)` where tensor dimension
    `d` names that mesh axis (by name or index), `Replicate()` where none does; a tuple of axes on
    one dimension shards it over each of them.

    A batch split over one mesh axis (its first dimension, nothing else split) becomes one slice
    per process where the block that marks it then takes one training step the rule can follow:
    `loss = ...` (alone under `with autocast(...)`, or not) is the only statement that reads the
    marked tensors once marked, a mean over samples of one model called on marked tensors
    (`F.mse_loss`, `F.l1_loss`, `F.smooth_l1_loss`, `F.huber_loss`,
    `F.binary_cross_entropy_with_logits`, `F.cross_entropy`, `F.nll_loss`, their `nn` modules
    such as `criterion = nn.CrossEntropyLoss()`, or `<...>.mean()`; no class weights, no
    `reduction` but `"mean"`; element-wise methods, arithmetic and `view(-1, ...)` in between),
    and the next statement that reads the loss is `loss.backward()`. The mean of equal slices'
    mean losses is the whole batch's, and so is the average of their gradients: each process
    averages the model's gradients over the axis right after `backward()`, and `loss` becomes
    the whole batch's again, so what prints or logs it reads what SPMD's did. No layer may be
    split over the batch's axis. Otherwise the marks go with the TODO below.

    ## Why
    torch_xla SPMD runs one process that drives every device and lets the compiler split the
    work; native PyTorch runs one process per device and says how tensors are split with DTensor.
    The program keeps its global view either way: a DTensor layer takes and returns whole tensors.

    ## Example
    ```python
    xr.use_spmd()
    mesh = xs.Mesh(np.arange(xr.global_runtime_device_count()), (2, 2), ("data", "model"))
    xs.mark_sharding(model.up.weight, mesh, ("model", None))
    xs.mark_sharding(model.down.weight, mesh, (None, "model"))
    for x, y in loader:
        xs.mark_sharding(x, mesh, ("data", None))
        xs.mark_sharding(y, mesh, ("data", None))
        loss = F.mse_loss(model(x), y)
        loss.backward()
        print(loss.item())
    ```

    ## Use instead
    ```python
    mesh = init_device_mesh(device_type, (2, 2), mesh_dim_names=("data", "model"))
    parallelize_module(model.up, mesh["model"], ColwiseParallel(output_layouts=Replicate()))
    parallelize_module(model.down, mesh["model"], RowwiseParallel(input_layouts=Replicate()))
    for x, y in loader:
        # TODO(neuron-migrate NM026): `model` now runs on this process's slice of the batch: ... (BatchNorm) ...
        x = batch_slice(x, mesh["data"])  # this process's equal slice, by its place on "data"
        y = batch_slice(y, mesh["data"])
        loss = F.mse_loss(model(x), y)
        loss.backward()
        average_gradients_over(model, mesh["data"])  # all-reduce, divided by the axis's size
        loss = mean_over(loss, mesh["data"])  # the whole batch's loss, detached
        print(loss.item())
    ```

    ## Fix safety
    Safe for the rewritten layers: the losses of a few training steps under torchrun match one
    process (tested). After the first mesh every process is seeded with rank 0's seed (unless the
    file seeds torch itself), so what each now computes whole, such as weights it does not shard
    and the data order, is the same everywhere, as in the one SPMD program. torch's optimizers
    in a file that shards layers are built with
    `foreach=False` (the multi-tensor kernels refuse DTensor and plain parameters together). A weight whose module is not an `nn.Linear` fails at `parallelize_module`
    (an `nn.Embedding` takes it, split along the other dimension with the same results). The
    layers keep whole inputs and outputs, so two chained layers gather between them: drop
    `output_layouts`/`input_layouts` where one feeds the other directly. A mark that is removed
    changes no value (SPMD's view is global), but the tensor is no longer split, so memory and work
    are no longer shared: its TODO names the placements to shard it with. Marks on a mesh whose
    shape the file does not show, with a spec not written out, after an optimizer is made from the
    parameters, or inside `forward` (a hint to the compiler) get a TODO; the mesh of devices not in
    order (`device_ids` other than `np.arange(n)`) is kept with a TODO.

    A batch split per process keeps the losses (tested: 2 processes on "data", 4 on a 2 x 2 mesh)
    where the model treats samples alone: a layer that mixes them (BatchNorm) now sees one slice,
    which a TODO says, and random layers (dropout) draw for the slice. A batch that does not
    split evenly over the axis stops the program with an error (SPMD would pad it), since unequal
    slices' means do not average to the batch's. `F.cross_entropy` and `F.nll_loss` average over
    the targets that are not `ignore_index`: a TODO says the mean is the batch's only while none is.
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
        self._seeded_alike = False
        self._decided: dict[int, bool] = {}  # id of a layer or batch split -> whether it is rewritten
        self._splits: dict[int, BatchSplit] = {}  # id of a mark or `loss.backward()` -> the batch split
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
        split = plan_batch_split(body, self._is_mark, self._mesh_of, self.qualify, self._loss_of)
        if split is not None:
            for statement in [*split.tensors, split.backward]:
                self._splits[statement] = split

    def _loss_of(self, callee: cst.BaseExpression) -> str | None:
        """The loss function a callee is: a function by its import, or a loss module's variable."""
        if isinstance(callee, cst.Name) and callee.value in self._facts.losses and self.ctx.binding_key(callee.value):
            return self._facts.losses[callee.value]
        return self.qualify(callee)

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
        split = self._splits.get(id(original_node))
        if split is not None and self._split_applies(split):
            if id(original_node) == split.backward:
                return self._average(split, updated_node)
            return self._slice(split, id(original_node), updated_node)
        name = self.qualify(call.func)
        if name == USE_SPMD and not call.args:
            self.changed("removed `use_spmd()`: one process per device runs the program under torchrun")
            if not self.ctx.notebook:  # a notebook's processes come from `notebook_launcher`, as its spawn's did
                self.ctx.comment(f"# Launch with: torchrun --nproc_per_node=<devices> {self.ctx.script_name}")
            self.ctx.note(
                self.code,
                "every process now runs the whole SPMD program: what a sharded layer reads (inputs, random numbers, "
                "the data order) must be the same on every process; the file's random numbers are seeded alike, "
                "inputs it reads otherwise must be too",
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

    # -- batches split over the data axis ----------------------------------------------------------
    def _split_applies(self, split: BatchSplit) -> bool:
        """Decided at its first mark: the mesh is the file's, and no layer is split over the axis
        the batch is (its processes would hold different slices of one layer's input)."""
        if id(split) not in self._decided:
            on_axis = any(layer.submesh == split.submesh for layer in self._layers.values())
            self._decided[id(split)] = self._visible(split.mesh) and not on_axis
        return self._decided[id(split)]

    def _slice(self, split: BatchSplit, statement: int, line: cst.SimpleStatementLine) -> Any:
        tensor = split.tensors[statement]
        if statement == next(iter(split.tensors)):
            self.todo(f"`{split.model}` now runs on this process's slice of the batch: a layer that mixes samples (BatchNorm) sees the slice only")
            if split.ignore_index:
                self.todo("the loss is the batch's mean only while no target equals `ignore_index`: else weigh each slice by its count")
        helper = self._helper("batch_slice", BATCH_SLICE)
        self.changed(f"`mark_sharding({tensor}, ...)` on the data axis -> `{tensor} = {helper}({tensor}, {split.submesh})`")
        value = expr(f"{helper}({tensor}, {split.submesh})")
        return line.with_changes(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(tensor))], value=value)])

    def _average(self, split: BatchSplit, line: cst.SimpleStatementLine) -> Any:
        average = self._helper("average_gradients_over", AVERAGE_GRADIENTS_OVER)
        mean = self._helper("mean_over", MEAN_OVER)
        self.changed(f"gradients of `{split.model}` and `{split.loss}` averaged over {split.submesh} after `backward()`")
        self.ctx.insert_after(
            stmt(f"{average}({split.model}, {split.submesh})\n"),
            stmt(f"{split.loss} = {mean}({split.loss}, {split.submesh})\n"),
        )
        return line

    def _helper(self, name: str, source: str) -> str:
        name = self.ctx.unused_name(name)
        spelled = {"name": name}
        if "{dist}" in source:
            spelled["dist"] = self.ctx.dist()
        if "{DTensor}" in source:
            spelled["DTensor"] = self.ctx.need_from("torch.distributed.tensor", "DTensor")
        return self.ctx.need_helper(name, source.format(**spelled))

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
        if name in FOREACH_OPTIMIZERS and self._layers:
            return without_foreach(self, updated_node)
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
        self._seed_alike()
        return cst.Call(func=expr(init), args=_comma_separated(args))

    def _seed_alike(self) -> None:
        """After the first mesh, every process draws rank 0's random numbers, as the one SPMD
        program did: the same initial weights, data order and dropout for what each process now
        computes whole. Not where the file seeds torch itself (alike on every process, then)."""
        if self._seeded_alike or self.ctx.facts.uses(*HOST_SEEDERS):
            return
        self._seeded_alike = True
        name = self.ctx.unused_name("seed_alike")
        helper = Template(SEED_ALIKE).substitute(name=name, torch=self.ctx.torch(), dist=self.ctx.dist())
        self.ctx.insert_after(stmt(f"{self.ctx.need_helper(name, helper)}()\n"))
        self.changed("every process seeded with rank 0's seed after the mesh, as one SPMD program drew its random numbers")


SEED_ALIKE = '''\
def $name():
    """Rank 0's seed on every process: each process now runs the whole SPMD program, and what it
    computes whole (weights it does not shard, the data order, dropout) must come out the same."""
    seed = [$torch.seed()]
    $dist.broadcast_object_list(seed, src=0)
    $torch.manual_seed(seed[0])
'''


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

