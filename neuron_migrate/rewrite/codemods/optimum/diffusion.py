"""NM022: optimum-neuron diffusion pipelines become diffusers pipelines with a compiled denoiser."""

from __future__ import annotations

import ast
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.codemods.base import code_of, stmt
from neuron_migrate.rewrite.codemods.optimum.fields import CAST_DTYPES
from neuron_migrate.rewrite.codemods.optimum.support import (
    OPTIMUM,
    RenamingCodemod,
    dict_entries,
    dict_literals,
    keyword,
    literal,
    make_arg,
    name_loads,
    one_per_line,
    sequential_loading,
    with_args,
)

# optimum-neuron 0.4.5 pipeline -> (diffusers pipeline, the denoiser to compile)
PIPELINES = {
    "NeuronStableDiffusionPipeline": ("StableDiffusionPipeline", "unet"),
    "NeuronStableDiffusionImg2ImgPipeline": ("StableDiffusionImg2ImgPipeline", "unet"),
    "NeuronStableDiffusionInpaintPipeline": ("StableDiffusionInpaintPipeline", "unet"),
    "NeuronStableDiffusionInstructPix2PixPipeline": (
        "StableDiffusionInstructPix2PixPipeline",
        "unet",
    ),
    "NeuronLatentConsistencyModelPipeline": ("LatentConsistencyModelPipeline", "unet"),
    "NeuronStableDiffusionXLPipeline": ("StableDiffusionXLPipeline", "unet"),
    "NeuronStableDiffusionXLImg2ImgPipeline": ("StableDiffusionXLImg2ImgPipeline", "unet"),
    "NeuronStableDiffusionXLInpaintPipeline": ("StableDiffusionXLInpaintPipeline", "unet"),
    "NeuronStableDiffusionControlNetPipeline": ("StableDiffusionControlNetPipeline", "unet"),
    "NeuronStableDiffusionXLControlNetPipeline": ("StableDiffusionXLControlNetPipeline", "unet"),
    "NeuronPixArtAlphaPipeline": ("PixArtAlphaPipeline", "transformer"),
    "NeuronPixArtSigmaPipeline": ("PixArtSigmaPipeline", "transformer"),
    "NeuronFluxPipeline": ("FluxPipeline", "transformer"),
    "NeuronFluxKontextPipeline": ("FluxKontextPipeline", "transformer"),
    "NeuronFluxInpaintPipeline": ("FluxInpaintPipeline", "transformer"),
}
OLD = {
    **{f"{OPTIMUM}.{old}": new for old, (new, _) in PIPELINES.items()},
    **{f"{OPTIMUM}.modeling_diffusion.{old}": new for old, (new, _) in PIPELINES.items()},
}
DENOISER = {new: denoiser for new, denoiser in PIPELINES.values()}
RENAMES = {old: ("diffusers", new) for old, new in OLD.items()}
# Export options of the diffusion pipelines: shapes that become call arguments, and the rest.
CALL_SHAPES = ("height", "width", "num_images_per_prompt")
DROPPED = (
    "export",
    "batch_size",
    "compiler_workdir",
    "disable_neuron_cache",
    "inline_weights_to_neff",
    "optlevel",
    "auto_cast",
    "auto_cast_type",
    "dynamic_batch_size",
    "instance_type",
    "data_parallel_mode",
    "tensor_parallel_size",
    "sequence_length",
)
KNOWN = {*CALL_SHAPES, *DROPPED, "torch_dtype"}


class OptimumDiffusion(RenamingCodemod):
    """Migrates optimum-neuron diffusion pipelines to diffusers on the device.

    ## What it does
    `NeuronStableDiffusionXLPipeline.from_pretrained(model_id, export=True, height=1024,
    width=1024, ...)` (options given directly or through `**input_shapes`) becomes
    `StableDiffusionXLPipeline.from_pretrained(model_id, torch_dtype=...).to(device)`, and the
    denoiser (`pipe.unet`, or `pipe.transformer` for PixArt and Flux) is compiled with
    `dynamic=False`. Calls of the pipeline get the exported `height`, `width` and
    `num_images_per_prompt`, so every call reuses the compiled graphs. All the Neuron
    diffusion pipelines of optimum-neuron 0.4.5 are covered. A `tensor_parallel_size` other
    than 1 gets a TODO: diffusers loads the denoiser whole on one device.

    ## Why
    The export compiled each component for fixed image sizes; natively diffusers runs on the
    `neuron` device and `torch.compile` compiles the denoiser, which is where the time goes, on
    the first call for each shape.

    ## Example
    ```python
    pipe = NeuronStableDiffusionXLPipeline.from_pretrained(model_id, export=True, height=1024, width=1024)
    image = pipe(prompt).images[0]
    ```

    ## Use instead
    ```python
    pipe = StableDiffusionXLPipeline.from_pretrained(model_id).to(device)
    # Compiled for the exported image size, as the export was.
    pipe.unet.compile(dynamic=False)
    image = pipe(prompt, height=1024, width=1024).images[0]
    ```

    ## Fix safety
    The pipeline loads from the original diffusers checkpoint: a directory of compiled Neuron
    artifacts gets a TODO. The text encoders and the VAE run eagerly; compile them the same way
    if they matter.
    """

    code = "NM022"
    name = "optimum-diffusion"
    summary = "optimum-neuron diffusion pipelines -> diffusers pipelines with a compiled denoiser and fixed sizes"
    triggers = tuple(OLD)
    RENAMES: ClassVar[dict[str, tuple[str, str]]] = RENAMES
    needs_old_stack_import = False
    manual: ClassVar[dict[str, str]] = {
        f"{OPTIMUM}.NeuronDiffusionPipelineBase": "use the diffusers pipeline class on the `neuron` device and compile its denoiser with `torch.compile(dynamic=False)`",
    }

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._target: str | None = None
        self._dicts: dict[str, tuple[str, ...]] = {}
        self._dict_values: dict[str, dict[str, cst.BaseExpression]] = {}
        self._pipes: dict[str, dict[str, cst.BaseExpression]] = {}  # pipeline var -> call shapes

    def visit_Module(self, node: cst.Module) -> None:
        try:
            tree = ast.parse(self.ctx.source)
        except SyntaxError:
            return
        splatted: dict[str, int] = {}
        for n in all_nodes(tree):
            if isinstance(n, ast.Call):
                dotted = ast_dotted_name(n.func) or ""
                owner = (
                    self.ctx.imports.resolve_dotted(dotted.rpartition(".")[0])
                    if "." in dotted
                    else None
                )
                if owner in OLD:
                    for k in n.keywords:
                        if k.arg is None and isinstance(k.value, ast.Name):
                            splatted[k.value.id] = splatted.get(k.value.id, 0) + 1
        loads = name_loads(self.ctx.source)
        for name, keys in dict_literals(self.ctx.source).items():
            if splatted.get(name) and splatted[name] == loads.get(name) and set(keys) <= KNOWN:
                self._dicts[name] = keys

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self._target = target.value if isinstance(target, cst.Name) else None

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        target, self._target = self._target, None
        if target in self._dicts:
            entries = dict_entries(updated_node.value)
            if entries is not None:
                self._dict_values[target] = entries
                self.changed(f"`{target}` (export options) folded into the pipeline")
                return self.ctx.remove(updated_node)
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(original_node.func)
        owner, _, method = (name or "").rpartition(".")
        if owner in OLD and method == "from_pretrained":
            return self._load(updated_node, OLD[owner])
        func = original_node.func
        if isinstance(func, cst.Name) and func.value in self._pipes:
            return self._fixed_sizes(updated_node, self._pipes[func.value])
        return updated_node

    def _load(self, call: cst.Call, pipeline: str) -> cst.BaseExpression:
        kept, options = self._export_options(call)
        if "export" not in options:
            self.todo(
                "this loads Neuron-compiled artifacts, which diffusers cannot read: point it at the original diffusers checkpoint"
            )
        for key, value in options.items():
            if key == "tensor_parallel_size" and literal(value) != 1:
                self.todo(
                    f"`tensor_parallel_size={code_of(value)}` sharded the denoiser over NeuronCores; diffusers loads it whole on one device: check that it fits, or shard `pipe.{DENOISER[pipeline]}` with `torch.distributed.tensor.parallel.parallelize_module` under `torchrun`"
                )
            elif key not in CALL_SHAPES:
                self.changed(f"dropped `{key}={code_of(value)}` (an option of the Neuron export)")
        sequential_loading(self.ctx)
        device = '"neuron"' if self.ctx.target.neuron else self.ctx.device_expr()
        cast = literal(options.get("auto_cast_type"))
        if cast in CAST_DTYPES and keyword(call, "torch_dtype") is None:
            kept.append(make_arg("torch_dtype", f"{self.ctx.torch()}.{CAST_DTYPES[cast]}"))
            self.ctx.note(
                self.code,
                f"`auto_cast_type={cast!r}` cast the compiled matmuls; natively the whole pipeline is loaded in `torch.{CAST_DTYPES[cast]}`",
            )
        loaded = with_args(call, kept)
        moved = cst.Call(
            func=cst.Attribute(value=loaded, attr=cst.Name("to")),
            args=[cst.Arg(cst.parse_expression(device))],
        )
        if len(code_of(moved)) > 88:
            moved = one_per_line(moved)
        self.changed(
            f"Neuron diffusion pipeline -> `diffusers.{pipeline}` with a compiled denoiser"
        )
        if self._target is not None:
            denoiser = DENOISER[pipeline]
            backend = 'backend="neuron", ' if self.ctx.target.neuron else ""
            self.ctx.insert_after(
                stmt(
                    "# Compiled for the exported image size, as the export was.\n"
                    f"{self._target}.{denoiser}.compile({backend}dynamic=False)\n"
                )
            )
            self._pipes[self._target] = {k: v for k, v in options.items() if k in CALL_SHAPES}
        else:
            self.todo(
                f"compile the pipeline's denoiser once loaded: `pipe.{DENOISER[pipeline]}.compile(dynamic=False)`"
            )
        return moved

    def _export_options(
        self, call: cst.Call
    ) -> tuple[list[cst.Arg], dict[str, cst.BaseExpression]]:
        """The call's plain arguments, and the export options (dict splats folded in)."""
        kept: list[cst.Arg] = []
        options: dict[str, cst.BaseExpression] = {}
        for arg in call.args:
            if (
                arg.star == "**"
                and isinstance(arg.value, cst.Name)
                and arg.value.value in self._dict_values
            ):
                options.update(self._dict_values[arg.value.value])
            elif (
                arg.keyword is not None
                and arg.keyword.value in KNOWN
                and arg.keyword.value != "torch_dtype"
            ):
                options[arg.keyword.value] = arg.value
            else:
                if arg.star:
                    self.todo(
                        "export options given through `**` unpacking of a dict this tool cannot see: pass `height`/`width` to each pipeline call and drop the compiler options"
                    )
                kept.append(arg)
        return kept, options

    def _fixed_sizes(self, call: cst.Call, shapes: dict[str, cst.BaseExpression]) -> cst.Call:
        missing = [make_arg(k, v) for k, v in shapes.items() if keyword(call, k) is None]
        if not missing:
            return call
        self.changed("pipeline call given the exported image size")
        return with_args(call, [*call.args, *missing])
