"""Hazards inside installed libraries that a user's own set-up sends compiled code through.

One record per library line: what a person reads is written here; what was measured (the line
Dynamo names, graphs per step, the classes the architecture sweep saw take the path) comes from
`library_hazards_measured.py`, which `benchmarks/check/library_hazards.py --write` regenerates on
tiny models built from their configs (`--check` compares both with a new measurement and with the
installed sources). NM308 reports them at the user's call site that chooses the path; the places
(`context.py`) read `only_with` to say which setting traces a library function at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neuron_migrate.checks.library_hazards_measured import MEASURED


@dataclass(frozen=True)
class LibraryHazard:
    key: str
    symbol: str  # the function (or property) that holds the line
    line_text: str  # how the line starts, checked against the installed source
    trigger: str  # what in user code takes the path, in the user's words
    what: str  # what compiling it costs
    fix: str
    case: str  # the step measured (`{before}` and `{after}`: graphs per step without and with the fix)
    # Nested functions traced only with a setting: (enclosing function, nested function, setting).
    only_with: tuple[tuple[str, str, str], ...] = ()
    where: str = field(init=False)  # "package/file.py:line" in the installed library, as Dynamo names it
    graphs: tuple[int, int] = field(init=False)  # graphs run per compiled step, before and after the fix
    classes: tuple[str, ...] = field(init=False)  # model classes the sweep saw take the path

    def __post_init__(self) -> None:
        measured = MEASURED[self.key]
        object.__setattr__(self, "where", measured["where"])
        object.__setattr__(self, "graphs", tuple(measured["graphs"]))
        object.__setattr__(self, "classes", tuple(measured["classes"]))

    @property
    def measured(self) -> str:
        """Graphs per compiled step before and after the fix, in words."""
        before, after = self.graphs
        return self.case.format(before=before, breaks=before - 1, after=after)


LOSS_TYPE = LibraryHazard(
    key="loss-type",
    symbol="PreTrainedModel.loss_function",
    line_text="logger.warning_once(",
    trigger="a model class whose name gives no `loss_type`, compiled and called with `labels`",
    what=(
        "every compiled step reads `model.loss_function`, which calls `logger.warning_once`: "
        "a graph break per step"
    ),
    fix='set `model.loss_type = "ForCausalLM"` after loading the model',
    case="GPT-2 training step: {before} graphs per step ({breaks} graph break); with `loss_type` set: {after}",
)

GRADIENT_CHECKPOINTING = LibraryHazard(
    key="gradient-checkpointing-use-cache",
    symbol="merge_with_config_defaults",
    line_text="logger.warning_once(",
    trigger="gradient checkpointing with `use_cache` left at its default (`True`), compiled for training",
    what=(
        "every compiled training step warns that `use_cache=True` is incompatible with gradient "
        "checkpointing (`logger.warning_once`): a graph break per step"
    ),
    fix="set `model.config.use_cache = False` (or pass `use_cache=False`)",
    case="Llama training step: {before} graphs per step ({breaks} graph break); with `use_cache=False`: {after}",
)

DYNAMIC_ROPE = LibraryHazard(
    key="dynamic-rope",
    symbol="dynamic_rope_update.dynamic_frequency_update",
    line_text="if seq_len > max_seq_len_cached:",
    trigger='`rope_type="dynamic"` in a model configuration, for a model that is compiled',
    what=(
        "each forward compares the largest position id with the cached length "
        "(`if seq_len > max_seq_len_cached:`), a branch on tensor values: graph breaks every call"
    ),
    fix='use a static rope type (`"linear"`, `"yarn"`, or `"default"` with a long enough `max_position_embeddings`)',
    case='Llama forward: {before} graphs per call ({breaks} graph breaks); with `rope_type="linear"`: {after}',
    only_with=(("dynamic_rope_update", "dynamic_frequency_update", 'rope_type="dynamic"'),),
)

HAZARDS = (LOSS_TYPE, GRADIENT_CHECKPOINTING, DYNAMIC_ROPE)


def only_with(enclosing: str) -> dict[str, str]:
    """The nested functions of `enclosing` traced only with a setting: {name: setting}."""
    return {nested: setting for h in HAZARDS for outer, nested, setting in h.only_with if outer == enclosing}
