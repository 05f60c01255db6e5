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
    compiled_artifacts_todo,
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
# Options of the export that loaded more into the pipeline before it was traced (0.4.5
# `exporters/neuron/utils.py`: `_load_lora_weights_to_pipeline`, `load_controlnets`).
LORA = ("lora_model_ids", "lora_weight_names", "lora_adapter_names", "lora_scales")
CONTROLNET = ("controlnet_ids",)
# (`NeuronArgumentParser` reads the IP-Adapter options under these singular names.)
NO_REWRITE = {
    "ip_adapter_id": "load it with `pipe.load_ip_adapter(id, subfolder=..., weight_name=...)` and `pipe.set_ip_adapter_scale(...)`",
    "ip_adapter_subfolder": "pass it to `pipe.load_ip_adapter(..., subfolder=...)`",
    "ip_adapter_weight_name": "pass it to `pipe.load_ip_adapter(..., weight_name=...)`",
    "ip_adapter_scale": "pass it to `pipe.set_ip_adapter_scale(...)`",
    "unet_id": "it replaced the pipeline's UNet: pass `unet=UNet2DConditionModel.from_pretrained(unet_id)`",
}
KNOWN = {*CALL_SHAPES, *DROPPED, "torch_dtype", *LORA, *CONTROLNET, *NO_REWRITE}
# What diffusers' `DiffusionPipeline.from_pretrained` takes besides the checkpoint: its loading
# options, and the components of a pipeline, which replace the ones it would load.
DIFFUSERS_LOADING = frozenset(
    {
        "torch_dtype",
        "cache_dir",
        "force_download",
        "proxies",
        "local_files_only",
        "token",
        "revision",
        "variant",
        "use_safetensors",
        "subfolder",
        "trust_remote_code",
        "custom_pipeline",
        "custom_revision",
        "low_cpu_mem_usage",
        "device_map",
        "max_memory",
        "config",
        "scheduler",
        "vae",
        "text_encoder",
        "text_encoder_2",
        "tokenizer",
        "tokenizer_2",
        "unet",
        "transformer",
        "controlnet",
        "feature_extractor",
        "image_encoder",
        "safety_checker",
        "requires_safety_checker",
    }
)
# Pipelines whose `__call__` renders at a `height`/`width` it is given (image-to-image ones take
# the image's size), and those that take a `max_sequence_length` for the prompt.
SIZED = frozenset(
    new
    for new, _ in PIPELINES.values()
    if "Img2Img" not in new and "InstructPix2Pix" not in new
)
SEQUENCE_LENGTH = frozenset(new for new in SIZED if new.startswith("PixArt"))


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
        f"{OPTIMUM}.NeuronDiffusionPipelineBase": "use the diffusers pipeline on `neuron` and compile its denoiser with `torch.compile(dynamic=False)`",
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
        compiled = compiled_artifacts_todo(options, "diffusers")
        if compiled is not None:
            self.todo(compiled)
        for key, value in options.items():
            if key == "tensor_parallel_size" and literal(value) != 1:
                self.todo(
                    f"`tensor_parallel_size={code_of(value)}`: diffusers loads the denoiser whole on one device: check it fits, or shard `pipe.{DENOISER[pipeline]}`"
                )
            elif key in NO_REWRITE:
                self.todo(f"`{key}={code_of(value)}` was an option of optimum-neuron's export: {NO_REWRITE[key]}")
            elif key in DROPPED:
                self.changed(f"dropped `{key}={code_of(value)}` (an option of the Neuron export)")
        sequential_loading(self.ctx)
        device = '"neuron"' if self.ctx.target.neuron else self.ctx.device_expr()
        kept += self._cast(options, keyword(call, "torch_dtype") is not None)
        kept += self._controlnet(options, pipeline)
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
            self._lora(options, self._target)
            denoiser = DENOISER[pipeline]
            backend = 'backend="neuron", ' if self.ctx.target.neuron else ""
            self.ctx.insert_after(
                stmt(
                    "# Compiled for the exported image size, as the export was.\n"
                    f"{self._target}.{denoiser}.compile({backend}dynamic=False)\n"
                )
            )
            self._pipes[self._target] = self._call_overrides(options, pipeline)
        else:
            if any(k in options for k in LORA):
                self.todo(
                    "the export fused its LoRA adapters: `pipe.load_lora_weights(...)` and `pipe.fuse_lora(lora_scale=...)` once loaded"
                )
            self.todo(
                f"compile the pipeline's denoiser once loaded: `pipe.{DENOISER[pipeline]}.compile(dynamic=False)`"
            )
        return moved

    def _cast(self, options: dict[str, cst.BaseExpression], dtype_given: bool) -> list[cst.Arg]:
        """The export cast inside the compiled graphs: by default (`auto_cast="matmul"`,
        `auto_cast_type="bf16"`) the matmuls only, over float32 weights; `"all"` every
        operation, as a pipeline loaded in that dtype does."""
        mode = literal(options["auto_cast"]) if "auto_cast" in options else "matmul"
        cast = literal(options["auto_cast_type"]) if "auto_cast_type" in options else "bf16"
        if mode in (None, "none") or dtype_given:
            return []
        dtype = CAST_DTYPES.get(cast) if isinstance(cast, str) else None
        if mode is ... or dtype is None:
            self.todo(
                f"the export autocast (`auto_cast={code_of(options['auto_cast']) if 'auto_cast' in options else repr(mode)}`): load with `torch_dtype=`, or wrap calls in `torch.autocast`"
            )
            return []
        if mode == "all":
            self.changed(f"`auto_cast=\"all\"`, `auto_cast_type={cast!r}` -> `torch_dtype=torch.{dtype}`")
            return [make_arg("torch_dtype", f"{self.ctx.torch()}.{dtype}")]
        self.ctx.note(
            self.code,
            f"the export computed the matmuls in {cast} over float32 weights (`auto_cast=\"matmul\"`, optimum-neuron's default); natively the pipeline computes in float32: wrap its calls in `torch.autocast(device_type=..., dtype=torch.{dtype})` for the old precision and speed",
        )
        return []

    def _controlnet(self, options: dict[str, cst.BaseExpression], pipeline: str) -> list[cst.Arg]:
        """`controlnet_ids=` loaded each ControlNet with `ControlNetModel.from_pretrained`."""
        if "controlnet_ids" not in options:
            return []
        value = options["controlnet_ids"]
        nodes = [e.value for e in value.elements] if isinstance(value, cst.List | cst.Tuple) else [value]
        if "ControlNet" not in pipeline or not nodes or not all(_is_string(n) for n in nodes):
            self.todo(
                "`controlnet_ids=`: pass `controlnet=ControlNetModel.from_pretrained(id)` (a list for several) to `from_pretrained`"
            )
            return []
        model = self.ctx.need_from("diffusers", "ControlNetModel")
        loads = [f"{model}.from_pretrained({code_of(i)})" for i in nodes]
        self.changed("`controlnet_ids=` -> `controlnet=ControlNetModel.from_pretrained(...)`")
        return [make_arg("controlnet", loads[0] if len(loads) == 1 else f"[{', '.join(loads)}]")]

    def _lora(self, options: dict[str, cst.BaseExpression], pipe: str) -> None:
        """The export loaded the LoRA adapters and fused them into the weights before tracing
        (`load_lora_weights` + `fuse_lora`); the same calls on the loaded pipeline."""
        if not any(k in options for k in LORA):
            return

        def one(key: str) -> cst.BaseExpression | None:
            """The option's single value (`"id"` or `["id"]`), or None."""
            node = options.get(key)
            if isinstance(node, cst.List | cst.Tuple) and len(node.elements) == 1:
                node = node.elements[0].value
            return node

        model_id, weight_name, scale = (one(k) for k in ("lora_model_ids", "lora_weight_names", "lora_scales"))
        if (
            model_id is None
            or weight_name is None
            or not _is_string(model_id)
            or not _is_string(weight_name)
            or not (scale is None or isinstance(literal(scale), int | float))
        ):
            given = ", ".join(f"`{k}={code_of(options[k])}`" for k in LORA if k in options)
            self.todo(
                f"{given}: the export fused these LoRA adapters: `{pipe}.load_lora_weights(...)` for each, then `{pipe}.fuse_lora()`"
            )
            return
        self.ctx.insert_after(
            stmt(
                "# The LoRA adapter the export fused into the weights.\n"
                f"{pipe}.load_lora_weights({code_of(model_id)}, weight_name={code_of(weight_name)})\n"
            ),
            stmt(f"{pipe}.fuse_lora(lora_scale={'1.0' if scale is None else code_of(scale)})\n"),
        )
        self.changed("`lora_*=` export options -> `load_lora_weights` + `fuse_lora`")

    def _call_overrides(
        self, options: dict[str, cst.BaseExpression], pipeline: str
    ) -> dict[str, cst.BaseExpression]:
        """What the Neuron pipeline's `__call__` forced on every call: the exported image size
        (any `height`/`width` given was dropped) and, for PixArt, the exported prompt length."""
        shapes = {
            k: v
            for k, v in options.items()
            if k in CALL_SHAPES and (pipeline in SIZED or k == "num_images_per_prompt")
        }
        if pipeline in SEQUENCE_LENGTH and "sequence_length" in options:
            shapes["max_sequence_length"] = options["sequence_length"]
        if pipeline not in SIZED and "height" in options and "width" in options:
            # It also resized the input image to the exported size; image-to-image pipelines
            # otherwise keep the image's own.
            shapes["image"] = cst.parse_expression(
                f"{self._target}.image_processor.preprocess(image, height={code_of(options['height'])}, width={code_of(options['width'])})"
            )
        return shapes

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
                        "export options in a `**` dict this tool cannot see: pass `height`/`width` per call, drop compiler options, load LoRA/ControlNets"
                    )
                elif arg.keyword is not None and arg.keyword.value not in DIFFUSERS_LOADING:
                    self.todo(
                        f"`{arg.keyword.value}=` is no keyword of diffusers' `from_pretrained`, which ignores it: redo its effect with diffusers"
                    )
                kept.append(arg)
        return kept, options

    def _fixed_sizes(self, call: cst.Call, shapes: dict[str, cst.BaseExpression]) -> cst.Call:
        """The exported sizes on a call of the pipeline: added where absent, and in place of a
        `height`/`width`/`max_sequence_length` given, which optimum-neuron's pipeline overrode."""
        args = []
        replaced = []
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for arg in call.args:
            key = arg.keyword.value if arg.keyword is not None else None
            if len(positional) > 1 and arg is positional[1]:
                key = "image"  # `pipe(prompt, image, ...)` of the image-to-image pipelines
            if key == "image" and "image" in shapes:
                resize = shapes["image"]
                assert isinstance(resize, cst.Call)
                arg = arg.with_changes(
                    value=resize.with_changes(args=[cst.Arg(arg.value), *resize.args[1:]])
                )
                self.changed("the input image resized to the exported size, as optimum-neuron's pipeline did")
            elif key in shapes and key != "num_images_per_prompt" and code_of(arg.value) != code_of(shapes[key]):
                replaced.append(f"`{key}={code_of(arg.value)}`")
                arg = arg.with_changes(value=shapes[key])
            args.append(arg)
        missing = [
            make_arg(k, v) for k, v in shapes.items() if k != "image" and keyword(call, k) is None
        ]
        if replaced:
            self.changed(
                f"{', '.join(replaced)} -> the exported value (optimum-neuron's pipeline replaced it with that)"
            )
        if args == list(call.args) and not missing:
            return call
        if missing:
            self.changed("pipeline call given the exported image size")
        return with_args(call, [*args, *missing])


def _is_string(node: cst.BaseExpression) -> bool:
    """A string for sure: a literal, an f-string, or a sum with a string in it (`root + "/lora"`)."""
    if isinstance(node, cst.SimpleString | cst.FormattedString | cst.ConcatenatedString):
        return True
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Add)
        and (_is_string(node.left) or _is_string(node.right))
    )
