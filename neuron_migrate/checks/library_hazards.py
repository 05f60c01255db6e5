"""Hazards inside installed libraries that a user's own set-up sends compiled code through.

One record per library line, as `benchmarks/check/library_hazards.py` measured it on tiny models
built from their configs (`--check` compares this table with a new measurement and with the
installed sources). NM308 reports them at the user's call site that chooses the path; the places
(`context.py`) read `only_with` to say which setting traces a library function at all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LibraryHazard:
    key: str
    where: str  # "package/file.py:line" in the installed library, as Dynamo names it
    symbol: str  # the function (or property) that holds the line
    line_text: str  # how the line starts, checked against the installed source
    trigger: str  # what in user code takes the path, in the user's words
    what: str  # what compiling it costs
    fix: str
    measured: str  # graphs per compiled step before and after the fix, in words
    graphs: tuple[int, int]  # graphs run per compiled step, before and after the fix
    # Model classes that take the path (measured by the architecture sweep), where that matters.
    classes: tuple[str, ...] = ()
    # Nested functions traced only with a setting: (enclosing function, nested function, setting).
    only_with: tuple[tuple[str, str, str], ...] = ()


LOSS_TYPE = LibraryHazard(
    key="loss-type",
    where="transformers/modeling_utils.py:4769",
    symbol="PreTrainedModel.loss_function",
    line_text="logger.warning_once(",
    trigger="a model class whose name gives no `loss_type`, compiled and called with `labels`",
    what=(
        "every compiled step reads `model.loss_function`, which calls `logger.warning_once`: "
        "a graph break per step"
    ),
    fix='set `model.loss_type = "ForCausalLM"` after loading the model',
    measured="GPT-2 training step: 2 graphs per step (1 graph break); with `loss_type` set: 1",
    graphs=(2, 1),
    classes=(
        "BertGenerationDecoder",
        "BertLMHeadModel",
        "CTRLLMHeadModel",
        "GPT2LMHeadModel",
        "OpenAIGPTLMHeadModel",
    ),
)

GRADIENT_CHECKPOINTING = LibraryHazard(
    key="gradient-checkpointing-use-cache",
    where="transformers/utils/generic.py:1043",
    symbol="merge_with_config_defaults",
    line_text="logger.warning_once(",
    trigger="gradient checkpointing with `use_cache` left at its default (`True`), compiled for training",
    what=(
        "every compiled training step warns that `use_cache=True` is incompatible with gradient "
        "checkpointing (`logger.warning_once`): a graph break per step"
    ),
    fix="set `model.config.use_cache = False` (or pass `use_cache=False`)",
    measured="Llama training step: 2 graphs per step (1 graph break); with `use_cache=False`: 1",
    graphs=(2, 1),
)

DYNAMIC_ROPE = LibraryHazard(
    key="dynamic-rope",
    where="transformers/modeling_rope_utils.py:101",
    symbol="dynamic_rope_update.dynamic_frequency_update",
    line_text="if seq_len > max_seq_len_cached:",
    trigger='`rope_type="dynamic"` in a model configuration, for a model that is compiled',
    what=(
        "each forward compares the largest position id with the cached length "
        "(`if seq_len > max_seq_len_cached:`), a branch on tensor values: graph breaks every call"
    ),
    fix='use a static rope type (`"linear"`, `"yarn"`, or `"default"` with a long enough `max_position_embeddings`)',
    measured='Llama forward: 6 graphs per call (5 graph breaks); with `rope_type="linear"`: 1',
    graphs=(6, 1),
    only_with=(("dynamic_rope_update", "dynamic_frequency_update", 'rope_type="dynamic"'),),
)

HAZARDS = (LOSS_TYPE, GRADIENT_CHECKPOINTING, DYNAMIC_ROPE)


def only_with(enclosing: str) -> dict[str, str]:
    """The nested functions of `enclosing` traced only with a setting: {name: setting}."""
    return {nested: setting for h in HAZARDS for outer, nested, setting in h.only_with if outer == enclosing}
