"""The keyword tables of optimum-neuron's training arguments and export options, as data.

Each entry says what becomes of one optimum-neuron keyword natively; `tests/optimum/test_tables.py`
checks them against the installed transformers and TRL and against the optimum-neuron 0.4.5 wheel.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# -- training arguments (`NeuronTrainingArguments`, `NeuronSFTConfig`) ---------------------------

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
TRAINING_FIELDS: dict[str, Field] = {
    "overwrite_output_dir": Field(
        "drop", "transformers 5 removed it; the Trainer writes into `output_dir` either way"
    ),
    "dataloader_prefetch_size": Field(
        "drop",
        "it sized the XLA device-loader prefetch; the native Trainer moves each batch when it is used",
    ),
    "skip_cache_push": Field(
        "drop",
        "it skipped pushing compiled artifacts to optimum-neuron's Hub cache, which is not used natively",
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
        "optimum-neuron's MFU metric: compute it from `train_samples_per_second` in a callback if needed",
        False,
    ),
    "enable_efficiency_metrics": Field(
        "todo",
        "optimum-neuron's efficiency metrics: add a `TrainerCallback` if you need them",
        False,
    ),
    "metrics_window_size": Field(
        "drop",
        "it sized optimum-neuron's metrics window; the Trainer averages over `logging_steps`",
    ),
    "zero_1": Field(
        "todo",
        "shard with FSDP2 (`DistributedConfig(fsdp_size=...)`) or expect the full optimizer state on every rank",
        False,
    ),
    "stochastic_rounding_enabled": Field(
        "todo",
        "load the model in float32 and train with `bf16=True` (autocast)",
        False,
    ),
    "optimizer_use_master_weights": Field(
        "todo",
        "fp32 master weights came with ZeRO-1: load the model in float32 and train with `bf16=True` (autocast)",
        False,
    ),
    "optimizer_use_fp32_grad_acc": Field(
        "todo",
        "fp32 gradient accumulation came with ZeRO-1: keep parameters in float32 and train with `bf16=True`",
        False,
    ),
    "optimizer_save_master_weights_in_ckpt": Field(
        "todo",
        "there are no separate master weights to save natively; checkpoints hold the parameters as trained",
        False,
    ),
    "pipeline_parallel_num_microbatches": Field(
        "todo",
        "`DistributedConfig(pp_size=...)` has no micro-batches: use `torch.distributed.pipelining` for a schedule",
        -1,
    ),
    "kv_size_multiplier": Field(
        "todo",
        "KV heads are no longer replicated: `tp_size` must divide the model's `num_key_value_heads`",
        None,
    ),
    "use_xser": Field(
        "todo",
        "checkpoints are safetensors now: convert old ones with `optimum-cli neuron consolidate`",
        False,
    ),
    "async_save": Field(
        "todo",
        "for asynchronous saves use `torch.distributed.checkpoint.async_save`",
        False,
    ),
    "fuse_qkv": Field(
        "todo",
        "transformers keeps q/k/v projections separate; fused QKV has no switch here",
        False,
    ),
}

# Fields both classes have whose optimum-neuron 0.4.5 default is not the native one, and changes
# the run (training_args.py: the batch sizes, and `average_tokens_across_devices`, which
# normalises the loss by the tokens of all ranks). They are written out where the migrated code
# would otherwise take the native default.
NEURON_DEFAULTS: dict[str, object] = {
    "per_device_train_batch_size": 1,
    "per_device_eval_batch_size": 1,
    "average_tokens_across_devices": False,
    "optim": "adamw_torch",  # transformers 5.23's default is the fused AdamW, which rounds otherwise
    "report_to": "all",  # every installed integration logged; transformers 5.23 logs to none by default
}


def python_literal(value: object) -> str:
    """`value` as code, strings in double quotes (as formatted code has them)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


# `NeuronSFTConfig(NeuronTrainingArguments, SFTConfig)` takes Neuron's default for every shared
# field (the dataclass MRO), where TRL's `SFTConfig` has its own.
SFT_NEURON_DEFAULTS: dict[str, object] = {
    **NEURON_DEFAULTS,
    "learning_rate": 5e-05,
    "bf16": False,
    "gradient_checkpointing": False,
    "logging_steps": 500,
}
# Defaults that cannot be kept under tensor parallelism: with `average_tokens_across_devices=False`
# transformers 5.23 still divides each rank's token count by `tp_size` (`_get_num_items_in_batch`),
# which multiplies the loss by `tp_size`.
NOT_WITH_TENSOR_PARALLEL = ("average_tokens_across_devices",)
TOKEN_AVERAGE_NOTE = "with tensor parallelism `average_tokens_across_devices` keeps transformers' `True`: optimum-neuron averaged each data-parallel rank's loss over that rank's tokens, transformers averages over the tokens of all ranks (the same when every rank sees as many), and `False` would multiply the loss by `tp_size` in transformers 5.23"
SEQUENCE_PARALLEL_NOTE = "`DistributedConfig(enable_sequence_parallel=True)` keeps optimum-neuron's sequence parallelism (on by default) as asked, but transformers 5.23 does not act on it yet: the loss is the same, and each core holds the whole sequence's activations between the tensor-parallel layers, where optimum-neuron held a share"
# How transformers 5 spells a field now (the old name still works, with a FutureWarning).
NATIVE_NAMES = {"gradient_checkpointing": "activation_checkpointing"}

# `from_pretrained` keywords that the training `NeuronModelForCausalLM` (`NeuronModelMixin`,
# models/training/modeling_utils.py) took and ignored, and that a transformers model rejects or
# applies: each is dropped. (`use_flash_attention_2=True` raised there, so no run that worked
# had it.)
TRAINING_LOADER_IGNORED = {
    "use_flash_attention_2": "optimum-neuron ignored it (it raised when true); transformers rejects it",
    "resume_download": "optimum-neuron ignored it; transformers 5 rejects it",
    "mirror": "optimum-neuron ignored it",
    "_fast_init": "optimum-neuron ignored it",
    "tp_plan": "optimum-neuron ignored it (it sharded through `trn_config`); transformers would apply it",
}

SFT_FIELDS: dict[str, Field] = {
    "padding_free": Field(
        "drop", "NeuronSFTConfig forced `padding_free=False`, which is TRL's default"
    ),
}


# -- export options (`from_pretrained(..., export=True, ...)`, `get_neuron_config`, `pipeline`) ---

# Keywords of the old export (`from_pretrained(..., export=True, ...)`, `get_neuron_config`,
# `pipeline`) and what each becomes. "drop": an ahead-of-time compiler option that
# torch.compile has no use for.
EXPORT_DROPPED = {
    "export": "compilation now happens on the first call",
    "compiler_workdir": "torch.compile keeps its artifacts in the Neuron compile cache",
    "disable_neuron_cache": "the Neuron compile cache of torch.compile is configured by environment variables",
    "inline_weights_to_neff": "weights stay ordinary parameters",
    "optlevel": "the neuron backend of torch.compile chooses the optimisation level",
    "instance_type": "the code now runs on whatever device it is given",
    "disable_fast_relayout": "a neuronx-cc flag of the old export",
    "disable_fallback": "a neuronx-cc flag of the old export",
    "auto_cast": "the dtype is now explicit (`dtype=`)",
    "output_attentions": "pass it to the forward call instead",
    "output_hidden_states": "pass it to the forward call instead",
    "task": "the model class says the task",
    "load_weights": "`from_pretrained` loads the weights",
    "neuron_config": "the shapes moved to the generation config",
}
LOADING_KEPT = (
    "token",
    "revision",
    "cache_dir",
    "force_download",
    "local_files_only",
    "trust_remote_code",
    "subfolder",
    "config",
)
EXPORT_SHAPES = (
    "batch_size",
    "sequence_length",
    "num_choices",
    "num_beams",
    "height",
    "width",
    "image_size",
    "num_channels",
    "audio_sequence_length",
    "patch_size",
    "text_batch_size",
    "image_batch_size",
    "num_images_per_prompt",
)
TP_KEYWORDS = ("num_cores", "tensor_parallel_size")
# Earlier optimum-neuron releases, on transformers-neuronx, named the compiled sequence length as
# it did: `n_positions`.
EXPORT_ALIASES = {"n_positions": "sequence_length"}
CAST_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "fp32": "float32",
    "float32": "float32",
    "tf32": "float32",
}
EXPORT_OPTIONS = {
    *EXPORT_DROPPED,
    *LOADING_KEPT,
    *EXPORT_SHAPES,
    *TP_KEYWORDS,
    *EXPORT_ALIASES,
    "auto_cast_type",
    "torch_dtype",
    "dtype",
    "dynamic_batch_size",
}
