"""NM020: optimum-neuron training scripts become plain transformers / TRL / peft scripts."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.codemods.base import arg_value, code_of, stmt
from neuron_migrate.rewrite.codemods.optimum.support import (
    OPTIMUM,
    RenamingCodemod,
    keyword,
    literal,
    make_arg,
    mark_leftovers,
    sequential_loading,
    with_args,
)


def _paths(name: str, *modules: str) -> tuple[str, ...]:
    return tuple(f"{module}.{name}" for module in modules)


TRAINING_ARGS = _paths(
    "NeuronTrainingArguments", OPTIMUM, f"{OPTIMUM}.trainers", f"{OPTIMUM}.trainers.training_args"
)
SFT_CONFIG = _paths(
    "NeuronSFTConfig", OPTIMUM, f"{OPTIMUM}.trainers", f"{OPTIMUM}.trainers.sft_config"
)
TRAINER = _paths(
    "NeuronTrainer", OPTIMUM, f"{OPTIMUM}.trainers", f"{OPTIMUM}.trainers.transformers"
)
SFT_TRAINER = _paths(
    "NeuronSFTTrainer", OPTIMUM, f"{OPTIMUM}.trainers", f"{OPTIMUM}.trainers.sft_trainer"
)
PARSER = _paths("NeuronHfArgumentParser", OPTIMUM, f"{OPTIMUM}.hf_argparser")
HF_PARSER = ("transformers.HfArgumentParser", "transformers.hf_argparser.HfArgumentParser")
TRAINING = f"{OPTIMUM}.models.training"
TRAINING_MODELS = {
    **dict.fromkeys(
        _paths("NeuronModelForCausalLM", TRAINING, f"{TRAINING}.modeling_auto"),
        "AutoModelForCausalLM",
    ),
    **dict.fromkeys(_paths("NeuronModel", TRAINING, f"{TRAINING}.modeling_auto"), "AutoModel"),
    **{
        f"{TRAINING}.{name}": name
        for name in ("LlamaForCausalLM", "GraniteForCausalLM", "Qwen3ForCausalLM")
    },
}
TRN_CONFIG_CLASS = _paths("TrainingNeuronConfig", TRAINING, f"{TRAINING}.config")
LAZY_LOAD = _paths(
    "lazy_load_for_parallelism", f"{OPTIMUM}.distributed", f"{OPTIMUM}.distributed.utils"
)
MAIN_WORKER = _paths("is_main_worker", f"{OPTIMUM}.utils", f"{OPTIMUM}.utils.misc")
PEFT = f"{OPTIMUM}.peft"

RENAMES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(TRAINING_ARGS, ("transformers", "TrainingArguments")),
    **dict.fromkeys(TRAINER, ("transformers", "Trainer")),
    **dict.fromkeys(SFT_CONFIG, ("trl", "SFTConfig")),
    **dict.fromkeys(SFT_TRAINER, ("trl", "SFTTrainer")),
    **dict.fromkeys(PARSER, ("transformers", "HfArgumentParser")),
    **{old: ("transformers", new) for old, new in TRAINING_MODELS.items()},
    **dict.fromkeys(TRN_CONFIG_CLASS, ("transformers.distributed", "DistributedConfig")),
    **dict.fromkeys(
        _paths("get_peft_model", PEFT, f"{PEFT}.mapping_func"), ("peft", "get_peft_model")
    ),
    **dict.fromkeys(_paths("NeuronPeftModel", PEFT, f"{PEFT}.peft_model"), ("peft", "PeftModel")),
    **dict.fromkeys(
        _paths("NeuronPeftModelForCausalLM", PEFT, f"{PEFT}.peft_model"),
        ("peft", "PeftModelForCausalLM"),
    ),
}

# The model-parallel fields of `NeuronTrainingArguments` and where they go in `DistributedConfig`.
PARALLEL_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "disable_sequence_parallel")


@dataclass(frozen=True)
class Field:
    """What happens to a `NeuronTrainingArguments` field that `TrainingArguments` lacks."""

    kind: str  # "drop": no native counterpart, nothing to do; "todo": a person decides
    why: str
    neutral: object = ...  # a value with which dropping the field changes nothing


# Every `NeuronTrainingArguments` field of optimum-neuron 0.4.5 that transformers 5.23's
# `TrainingArguments` does not have (the parallel ones are in PARALLEL_FIELDS; `warmup_ratio`
# and `logging_dir` are rewritten in place).
FIELDS: dict[str, Field] = {
    "overwrite_output_dir": Field(
        "drop", "transformers 5 removed it; the Trainer writes into `output_dir` either way"
    ),
    "dataloader_prefetch_size": Field(
        "drop",
        "it sized the XLA device-loader prefetch; the native Trainer moves each batch when it is used",
    ),
    "skip_cache_push": Field(
        "drop",
        "it skipped pushing compiled artifacts to the optimum-neuron Hub cache, which the native backend does not use",
    ),
    "use_autocast": Field("drop", "natively `bf16=True` already trains under `torch.autocast`"),
    "num_local_ranks_per_step": Field(
        "drop",
        "it throttled concurrent checkpoint loading per host; transformers loads each rank's shard itself",
    ),
    "recompute_causal_mask": Field("drop", "transformers builds the attention mask itself"),
    "enable_throughput_metrics": Field(
        "drop",
        "optimum-neuron's metrics collector is gone; the Trainer logs `train_samples_per_second`",
    ),
    "enable_mfu_metrics": Field(
        "todo",
        "optimum-neuron's MFU metric has no Trainer counterpart; compute it from `train_samples_per_second` in a callback if you need it",
        False,
    ),
    "enable_efficiency_metrics": Field(
        "todo",
        "optimum-neuron's efficiency metrics have no Trainer counterpart; add a `TrainerCallback` if you need them",
        False,
    ),
    "metrics_window_size": Field(
        "drop",
        "it sized optimum-neuron's metrics window; the Trainer averages over `logging_steps`",
    ),
    "zero_1": Field(
        "todo",
        "ZeRO-1 optimizer-state sharding has no TrainingArguments switch: shard with FSDP2 (`DistributedConfig(fsdp_size=...)` in `from_pretrained`) or expect the full optimizer state on every rank",
        False,
    ),
    "stochastic_rounding_enabled": Field(
        "todo",
        "stochastic rounding was a Neuron runtime feature for bf16 weights; load the model in float32 and train with `bf16=True` (autocast) to keep fp32 weights instead",
        False,
    ),
    "optimizer_use_master_weights": Field(
        "todo",
        "fp32 master weights came with the ZeRO-1 optimizer; natively the optimizer updates the parameters in their own dtype, so load the model in float32 and train with `bf16=True` (autocast)",
        False,
    ),
    "optimizer_use_fp32_grad_acc": Field(
        "todo",
        "fp32 gradient accumulation came with the ZeRO-1 optimizer; natively gradients have the parameters' dtype, so keep the parameters in float32 and train with `bf16=True` (autocast)",
        False,
    ),
    "optimizer_save_master_weights_in_ckpt": Field(
        "todo",
        "there are no separate master weights to save natively; checkpoints hold the parameters as trained",
        False,
    ),
    "pipeline_parallel_num_microbatches": Field(
        "todo",
        "transformers' pipeline parallelism (`DistributedConfig(pp_size=...)`) runs without micro-batches; for a micro-batched schedule use `torch.distributed.pipelining` (`ScheduleGPipe`, `Schedule1F1B`)",
        -1,
    ),
    "kv_size_multiplier": Field(
        "todo",
        "KV heads are no longer replicated for tensor parallelism: `tp_size` must divide the model's `num_key_value_heads`",
        None,
    ),
    "use_xser": Field(
        "todo",
        "checkpoints are now saved with safetensors (`save_pretrained`), not torch-xla serialization; convert old ones with `optimum-cli neuron consolidate` before loading them with `from_pretrained`",
        False,
    ),
    "async_save": Field(
        "todo",
        "the Trainer saves synchronously; for asynchronous saves write a DCP checkpoint with `torch.distributed.checkpoint.async_save`",
        False,
    ),
    "fuse_qkv": Field(
        "todo",
        "transformers keeps the q/k/v projections separate; fused QKV was an optimum-neuron kernel optimisation with no switch here",
        False,
    ),
}

SFT_FIELDS: dict[str, Field] = {
    "padding_free": Field(
        "drop", "NeuronSFTConfig forced `padding_free=False`, which is TRL's default"
    ),
}

PARSE_METHODS = ("parse_args_into_dataclasses", "parse_json_file", "parse_yaml_file", "parse_dict")

PARALLEL_ARGUMENTS = '''\
@{dataclass}
class ModelParallelArguments:
    """The model-parallel flags of optimum-neuron's `NeuronTrainingArguments`, under the same names."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    disable_sequence_parallel: bool = False

    def to_distributed_config(self):
        return {DistributedConfig}(
            tp_size=self.tensor_parallel_size,
            pp_size=self.pipeline_parallel_size,
            enable_sequence_parallel=not self.disable_sequence_parallel,
        )
'''


@dataclass
class _Parsed:
    """A training-arguments object that comes out of an argument parser."""

    parser_index: int  # position of the Neuron class in the parser's dataclass tuple
    scope: str | None = None  # the function the parser runs in, None at module level
    parallel_var: str | None = None  # the new unpacked name


class OptimumTraining(RenamingCodemod):
    """Migrates optimum-neuron training code to transformers, TRL and peft.

    ## What it does
    `NeuronTrainer`, `NeuronTrainingArguments`, `NeuronSFTTrainer`, `NeuronSFTConfig` and
    `NeuronHfArgumentParser` become `Trainer`, `TrainingArguments`, `trl.SFTTrainer`,
    `trl.SFTConfig` and `HfArgumentParser`. The training `NeuronModelForCausalLM` (imported from
    `optimum.neuron.models.training`) becomes `AutoModelForCausalLM`, and its `trn_config`
    argument becomes `distributed_config=DistributedConfig(tp_size=..., pp_size=...,
    enable_sequence_parallel=...)` built from `tensor_parallel_size`, `pipeline_parallel_size`
    and `disable_sequence_parallel`. When those flags come from the command line, a small
    `ModelParallelArguments` dataclass joins the parser so the same flags keep working.
    Every other Neuron-only field of `NeuronTrainingArguments` is removed with its reason;
    those whose loss changes the run (ZeRO-1, master weights, xser checkpoints, ...) get a TODO.
    `optimum.neuron.peft` becomes `peft`, `lazy_load_for_parallelism` blocks are unwrapped.

    ## Why
    transformers 5.23 trains on the `neuron` device itself (`TrainingArguments` picks
    `neuron:0`, `torch_compile` picks the `neuron` backend with `dynamic=False`) and shards
    models with `DistributedConfig`; TRL pads batches to a multiple of 128 on Neuron.

    ## Example
    ```python
    from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer
    from optimum.neuron.models.training import NeuronModelForCausalLM

    args = NeuronSFTConfig(output_dir="out", tensor_parallel_size=2, zero_1=True)
    model = NeuronModelForCausalLM.from_pretrained(model_id, args.trn_config, torch_dtype=torch.bfloat16)
    trainer = NeuronSFTTrainer(model=model, args=args, train_dataset=dataset)
    ```

    ## Use instead
    ```python
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig
    from trl import SFTConfig, SFTTrainer

    # TODO(neuron-migrate NM020): `zero_1=True`: ZeRO-1 optimizer-state sharding has no ...
    args = SFTConfig(output_dir="out")
    model = AutoModelForCausalLM.from_pretrained(model_id, distributed_config=DistributedConfig(tp_size=2), dtype=torch.bfloat16)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset)
    ```
    `--target neuron` also turns on `torch_compile=True` (the old stack compiled every step)
    and sets `HF_DEACTIVATE_ASYNC_LOAD=1`, which makes transformers load weights sequentially.

    ## Fix safety
    The training loop is the Trainer's now: optimum-neuron's ZeRO-1 optimizer, fp32 master
    weights and stochastic rounding are gone unless you rebuild them (the TODOs say how), and
    tensor parallelism needs `torchrun`. Checkpoints are standard transformers checkpoints.
    """

    code = "NM020"
    name = "optimum-training"
    summary = "optimum-neuron trainers, training arguments and training models -> transformers / TRL / peft"
    triggers = (OPTIMUM,)
    markers = ("optimum.neuron", "from optimum import neuron")
    RENAMES: ClassVar[dict[str, tuple[str, str]]] = RENAMES
    # optimum.neuron is not among the old-stack PACKAGES (its aliases may name the new classes); the
    # triggers already require an optimum.neuron import.
    needs_old_stack_import = False
    manual: ClassVar[dict[str, str]] = {
        f"{OPTIMUM}.NeuronAccelerator": "use `accelerate.Accelerator`: it picks the `neuron` device and process group itself; NeuronAccelerator's XLA-specific options have no counterpart",
        f"{OPTIMUM}.accelerate": "use `accelerate` (`Accelerator`, `PartialState`), which supports the `neuron` device natively",
        f"{OPTIMUM}.NeuronAcceleratorState": "use `accelerate.state.AcceleratorState`",
        f"{OPTIMUM}.NeuronPartialState": "use `accelerate.PartialState`",
        f"{OPTIMUM}.utils.is_precompilation": "there is no precompilation pass natively (`neuron_parallel_compile` is gone): treat this as False",
        f"{OPTIMUM}.utils.is_neuronx_available": 'test `torch.accelerator.current_accelerator()` (its `.type` is `"neuron"` on Trainium) instead',
        f"{OPTIMUM}.utils.is_torch_neuronx_available": 'test `torch.accelerator.current_accelerator()` (its `.type` is `"neuron"` on Trainium) instead',
        f"{OPTIMUM}.models.training.consolidate_model_parallel_checkpoints_to_unified_checkpoint": "native checkpoints are already unified (`save_pretrained`); run `optimum-cli neuron consolidate` once on old sharded checkpoints",
        f"{OPTIMUM}.models.training.NeuronModelMixin": "subclass `transformers.PreTrainedModel` and shard with `DistributedConfig` / a `tp_plan`",
        f"{OPTIMUM}.models.training.CustomModule": "Neuron-specific weight transformations; transformers loads the original layout",
        f"{OPTIMUM}.distributed": "optimum-neuron's parallelization helpers: shard with `DistributedConfig(tp_size=...)` in `from_pretrained`",
        f"{OPTIMUM}.trainers": "use the transformers `Trainer` / TRL counterpart",
        OPTIMUM: "`{name}` is optimum-neuron API with no automatic migration; use the transformers / TRL / diffusers counterpart on the `neuron` device",
    }

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._constructed: dict[
            str, dict[str, cst.BaseExpression]
        ] = {}  # args var -> parallel kwargs
        self._parsed: dict[str, _Parsed] = {}  # args var -> where it comes from
        self._parsers: dict[str, int] = {}  # parser var -> index of the Neuron class
        self._needs_parallel = False
        self._uses_trn_config = False
        self._functions: list[str] = []
        self._string_model_args: set[str] = (
            set()
        )  # SFT config vars handed to a trainer with a model id

    # -- whole-file facts -----------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        try:
            tree = ast.parse(self.ctx.source)
        except SyntaxError:
            return
        table = self.ctx.imports
        args_classes = set(TRAINING_ARGS) | set(SFT_CONFIG)

        def qualified(expr: ast.AST) -> str | None:
            dotted = ast_dotted_name(expr)
            return table.resolve_dotted(dotted) if dotted else None

        parsed_names: set[str] = set()
        scopes: dict[int, str | None] = {}
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(function):
                    scopes.setdefault(id(inner), None)
                    if inner is not function and isinstance(inner, ast.Assign):
                        scopes[id(inner)] = function.name
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr == "trn_config":
                self._uses_trn_config = True
            if not isinstance(n, ast.Assign) or not isinstance(n.value, ast.Call):
                continue
            call = n.value
            name = qualified(call.func)
            if (
                name in (*PARSER, *HF_PARSER)
                and call.args
                and isinstance(call.args[0], ast.Tuple | ast.List)
            ):
                index = next(
                    (i for i, e in enumerate(call.args[0].elts) if qualified(e) in args_classes),
                    None,
                )
                if index is not None and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    self._parsers[n.targets[0].id] = index
        for n in ast.walk(tree):
            if not (
                isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Call)
                and isinstance(n.value.func, ast.Attribute)
            ):
                continue
            func = n.value.func
            if (
                func.attr not in PARSE_METHODS
                or len(n.targets) != 1
                or not isinstance(n.targets[0], ast.Tuple)
            ):
                continue
            index = None
            if isinstance(func.value, ast.Name) and func.value.id in self._parsers:
                index = self._parsers[func.value.id]
            elif isinstance(func.value, ast.Call) and qualified(func.value.func) in (
                *PARSER,
                *HF_PARSER,
            ):
                elts = (
                    func.value.args[0].elts
                    if func.value.args and isinstance(func.value.args[0], ast.Tuple | ast.List)
                    else []
                )
                index = next((i for i, e in enumerate(elts) if qualified(e) in args_classes), None)
            target = n.targets[0].elts
            element = target[index] if index is not None and index < len(target) else None
            if index is not None and isinstance(element, ast.Name):
                self._parsed[element.id] = _Parsed(index, scope=scopes.get(id(n)))
                parsed_names.add(element.id)
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id in parsed_names
                and n.attr in ("trn_config", *PARALLEL_FIELDS)
            ):
                self._needs_parallel = True
            if isinstance(n, ast.Call) and qualified(n.func) in SFT_TRAINER:
                model = next(
                    (k.value for k in n.keywords if k.arg == "model"), n.args[0] if n.args else None
                )
                args = next(
                    (k.value for k in n.keywords if k.arg == "args"),
                    n.args[1] if len(n.args) > 1 else None,
                )
                if _looks_like_model_id(model) and isinstance(args, ast.Name):
                    self._string_model_args.add(args.id)
        if self._needs_parallel:
            var = (
                "parallel_args"
                if "parallel_args" not in self.ctx.imports.bindings
                else "model_parallel_args"
            )
            for parsed in self._parsed.values():
                parsed.parallel_var = var


    # -- leftovers ------------------------------------------------------------------------------
    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        mark_leftovers(self, updated_node, (OPTIMUM,))
        return updated_node

    def _compound(self, node: Any) -> Any:
        mark_leftovers(self, node, (OPTIMUM,))
        return node

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> Any:
        return self._compound(updated_node)

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> Any:
        return self._compound(updated_node)

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> Any:
        return self._compound(updated_node)

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> Any:
        return self._compound(updated_node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._functions.append(node.name.value)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> Any:
        self._functions.pop()
        return self._compound(updated_node)

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> Any:
        kept = [item for item in updated_node.items if not self.called(item.item, *LAZY_LOAD)]
        if len(kept) == len(updated_node.items):
            return self._compound(updated_node)
        self.changed(
            "`with lazy_load_for_parallelism(...)` removed: transformers shards while loading"
        )
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return self._compound(updated_node.with_changes(items=kept))
        body = updated_node.body
        if not isinstance(body, cst.IndentedBlock):
            return self._compound(updated_node)
        statements = list(body.body)
        first: Any = statements[0]
        statements[0] = first.with_changes(
            leading_lines=[*updated_node.leading_lines, *first.leading_lines]
        )
        return cst.FlattenSentinel(statements)

    # -- names ------------------------------------------------------------------------------------
    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        base = original_node.value
        attr = original_node.attr.value
        if isinstance(base, cst.Name) and (attr == "trn_config" or attr in PARALLEL_FIELDS):
            replacement = self._parallel_read(base.value, attr)
            if replacement is not None:
                return replacement
        return super().leave_Attribute(original_node, updated_node)

    def _parallel_read(self, var: str, attr: str) -> cst.BaseExpression | None:
        parsed = self._parsed.get(var)
        if parsed is not None and parsed.parallel_var is not None:
            if parsed.scope is not None and parsed.scope not in self._functions:
                self.todo(
                    f"`{var}.{attr}`: the model-parallel flags are parsed into `{parsed.parallel_var}` (`ModelParallelArguments`) in `{parsed.scope}()`; pass it here and use `{parsed.parallel_var}.to_distributed_config()`"
                )
                return None
            if attr == "trn_config":
                self.changed(
                    f"`{var}.trn_config` -> `DistributedConfig` from the model-parallel flags"
                )
                return cst.parse_expression(f"{parsed.parallel_var}.to_distributed_config()")
            return cst.parse_expression(f"{parsed.parallel_var}.{attr}")
        kwargs = self._constructed.get(var)
        if kwargs is None:
            return None
        if attr == "trn_config":
            self.changed(f"`{var}.trn_config` -> `DistributedConfig(...)`")
            return self._distributed_config(kwargs)
        if attr in kwargs:
            return kwargs[attr]
        return cst.parse_expression(
            {
                "tensor_parallel_size": "1",
                "pipeline_parallel_size": "1",
                "disable_sequence_parallel": "False",
            }[attr]
        )

    def _distributed_config(self, kwargs: dict[str, cst.BaseExpression]) -> cst.BaseExpression:
        cls = self.ctx.need_from("transformers.distributed", "DistributedConfig")
        parts = []
        if "tensor_parallel_size" in kwargs:
            parts.append(f"tp_size={code_of(kwargs['tensor_parallel_size'])}")
        if "pipeline_parallel_size" in kwargs:
            parts.append(f"pp_size={code_of(kwargs['pipeline_parallel_size'])}")
        if "disable_sequence_parallel" in kwargs:
            value = kwargs["disable_sequence_parallel"]
            flag = literal(value)
            if flag is False:
                parts.append("enable_sequence_parallel=True")
            elif flag is ...:
                parts.append(f"enable_sequence_parallel=not {code_of(value)}")
        return cst.parse_expression(f"{cls}({', '.join(parts)})")

    # -- calls ----------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(original_node.func)
        if name in TRAINING_ARGS or name in SFT_CONFIG:
            return self._training_arguments(updated_node, sft=name in SFT_CONFIG)
        if name in (*PARSER, *HF_PARSER):
            return self._parser(updated_node)
        if name in TRAINER or name in SFT_TRAINER:
            return self._trainer(updated_node)
        if name in TRN_CONFIG_CLASS:
            return self._trn_config_class(updated_node)
        if name in MAIN_WORKER:
            return self._main_worker(updated_node)
        if name is not None and "." in name:
            owner, _, method = name.rpartition(".")
            if owner in TRAINING_MODELS and method == "from_pretrained":
                return self._from_pretrained(updated_node)
            if owner in TRAINING_MODELS and method == "from_config":
                self.todo(
                    "`from_config` does not apply a `DistributedConfig`: build the model with `from_pretrained(..., distributed_config=...)`, or shard it with `torch.distributed.tensor.parallel.parallelize_module`"
                )
                positional = [a for a in updated_node.args if a.keyword is None and not a.star]
                trn_config = (
                    positional[1] if len(positional) > 1 else keyword(updated_node, "trn_config")
                )
                return with_args(
                    updated_node, [a for a in updated_node.args if a is not trn_config]
                )
        return updated_node

    def _training_arguments(self, call: cst.Call, sft: bool) -> cst.Call:
        args: list[cst.Arg] = []
        parallel: dict[str, cst.BaseExpression] = {}
        present = {a.keyword.value for a in call.args if a.keyword is not None}
        for arg in call.args:
            key = arg.keyword.value if arg.keyword is not None else None
            if key in PARALLEL_FIELDS:
                parallel[key] = arg.value
                continue
            if key == "warmup_ratio":
                if "warmup_steps" in present:
                    self.changed("dropped `warmup_ratio`: `warmup_steps` overrides it, as before")
                else:
                    self.changed(
                        "`warmup_ratio=` -> `warmup_steps=` (a float below 1 is a ratio in transformers 5)"
                    )
                    args.append(arg.with_changes(keyword=cst.Name("warmup_steps")))
                continue
            if key == "logging_dir":
                os_ = self.ctx.os()
                comment = _arg_comment(arg)
                line = f'{os_}.environ["TENSORBOARD_LOGGING_DIR"] = {code_of(arg.value)}'
                self.ctx.insert_after(stmt(f"{line}  {comment}\n" if comment else f"{line}\n"))
                self.changed(
                    "`logging_dir=` -> `TENSORBOARD_LOGGING_DIR` (transformers 5 removed the field)"
                )
                continue
            if sft and key == "max_seq_length":
                if "max_length" not in present:
                    args.append(arg.with_changes(keyword=cst.Name("max_length")))
                    self.changed("`max_seq_length=` -> `max_length=`")
                continue
            if sft and key == "packing" and literal(arg.value) is not False:
                self.todo(
                    'TRL packs with the `bfd` strategy, which turns on padding-free batches (variable length, FlashAttention only); for the fixed shapes Neuron compiles best, pass `packing_strategy="wrapped"`'
                )
            table = {**FIELDS, **(SFT_FIELDS if sft else {})}
            if key in table:
                field = table[key]
                value = literal(arg.value)
                if field.kind == "todo" and value != field.neutral:
                    self.todo(f"`{key}={code_of(arg.value)}` was removed: {field.why}")
                elif field.kind == "todo":
                    self.changed(
                        f"dropped `{key}={code_of(arg.value)}`: natively there is nothing to turn off"
                    )
                else:
                    self.changed(f"dropped `{key}`: {field.why}")
                continue
            args.append(arg)
        if parallel:
            self._remember_parallel(parallel)
        if (
            self.ctx.target.neuron
            and "torch_compile" not in present
            and not any(a.star for a in call.args)
        ):
            args.append(make_arg("torch_compile", "True"))
            self.changed(
                "`torch_compile=True`: the old stack compiled every step; natively the Trainer compiles with the `neuron` backend"
            )
        elif not self.ctx.target.neuron:
            self.ctx.note(
                self.code,
                "training now runs eagerly unless `torch_compile=True` (or `--torch_compile`) is set; on Trainium transformers then compiles with the `neuron` backend and `dynamic=False`, as the old stack compiled every step",
            )
        if sft:
            self.ctx.note(
                self.code,
                'TRL pads SFT batches to a multiple of 128 on Neuron (`pad_to_multiple_of="auto"`) instead of to `max_length`: a few compiled shapes rather than one',
            )
        self.changed(
            "`NeuronSFTConfig` -> `trl.SFTConfig`"
            if sft
            else "`NeuronTrainingArguments` -> `TrainingArguments`"
        )
        return with_args(call, args)

    def _remember_parallel(self, parallel: dict[str, cst.BaseExpression]) -> None:
        frame_statement = self._assign_target()
        tp = literal(parallel.get("tensor_parallel_size"))
        if frame_statement is not None and (
            self._uses_trn_config or frame_statement in self._string_model_args
        ):
            simple = all(
                literal(v) is not ... or isinstance(v, cst.Name | cst.Attribute)
                for v in parallel.values()
            )
            if simple:
                self._constructed[frame_statement] = parallel
                if frame_statement in self._string_model_args and not self._uses_trn_config:
                    self._pending_model_init = self._distributed_config(parallel)
                return
        if tp not in (1, ...) or literal(parallel.get("pipeline_parallel_size")) not in (
            1,
            None,
            ...,
        ):
            self.todo(
                f"{', '.join(f'`{k}={code_of(v)}`' for k, v in parallel.items())} no longer shard the model from here: pass `distributed_config=DistributedConfig(tp_size=..., pp_size=...)` to the model's `from_pretrained` and launch with `torchrun`"
            )
        else:
            self.changed("dropped the default model-parallel sizes")

    _pending_model_init: cst.BaseExpression | None = None
    _current_target: str | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self._current_target = target.value if isinstance(target, cst.Name) else None

    def _assign_target(self) -> str | None:
        return self._current_target

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        self._current_target = None
        if self._pending_model_init is not None and isinstance(updated_node.value, cst.Call):
            call = updated_node.value
            if keyword(call, "model_init_kwargs") is None:
                value = cst.parse_expression(
                    f'{{"distributed_config": {code_of(self._pending_model_init)}}}'
                )
                call = with_args(call, [*call.args, make_arg("model_init_kwargs", value)])
                self.changed(
                    'model-parallel sizes -> `model_init_kwargs={"distributed_config": DistributedConfig(...)}` (TRL loads the model)'
                )
                updated_node = updated_node.with_changes(value=call)
            self._pending_model_init = None
        target = updated_node.targets[0].target if len(updated_node.targets) == 1 else None
        value = updated_node.value
        if (
            isinstance(target, cst.Tuple)
            and isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in PARSE_METHODS
            and self._needs_parallel
        ):
            names = [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
            parsed = next((self._parsed[n] for n in names if n in self._parsed), None)
            if (
                parsed is not None
                and parsed.parallel_var is not None
                and parsed.parallel_var not in names
            ):
                var = parsed.parallel_var
                elements = list(target.elements)
                last = elements[-1]
                elements[-1] = last.with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
                elements.append(cst.Element(value=cst.Name(var)))
                self.changed(
                    "the parser also returns `ModelParallelArguments` (the `--tensor_parallel_size` family of flags)"
                )
                return updated_node.with_changes(
                    targets=[
                        updated_node.targets[0].with_changes(
                            target=target.with_changes(elements=elements)
                        )
                    ]
                )
        return updated_node

    def _parser(self, call: cst.Call) -> cst.Call:
        if (
            not self._needs_parallel
            or not call.args
            or not isinstance(call.args[0].value, cst.Tuple | cst.List)
        ):
            if self._parsed:
                self._parser_notes(call)
            return call
        container = call.args[0].value
        decorator = (
            self.ctx.imports.local_for("dataclasses.dataclass")
            or f"{self.ctx.need_import('dataclasses')}.dataclass"
        )
        distributed = self.ctx.need_from("transformers.distributed", "DistributedConfig")
        self.ctx.need_helper(
            "ModelParallelArguments",
            PARALLEL_ARGUMENTS.format(dataclass=decorator, DistributedConfig=distributed),
        )
        elements = list(container.elements)
        if not isinstance(elements[-1].comma, cst.Comma) or len(elements) == 1:
            elements[-1] = elements[-1].with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            )
        elements.append(cst.Element(value=cst.Name("ModelParallelArguments")))
        if (
            len(elements) > 1
            and isinstance(elements[-2].comma, cst.Comma)
            and isinstance(elements[-2].comma.whitespace_after, cst.ParenthesizedWhitespace)
        ):
            elements[-1] = elements[-1].with_changes(comma=elements[-2].comma)
        self.changed(
            "`--tensor_parallel_size`, `--pipeline_parallel_size` and `--disable_sequence_parallel` parsed into `ModelParallelArguments`"
        )
        self._parser_notes(call)
        return call.with_changes(
            args=[
                call.args[0].with_changes(value=container.with_changes(elements=elements)),
                *call.args[1:],
            ]
        )

    def _parser_notes(self, call: cst.Call) -> None:
        self.ctx.note(
            self.code,
            "launch commands must drop the optimum-neuron-only flags other than the model-parallel sizes (`--zero_1`, `--use_xser`, `--fuse_qkv`, ...): `TrainingArguments` rejects them",
        )
        self.ctx.note(
            self.code,
            "add `--torch_compile` to the launch command: training otherwise runs eagerly, while the old stack compiled every step (on Trainium transformers compiles with the `neuron` backend and `dynamic=False`)",
        )
        if "SFTConfig" in code_of(call):
            self.ctx.note(
                self.code,
                'TRL pads SFT batches to a multiple of 128 on Neuron (`pad_to_multiple_of="auto"`) instead of to `max_length`: a few compiled shapes rather than one',
            )

    def _trainer(self, call: cst.Call) -> cst.Call:
        args = []
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "tokenizer":
                if keyword(call, "processing_class") is not None:
                    self.changed(
                        "dropped the deprecated `tokenizer=` (`processing_class=` is given)"
                    )
                    continue
                arg = arg.with_changes(keyword=cst.Name("processing_class"))
                self.changed("`tokenizer=` -> `processing_class=`")
            args.append(arg)
        return (
            with_args(call, args)
            if len(args) != len(call.args) or args != list(call.args)
            else call
        )

    def _trn_config_class(self, call: cst.Call) -> cst.Call:
        mapping = {
            "tensor_parallel_size": "tp_size",
            "pipeline_parallel_size": "pp_size",
            "sequence_parallel_enabled": "enable_sequence_parallel",
        }
        args = []
        for position, arg in enumerate(call.args):
            key = (
                arg.keyword.value
                if arg.keyword is not None
                else ("tensor_parallel_size" if position == 0 and not arg.star else None)
            )
            if key in mapping:
                args.append(
                    make_arg(mapping[key], arg.value)
                    if arg.keyword is None
                    else arg.with_changes(keyword=cst.Name(mapping[key]))
                )
            elif key == "gradient_checkpointing":
                self.todo(
                    f"`gradient_checkpointing={code_of(arg.value)}` moved: call `model.gradient_checkpointing_enable()` or set `TrainingArguments(activation_checkpointing=True)`"
                )
            elif key is not None:
                field = FIELDS.get(key)
                reason = field.why if field else "it has no `DistributedConfig` counterpart"
                self.todo(f"`{key}={code_of(arg.value)}` was removed: {reason}")
            else:
                args.append(arg)
        self.changed("`TrainingNeuronConfig` -> `DistributedConfig`")
        return with_args(call, args)

    def _main_worker(self, call: cst.Call) -> cst.BaseExpression:
        global_main = arg_value(call, 0, "global_main")
        local = global_main is not None and literal(global_main.value) is False
        self.changed("`is_main_worker()` -> rank test")
        if local:
            return cst.parse_expression(f"{self.ctx.local_rank_expr()} == 0")
        dist = self.ctx.dist()
        return cst.parse_expression(f"not {dist}.is_initialized() or {dist}.get_rank() == 0")

    def _from_pretrained(self, call: cst.Call) -> cst.Call:
        sequential_loading(self.ctx)
        args: list[cst.Arg] = []
        positional = 0
        for arg in call.args:
            if arg.keyword is None and not arg.star:
                positional += 1
                if positional == 2:
                    args.append(make_arg("distributed_config", arg.value))
                    continue
            key = arg.keyword.value if arg.keyword is not None else None
            if key == "trn_config":
                args.append(arg.with_changes(keyword=cst.Name("distributed_config")))
                continue
            if key == "torch_dtype":
                if keyword(call, "dtype") is None:
                    args.append(arg.with_changes(keyword=cst.Name("dtype")))
                continue
            if key == "attn_implementation" and literal(arg.value) == "flash_attention_2":
                self.changed(
                    'dropped `attn_implementation="flash_attention_2"` (optimum-neuron\'s NKI kernel; transformers uses SDPA on Neuron)'
                )
                continue
            args.append(arg)
        # `distributed_config` last among the leading arguments reads best after the model id.
        self.changed(
            "training `NeuronModelForCausalLM.from_pretrained(id, trn_config)` -> `from_pretrained(id, distributed_config=...)`"
        )
        if any(a.keyword is not None and a.keyword.value == "distributed_config" for a in args):
            self.ctx.note(
                self.code,
                "tensor/pipeline parallelism (`DistributedConfig`) needs one process per core: launch with `torchrun --nproc_per_node=<tp_size * pp_size * data-parallel size>`",
            )
        return with_args(call, args)


def _arg_comment(arg: cst.Arg) -> str | None:
    comma = arg.comma
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        comment = comma.whitespace_after.first_line.comment
        return comment.value if comment is not None else None
    return None


def _looks_like_model_id(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    dotted = ast_dotted_name(node) if node is not None else None
    if dotted is None:
        return False
    last = dotted.split(".")[-1].lower()
    return any(part in last for part in ("model_id", "model_name", "model_path", "checkpoint"))
