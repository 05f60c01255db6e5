"""Every causal-LM config shrinks the same way, with no code per architecture."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from neuron_migrate.sweep.tiny import (
    DEPTH,
    SIZES,
    Architecture,
    CannotShrink,
    causal_lm_architectures,
    tiny_model,
)


def _architecture(model_type: str) -> Architecture:
    return next(a for a in causal_lm_architectures() if a.model_type == model_type)


def test_every_entry_of_the_causal_lm_mapping_is_listed() -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    listed = causal_lm_architectures()
    assert [a.model_type for a in listed] == list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert Architecture("llama", "LlamaForCausalLM") in listed


def test_a_config_gets_the_tiny_sizes_under_its_own_field_names() -> None:
    llama = tiny_model(_architecture("llama")).config
    assert (llama.hidden_size, llama.num_hidden_layers, llama.vocab_size) == (64, DEPTH, 256)
    assert (llama.num_attention_heads, llama.num_key_value_heads, llama.head_dim) == (4, 2, 16)
    gpt2 = tiny_model(_architecture("gpt2")).config  # n_embd, n_layer, n_head
    assert (gpt2.n_embd, gpt2.n_layer, gpt2.n_head) == (SIZES["n_embd"], DEPTH, 4)
    assert gpt2.resid_pdrop == gpt2.attn_pdrop == 0.0  # compiled and eager draw no random numbers


def test_per_layer_lists_keep_one_layer_of_each_kind() -> None:
    zamba2 = tiny_model(_architecture("zamba2")).config
    assert zamba2.layers_block_type == ["linear_attention", "hybrid"]


def test_special_tokens_are_moved_inside_the_tiny_vocabulary() -> None:
    config = tiny_model(_architecture("arcee")).config  # 128000 and 128001 by default
    assert (config.bos_token_id, config.eos_token_id) == (255, 254)


def test_the_same_seed_gives_the_same_weights() -> None:
    first, second = (tiny_model(_architecture("opt")) for _ in range(2))
    assert all((a == b).all() for a, b in zip(first.parameters(), second.parameters(), strict=True))
    assert not first.training


def test_a_config_that_does_not_shrink_says_why() -> None:
    with pytest.raises(CannotShrink, match="parameters after shrinking"):
        tiny_model(_architecture("blt"))  # sizes under names no other config uses
