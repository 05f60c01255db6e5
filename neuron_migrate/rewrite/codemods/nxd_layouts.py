"""neuronx-distributed's parallel layers and region mappings, and the DTensor layouts that do the same.

Read from NxD's own source (`parallel_layers/layers.py`, `mappings.py`, `layer_norm.py`): each
layer's parameters and defaults, which option picks its layout, and, for each mapping, what it
does to the tensor going forward and to the gradient coming back. One table, read by the codemod
that rewrites the calls and by the check that decides whether a file can be rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

NXD = "neuronx_distributed"
LAYERS_MODULE = f"{NXD}.parallel_layers"

COLWISE_GATHERED = "ColwiseParallel(output_layouts=Replicate())"
ROWWISE_SCATTERED = "RowwiseParallel(input_layouts=Replicate())"
# NxD's `stride=k` splits a fused projection's k parts (q, k, v) over the ranks one by one, so
# each rank holds its share of every part; natively the style lays the last dimension out so.
STRIDE = "stride"
STRIDED = "_StridedShard(-1, split_factor={stride})"


@dataclass(frozen=True)
class Layer:
    """One NxD parallel layer and the plain module plus `parallelize_module` style that replace it."""

    native: str  # the `torch.nn` class
    sizes: tuple[tuple[str, str], ...]  # NxD's first parameters -> the native ones
    switch: str  # the keyword that picks the layout ("" for a layer that has one layout)
    switch_default: bool
    styles: tuple[str, str]  # the style when the switch is False, when it is True
    passed: frozenset[str]  # keywords with the same name and meaning natively
    # Keywords accepted only at NxD's default (their code), where they change nothing natively.
    defaults: tuple[tuple[str, str], ...]
    # With `sequence_parallel_enabled=True`: the style (`{dim}` is the sequence dimension), and the
    # switch value NxD requires then. None: this layer is not migrated with sequence parallelism.
    sequence_style: str | None = None
    sequence_switch: bool | None = None
    # With `stride=k`: the style (`{strided}` the layout of each rank's share of the k parts), and
    # the switch value it needs, without which NxD's result changes with the tensor-parallel size.
    strided_style: str | None = None
    strided_switch: bool | None = None
    # With both: the style (`{dim}` and `{strided}` as above).
    sequence_strided_style: str | None = None


LINEAR_DEFAULTS = (
    ("init_method", "None"),
    ("keep_master_weight", "False"),
    ("skip_bias_add", "False"),
    ("pad", "False"),
    ("tensor_model_parallel_group", "None"),
    ("reduce_dtype", "torch.float32"),
    ("rank_ordering", "None"),
)

LAYERS = {
    "ColumnParallelLinear": Layer(
        native="Linear",
        sizes=(("input_size", "in_features"), ("output_size", "out_features")),
        switch="gather_output",
        switch_default=True,
        styles=("ColwiseParallel()", COLWISE_GATHERED),
        passed=frozenset({"bias", "dtype", "device"}),
        defaults=(*LINEAR_DEFAULTS, ("pad_alignment_size_per_rank", "1"), ("keep_padded_output", "False")),
        # The input arrives split along the sequence and is all-gathered (NxD asserts it is not
        # gathered again on the way out); the gradient is reduce-scattered back.
        sequence_style="ColwiseParallel(input_layouts=Shard({dim}))",
        sequence_switch=False,
        # Gathered, NxD's output has each rank's parts one after another.
        strided_style="ColwiseParallel(output_layouts={strided})",
        strided_switch=False,
        sequence_strided_style="ColwiseParallel(input_layouts=Shard({dim}), output_layouts={strided})",
    ),
    "RowParallelLinear": Layer(
        native="Linear",
        sizes=(("input_size", "in_features"), ("output_size", "out_features")),
        switch="input_is_parallel",
        switch_default=False,
        styles=(ROWWISE_SCATTERED, "RowwiseParallel()"),
        passed=frozenset({"bias", "dtype", "device"}),
        defaults=(*LINEAR_DEFAULTS, ("reduce_output", "True"), ("tile_cc", "False")),
        # The partial sums are reduce-scattered along the sequence instead of all-reduced; NxD
        # raises unless the input is already split.
        sequence_style="RowwiseParallel(output_layouts=Shard({dim}))",
        sequence_switch=True,
        # Scattered, NxD's input is split in slices but its weight by parts.
        strided_style="RowwiseParallel(input_layouts={strided})",
        strided_switch=True,
        sequence_strided_style="RowwiseParallel(input_layouts={strided}, output_layouts=Shard({dim}))",
    ),
    "ParallelEmbedding": Layer(
        native="Embedding",
        sizes=(("num_embeddings", "num_embeddings"), ("embedding_dim", "embedding_dim")),
        switch="shard_across_embedding",
        switch_default=False,
        styles=(ROWWISE_SCATTERED, COLWISE_GATHERED),  # the vocabulary or the embedding dimension
        passed=frozenset({"dtype", "device"}),
        defaults=(
            ("padding_idx", "None"),
            ("max_norm", "None"),
            ("scale_grad_by_freq", "False"),
            ("sparse", "False"),
            ("pad", "False"),
            ("tensor_model_parallel_group", "None"),
            ("use_spmd_rank", "False"),
            ("tile_cc", "False"),
            ("rank_ordering", "None"),
            ("collect_output", "True"),
        ),
        # With sequence parallelism NxD transposes the output to (sequence, batch, hidden) before
        # scattering it, or skips the reduction for a nonzero `sequence_dimension`: not migrated.
    ),
    # NxD's LayerNorm is torch's, with its parameters marked for the sequence-parallel gradient
    # all-reduce; natively `SequenceParallel()` makes them replicated DTensors, reduced in backward.
    "LayerNorm": Layer(
        native="LayerNorm",
        sizes=(("normalized_shape", "normalized_shape"), ("eps", "eps")),
        switch="",
        switch_default=False,
        styles=("", ""),
        passed=frozenset({"eps", "elementwise_affine", "bias", "dtype", "device"}),
        defaults=(),
        sequence_style="SequenceParallel(sequence_dim={dim}, use_local_output=True)",
    ),
}


def layer_style(layer: Layer, given: dict[str, str], sequence_dim: str = "0", strided: str = STRIDED) -> str | None:
    """The `parallelize_module` style that lays the layer out as NxD did, from the keywords a call
    passes (as code): "" for none, None where the call decides it at run time or DTensor has no
    such layout. `sequence_dim`: the program's, for a layer that does not name its own;
    `strided`: how the style spells the layout of a `stride=` layer."""
    stride = given.get(STRIDE, "1")
    sequence = given.get(SEQUENCE_OPTIONS[0], "False")
    if stride != "1":
        switch = given.get(layer.switch, str(layer.switch_default))
        style = {"False": layer.strided_style, "True": layer.sequence_strided_style}.get(sequence)
        if style is None or switch != str(layer.strided_switch):
            return None
        return style.format(strided=strided.format(stride=stride), dim=_sequence_dim(given))
    if sequence == "True":
        if layer.sequence_style is None:
            return None
        if not layer.switch:
            return layer.sequence_style.format(dim=sequence_dim)
        return layer.sequence_style.format(dim=_sequence_dim(given))
    if given.get(SEQUENCE_OPTIONS[0], "False") != "False":
        return None
    if not layer.switch:
        return layer.styles[False]
    value = given.get(layer.switch, str(layer.switch_default))
    return layer.styles[value == "True"] if value in ("True", "False") else None


def _sequence_dim(given: dict[str, str]) -> str:
    """The sequence dimension a linear layer names (NxD's default, 0, where it names none)."""
    dim = given.get(SEQUENCE_OPTIONS[1], "None")
    return "0" if dim == "None" else dim


LAYER_MODULES = {"LayerNorm": (".layer_norm",)}
LAYER_NAMES = {
    f"{LAYERS_MODULE}{module}.{name}": name
    for name in LAYERS
    for module in LAYER_MODULES.get(name, ("", ".layers"))
}
SEQUENCE_OPTIONS = ("sequence_parallel_enabled", "sequence_dimension")


@dataclass(frozen=True)
class Mapping:
    """An NxD region mapping as a DTensor redistribution over the tensor-parallel mesh dimension.

    The local tensor is taken as `source` and redistributed to `target`; `grad` is the layout its
    gradient is taken to have on the way back (`Partial()`: summed over the ranks), which makes
    DTensor's backward the one NxD's `autograd.Function` wrote.
    """

    source: str
    target: str
    grad: str = ""
    dimension: tuple[str, int, str | None] | None = None  # (keyword, position, default) of `{dim}`
    # Keywords accepted only at these values, and one that picks the gradient (value -> grad).
    defaults: tuple[tuple[str, str], ...] = (("process_group", "None"),)
    grad_switch: tuple[str, int, dict[str, str]] | None = None
    # NxD's private helpers behind the mappings: the forward alone, with no backward of their own
    # (what a hand-written `autograd.Function` calls in its `forward` and `backward`).
    forward_only: bool = False


SEQUENCE_DIMENSION = ("sequence_dimension", 1, "0")
MAPPINGS = {
    # forward identity, backward all-reduce
    "copy_to_tensor_model_parallel_region": Mapping("Replicate()", "Replicate()", grad="Partial()"),
    # forward all-reduce, backward identity
    "reduce_from_tensor_model_parallel_region": Mapping("Partial()", "Replicate()"),
    # forward split of the last dimension, backward all-gather
    "scatter_to_tensor_model_parallel_region": Mapping("Replicate()", "Shard(-1)"),
    # forward all-gather of the last dimension, backward split
    "gather_from_tensor_model_parallel_region": Mapping("Shard(-1)", "Replicate()"),
    "scatter_to_sequence_parallel_region": Mapping("Replicate()", "Shard({dim})", dimension=SEQUENCE_DIMENSION),
    # forward all-gather; backward reduce-scatter into the model-parallel region, else a split
    "gather_from_sequence_parallel_region": Mapping(
        "Shard({dim})",
        "Replicate()",
        dimension=SEQUENCE_DIMENSION,
        defaults=(("process_group", "None"), ("tile_cc", "False")),
        grad_switch=("to_model_parallel", 2, {"True": "Partial()", "False": ""}),
    ),
    # forward reduce-scatter, backward all-gather
    "reduce_scatter_to_sequence_parallel_region": Mapping(
        "Partial()",
        "Shard({dim})",
        dimension=SEQUENCE_DIMENSION,
        defaults=(("process_group", "None"), ("dtype", "None")),
    ),
    "reduce_scatter_to_tensor_model_parallel_region_with_dim": Mapping(
        "Partial()", "Shard({dim})", dimension=("partition_dim", 1, None)
    ),
    "gather_from_tensor_model_parallel_region_with_dim": Mapping(
        "Shard({dim})", "Replicate()", dimension=("gather_dim", 1, None)
    ),
    "_split_along_first_dim": Mapping("Replicate()", "Shard(0)", forward_only=True),
    "_split_along_last_dim": Mapping("Replicate()", "Shard(-1)", forward_only=True),
    "_gather_along_first_dim": Mapping("Shard(0)", "Replicate()", forward_only=True),
    "_gather_along_last_dim": Mapping("Shard(-1)", "Replicate()", forward_only=True),
}
MAPPING_NAMES = {
    f"{LAYERS_MODULE}{module}.{name}": name
    for name in MAPPINGS
    for module in ((".mappings", "") if name.endswith("_tensor_model_parallel_region") else (".mappings",))
}


def redistribution(mapping: Mapping, tensor: str, mesh: str, dim: str | None, grad: str) -> tuple[str, ...]:
    """The DTensor expression for `mapping` of `tensor` over `mesh`, as the calls of its chain
    (`DTensor` and the placement classes spelled as here; the caller respells them)."""
    source, target = (p.format(dim=dim) for p in (mapping.source, mapping.target))
    local = f"DTensor.from_local({tensor}, {mesh}, [{source}])"
    grad_option = f"grad_placements=[{grad}]" if grad else ""
    if source == target:
        return local, f".to_local({grad_option})"
    if target == "Replicate()":
        return local, f".full_tensor({grad_option})"
    return local, f".redistribute(placements=[{target}])", f".to_local({grad_option})"
