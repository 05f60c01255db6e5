"""NM020: optimum-neuron training scripts become plain transformers / TRL / peft scripts."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ImportTable, ast_dotted_name
from neuron_migrate.core.static_shapes import TRL_NEURON_PAD_MULTIPLE
from neuron_migrate.rewrite.codemods.base import arg_value, code_of, dotted_name, expr, stmt
from neuron_migrate.rewrite.codemods.optimum import diffusion, inference
from neuron_migrate.rewrite.codemods.optimum.fields import (
    NATIVE_NAMES,
    NEURON_DEFAULTS,
    NOT_WITH_TENSOR_PARALLEL,
    PARALLEL_FIELDS,
    SEQUENCE_PARALLEL_NOTE,
    SFT_FIELDS,
    SFT_NEURON_DEFAULTS,
    TOKEN_AVERAGE_NOTE,
    TRAINING_FIELDS,
    TRAINING_LOADER_IGNORED,
    python_literal,
)
from neuron_migrate.rewrite.codemods.optimum.model_parallel import (
    PARALLEL_ARGUMENTS,
    PLACEMENT_KEYWORDS,
    REMAINDER_COMMENT,
    Qualifier,
    Scope,
    ShardedLoad,
    data_parallel_size,
    enclosing_functions,
    forwarded_to,
    is_default_size,
    sharded_loads,
)
from neuron_migrate.rewrite.codemods.optimum.support import (
    OPTIMUM,
    RenamingCodemod,
    keyword,
    literal,
    make_arg,
    mark_leftovers,
    mark_named_module,
    mark_run_time_import,
    mark_star_import,
    name_loads,
    named_module,
    names_in,
    note_run_time_import,
    one_per_line,
    sequential_loading,
    with_args,
)
from neuron_migrate.rewrite.codemods.upgrade.keywords import upgrade_argument, upgrade_call
from neuron_migrate.rewrite.codemods.upgrade.table import (
    ANY_LOADERS,
    KEYWORDS,
    MODEL_LOADERS,
    SFT_KEYWORDS,
    Keyword,
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
HF_PARSER = (
    "transformers.HfArgumentParser",
    "transformers.hf_argparser.HfArgumentParser",
    "trl.TrlParser",
    "trl.scripts.utils.TrlParser",
)
TRAINING = f"{OPTIMUM}.models.training"
TRAINING_MODELS = {
    **dict.fromkeys(
        _paths("NeuronModelForCausalLM", TRAINING, f"{TRAINING}.modeling_auto"),
        "AutoModelForCausalLM",
    ),
    **dict.fromkeys(_paths("NeuronModel", TRAINING, f"{TRAINING}.modeling_auto"), "AutoModel"),
    # Re-exported by `optimum.neuron.models.training` from the module that defines each one.
    **{
        path: name
        for package, name in (
            ("llama", "LlamaForCausalLM"),
            ("granite", "GraniteForCausalLM"),
            ("qwen3", "Qwen3ForCausalLM"),
        )
        for path in _paths(name, TRAINING, f"{TRAINING}.{package}.modeling_{package}")
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

# Every optimum-neuron name some codemod of the family rewrites (their imports go with them).
OPTIMUM_RENAMES = {*RENAMES, *inference.RENAMES, *diffusion.RENAMES}

FLOAT32 = frozenset({"torch.float32", "torch.float", '"float32"'})
TRL_PADDING_NOTE = f'TRL pads SFT batches to a multiple of {TRL_NEURON_PAD_MULTIPLE} on Neuron (`pad_to_multiple_of="auto"`) instead of to `max_length`: a few compiled shapes rather than one'

PARSE_METHODS = ("parse_args_into_dataclasses", "parse_args_and_config", "parse_json_file", "parse_yaml_file", "parse_dict")
# What parses the command line (TRL's also reads the `--config` file it names, as defaults).
COMMAND_LINE = frozenset({"parse_args_into_dataclasses", "parse_args_and_config"})
# What reads a file of arguments, whose keys must be the native classes' fields.
FILE_READERS = frozenset({"parse_args_and_config", "parse_json_file", "parse_yaml_file"})


@dataclass
class _Parsed:
    """A training-arguments object that comes out of an argument parser."""

    parser_index: int  # position of the Neuron class in the parser's dataclass tuple
    scope: str | None = None  # the function the parser runs in, None at module level
    parallel_var: str | None = None  # the new unpacked name


@dataclass
class _TrainingFacts:
    """What the whole file says about its training arguments, before any rewrite."""

    parsed: dict[str, _Parsed] = field(default_factory=dict)  # args var -> where it comes from
    needs_parallel: bool = False  # parsed arguments' model-parallel flags are read
    # (function, `x`) of each `x.trn_config` read: a reader elsewhere sees another variable.
    trn_config_readers: set[tuple[Scope, str]] = field(default_factory=set)
    string_model_args: set[str] = field(default_factory=set)  # SFT configs given a model id
    # The models a Neuron trainer trains, by (function, variable): where their sizes come from.
    sharded: dict[tuple[Scope, str], ShardedLoad] = field(default_factory=dict)
    forwarded: set[str] = field(
        default_factory=set
    )  # functions given the parsed sizes as a parameter
    parser_methods: dict[str, set[str]] = field(default_factory=dict)  # parser var -> its methods called
    # args var -> the dtypes (source) of the models its Neuron trainer trains ("" for none given)
    load_dtypes: dict[str, set[str]] = field(default_factory=dict)
    # `args = training_args.to_dict()`, its only assignment: "args" -> "training_args"
    argument_dicts: dict[str, str] = field(default_factory=dict)
    # names handed to optimum-neuron API that no codemod rewrites -> that API, as written
    to_unmigrated: dict[str, str] = field(default_factory=dict)
    # a `TrainingNeuronConfig` here may shard a model with tensor parallelism
    sharded_by_config: bool = False


def _training_facts(source: str, table: ImportTable) -> _TrainingFacts:
    facts = _TrainingFacts()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return facts

    def qualified(expr: ast.AST) -> str | None:
        dotted = ast_dotted_name(expr)
        return table.resolve_dotted(dotted) if dotted else None

    scopes = enclosing_functions(tree)
    facts.trn_config_readers = {
        (scopes.get(id(n)), n.value.id)
        for n in all_nodes(tree)
        if isinstance(n, ast.Attribute) and n.attr == "trn_config" and isinstance(n.value, ast.Name)
    }
    facts.argument_dicts = _argument_dicts(tree)
    for n in all_nodes(tree):
        if isinstance(n, ast.Call) and _unmigrated(qualified(n.func)):
            for value in [*n.args, *(k.value for k in n.keywords)]:
                if isinstance(value, ast.Name):
                    facts.to_unmigrated.setdefault(value.id, ast.unparse(n.func))
    facts.sharded_by_config = any(
        isinstance(n, ast.Call) and qualified(n.func) in TRN_CONFIG_CLASS and _may_shard(n)
        for n in all_nodes(tree)
    )
    parsers = _parser_indexes(tree, qualified)
    facts.parsed = _parsed_arguments(tree, qualified, parsers)
    for n in all_nodes(tree):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in parsers
        ):
            facts.parser_methods.setdefault(n.func.value.id, set()).add(n.func.attr)
    facts.string_model_args = _sft_configs_given_model_ids(tree, qualified)
    loads = sharded_loads(
        tree,
        source,
        qualified,
        (*TRAINER, *SFT_TRAINER),
        (*TRAINING_ARGS, *SFT_CONFIG),
        {name: parsed.scope for name, parsed in facts.parsed.items()},
    )
    # Training models take their sizes from their own `trn_config` argument.
    facts.sharded = {k: v for k, v in loads.items() if v.loader not in TRAINING_MODELS}
    for load in loads.values():
        facts.load_dtypes.setdefault(load.args_var, set()).add(load.dtype)
    # `def train(script_args, training_args): ... training_args.trn_config ...`, called with the parsed ones.
    readers = {
        (scopes.get(id(n)), n.value.id)
        for n in all_nodes(tree)
        if isinstance(n, ast.Attribute)
        and (n.attr == "trn_config" or n.attr in PARALLEL_FIELDS)
        and isinstance(n.value, ast.Name)
    }
    facts.forwarded = forwarded_to(
        tree, facts.sharded, {name: parsed.scope for name, parsed in facts.parsed.items()}, readers
    )
    # The flags stay on the command line when they are read, or when a trained model is loaded
    # where the parsed arguments may reach it.
    facts.needs_parallel = _reads_parallel_flags(tree, set(facts.parsed)) or bool(
        facts.parsed and any(load.origin != "constructed" for load in facts.sharded.values())
    )
    if facts.needs_parallel:
        taken = {n.id for n in all_nodes(tree) if isinstance(n, ast.Name)} | {
            a.arg for a in all_nodes(tree) if isinstance(a, ast.arg)
        }
        var = (
            "parallel_args"
            if "parallel_args" not in {*taken, *table.bindings}
            else "model_parallel_args"
        )
        for parsed in facts.parsed.values():
            parsed.parallel_var = var
    return facts


def _argument_dicts(tree: ast.AST) -> dict[str, str]:
    """Names bound once, to `x.to_dict()`, and what they are the dict of."""
    bound: dict[str, list[ast.AST]] = {}
    for n in all_nodes(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            bound.setdefault(n.id, []).append(n)
    found = {}
    for n in all_nodes(tree):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and len(bound.get(n.targets[0].id, [])) == 1
            and isinstance(n.value, ast.Call)
            and not n.value.args
            and isinstance(n.value.func, ast.Attribute)
            and n.value.func.attr == "to_dict"
            and isinstance(n.value.func.value, ast.Name)
        ):
            found[n.targets[0].id] = n.value.func.value.id
    return found


def _neuron_arguments_index(classes: ast.AST | None, qualified: Qualifier) -> int | None:
    """Where the Neuron training-arguments class sits in a parser's tuple of dataclasses."""
    if not isinstance(classes, ast.Tuple | ast.List):
        return None
    arguments = {*TRAINING_ARGS, *SFT_CONFIG}
    return next((i for i, e in enumerate(classes.elts) if qualified(e) in arguments), None)


def _parser_indexes(tree: ast.AST, qualified: Qualifier) -> dict[str, int]:
    """Parser variables built over a Neuron training-arguments class -> the class's position."""
    parsers: dict[str, int] = {}
    for n in all_nodes(tree):
        if not isinstance(n, ast.Assign) or not isinstance(n.value, ast.Call):
            continue
        call = n.value
        if qualified(call.func) not in (*PARSER, *HF_PARSER) or not call.args:
            continue
        index = _neuron_arguments_index(call.args[0], qualified)
        if index is not None and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            parsers[n.targets[0].id] = index
    return parsers


def _parsed_arguments(
    tree: ast.AST, qualified: Qualifier, parsers: dict[str, int]
) -> dict[str, _Parsed]:
    """`a, b = parser.parse_args_into_dataclasses()`: the names bound to the Neuron arguments."""
    scopes = enclosing_functions(tree)
    parsed: dict[str, _Parsed] = {}
    for n in all_nodes(tree):
        if not (
            isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Attribute)
            and n.value.func.attr in PARSE_METHODS
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Tuple)
        ):
            continue
        parser = n.value.func.value
        index = None
        if isinstance(parser, ast.Name) and parser.id in parsers:
            index = parsers[parser.id]
        elif isinstance(parser, ast.Call) and qualified(parser.func) in (*PARSER, *HF_PARSER):
            index = _neuron_arguments_index(parser.args[0] if parser.args else None, qualified)
        target = n.targets[0].elts
        element = target[index] if index is not None and index < len(target) else None
        if index is not None and isinstance(element, ast.Name):
            parsed[element.id] = _Parsed(index, scope=scopes.get(id(n)))
    return parsed


def _reads_parallel_flags(tree: ast.AST, parsed_names: set[str]) -> bool:
    return any(
        isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in parsed_names
        and n.attr in ("trn_config", *PARALLEL_FIELDS)
        for n in all_nodes(tree)
    )


def _sft_configs_given_model_ids(tree: ast.AST, qualified: Qualifier) -> set[str]:
    """SFT configs handed to an `NeuronSFTTrainer` that loads the model from an id itself."""
    found: set[str] = set()
    for n in all_nodes(tree):
        if isinstance(n, ast.Call) and qualified(n.func) in SFT_TRAINER:
            model = next(
                (k.value for k in n.keywords if k.arg == "model"), n.args[0] if n.args else None
            )
            args = next(
                (k.value for k in n.keywords if k.arg == "args"),
                n.args[1] if len(n.args) > 1 else None,
            )
            if _looks_like_model_id(model) and isinstance(args, ast.Name):
                found.add(args.id)
    return found


class OptimumTraining(RenamingCodemod):
    """Migrates optimum-neuron training code to transformers, TRL and peft.

    ## What it does
    `NeuronTrainer`, `NeuronTrainingArguments`, `NeuronSFTTrainer`, `NeuronSFTConfig` and
    `NeuronHfArgumentParser` become `Trainer`, `TrainingArguments`, `trl.SFTTrainer`,
    `trl.SFTConfig` and `HfArgumentParser`. The training `NeuronModelForCausalLM` (imported from
    `optimum.neuron.models.training`) becomes `AutoModelForCausalLM`, and its `trn_config`
    argument becomes `distributed_config=DistributedConfig(tp_size=..., pp_size=...,
    enable_sequence_parallel=...)` built from `tensor_parallel_size`, `pipeline_parallel_size`
    and `disable_sequence_parallel`, with `fsdp_size=WORLD_SIZE // (tp_size * pp_size)`:
    optimum-neuron trained the processes beyond the model-parallel ones as data parallelism, and a
    `DistributedConfig` mesh must cover every process (beside pipeline parallelism, which
    transformers cannot combine with data parallelism, a TODO says so). A plain transformers
    model that a Neuron trainer trains gets the same `distributed_config` in its `from_pretrained`, the only place where transformers
    shards a model. When those flags come from the command line, a small
    `ModelParallelArguments` dataclass joins the parser so the same flags keep working, and is
    passed on to the function that loads the model when that function is called once.
    Sizes of 1 shard nothing and go; sizes this tool cannot carry to the load (arguments from
    elsewhere, a name rebound in between) leave a TODO at the load.
    Every other Neuron-only field of `NeuronTrainingArguments` is removed with its reason;
    those whose loss changes the run (ZeRO-1, master weights, xser checkpoints, ...) get a TODO.
    `optimum.neuron.peft` becomes `peft`, `lazy_load_for_parallelism` blocks are unwrapped.
    optimum-neuron reached in ways no rewrite can follow gets a TODO too: star imports,
    modules named in strings (`importlib.import_module`, `eval`, patch targets), and imports
    nothing in the file uses (natively they fail).

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
    import os

    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig
    from trl import SFTConfig, SFTTrainer

    WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))

    # TODO(neuron-migrate NM020): `zero_1=True` was removed: shard with FSDP2 (`DistributedConfig(fsdp_size=...)`) ...
    args = SFTConfig(output_dir="out")
    model = AutoModelForCausalLM.from_pretrained(
        model_id, distributed_config=DistributedConfig(tp_size=2, fsdp_size=WORLD_SIZE // 2), dtype=torch.bfloat16
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset)
    ```
    `--target neuron` also turns on `torch_compile=True` (the old stack compiled every step)
    and sets `HF_DEACTIVATE_ASYNC_LOAD=1`, which makes transformers load weights sequentially.

    ## Fix safety
    The training loop is the Trainer's now: optimum-neuron's ZeRO-1 optimizer, fp32 master
    weights and stochastic rounding are gone unless you rebuild them (the TODOs say how), and
    tensor parallelism needs `torchrun` and a model class with a tensor-parallel plan.
    Checkpoints are standard transformers checkpoints; `optimum-cli neuron consolidate` converts
    old sharded ones once. optimum-neuron trained bfloat16 weights through fp32 master weights,
    with fp32 gradient accumulation and stochastic rounding (its ZeRO-1 optimizer's defaults);
    natively `bf16=True` is autocast and AdamW updates the parameters in their own dtype, so a
    model loaded in bfloat16 loses the small updates: load it in float32 (autocast still
    computes in bfloat16). With `pp_size`, optimum-neuron trained the processes beyond tp_size *
    pp_size as data parallelism, which transformers 5.23 cannot combine with pipeline
    parallelism (`DistributedConfig` raises). SFT packing changes the loss: optimum-neuron
    padded each packed row to `max_length` and trained on all of it, pads and each document's
    first token included, with causal attention across the row's documents; TRL's `bfd` packing
    is padding-free (attention within each document, a new total length per batch), and no TRL
    option restores the old loss; `packing_strategy="wrapped"` gives fixed rows (documents cut
    at row ends, attended across). A removed field that the arguments also pass to
    optimum-neuron API the file keeps (`prepare_environment`) may still be read there.
    transformers shards a model only while loading it, so model-parallel sizes go to
    `from_pretrained(..., distributed_config=...)` under torchrun, and `distributed_config`
    excludes `device_map`. An optimum-neuron import nothing in the file uses (an availability
    test, a re-export) fails natively: inside `try`, the `except ImportError` branch runs.
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
        f"{OPTIMUM}.NeuronAccelerator": "use `accelerate.Accelerator`, which picks the `neuron` device and process group itself",
        f"{OPTIMUM}.accelerate": "use `accelerate` (`Accelerator`, `PartialState`), which supports the `neuron` device natively",
        f"{OPTIMUM}.NeuronAcceleratorState": "use `accelerate.state.AcceleratorState`",
        f"{OPTIMUM}.NeuronPartialState": "use `accelerate.PartialState`",
        f"{OPTIMUM}.utils.is_precompilation": "there is no precompilation pass natively: treat this as False",
        f"{OPTIMUM}.utils.is_neuronx_available": 'test `torch.accelerator.current_accelerator()` (its `.type` is `"neuron"` on Trainium) instead',
        f"{OPTIMUM}.utils.is_torch_neuronx_available": 'test `torch.accelerator.current_accelerator()` (its `.type` is `"neuron"` on Trainium) instead',
        f"{OPTIMUM}.models.training.consolidate_model_parallel_checkpoints_to_unified_checkpoint": "native checkpoints are unified (`save_pretrained`)",
        f"{OPTIMUM}.models.training.NeuronModelMixin": "subclass `transformers.PreTrainedModel` and shard with `DistributedConfig` / a `tp_plan`",
        f"{OPTIMUM}.models.training.CustomModule": "Neuron-specific weight transformations; transformers loads the original layout",
        f"{OPTIMUM}.distributed": "optimum-neuron's parallelization helpers: shard with `DistributedConfig(tp_size=...)` in `from_pretrained`",
        # Merging shards already on disk is no sharding at load time: the shards are optimum-neuron's format.
        **dict.fromkeys(
            (
                f"{OPTIMUM}.distributed.checkpointing.consolidate_model_parallel_checkpoints",
                f"{OPTIMUM}.distributed.consolidate_model_parallel_checkpoints",
                f"{OPTIMUM}.models.training.checkpointing.consolidate_model_parallel_checkpoints",
            ),
            "`{name}` merges optimum-neuron's shards: run it where optimum-neuron is installed",
        ),
        f"{OPTIMUM}.trainers": "use the transformers `Trainer` / TRL counterpart",
        f"{OPTIMUM}.utils.testing_utils": "`{name}` is an optimum-neuron test marker: use `pytest.mark.skipif(...)` with a condition of your own",
        OPTIMUM: "`{name}` is optimum-neuron API with no automatic migration: use the transformers / TRL / diffusers counterpart",
    }

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        # (binding, args var) -> its model-parallel keywords (the same name in another function
        # is another variable; None: some came through `**` unpacking, unknown)
        self._constructed: dict[tuple[object, str], dict[str, cst.BaseExpression] | None] = {}
        self.facts = _TrainingFacts()
        self._loads: dict[str, int] = {}  # how often each name is read in the file
        self._strings_name_optimum = False
        self._functions: list[str] = []
        self._calls: list[str | None] = []  # what each call being visited calls, innermost last

    # -- whole-file facts -----------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self.facts = _training_facts(self.ctx.source, self.ctx.imports)
        self._loads = name_loads(self.ctx.source)
        # A file that names optimum-neuron in strings uses its imports there (`eval`, patches).
        self._strings_name_optimum = any(
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and named_module(n.value, (OPTIMUM,), importing=True) is not None
            for n in ast.walk(ast.parse(self.ctx.source))
        )

    # -- what this tool cannot see ------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        note_run_time_import(self, node)
        self._calls.append(self.qualify(node.func))

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.SimpleString:
        mark_named_module(self, original_node, (OPTIMUM,))
        return updated_node

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.FormattedString:
        mark_named_module(self, original_node, (OPTIMUM,))
        return updated_node

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        self._mark_unused(original_node)
        return super().leave_Import(original_node, updated_node)

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> Any:
        mark_star_import(self, original_node, (OPTIMUM,))
        self._mark_unused(original_node)
        return super().leave_ImportFrom(original_node, updated_node)

    def _mark_unused(self, node: cst.Import | cst.ImportFrom) -> None:
        """TODO at an optimum-neuron import nothing uses: natively the import itself fails."""
        if isinstance(node.names, cst.ImportStar) or self._strings_name_optimum:
            return
        module = (
            dotted_name(node.module) if isinstance(node, cst.ImportFrom) and node.module else None
        )
        if isinstance(node, cst.ImportFrom) and (node.relative or module is None):
            return
        unused = []
        for alias in node.names:
            written = code_of(alias.name)
            qualified = f"{module}.{written}" if module else written
            local = alias.asname.name if alias.asname is not None else None
            name = code_of(local) if local is not None else written.split(".")[0]
            if (
                (qualified == OPTIMUM or qualified.startswith(OPTIMUM + "."))
                and qualified not in OPTIMUM_RENAMES
                and not self._loads.get(name)
            ):
                unused.append(name)
        if unused:
            self.todo(
                f"nothing here uses {names_in(unused)} from optimum-neuron, which is not installed natively: this import fails there"
            )

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
        name = updated_node.name.value
        if not self._functions and name in self.facts.forwarded:
            params = updated_node.params
            added = cst.Param(cst.Name(self._parallel_var()))
            if params.params:
                last = params.params[-1]
                comma = (
                    last.comma
                    if isinstance(last.comma, cst.Comma)
                    else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
                added = added.with_changes(comma=last.comma)
                params = params.with_changes(
                    params=[*params.params[:-1], last.with_changes(comma=comma), added]
                )
            else:
                params = params.with_changes(params=[added])
            updated_node = updated_node.with_changes(params=params)
        return self._compound(updated_node)

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> Any:
        lazy = [item for item in updated_node.items if self.called(item.item, *LAZY_LOAD)]
        if not lazy:
            return self._compound(updated_node)
        kept = [item for item in updated_node.items if item not in lazy]
        sharded = self._shard_lazy_loads(lazy[0].item, updated_node.body)
        if sharded is not None:
            updated_node = updated_node.with_changes(body=sharded)
            self.changed("`with lazy_load_for_parallelism(...)` removed: transformers loads weights as it shards them")
        else:
            self.changed("`with lazy_load_for_parallelism(...)` removed: the loads under it shard nothing yet (see the TODO)")
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

    def _shard_lazy_loads(self, lazy: cst.BaseExpression, body: cst.BaseSuite) -> cst.BaseSuite | None:
        """A model loaded under `lazy_load_for_parallelism(tensor_parallel_size=n)` was sharded
        over n cores: its `from_pretrained` must now get the sizes itself. `body` with the parsed
        flags' `DistributedConfig` given to its loads where the sizes are those flags; None where
        they shard nothing (a TODO says what to pass)."""
        assert isinstance(lazy, cst.Call)
        sizes = {
            a.keyword.value: literal(a.value)
            for a in lazy.args
            if a.keyword is not None and a.keyword.value in PARALLEL_FIELDS
        }
        if all(is_default_size(k, v) for k, v in sizes.items()):
            return body
        loads = [
            n
            for n in _direct_calls(body)
            if isinstance(n.func, cst.Attribute) and n.func.attr.value == "from_pretrained"
        ]
        if not loads or any(keyword(n, "distributed_config") is None for n in loads):
            tp = next((a.value for a in lazy.args if a.keyword is not None and a.keyword.value == "tensor_parallel_size"), None)
            parallel_var = next((p.parallel_var for p in self.facts.parsed.values() if p.parallel_var), None)
            if loads and parallel_var is not None and isinstance(tp, cst.Attribute) and tp.attr.value in PARALLEL_FIELDS:
                config = cst.parse_expression(f"{parallel_var}.to_distributed_config()")  # the parsed flags
                for load in loads:
                    if keyword(load, "distributed_config") is None:
                        body = body.deep_replace(load, with_args(load, [*load.args, make_arg("distributed_config", config)]))  # type: ignore[arg-type]
                self.changed(f"`from_pretrained` under `lazy_load_for_parallelism` -> `distributed_config={parallel_var}.to_distributed_config()`")
                self._torchrun_note()
                return body
            size = code_of(tp) if tp is not None and len(code_of(tp)) <= 6 else "..."
            self.todo(f"`lazy_load_for_parallelism` sharded it: pass `distributed_config=DistributedConfig(tp_size={size})` to `from_pretrained`")
            return None
        return body

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
        if isinstance(base, cst.Name) and attr in TRAINING_FIELDS and self._arguments(base.value):
            self.todo(
                f"`{base.value}.{attr}`: `TrainingArguments` has no `{attr}` (removed): use the value these arguments were built with"
            )
        return super().leave_Attribute(original_node, updated_node)

    def _parallel_read(self, var: str, attr: str) -> cst.BaseExpression | None:
        if self._calls and _unmigrated(self._calls[-1]):
            return None  # handed to optimum-neuron API that stays, under its own TODO
        parsed = self.facts.parsed.get(var)
        if parsed is not None and parsed.parallel_var is not None:
            owner = self.ctx.scope.lookup(var.split(".")[0])
            # `def load(training_args): ...`: a parameter (or local) of that name is whatever the
            # caller passes, not the arguments parsed elsewhere.
            shadowed = owner is not None and (
                owner is not self.ctx.scope.module
                if parsed.scope is None
                else owner is self.ctx.scope and self._functions[-1:] != [parsed.scope]
            )
            # A function called once, with the parsed arguments, gets the flags as a parameter too.
            forwarded = len(self._functions) == 1 and self._functions[0] in self.facts.forwarded
            unreached = shadowed or (parsed.scope is not None and parsed.scope not in self._functions)
            if unreached and not forwarded:
                where = f" in `{parsed.scope}()`" if parsed.scope is not None else ""
                self.todo(
                    f"`{var}.{attr}`: the model-parallel flags are in `{parsed.parallel_var}`{where}: use `{parsed.parallel_var}.to_distributed_config()`"
                )
                return None
            if attr == "trn_config":
                self.changed(
                    f"`{var}.trn_config` -> `DistributedConfig` from the model-parallel flags"
                )
                return cst.parse_expression(f"{parsed.parallel_var}.to_distributed_config()")
            return cst.parse_expression(f"{parsed.parallel_var}.{attr}")
        key = (self.ctx.binding_key(var.split(".")[0]), var)
        kwargs = self._constructed.get(key)
        if attr == "trn_config" and (kwargs is None or not self._simple(kwargs)):
            # Arguments built elsewhere, or from values that cannot be repeated here. (Said the same
            # way as for arguments that are no Neuron class any more: a second run agrees.)
            self.todo(
                f"`{var}.trn_config`: `TrainingArguments` has none; pass a `DistributedConfig` with `{var}`'s model-parallel sizes"
            )
            return None
        if key not in self._constructed:
            return None
        if kwargs is None or not self._simple(kwargs):
            self.todo(
                f"`{var}.{attr}`: `TrainingArguments` has no model-parallel sizes; use the value `{var}` was built with"
            )
            return None
        if attr == "trn_config" and all(is_default_size(k, literal(v)) for k, v in kwargs.items()):
            self.changed(f"`{var}.trn_config` -> `None`: `{var}` shards nothing")
            return cst.Name("None")
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
        remainder = self._data_parallel(kwargs)
        if remainder is not None:
            parts.append(f"fsdp_size={remainder}")
        if "disable_sequence_parallel" in kwargs:
            value = kwargs["disable_sequence_parallel"]
            flag = literal(value)
            if flag is False:
                parts.append("enable_sequence_parallel=True")
            elif flag is ...:
                parts.append(f"enable_sequence_parallel=not {code_of(value)}")
        elif "tensor_parallel_size" in kwargs and literal(kwargs["tensor_parallel_size"]) != 1:
            parts.append("enable_sequence_parallel=True")  # optimum-neuron's default
        if any(part.startswith("enable_sequence_parallel") for part in parts):
            self.ctx.note(self.code, SEQUENCE_PARALLEL_NOTE)
        return cst.parse_expression(f"{cls}({', '.join(parts)})")

    def _data_parallel(self, kwargs: dict[str, cst.BaseExpression]) -> str | None:
        """The `fsdp_size` of the processes the model-parallel sizes leave over (None: unsharded)."""
        pipeline = literal(kwargs.get("pipeline_parallel_size"))
        if isinstance(pipeline, int) and pipeline > 1:
            self.todo(
                f"`pp_size={pipeline}`: launch exactly tp_size * pp_size processes, or drop `pp_size` for `fsdp_size=` data parallelism"
            )
            return None
        sizes = [
            code_of(kwargs[k])
            for k in ("tensor_parallel_size", "pipeline_parallel_size")
            if k in kwargs and literal(kwargs[k]) is not None
        ]
        return data_parallel_size(self.ctx.env_world_size_expr(), sizes)

    # -- calls ----------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self._calls.pop()
        mark_run_time_import(self, original_node, (OPTIMUM,))
        name = self.qualify(original_node.func)
        if name in TRAINING_ARGS or name in SFT_CONFIG:
            return self._training_arguments(updated_node, sft=name in SFT_CONFIG)
        if name in (*PARSER, *HF_PARSER):
            self._parsed_defaults(original_node)
            return self._parser(updated_node)
        if name in TRAINER or name in SFT_TRAINER:
            return upgrade_call(self, updated_node, ("trl.SFTTrainer" if name in SFT_TRAINER else "transformers.Trainer",))
        if name in TRN_CONFIG_CLASS:
            return self._trn_config_class(updated_node)
        if name in MAIN_WORKER:
            return self._main_worker(updated_node)
        if name is not None and "." in name:
            owner, _, method = name.rpartition(".")
            if owner in TRAINING_MODELS and method == "from_pretrained":
                return self._from_pretrained(updated_node)
            if owner in TRAINING_MODELS and method == "from_config":
                return self._built_unsharded(updated_node, "`from_config`")
        if name in TRAINING_MODELS and name.rpartition(".")[2] == TRAINING_MODELS[name]:
            return self._built_unsharded(updated_node, f"`{TRAINING_MODELS[name]}(config)`")
        if (
            isinstance(original_node.func, cst.Name)
            and original_node.func.value in self.facts.forwarded
        ):
            return self._forward_to(updated_node)
        load = self._sharded_load(original_node)
        if load is not None:
            return self._shard_while_loading(updated_node, load)
        return updated_node

    def _built_unsharded(self, call: cst.Call, how: str) -> cst.Call:
        """A training model built from its config took the `trn_config` to shard by; a
        transformers model built that way is never sharded."""
        positional = [a for a in call.args if a.keyword is None and not a.star]
        trn_config = positional[1] if len(positional) > 1 else keyword(call, "trn_config")
        if trn_config is None:
            return call
        if not _unsharded(trn_config.value):
            self.todo(
                f"{how} does not apply a `DistributedConfig`: pass it to `from_pretrained`, or `parallelize_module`"
            )
        self.changed(f"{how}: the `trn_config` argument goes (a transformers model takes none)")
        return with_args(call, [a for a in call.args if a is not trn_config])

    def _sharded_load(self, call: cst.Call) -> ShardedLoad | None:
        """The load this call is, when it loads a model a Neuron trainer trains."""
        if not (
            call is self._assigned_value
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "from_pretrained"
            and self._current_target is not None
        ):
            return None
        return self.facts.sharded.get((self._scope(), self._current_target))

    def _shard_while_loading(self, call: cst.Call, load: ShardedLoad) -> cst.Call:
        """Give the load of a trained model the model-parallel sizes of its training arguments."""
        if any(keyword(call, k) is not None for k in PLACEMENT_KEYWORDS):
            return call
        config = self._load_distributed_config(load)
        if config is None:
            return call
        if keyword(call, "device_map") is not None:
            self.todo(
                f"`{load.args_var}` sharded this model: pass `distributed_config={config}` here instead of `device_map`, launch with torchrun"
            )
            return call
        self.changed(
            f"the model-parallel sizes of `{load.args_var}` -> `from_pretrained(..., distributed_config={config})`"
        )
        self._torchrun_note()
        return with_args(call, [*call.args, make_arg("distributed_config", config)])

    def _load_distributed_config(self, load: ShardedLoad) -> str | None:
        """The `DistributedConfig` expression for a load, or None (nothing to shard, or a TODO)."""
        if load.origin == "parsed":
            parsed = self.facts.parsed[load.args_var]
            return f"{parsed.parallel_var}.to_distributed_config()"
        if self._scope() in self.facts.forwarded:
            return f"{self._parallel_var()}.to_distributed_config()"
        if load.origin == "constructed":
            if all(is_default_size(k, literal(cst.parse_expression(v))) for k, v in load.sizes):
                return None
            if load.movable:
                values = {k: cst.parse_expression(v) for k, v in load.sizes}
                return code_of(self._distributed_config(values))
        self.todo(self._unseen_sizes(load.args_var))
        return None

    def _unseen_sizes(self, args_var: str) -> str:
        parsed = self.facts.parsed.get(args_var)
        if parsed is not None and parsed.parallel_var is not None:
            where = f" in `{parsed.scope}()`" if parsed.scope else ""
            return f"the model-parallel flags of `{args_var}` are in `{parsed.parallel_var}`{where}: pass `distributed_config={parsed.parallel_var}.to_distributed_config()`"
        return f"if `{args_var}` sets `tensor_parallel_size` above 1, pass `distributed_config=DistributedConfig(tp_size=...)` here, launch with torchrun"

    def _parallel_var(self) -> str:
        """The variable the model-parallel flags are parsed into."""
        return next(p.parallel_var for p in self.facts.parsed.values() if p.parallel_var)

    def _forward_to(self, call: cst.Call) -> cst.Call:
        """`train(script_args, training_args)` also passes the parsed model-parallel flags."""
        var = self._parallel_var()
        if call.args and all(a.keyword is None and not a.star for a in call.args):
            new = cst.Arg(cst.Name(var))
        else:
            new = make_arg(var, var)
        self.changed(f"`{var}` (the model-parallel flags) passed on to `{code_of(call.func)}`")
        return with_args(call, [*call.args, new])

    def _torchrun_note(self) -> None:
        self.ctx.note(
            self.code,
            "tensor/pipeline parallelism (`DistributedConfig`) needs one process per core: launch with `torchrun --nproc_per_node=<tp_size * pp_size * data-parallel size>`",
        )

    def _training_arguments(self, call: cst.Call, sft: bool) -> cst.Call:
        args: list[cst.Arg] = []
        parallel: dict[str, cst.BaseExpression] = {}
        present = {a.keyword.value for a in call.args if a.keyword is not None}
        for arg in call.args:
            key = arg.keyword.value if arg.keyword is not None else None
            if key in PARALLEL_FIELDS:
                parallel[key] = arg.value
                continue
            kept = self._training_argument(arg, key, present, sft)
            if kept is not None:
                args.append(kept)
        splats = [a for a in call.args if a.star == "**"]
        unknown = [a for a in splats if not self._migrated_arguments_dict(a.value)]
        defaults = SFT_NEURON_DEFAULTS if sft else NEURON_DEFAULTS
        new_class = "SFTConfig" if sft else "TrainingArguments"
        if unknown:
            self.todo(
                f"`**{code_of(unknown[0].value)}` must not hold optimum-neuron-only fields (`tensor_parallel_size`, `zero_1`, ...): `{new_class}` rejects them"
            )
        elif not splats:
            sizes = {k: literal(v) for k, v in parallel.items()}
            if self.facts.sharded_by_config or not all(
                is_default_size(k, v) for k, v in sizes.items()
            ):
                defaults = {k: v for k, v in defaults.items() if k not in NOT_WITH_TENSOR_PARALLEL}
                self.ctx.note(self.code, TOKEN_AVERAGE_NOTE)
            pinned = [
                NATIVE_NAMES.get(k, k)
                for k in defaults
                if k not in present and NATIVE_NAMES.get(k, k) not in present
            ]
            neuron_name = {NATIVE_NAMES.get(k, k): k for k in defaults}
            args += [make_arg(k, python_literal(defaults[neuron_name[k]])) for k in pinned]
            if pinned:
                self.ctx.comment(
                    f"# From `{pinned[0]}` on: optimum-neuron's defaults, where {_possessive(new_class)} differ."
                )
                self.changed(f"optimum-neuron's defaults written out where those of `{new_class}` differ: {names_in(pinned)}")
        self._check_master_weights(call, present, parsed=False)
        self._remember_parallel(parallel, opaque=bool(splats))
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
            self.ctx.note(self.code, TRL_PADDING_NOTE)
        self.changed(
            "`NeuronSFTConfig` -> `trl.SFTConfig`"
            if sft
            else "`NeuronTrainingArguments` -> `TrainingArguments`"
        )
        return with_args(call, args)

    def _arguments(self, var: str) -> bool:
        """Does `var` hold training arguments this codemod migrated?"""
        return (self.ctx.binding_key(var), var) in self._constructed or var in self.facts.parsed

    def _migrated_arguments_dict(self, value: cst.BaseExpression) -> bool:
        """`training_args.to_dict()` of arguments this codemod migrated: their fields are all
        native ones, with optimum-neuron's defaults already written out."""
        if isinstance(value, cst.Name) and value.value in self.facts.argument_dicts:
            return self._arguments(self.facts.argument_dicts[value.value])
        if not (
            isinstance(value, cst.Call)
            and not value.args
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "to_dict"
            and isinstance(value.func.value, cst.Name)
        ):
            return False
        return self._arguments(value.func.value.value)

    def _check_master_weights(self, call: cst.Call, present: set[str], parsed: bool) -> None:
        """bf16 without `use_autocast` trained bfloat16 weights through the ZeRO-1 optimizer's fp32
        master weights, fp32 gradient accumulation and stochastic rounding (all on by default);
        natively `bf16=True` is autocast, and AdamW updates the parameters in their own dtype."""

        def given(name: str) -> Any:
            arg = keyword(call, name)
            return literal(arg.value) if arg is not None else None

        bf16 = keyword(call, "bf16")
        may_be_bf16 = (bf16 is not None and literal(bf16.value) is not False) or (
            parsed and not any(a.star for a in call.args)
        )
        arguments = (
            [name for name, p in self.facts.parsed.items() if p.scope == self._scope()]
            if parsed
            else [self._current_target or ""]
        )
        dtypes = set().union(*(self.facts.load_dtypes.get(a, set()) for a in arguments))
        if (
            not may_be_bf16
            or given("use_autocast") is True
            or given("zero_1") is False
            or given("optimizer_use_master_weights") is False
            # A model loaded in float32 trains natively as it did: bf16 compute, fp32 weights (a
            # load given no dtype is given float32, transformers 4's default, by NM203).
            or (dtypes and dtypes <= FLOAT32 | {""})
        ):
            return
        when = "With `--bf16` (and no `--use_autocast`), optimum-neuron" if parsed else "optimum-neuron"
        self.todo(
            f"{when} kept fp32 master weights: load the model in float32"
        )

    def _training_argument(
        self, arg: cst.Arg, key: str | None, present: set[str], sft: bool
    ) -> cst.Arg | None:
        """One keyword of the Neuron arguments as `TrainingArguments` takes it, or None if it goes."""
        upgraded = _upgrade_entry("trl.SFTConfig" if sft else "transformers.TrainingArguments", key)
        if upgraded is not None:
            return upgrade_argument(self, arg, upgraded, present)
        if sft and key == "packing" and literal(arg.value) is not False:
            self.todo(
                'the loss changes: TRL\'s `bfd` packing is padding-free, unlike optimum-neuron\'s: keep it, or pass `packing_strategy="wrapped"`'
            )
        table = {**TRAINING_FIELDS, **(SFT_FIELDS if sft else {})}
        if key not in table:
            return arg
        entry = table[key]
        consumer = self.facts.to_unmigrated.get(self._current_target or "")
        if consumer is not None:
            self.todo(
                f"`{key}=` was removed, but `{consumer}` (optimum-neuron, kept) may read it: migrate that code first"
            )
        elif entry.kind == "todo" and literal(arg.value) != entry.neutral:
            self.todo(f"`{key}={code_of(arg.value)}` was removed: {entry.why}")
        elif entry.kind == "todo":
            self.changed(
                f"dropped `{key}={code_of(arg.value)}`: natively there is nothing to turn off"
            )
        else:
            self.changed(f"dropped `{key}`: {entry.why}")
        return None

    def _remember_parallel(
        self, parallel: dict[str, cst.BaseExpression], opaque: bool = False
    ) -> None:
        """Decide, at the arguments, whether their model-parallel sizes reach a model.

        `opaque`: more keywords come through `**` unpacking, so the sizes cannot be known.
        """
        var = self._current_target
        if var is not None:
            key = (self.ctx.binding_key(var.split(".")[0]), var)
            self._constructed[key] = None if opaque else parallel
        if opaque:
            return
        sizes = {k: literal(v) for k, v in parallel.items()}
        if all(is_default_size(k, v) for k, v in sizes.items()):
            if parallel:
                self.changed("dropped the default model-parallel sizes")
            return
        if (
            var in self.facts.string_model_args
            and (self._scope(), var) not in self.facts.trn_config_readers
            and self._simple(parallel)
        ):
            self._pending_model_init = self._distributed_config(parallel)
            return
        if var is not None and (
            (self._scope(), var) in self.facts.trn_config_readers or self._routed(var)
        ):
            self.changed(
                "model-parallel sizes moved to the model's `from_pretrained(..., distributed_config=...)`"
            )
            return
        given = ", ".join(f"`{k}={code_of(v)}`" for k, v in parallel.items())
        self.todo(
            f"{given} no longer shard the model here: pass `distributed_config=DistributedConfig(...)` to the `from_pretrained` that loads it"
        )

    def _routed(self, args_var: str) -> bool:
        """Is a model the trainer trains with `args_var` loaded where the sizes can be passed?"""
        scope = self._scope()
        return any(
            key[0] == scope
            and load.args_var == args_var
            and load.origin == "constructed"
            and load.movable
            for key, load in self.facts.sharded.items()
        )

    @staticmethod
    def _simple(values: dict[str, cst.BaseExpression]) -> bool:
        """Values that can be repeated where they are read: literals and plain names."""
        return all(
            literal(v) is not ... or isinstance(v, cst.Name | cst.Attribute)
            for v in values.values()
        )

    def _scope(self) -> Scope:
        return self._functions[-1] if self._functions else None

    _pending_model_init: cst.BaseExpression | None = None
    _current_target: str | None = None
    _assigned_value: cst.BaseExpression | None = None

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self._current_target = target.value if isinstance(target, cst.Name) else None
        self._assigned_value = node.value

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        self._current_target = None
        self._assigned_value = None
        if self._pending_model_init is not None and isinstance(updated_node.value, cst.Call):
            call = updated_node.value
            if keyword(call, "model_init_kwargs") is None:
                # TRL loads with `device_map="auto"` on accelerators (not for MULTI_NEURON), which
                # transformers refuses next to a `distributed_config`.
                value = cst.parse_expression(
                    f'{{"distributed_config": {code_of(self._pending_model_init)}, "device_map": None}}'
                )
                call = with_args(call, [*call.args, make_arg("model_init_kwargs", value)])
                self.changed(
                    'model-parallel sizes -> `model_init_kwargs={"distributed_config": DistributedConfig(...), "device_map": None}` (TRL loads the model)'
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
            and self.facts.needs_parallel
        ):
            names = [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
            parsed = next((self.facts.parsed[n] for n in names if n in self.facts.parsed), None)
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
                # The dataclasses come first, in order; the remaining strings, when asked for, last.
                remaining = arg_value(value, None, "return_remaining_strings")
                at = len(elements) - 1 if remaining is not None and code_of(remaining.value) == "True" else len(elements)
                new = cst.Element(value=cst.Name(var), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                elements.insert(at, new if at < len(elements) else new.with_changes(comma=cst.MaybeSentinel.DEFAULT))
                if at < len(elements) - 1:
                    elements[-1] = elements[-1].with_changes(comma=last.comma)
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
            not self.facts.needs_parallel
            or not call.args
            or not isinstance(call.args[0].value, cst.Tuple | cst.List)
        ):
            if self.facts.parsed:
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
            PARALLEL_ARGUMENTS.format(
                dataclass=decorator,
                DistributedConfig=distributed,
                world_size=self.ctx.env_world_size_expr(),
                remainder_comment=REMAINDER_COMMENT,
            ),
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

    def _parsed_defaults(self, call: cst.Call) -> None:
        """A parser over the Neuron arguments filled every flag not given with optimum-neuron's
        default: keep those defaults where the native class has others (`set_defaults` reaches
        the command line only; files and dicts are read without argparse)."""
        container = call.args[0].value if call.args else None
        if not isinstance(container, cst.Tuple | cst.List):
            return
        names = [self.qualify(e.value) for e in container.elements]
        if not any(n in (*TRAINING_ARGS, *SFT_CONFIG) for n in names):
            return
        sft = any(n in SFT_CONFIG for n in names)
        defaults = SFT_NEURON_DEFAULTS if sft else NEURON_DEFAULTS
        # `--tensor_parallel_size` reaches the model, or a `TrainingNeuronConfig` may shard it
        if self.facts.needs_parallel or self.facts.sharded_by_config:
            defaults = {k: v for k, v in defaults.items() if k not in NOT_WITH_TENSOR_PARALLEL}
            self.ctx.note(self.code, TOKEN_AVERAGE_NOTE)
        new_class = "SFTConfig" if sft else "TrainingArguments"
        values = ", ".join(f"{NATIVE_NAMES.get(k, k)}={python_literal(v)}" for k, v in defaults.items())
        parser = self._current_target if call is self._assigned_value else None
        methods = self.facts.parser_methods.get(parser, set()) if parser else set()
        self._check_master_weights(call, set(), parsed=True)
        files = sorted(methods & set(PARSE_METHODS) - COMMAND_LINE)
        if parser is None or not methods & COMMAND_LINE:
            files = files or ["parse_args_into_dataclasses"]
        else:
            line = f"{parser}.set_defaults({values})"
            if len(line) > 88:
                defaults_call = cst.parse_expression(line)
                assert isinstance(defaults_call, cst.Call)
                line = code_of(one_per_line(defaults_call))
            self.ctx.insert_after(
                stmt(f"# optimum-neuron's defaults, where {_possessive(new_class)} differ.\n{line}\n")
            )
            self.changed(
                f"optimum-neuron's defaults kept for flags not given: {names_in(NATIVE_NAMES.get(k, k) for k in defaults)}"
            )
        if files:
            self.todo(
                f"{names_in(files)}: fields the file leaves out take {_possessive(new_class)} defaults, not optimum-neuron's: give them (see the report)"
            )
        if methods & FILE_READERS:
            renamed = ", ".join(f"`{k.old}` -> `{k.new}`" for k in (SFT_KEYWORDS if sft else ()) if k.new)
            self.todo(
                "files this parser reads: drop optimum-neuron keys (`zero_1`, ...)"
                + (" but model-parallel sizes" if self.facts.needs_parallel else "")
                + (f"; {renamed}" if renamed else "")
            )

    def _parser_notes(self, call: cst.Call) -> None:
        flags = (
            " other than the model-parallel sizes (`--zero_1`, `--use_xser`, `--fuse_qkv`, ...)"
            if self.facts.needs_parallel
            else " (`--tensor_parallel_size`, `--zero_1`, `--use_xser`, ...)"
        )
        self.ctx.note(
            self.code,
            f"launch commands must drop the optimum-neuron-only flags{flags}: `TrainingArguments` rejects them",
        )
        self.ctx.note(
            self.code,
            "add `--torch_compile` to the launch command: training otherwise runs eagerly, while the old stack compiled every step (on Trainium transformers compiles with the `neuron` backend and `dynamic=False`)",
        )
        if "SFTConfig" in code_of(call):
            self.ctx.note(self.code, TRL_PADDING_NOTE)

    def _trn_config_class(self, call: cst.Call) -> cst.Call:
        mapping = {
            "tensor_parallel_size": "tp_size",
            "pipeline_parallel_size": "pp_size",
            "sequence_parallel_enabled": "enable_sequence_parallel",
        }
        args = []
        sizes: dict[str, cst.BaseExpression] = {}
        for position, arg in enumerate(call.args):
            key = (
                arg.keyword.value
                if arg.keyword is not None
                else ("tensor_parallel_size" if position == 0 and not arg.star else None)
            )
            if key in ("tensor_parallel_size", "pipeline_parallel_size"):
                sizes[key] = arg.value
            if key in mapping:
                args.append(
                    make_arg(mapping[key], arg.value)
                    if arg.keyword is None
                    else arg.with_changes(keyword=cst.Name(mapping[key]))
                )
            elif key == "gradient_checkpointing":
                self.todo(
                    f"`gradient_checkpointing={code_of(arg.value)}` moved: call `model.gradient_checkpointing_enable()` or set `activation_checkpointing=True`"
                )
            elif key is not None:
                entry = TRAINING_FIELDS.get(key)
                reason = entry.why if entry else "it has no `DistributedConfig` counterpart"
                self.todo(f"`{key}={code_of(arg.value)}` was removed: {reason}")
            else:
                args.append(arg)
        remainder = None if any(a.star for a in call.args) else self._data_parallel(sizes)
        if remainder is not None:
            args.append(make_arg("fsdp_size", remainder))
        self.changed("`TrainingNeuronConfig` -> `DistributedConfig`")
        return with_args(call, args)

    def _main_worker(self, call: cst.Call) -> cst.BaseExpression:
        global_main = arg_value(call, 0, "global_main")
        local = global_main is not None and literal(global_main.value) is False
        self.changed("`is_main_worker()` -> rank test")
        if local:
            return cst.parse_expression(f"{self.ctx.local_rank_expr()} == 0")
        # The Trainer creates the process group only when it starts; torchrun's `RANK` is there first.
        return cst.parse_expression(f"{self.ctx.env_rank_expr()} == 0")

    def _from_pretrained(self, call: cst.Call) -> cst.Call:
        sequential_loading(self.ctx)
        args: list[cst.Arg] = []
        present = {a.keyword.value for a in call.args if a.keyword is not None}
        positional = 0
        for arg in call.args:
            if arg.keyword is None and not arg.star:
                positional += 1
                if positional == 2:
                    if not _unsharded(arg.value):
                        args.append(make_arg("distributed_config", arg.value))
                    continue
            key = arg.keyword.value if arg.keyword is not None else None
            if key == "trn_config":
                if not _unsharded(arg.value):
                    args.append(arg.with_changes(keyword=cst.Name("distributed_config")))
                continue
            if key in TRAINING_LOADER_IGNORED:  # what optimum-neuron ignored goes, whatever transformers 4 made of it
                self.changed(f"dropped `{key}=`: {TRAINING_LOADER_IGNORED[key]}")
                continue
            upgraded = _upgrade_entry(MODEL_LOADERS, key) or _upgrade_entry(ANY_LOADERS, key)
            if upgraded is not None:
                kept = upgrade_argument(self, arg, upgraded, present)
                if kept is not None:
                    args.append(kept)
                continue
            if key == "attn_implementation" and literal(arg.value) == "flash_attention_2":
                self.changed(
                    'dropped `attn_implementation="flash_attention_2"` (optimum-neuron\'s NKI kernel; transformers uses SDPA on Neuron)'
                )
                continue
            if key == "device_map" and literal(arg.value) in ("xla", "cpu"):
                self.changed(f"dropped `device_map={code_of(arg.value)}`: the Trainer places the model")
                continue
            args.append(arg)
        if not any(a.star == "**" or (a.keyword is not None and a.keyword.value in ("dtype", "torch_dtype")) for a in call.args):
            # optimum-neuron built its training models in float32 unless told otherwise; transformers 5
            # loads the checkpoint's own dtype.
            args.append(make_arg("dtype", expr(f"{self.ctx.torch()}.float32")))
            self.changed("`dtype=torch.float32`: optimum-neuron's training models loaded in float32 by default")
        # `distributed_config` last among the leading arguments reads best after the model id.
        self.changed(
            "training `NeuronModelForCausalLM.from_pretrained(id, trn_config)` -> `from_pretrained(id, distributed_config=...)`"
        )
        if any(a.keyword is not None and a.keyword.value == "distributed_config" for a in args):
            self._torchrun_note()
        return with_args(call, args)


def _upgrade_entry(owner: str, key: str | None) -> Keyword | None:
    """The upgrade table's entry for `owner`'s keyword `key`: its home is the upgrade family."""
    return next((k for k in KEYWORDS[owner] if k.old == key), None)


def _possessive(name: str) -> str:
    """`TrainingArguments'`, `SFTConfig's`."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _may_shard(config: ast.Call) -> bool:
    """Does this `TrainingNeuronConfig(...)` give a tensor-parallel size other than 1?"""
    given = [k.value for k in config.keywords if k.arg in ("tensor_parallel_size", None)]
    if config.args:
        given.append(config.args[0])
    return any(not (isinstance(v, ast.Constant) and v.value == 1) for v in given)


def _unmigrated(qualified: str | None) -> bool:
    """Is this optimum-neuron API that no codemod of the family rewrites?"""
    if qualified is None or not (qualified == OPTIMUM or qualified.startswith(OPTIMUM + ".")):
        return False
    owner, _, method = qualified.rpartition(".")
    return qualified not in OPTIMUM_RENAMES and not (
        owner in OPTIMUM_RENAMES and method in ("from_pretrained", "from_config", "export")
    )


def _looks_like_model_id(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    dotted = ast_dotted_name(node) if node is not None else None
    if dotted is None:
        return False
    last = dotted.split(".")[-1].lower()
    return any(part in last for part in ("model_id", "model_name", "model_path", "checkpoint"))


def _direct_calls(body: cst.BaseSuite) -> list[cst.Call]:
    """The calls that are the value of a statement of `body` (`x = f(...)`, `f(...)`)."""
    if not isinstance(body, cst.IndentedBlock):
        return []
    calls = []
    for line in body.body:
        if isinstance(line, cst.SimpleStatementLine):
            for small in line.body:
                value = getattr(small, "value", None)
                if isinstance(value, cst.Call):
                    calls.append(value)
    return calls


def _unsharded(config: cst.BaseExpression) -> bool:
    """`None` for a `trn_config`: the arguments shard nothing, as without `distributed_config`."""
    return isinstance(config, cst.Name) and config.value == "None"
