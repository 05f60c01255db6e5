"""Generation as the migration of `NeuronModelForCausalLM` emits it, against plain generation.

The migrated script gives the model a static KV cache of the exported `sequence_length`, chunked
prefill and the `neuron` compile config, and tokenizes its prompts with left padding to a
multiple of the prefill chunk (`core.static_shapes`). The reference is the simplest generation
there is: each prompt alone, unpadded, the default dynamic cache, nothing compiled. Greedy tokens
must be the same, and generate must compile at most one graph per shape bucket: each padded
prompt length, and the one-token decoding step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from neuron_migrate.core import neuron_backend
from neuron_migrate.core.static_shapes import (
    NEURON_COMPILE,
    PROMPT_PADDING,
    STATIC_CACHE,
    prefill_chunk,
)
from neuron_migrate.sweep import causes

SEQUENCE_LENGTH = 64  # the exported `sequence_length`: the static cache's size
# With chunks of 16 tokens, each pads to 32: three lengths in one bucket, each prefilled in two
# chunks (the second attends to the first through the cache). A second bucket would cost a
# compile per architecture and show nothing new: in transformers 5.23 each padded length is a
# prefill graph of its own (the chunks' `position_ids` are views that keep its stride).
PROMPT_LENGTHS = (17, 23, 29)
NEW_TOKENS = 6


@dataclass
class GenerationResult:
    ok: bool
    cause: str | None = None
    reason: str | None = None
    where: str | None = None
    graphs: int = 0
    buckets: int = 0
    recompiles: list[str] = field(default_factory=list)
    graph_breaks: list[str] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    reference: list[list[int]] = field(default_factory=list)
    graphs_after_first: int = 0  # graphs compiled by the end of the first prompt


def word_tokenizer(config: Any) -> Any:
    """A word-level tokenizer over the tiny vocabulary: the word `<N>` is token N, special tokens
    are the config's (the migration gives a tokenizer without a pad token its eos token)."""
    from tokenizers import Tokenizer, models
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocabulary = {_word(i): i for i in range(vocab_size(config))}
    words = Tokenizer(models.WordLevel(vocabulary, unk_token=_word(0)))
    words.pre_tokenizer = WhitespaceSplit()
    eos = _first(_token(config, "eos_token_id"))
    pad = _first(_token(config, "pad_token_id"))
    pad = pad if pad is not None else eos if eos is not None else 0
    special = {"unk_token": _word(0), "pad_token": _word(pad)}
    if eos is not None:
        special["eos_token"] = _word(eos)
    return PreTrainedTokenizerFast(
        tokenizer_object=words, model_input_names=["input_ids", "attention_mask"], **special
    )


def prompts(config: Any, seed: int = 0) -> list[str]:
    """Prompts of `PROMPT_LENGTHS` words, none of them a special token."""
    special = special_ids(config)
    ordinary = [i for i in range(vocab_size(config)) if i not in special]
    draw = random.Random(seed)
    return [" ".join(_word(draw.choice(ordinary)) for _ in range(n)) for n in PROMPT_LENGTHS]


def vocab_size(config: Any) -> int:
    """The vocabulary the model reads tokens from: a multimodal model's is its text model's."""
    size = getattr(config, "vocab_size", None)
    return size if isinstance(size, int) else config.get_text_config(decoder=True).vocab_size


def _token(config: Any, name: str) -> Any:
    value = getattr(config, name, None)
    return value if value is not None else getattr(config.get_text_config(decoder=True), name, None)


def special_ids(config: Any) -> set[int]:
    found: set[int] = set()
    for name, value in vars(config).items():
        if name.endswith(("token_id", "token_ids", "token_index")):
            found.update(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int))
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):  # a sub-config
            found |= special_ids(value)
    return found


def run(model: Any, config: Any) -> GenerationResult:
    import torch
    from transformers import CompileConfig

    tokenizer = word_tokenizer(config)
    texts = prompts(config)
    try:
        reference = [_generate(model, tokenizer(text, return_tensors="pt")) for text in texts]
    except Exception as exc:
        failure = causes.uncompiled_failure(exc)
        return GenerationResult(False, failure.cause, failure.reason, failure.where)
    chunk = prefill_chunk(SEQUENCE_LENGTH)
    compile_config = CompileConfig(**NEURON_COMPILE)
    # On Trainium transformers compiles because the model's device is `neuron`; here the
    # stand-in backend runs on the CPU, which needs transformers' opt-in.
    compile_config._compile_all_devices = True  # type: ignore[assignment]
    model.generation_config.update(
        **STATIC_CACHE,
        max_cache_len=SEQUENCE_LENGTH,
        prefill_chunk_size=chunk,
        compile_config=compile_config,
    )
    padded = [tokenizer(t, return_tensors="pt", pad_to_multiple_of=chunk, **PROMPT_PADDING) for t in texts]
    buckets = len({p["input_ids"].shape[1] for p in padded}) + 1  # and the decoding step
    # One graph more than the buckets already fails: Dynamo stops after it, not at its limit of 8.
    limit = torch._dynamo.config.patch(recompile_limit=buckets + 1)
    with neuron_backend.recording() as log, torch.no_grad(), limit:
        tokens: list[list[int]] = []
        first = 0
        try:
            for inputs in padded:
                tokens.append(_generate(model, inputs))
                if len(tokens) == 1:
                    first = log.graphs
        except Exception as exc:
            failure = causes.cache_failure(exc) or causes.classify(exc)
            if failure.cause == causes.RECOMPILE:
                failure = causes.recompile_failure(log.recompiles, log.graphs)
            elif failure.cause in (causes.ERROR, causes.UNSUPPORTED):
                failure = _uncompiled_failure(model, padded) or failure
            return GenerationResult(
                False, failure.cause, failure.reason, failure.where, log.graphs, buckets,
                list(log.recompiles), [f"{b.where}: {b.reason}" for b in log.graph_breaks],
                reference=reference,
            )
    result = GenerationResult(
        True, graphs=log.graphs, buckets=buckets, graphs_after_first=first, recompiles=list(log.recompiles),
        graph_breaks=[f"{b.where}: {b.reason}" for b in log.graph_breaks], tokens=tokens,
        reference=reference,
    )
    _judge(result, model, padded)
    return result


def _judge(result: GenerationResult, model: Any, padded: list[Any]) -> None:
    if result.graphs == 0:
        result.ok, result.cause = False, causes.NOT_COMPILED
        result.reason = "generate ran the model eagerly: transformers did not compile it"
        if model.get_compiled_call(model.generation_config.compile_config) == model.__call__:
            result.reason += " (its `get_compiled_call` gives this architecture the uncompiled model)"
    elif result.tokens != result.reference:
        result.ok, result.cause = False, causes.MISMATCH
        result.reason = _mismatch(model, padded, result.tokens, result.reference)
    elif result.graphs > result.buckets:
        failure = causes.recompile_failure(result.recompiles, result.graphs)
        if failure.cause == causes.RECOMPILE_VALUE and result.graphs == result.buckets + 1 == result.graphs_after_first:
            # Every prompt has one bucket (see PROMPT_LENGTHS): the later prompts, each with a
            # fresh cache, compiled nothing.
            failure.cause = causes.RECOMPILE_ONCE
            failure.reason += "; on the first prompt only, none for the later ones"
        result.ok, result.cause, result.reason, result.where = False, failure.cause, failure.reason, failure.where


def _mismatch(model: Any, padded: list[Any], tokens: list[list[int]], reference: list[list[int]]) -> str:
    """Which part of the migrated generation changes the tokens: the padding, the static cache,
    or the compiled graphs (each tried alone, uncompiled)."""
    import inspect

    model.generation_config.update(disable_compile=True)
    if [_generate(model, inputs, cache_implementation=None) for inputs in padded] != reference:
        takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        return "left padding changes the tokens, uncompiled and with the default cache too" + (
            "" if takes_positions else " (the model takes no `position_ids`: padding shifts every position)"
        )
    if [_generate(model, inputs) for inputs in padded] == tokens:
        return "the static cache changes the tokens, uncompiled too"
    return "the compiled graphs give other tokens than the same generation uncompiled"


def _uncompiled_failure(model: Any, padded: list[Any]) -> causes.Failure | None:
    """The failure of the migrated generation with compilation off, if it fails that way too."""
    model.generation_config.update(disable_compile=True)
    try:
        for inputs in padded:
            _generate(model, inputs)
    except Exception as exc:
        return causes.uncompiled_failure(exc, "uncompiled too, with the static cache and padding: ")
    finally:
        model.generation_config.update(disable_compile=False)
    return None


def _generate(model: Any, inputs: Any, **options: Any) -> list[int]:
    output = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False, **options)
    return output[0, inputs["input_ids"].shape[1] :].tolist()


def _word(token: int) -> str:
    return f"<{token}>"  # no word is part of another, so special tokens never split one


def _first(value: Any) -> int | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value if isinstance(value, int) else None
