"""What changed between the library versions old-stack scripts were written for and those of the
native stack, as data: keywords, public names and defaults.

The old side is transformers 4 (optimum-neuron 0.4 pinned 4.57.1; older scripts use names 4.57
had already removed), TRL 0.24 and earlier; the new side is the `native` extra's versions.
`tests/upgrade/test_table.py` checks every entry against the installed libraries, and
`benchmarks/upgrade_gaps.py` lists what changed between the pins and the table does not cover.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# -- who takes the keywords ---------------------------------------------------------------------

_TRL_CONFIGS = ("SFT", "DPO", "GRPO", "Reward", "KTO", "CPO", "ORPO", "GKD", "OnlineDPO", "PPO", "BCO", "PRM", "XPO", "NashMD")
# `TrainingArguments` and every class that inherits its fields.
TRAINING_ARGUMENTS = (
    "transformers.TrainingArguments",
    "transformers.Seq2SeqTrainingArguments",
    *(f"trl.{name}Config" for name in _TRL_CONFIGS),
)
TRAINERS = (
    "transformers.Trainer",
    "transformers.Seq2SeqTrainer",
    *(f"trl.{name}Trainer" for name in _TRL_CONFIGS),
)
# Stand-ins for "`from_pretrained` of a transformers model class" and "of any transformers class"
# (tokenizers, configs, processors): `loader_group` says which a call is.
MODEL_LOADERS = "transformers.PreTrainedModel.from_pretrained"
ANY_LOADERS = "transformers.AutoConfig.from_pretrained"
PIPELINE = "transformers.pipeline"

# A transformers class name that names a model (`LlamaForCausalLM`, `AutoModel`, `BertModel`,
# `GPT2LMHeadModel`), as the library names them, not a tokenizer, config or processor.
_MODEL_CLASS = re.compile(r"^(?:AutoModel\w*|\w*Model|\w+For[A-Z]\w*)$")


def canonical(qualified: str) -> str:
    """`transformers.training_args.TrainingArguments` -> `transformers.TrainingArguments`: the
    libraries export each public class at their top level, where the table names it."""
    top, _, rest = qualified.partition(".")
    return f"{top}.{rest.rsplit('.', 1)[-1]}" if rest else qualified


def loader_group(owner: str) -> tuple[str, ...]:
    """The table owners whose keywords apply to `owner.from_pretrained(...)`."""
    owner = canonical(owner)
    if not owner.startswith("transformers."):
        return ()
    name = owner.removeprefix("transformers.")
    return (MODEL_LOADERS, ANY_LOADERS) if _MODEL_CLASS.match(name) else (ANY_LOADERS,)


# -- keywords -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keyword:
    """One keyword the old version took that the new one does not.

    `new`: the keyword that means the same (the value is kept). `values`: literal old values
    with their translation, (value, new keyword, new value as code), a `None` keyword meaning
    the argument goes (it asked for what now happens anyway). `drop`: it goes whatever its value.
    Anything else keeps the argument under a TODO saying `why`."""

    old: str
    new: str | None = None
    values: tuple[tuple[object, str | None, str | None], ...] = ()
    drop: bool = False
    why: str = ""
    rule: str = ""  # a translation written in code (`keywords.SPECIAL`)
    kept: bool = False  # the keyword itself stays: only what `rule` translates went


def _off(*defaults: object) -> tuple[tuple[object, None, None], ...]:
    """The values with which the keyword asked for nothing: the argument goes."""
    return tuple((value, None, None) for value in defaults)


TRAINING_KEYWORDS = (
    Keyword("evaluation_strategy", "eval_strategy"),
    Keyword("no_cuda", "use_cpu"),
    Keyword("per_gpu_train_batch_size", "per_device_train_batch_size"),
    Keyword("per_gpu_eval_batch_size", "per_device_eval_batch_size"),
    Keyword("push_to_hub_token", "hub_token"),
    Keyword("push_to_hub_model_id", "hub_model_id"),
    Keyword("torchdynamo", "torch_compile_backend"),
    Keyword("push_to_hub_organization", values=_off(None), why='give the organization in `hub_model_id="org/name"`'),
    Keyword("overwrite_output_dir", drop=True, why="the Trainer writes into `output_dir` either way"),
    Keyword("save_safetensors", values=_off(True), why="transformers 5 always saves safetensors"),
    Keyword(
        "include_inputs_for_metrics",
        values=((True, "include_for_metrics", '["inputs"]'), *_off(False)),
        why='pass `include_for_metrics=["inputs"]` where it is true',
    ),
    Keyword(
        "group_by_length",
        values=((True, "train_sampling_strategy", '"group_by_length"'), *_off(False)),
        why='pass `train_sampling_strategy="group_by_length"` where it is true',
    ),
    Keyword("adafactor", values=((True, "optim", '"adafactor"'), *_off(False)), why='pass `optim="adafactor"` where it is true'),
    Keyword("use_mps_device", values=_off(False), why="transformers 5 picks the device itself"),
    Keyword("tpu_num_cores", drop=True, why="it sized TPU runs, and the program runs on no TPU now"),
    Keyword("tpu_metrics_debug", drop=True, why="it printed TPU metrics, and the program runs on no TPU now"),
    Keyword("fp16_backend", values=_off("auto", "amp"), why="transformers 5 trains in half precision with torch.amp only"),
    Keyword("half_precision_backend", values=_off("auto", "amp"), why="transformers 5 trains in half precision with torch.amp only"),
    Keyword("fp16_opt_level", values=_off("O1"), why="it was apex's level; transformers 5 trains in half precision with torch.amp only"),
    Keyword("jit_mode_eval", values=_off(False), why="transformers 5 has no TorchScript evaluation: compile the model instead"),
    Keyword("past_index", values=_off(-1), why="pass the model's past state in a `compute_loss` of your own"),
    Keyword("use_legacy_prediction_loop", values=_off(False), why="transformers 5 has only the current prediction loop"),
    Keyword("include_tokens_per_second", values=_off(False), why="compute tokens per second in a `TrainerCallback` if you need it"),
    Keyword("ray_scope", values=_off("last"), why="it went with transformers' Ray Tune options"),
    Keyword("mp_parameters", values=_off(""), why="SageMaker model parallelism is gone from transformers 5"),
    Keyword("fsdp_min_num_params", values=_off(0), why='give it as `fsdp_config={"min_num_params": ...}`'),
    Keyword(
        "fsdp_transformer_layer_cls_to_wrap",
        values=_off(None),
        why='give it as `fsdp_config={"transformer_layer_cls_to_wrap": [...]}`',
    ),
    Keyword("warmup_ratio", "warmup_steps", rule="ratio"),
    Keyword("optim", rule="optimizer", kept=True),
    Keyword("logging_dir", rule="environment"),
)
TRAINER_KEYWORDS = (Keyword("tokenizer", "processing_class"),)
SFT_KEYWORDS = (Keyword("max_seq_length", "max_length"),)
# TRL 0.11 and earlier called `formatting_func` on batches (a dict of lists, returning a list of
# texts); later versions call it on one example, returning one text.
SFT_TRAINER_KEYWORDS = (Keyword("formatting_func", rule="formatting_func", kept=True),)
# TRL 1.x dropped these from its preference-training configs.
_TRL_REMOVED = "TRL 1.x has no such option: see the trainer's documentation for what replaced it"
PREFERENCE_KEYWORDS = tuple(
    Keyword(name, why=_TRL_REMOVED)
    for name in ("max_prompt_length", "max_completion_length", "label_pad_token_id", "padding_value", "generate_during_eval", "use_liger_loss")
)
LOADER_KEYWORDS = (
    Keyword("use_auth_token", "token"),
    Keyword("from_tf", values=_off(False), why="transformers 5 loads no TensorFlow checkpoints: convert it to safetensors first"),
    Keyword("from_flax", values=_off(False), why="transformers 5 loads no Flax checkpoints: convert it to safetensors first"),
)
MODEL_LOADER_KEYWORDS = (
    Keyword("torch_dtype", "dtype", rule="dtype"),
    Keyword(
        "use_flash_attention_2",
        values=((True, "attn_implementation", '"flash_attention_2"'), *_off(False)),
        why='pass `attn_implementation="flash_attention_2"` where it is true',
        rule="flash_attention",
    ),
    Keyword(
        "torchscript",
        values=_off(False),
        why="pass `return_dict=False` where outputs are unpacked as tuples",
        rule="torchscript",
    ),
    Keyword("load_in_8bit", values=_off(False), why="pass `quantization_config=BitsAndBytesConfig(load_in_8bit=True)` (bitsandbytes needs CUDA)"),
    Keyword("load_in_4bit", values=_off(False), why="pass `quantization_config=BitsAndBytesConfig(load_in_4bit=True)` (bitsandbytes needs CUDA)"),
)
ADAMW_KEYWORDS = (
    Keyword("correct_bias", values=_off(True), why="torch's AdamW always corrects the bias: keep transformers 4's AdamW in your code for it"),
    Keyword("no_deprecation_warning", drop=True, why="torch's AdamW warns of nothing"),
)

# Owner -> the keywords its calls are upgraded with.
KEYWORDS: dict[str, tuple[Keyword, ...]] = {
    **{owner: TRAINING_KEYWORDS for owner in TRAINING_ARGUMENTS},
    "trl.SFTConfig": (*TRAINING_KEYWORDS, *SFT_KEYWORDS),
    **{f"trl.{name}Config": (*TRAINING_KEYWORDS, *PREFERENCE_KEYWORDS) for name in ("DPO", "KTO")},
    **{owner: TRAINER_KEYWORDS for owner in TRAINERS},
    "trl.SFTTrainer": (*TRAINER_KEYWORDS, *SFT_TRAINER_KEYWORDS),
    ANY_LOADERS: LOADER_KEYWORDS,
    MODEL_LOADERS: MODEL_LOADER_KEYWORDS,
    PIPELINE: (*LOADER_KEYWORDS, Keyword("torch_dtype", "dtype")),
    "trl.ModelConfig": (Keyword("torch_dtype", "dtype"),),
    "datasets.load_dataset": (Keyword("use_auth_token", "token"),),
    "transformers.AdamW": ADAMW_KEYWORDS,
}


# -- public names -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Name:
    """A public name the old version had and the new one does not: where it lives now (`new`,
    the same object or one that does the same), or why nothing does."""

    old: str
    new: str | None = None
    why: str = ""


# transformers 4 kept each vision model's `*FeatureExtractor` as a deprecated subclass of its
# `*ImageProcessor`, adding nothing; transformers 5 removed them.
_VISION = (
    "Beit", "ChineseCLIP", "CLIP", "ConditionalDetr", "ConvNext", "DeformableDetr", "DeiT", "Detr", "Donut",
    "DPT", "Flava", "GLPN", "ImageGPT", "LayoutLMv2", "LayoutLMv3", "Levit", "MaskFormer", "MobileNetV1",
    "MobileNetV2", "MobileViT", "OwlViT", "Perceiver", "PoolFormer", "Segformer", "VideoMAE", "Vilt", "ViT",
    "Yolos",
)  # fmt: skip
# transformers 5 keeps only the static and dynamic caches (a static-shape compiler wants the first).
_CACHES = (
    "HybridCache", "HybridChunkedCache", "SinkCache", "OffloadedCache", "OffloadedStaticCache", "SlidingWindowCache",
    "MambaCache", "HQQQuantizedCache", "QuantoQuantizedCache",
)  # fmt: skip
# TRL 1.x moved these trainers out of its top level, unchanged.
_TRL_MOVED = {
    "cpo": ("CPOConfig", "CPOTrainer"),
    "gkd": ("GKDConfig", "GKDTrainer"),
    "orpo": ("ORPOConfig", "ORPOTrainer"),
    "online_dpo": ("OnlineDPOConfig", "OnlineDPOTrainer"),
    "merge_model_callback": ("MergeModelCallback",),
    "utils": ("truncate_dataset",),
}
_TRL_GONE = (
    "BCOConfig", "BCOTrainer", "XPOConfig", "XPOTrainer", "NashMDConfig",
    "NashMDTrainer", "PRMConfig", "PRMTrainer", "AutoModelForCausalLMWithValueHead",
    "AutoModelForSeq2SeqLMWithValueHead", "PreTrainedModelWrapper", "BestOfNSampler",
    "get_kbit_device_map", "WinRateCallback", "PairRMJudge", "HfPairwiseJudge", "OpenAIPairwiseJudge",
    "AllTrueJudge", "BaseJudge", "BaseBinaryJudge", "BasePairwiseJudge", "BaseRankJudge",
)  # fmt: skip

NAMES: dict[str, Name] = {
    entry.old: entry
    for entry in (
        *(Name(f"transformers.{m}FeatureExtractor", f"transformers.{m}ImageProcessor") for m in _VISION),
        # What the migrated program must see: it runs without torch_xla, as 4.x saw on a GPU.
        Name("transformers.is_torch_tpu_available", "transformers.is_torch_xla_available"),
        Name("transformers.AdamW", "torch.optim.AdamW"),
        *(Name(f"trl.{n}", f"trl.experimental.{module}.{n}") for module, names in _TRL_MOVED.items() for n in names),
        *(Name(f"trl.{n}", why="TRL 1.x removed it") for n in _TRL_GONE),
        *(Name(f"trl.{n}", why="TRL 1.x removed PPO: `GRPOTrainer` or `RLOOTrainer` come nearest") for n in ("PPOConfig", "PPOTrainer")),
        Name("trl.setup_chat_format", why="`clone_chat_template(model, tokenizer, source)` sets a template and its tokens now"),
        Name("transformers.AutoModelForVision2Seq", "transformers.AutoModelForImageTextToText"),
        Name("transformers.AutoModelWithLMHead", why="use `AutoModelForCausalLM`/`ForMaskedLM`/`ForSeq2SeqLM`, as the model's head is"),
        Name("transformers.DataCollatorForWholeWordMask", why="use `DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True)`"),
        Name("transformers.TRANSFORMERS_CACHE", "huggingface_hub.constants.HF_HUB_CACHE"),
        *(Name(f"transformers.{n}", why="use `StaticCache` (fixed shapes, as a compiler wants) or `DynamicCache`") for n in _CACHES),
        *(
            Name(f"transformers.{old}{kind}Output", f"transformers.generation.Generate{new}{kind}Output")
            for old, new in (("Greedy", ""), ("Sample", ""), ("ContrastiveSearch", ""), ("BeamSearch", "Beam"), ("BeamSample", "Beam"))
            for kind in ("DecoderOnly", "EncoderDecoder")
        ),
        Name("huggingface_hub.HfFolder", why="read the token with `huggingface_hub.get_token()`, save it with `login()`"),
        Name("peft.BoneConfig", "peft.MissConfig"),
        Name("peft.BoneModel", "peft.MissModel"),
    )
}


# -- defaults -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Default:
    """A keyword whose default changed in a way that changes what the program does: written out
    with the old default where a call leaves it out (`{torch}` is the file's name for torch)."""

    keyword: str
    old: str
    why: str
    position: int | None = None  # where it may come positionally (the callee's parameter index)


# Where torch's AdamW and transformers 4's (NxD's `AdamW_FP32OptimParams` is a copy) part: torch
# divides by `sqrt(v) / sqrt(1 - beta2**t) + eps`, transformers 4 by `sqrt(v) + eps` before scaling
# by the bias corrections. With gradients near `eps * 1000 ** 0.5` and below, torch's early
# updates are much larger (1.6x at 5e-5, 16x at 1e-6 on the first step); no `eps` makes them equal.
ADAMW_UPDATE = (
    "torch's AdamW adds `eps` after bias correction, transformers 4's before: larger early updates where gradients are small"
)

DEFAULTS: dict[str, tuple[Default, ...]] = {
    MODEL_LOADERS: (
        Default("dtype", "{torch}.float32", "transformers 4 loaded float32; transformers 5 loads the checkpoint's dtype"),
    ),
    # The old defaults of transformers 4's AdamW, which torch's does not share (see ADAMW_UPDATE).
    "transformers.AdamW": (
        Default("eps", "1e-6", "transformers 4's AdamW default; torch's is 1e-8", position=3),
        Default("weight_decay", "0.0", "transformers 4's AdamW default; torch's is 0.01", position=4),
    ),
    **{
        owner: (Default("report_to", '"all"', "transformers 4 reported to every installed integration; 5 reports to none"),)
        for owner in TRAINING_ARGUMENTS
    },
}


# -- the table as old -> new spellings (what `benchmarks/upgrade_gaps.py` matches) ----------------


@dataclass(frozen=True)
class Spelling:
    old: str  # `transformers.ViTFeatureExtractor`, or `transformers.TrainingArguments(evaluation_strategy)`
    new: str | None


# The loaders as the gap list names them: the group stands for each.
_LOADER_SPELLINGS = {
    MODEL_LOADERS: tuple(f"transformers.{c}.from_pretrained" for c in ("PreTrainedModel", "AutoModel", "AutoModelForCausalLM", "AutoModelForSeq2SeqLM")),
    ANY_LOADERS: tuple(f"transformers.{c}.from_pretrained" for c in ("PreTrainedModel", "AutoModel", "AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoTokenizer", "AutoConfig", "AutoProcessor")),
}


def _spellings() -> tuple[Spelling, ...]:
    found = [Spelling(n.old, n.new) for n in NAMES.values()]
    for owner, keywords in KEYWORDS.items():
        for spelled in _LOADER_SPELLINGS.get(owner, (owner,)):
            found += [Spelling(f"{spelled}({k.old})", f"{spelled}({k.new})" if k.new else None) for k in keywords]
    return tuple(found)


ENTRIES = _spellings()

# `TrainingArguments(optim=...)` values the native stack cannot run, what computes the same, and
# why the old one is gone: transformers 5 removed its own AdamW (torch's differs only in where
# `eps` meets the bias correction, see ADAMW_UPDATE); torch_xla's syncfree AdamW is torch's update without the
# found-inf sync, and the Trainer imports it from torch_xla.
REMOVED_OPTIMIZERS = {
    "adamw_hf": ("adamw_torch", "transformers 5 removed its own AdamW"),
    "adamw_torch_xla": ("adamw_torch", "it is torch_xla's AdamW, the same update"),
}
