"""Every causal-LM architecture of the installed transformers, and a tiny random model of each.

A config is shrunk generically: every field named in `SIZES` (or mapped to one through the
config's `attribute_map`) gets its tiny value, in the config and in each of its sub-configs,
dropout is turned off (compiled and eager runs must draw the same numbers), and special token
ids beyond the tiny vocabulary are moved inside it. There is no code per architecture: one
whose config these fields do not shrink fails to build, or stays too big, and says so.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import Any

# The tiny value of each size field, under every spelling transformers configs use. The first
# spelling a config has wins; widths keep heads * head_dim == hidden.
DEPTH = 2
DEPTH_FIELDS = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers",
    "num_decoder_layers", "num_encoder_layers", "depth",
)
HEAD_FIELDS = (
    "num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
    "decoder_attention_heads", "attention_heads",
)
KV_HEAD_FIELDS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
SIZES: dict[str, int] = {
    # width, heads, depth
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "embed_dim", "emb_dim", "dim"), 64),
    **dict.fromkeys(HEAD_FIELDS, 4),
    **dict.fromkeys(KV_HEAD_FIELDS, 2),
    **dict.fromkeys(("head_dim", "kv_channels", "attention_head_size", "dim_head"), 16),
    "rotary_dim": 8,  # the rotated part of a head
    **dict.fromkeys(DEPTH_FIELDS, DEPTH),
    "num_kv_shared_layers": 0,
    # feed-forward
    **dict.fromkeys(
        ("intermediate_size", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "d_ff", "dff",
         "d_inner", "n_inner", "dim_ff", "feed_forward_size", "ffn_hidden_size",
         "intermediate_size_mlp", "dense_intermediate_size", "mlp_dim"),
        128,
    ),
    # vocabulary and positions
    **dict.fromkeys(("vocab_size", "text_vocab_size", "vocab_size_per_layer_input"), 256),
    "hidden_size_per_layer_input": 16,
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_target_positions",
         "context_length", "max_sequence_length"),
        512,
    ),
    # mixture of experts
    **dict.fromkeys(
        ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4
    ),
    **dict.fromkeys(("num_experts_per_tok", "moe_topk"), 2),
    **dict.fromkeys(
        ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_ffn_hidden_size",
         "shared_intermediate_size", "moe_shared_expert_intermediate_size",
         "shared_experts_intermediate_size"),
        32,
    ),
    **dict.fromkeys(("n_shared_experts", "num_shared_experts", "n_group", "topk_group"), 1),
    "first_k_dense_replace": 1,
    # multi-head latent attention
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    # state-space and linear-attention layers
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state"), 8),
    **dict.fromkeys(("mamba_n_heads", "mamba_num_heads", "n_mamba_heads", "linear_num_key_heads",
                     "linear_num_value_heads", "linear_num_heads"), 4),
    **dict.fromkeys(("mamba_d_head", "mamba_head_dim", "linear_key_head_dim",
                     "linear_value_head_dim", "linear_head_dim"), 16),
    **dict.fromkeys(("n_groups", "mamba_n_groups"), 1),
    **dict.fromkeys(("chunk_size", "mamba_chunk_size"), 16),
    "time_step_rank": 4,
    # a state-space layer's inner width is expand * hidden == its heads * head_dim
    **dict.fromkeys(("expand", "mamba_expand"), 1),
    # vision and audio towers of multimodal models (built, not run: prompts are text)
    **dict.fromkeys(("image_size",), 28),
    **dict.fromkeys(("patch_size",), 14),
    **dict.fromkeys(("out_hidden_size", "projector_input_dim", "projector_output_dim",
                     "vision_output_dim", "output_proj_dims"), 64),
}
SPECIAL_TOKEN_SUFFIXES = ("token_id", "token_index", "token_ids")
PARAMETER_LIMIT = 20_000_000  # a shrunk model above this kept a size field SIZES does not know


class CannotShrink(Exception):
    """The config of this architecture does not shrink generically."""


@dataclass(frozen=True)
class Architecture:
    model_type: str  # the key of transformers' causal-LM mapping, such as "llama"
    class_name: str  # the class it maps to, such as "LlamaForCausalLM"


def causal_lm_architectures() -> list[Architecture]:
    """Every entry of the installed transformers' causal-LM mapping, in its order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return [Architecture(key, name) for key, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()]


def tiny_model(architecture: Architecture, seed: int = 0) -> Any:
    """A tiny model with random weights from `seed`, in fp32, in eval mode.

    The config is the one the model class takes (for a causal LM that wraps the text part of a
    multimodal model, its text config) with every size field it has made tiny. Should the config
    refuse the tiny values, or the tiny model fail on a short prompt, two generic variants are
    tried: every attention head with its own key/value head, then the defaults back for the
    fields the first failure names."""
    import torch

    model_class, config = _working_config(architecture)
    torch.manual_seed(seed)
    return model_class(copy.deepcopy(config)).float().eval()


@cache
def _working_config(architecture: Architecture) -> tuple[type, Any]:
    import transformers

    model_class = getattr(transformers, architecture.class_name)
    config_class = model_class.config_class
    try:
        overrides = _overrides(config_class, config_class())
    except Exception as exc:
        raise CannotShrink(_why(exc)) from exc
    first: Exception | None = None
    for variant in (overrides, _multi_head(overrides), None):
        if variant is None:  # the defaults back for the fields the first failure names
            variant = {k: v for k, v in overrides.items() if k not in str(first)}
        try:
            config = config_class(**variant)
            fixed = _special_tokens(config)
            config = config_class(**variant, **fixed) if fixed else config
            _runs(model_class, config)
            return model_class, config
        except CannotShrink:
            raise
        except Exception as exc:
            first = first or exc
    assert first is not None
    raise CannotShrink(_why(first)) from first


def _runs(model_class: type, config: Any) -> None:
    """Build the model on the meta device to count its parameters, then for real, and run it
    once on a short padded prompt: a shrunk config whose model cannot run is not kept."""
    import torch

    with torch.device("meta"):
        size = sum(p.numel() for p in model_class(copy.deepcopy(config)).parameters())
    if size > PARAMETER_LIMIT:
        raise CannotShrink(f"{size:,} parameters after shrinking: a size field stayed large")
    model = model_class(copy.deepcopy(config)).eval()
    with torch.no_grad():
        model(input_ids=torch.tensor([[3, 4, 5, 6]]), attention_mask=torch.tensor([[0, 1, 1, 1]]))


def _why(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def _overrides(config_class: type, defaults: Any) -> dict[str, Any]:
    """The tiny values of the fields `config_class` has; sub-configs as dicts of theirs."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    aliases = dict(getattr(config_class, "attribute_map", {}))
    overrides: dict[str, Any] = {}
    for name, value in SIZES.items():
        field = aliases.get(name, name)
        if field in fields:
            overrides.setdefault(field, value)
    for name in fields:
        if "dropout" in name or "pdrop" in name:
            overrides[name] = 0.0
    if "is_decoder" in fields:
        overrides["is_decoder"] = True  # the causal-LM head of an encoder architecture
    overrides.update(_per_layer(defaults, overrides))
    for key, spec in getattr(config_class, "sub_configs_defaults", {}).items():
        sub_class = _config_class_of(spec)
        if key in fields and isinstance(getattr(defaults, key, None), sub_class):
            overrides[key] = _overrides(sub_class, getattr(defaults, key))
    return overrides


def _per_layer(defaults: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """Lists with one entry per layer (layer types, hybrid patterns), cut to the tiny depth:
    the first layer, and the first of another kind, so both kinds are built."""
    depth_field = next((k for k in overrides if SIZES.get(k) == DEPTH and k in DEPTH_FIELDS), None)
    depth = getattr(defaults, depth_field, None) if depth_field else None
    if not isinstance(depth, int) or depth <= DEPTH:
        return {}
    cut = {}
    for name, value in vars(defaults).items():
        if isinstance(value, list) and len(value) == depth and name not in overrides:
            other = next((v for v in value if v != value[0]), value[0])
            cut[name] = [value[0], other]
    return cut


def _multi_head(overrides: dict[str, Any]) -> dict[str, Any]:
    heads = next((overrides[k] for k in HEAD_FIELDS if k in overrides), None)
    if heads is None:
        return overrides
    return {k: heads if k in KV_HEAD_FIELDS else v for k, v in overrides.items()}


def _config_class_of(spec: Any) -> type:
    from transformers import PreTrainedConfig

    if isinstance(spec.config_class, type) and issubclass(spec.config_class, PreTrainedConfig):
        return spec.config_class
    return spec.get_config_class(spec.model_type)


def _special_tokens(config: Any) -> dict[str, Any]:
    """Special token ids that the tiny vocabulary does not hold, moved to its last ids (the same
    old id always to the same new one)."""
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        return {}
    moved: dict[int, int] = {}

    def inside(token: int) -> int:
        if token < vocab:
            return token
        return moved.setdefault(token, vocab - 1 - len(moved))

    fixed: dict[str, Any] = {}
    for name, value in vars(config).items():
        if not name.endswith(SPECIAL_TOKEN_SUFFIXES):
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            fixed[name] = inside(value)
        elif isinstance(value, list) and all(isinstance(v, int) for v in value):
            fixed[name] = [inside(v) for v in value]
    return {k: v for k, v in fixed.items() if v != getattr(config, k)}
