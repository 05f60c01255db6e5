"""How migrated code keeps its shapes static on Neuron: the generation settings and prompt padding
the migration writes for `NeuronModelForCausalLM`, and the padding TRL applies to training
batches. The rewrite writes them and the architecture sweep runs them, so both say the same."""

from __future__ import annotations

from typing import Any

# `model.generation_config.update(...)`: a KV cache of one fixed size...
STATIC_CACHE: dict[str, Any] = {"cache_implementation": "static"}
# ... and, with `--target neuron`, `compile_config=CompileConfig(...)` with these fields
# (`fullgraph=True` as the Neuron docs recommend; Neuron has no mode but "default").
NEURON_COMPILE: dict[str, Any] = {"backend": "neuron", "fullgraph": True, "dynamic": False, "mode": "default"}
# The tokenizer call of the prompts, beside `pad_to_multiple_of=<prefill_chunk_size>`: left
# padding keeps the last prompt token last, where generation continues.
PROMPT_PADDING: dict[str, Any] = {"padding": True, "padding_side": "left"}
# TRL >= 1.16: `pad_to_multiple_of="auto"` becomes this on a neuron device (`SFTConfig.__post_init__`).
TRL_NEURON_PAD_MULTIPLE = 128
PREFILL_CHUNK_LIMIT = 128


def prefill_chunk(sequence_length: object) -> int:
    """Chunk the prompt in pieces of at most 128 tokens, and at most a quarter of the cache."""
    if not isinstance(sequence_length, int) or sequence_length <= 0:
        return PREFILL_CHUNK_LIMIT
    chunk = PREFILL_CHUNK_LIMIT
    while chunk > 8 and chunk * 4 > sequence_length:
        chunk //= 2
    return chunk
