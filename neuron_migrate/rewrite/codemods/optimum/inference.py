"""NM021: optimum-neuron inference models and pipelines become transformers models with static shapes."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.names import ImportTable, ast_dotted_name
from neuron_migrate.core.scopes import Scope, ScopeTable
from neuron_migrate.core.static_shapes import (
    NEURON_COMPILE,
    PREFILL_CHUNK_LIMIT,
    PROMPT_PADDING,
    STATIC_CACHE,
    prefill_chunk,
)
from neuron_migrate.rewrite.codemods.base import arg_value, code_of, expr, fix_trailing_comma, stmt
from neuron_migrate.rewrite.codemods.optimum.fields import (
    CAST_DTYPES,
    EXPORT_ALIASES,
    EXPORT_DROPPED,
    EXPORT_OPTIONS,
    LOADING_KEPT,
    TP_KEYWORDS,
)
from neuron_migrate.rewrite.codemods.optimum.generated_tokens import (
    padding_is_invisible,
    parents_of,
    read_only_by,
)
from neuron_migrate.rewrite.codemods.optimum.support import (
    OPTIMUM,
    RenamingCodemod,
    compiled_artifacts_todo,
    dict_entries,
    dict_literals,
    keyword,
    literal,
    make_arg,
    name_loads,
    sequential_loading,
    with_args,
)

INFERENCE = f"{OPTIMUM}.models.inference"
CAUSAL_LM = (
    f"{OPTIMUM}.NeuronModelForCausalLM",
    f"{INFERENCE}.modeling_utils.NeuronModelForCausalLM",
    f"{OPTIMUM}.modeling_decoder.NeuronModelForCausalLM",  # optimum-neuron < 0.1
)
# Traced (encoder, vision, audio) models and the transformers class each one wraps; the
# `auto_model_class` attributes of optimum-neuron 0.4.5's `modeling.py` say the same.
TRACED_TASKS = {
    "NeuronModelForFeatureExtraction": "AutoModel",
    "NeuronModelForMaskedLM": "AutoModelForMaskedLM",
    "NeuronModelForQuestionAnswering": "AutoModelForQuestionAnswering",
    "NeuronModelForSequenceClassification": "AutoModelForSequenceClassification",
    "NeuronModelForTokenClassification": "AutoModelForTokenClassification",
    "NeuronModelForMultipleChoice": "AutoModelForMultipleChoice",
    "NeuronModelForImageClassification": "AutoModelForImageClassification",
    "NeuronModelForSemanticSegmentation": "AutoModelForSemanticSegmentation",
    "NeuronModelForObjectDetection": "AutoModelForObjectDetection",
    "NeuronModelForAudioClassification": "AutoModelForAudioClassification",
    "NeuronModelForAudioFrameClassification": "AutoModelForAudioFrameClassification",
    "NeuronModelForCTC": "AutoModelForCTC",
    "NeuronModelForXVector": "AutoModelForAudioXVector",
    "NeuronBertModel": "BertModel",
    "NeuronBertForMaskedLM": "BertForMaskedLM",
    "NeuronBertForQuestionAnswering": "BertForQuestionAnswering",
    "NeuronBertForSequenceClassification": "BertForSequenceClassification",
    "NeuronBertForTokenClassification": "BertForTokenClassification",
    "NeuronBertForMultipleChoice": "BertForMultipleChoice",
    "NeuronCLIPModel": "CLIPModel",
    "NeuronCLIPForImageClassification": "CLIPForImageClassification",
    "NeuronYolosForObjectDetection": "YolosForObjectDetection",
}
# Text tasks whose outputs have no sequence axis: padding the tokens to the exported length
# (right, with the attention mask) changes none of them, as optimum-neuron's own padding did not.
POOLED_TEXT_TASKS = frozenset(
    {
        "NeuronModelForSequenceClassification",
        "NeuronModelForMultipleChoice",
        "NeuronBertForSequenceClassification",
        "NeuronBertForMultipleChoice",
        "NeuronCLIPModel",
    }
)
# Text tasks with one output per token. optimum-neuron padded their inputs to the exported
# length itself and cut the outputs back to the input's length (`remove_padding`, modeling.py),
# so padding them natively would add outputs for the pad tokens: their inputs keep their length.
TOKEN_TASKS = frozenset(
    {
        "NeuronModelForFeatureExtraction",
        "NeuronModelForMaskedLM",
        "NeuronModelForQuestionAnswering",
        "NeuronModelForTokenClassification",
        "NeuronBertModel",
        "NeuronBertForMaskedLM",
        "NeuronBertForQuestionAnswering",
        "NeuronBertForTokenClassification",
    }
)
TRACED = {
    **{f"{OPTIMUM}.{old}": new for old, new in TRACED_TASKS.items()},
    **{
        f"{OPTIMUM}.modeling.{old}": new
        for old, new in TRACED_TASKS.items()
        if old.startswith("NeuronModelFor")
    },
}
# What optimum-neuron's loaders call the checkpoint (`export(model_id, ...)`,
# `get_neuron_config(model_name_or_path, ...)`).
MODEL_ID_KEYWORDS = ("model_id", "model_name_or_path")
PIPELINE = (
    f"{OPTIMUM}.pipeline",
    f"{OPTIMUM}.pipelines.pipeline",
    f"{OPTIMUM}.pipelines.transformers.base.pipeline",
)

RENAMES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(CAUSAL_LM, ("transformers", "AutoModelForCausalLM")),
    **{old: ("transformers", new) for old, new in TRACED.items()},
    **dict.fromkeys(PIPELINE, ("transformers", "pipeline")),
}

# What optimum-neuron's models have and transformers models do not (AttributeError natively).
NEURON_MODEL_ONLY = {
    "neuron_config": "`{code}` is optimum-neuron's export configuration: read sizes from `generation_config` or `config` instead",
    "CHECKPOINT_DIR": "`{code}` is optimum-neuron's artifacts folder; transformers saves weights at the folder's top: remove what reads it",
    **dict.fromkeys(
        ("chunked_prefill_model", "context_encoding_model", "token_generation_model", "speculation_model"),
        "`{code}` is a graph optimum-neuron compiled; a transformers model has none: remove what reads it",
    ),
}
PRECOMPILE = "neuron_parallel_compile"
PRECOMPILE_TODO = "`neuron_parallel_compile` only compiled graphs and is gone natively: drop the run this starts (training compiles as it goes)"
PRECOMPILE_NOTE = "`neuron_parallel_compile` is gone: it extracted XLA graphs in a separate run before training; natively the training run compiles its graphs itself on the first steps, so that run was removed"
SHELL_RUNNERS = (
    "os.system",
    "subprocess.run",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.Popen",
)


PUSH_FOLDER = '''\
def $name(save_directory, repository_id, private=None, revision=None, token=None, endpoint=None):
    """optimum-neuron's `push_to_hub`: the repository created if need be, and the folder
    `save_directory` uploaded to it, everything saved there."""
    api = $HfApi(endpoint=endpoint)
    api.create_repo(repository_id, exist_ok=True, private=private, token=token)
    return api.upload_folder(repo_id=repository_id, folder_path=save_directory, revision=revision, token=token)
'''


def keywords(settings: dict[str, object]) -> list[str]:
    """`key=value` for each setting, as the migration writes it."""
    return [f"{key}={value_code(value)}" for key, value in settings.items()]


def prompt_padding(model: str) -> dict[str, str]:
    """The keywords (and their code) that pad the prompts of `model` to its prefill chunks."""
    padding = {key: value_code(value) for key, value in PROMPT_PADDING.items()}
    chunk = f"{model}.generation_config.prefill_chunk_size"
    return {"padding": padding.pop("padding"), "pad_to_multiple_of": chunk, **padding}


def value_code(value: object) -> str:
    """A setting's value as code: strings in double quotes, as the migrated code writes them."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


# The keywords of `from_pretrained` that say where the model goes.
PLACEMENT = ("device_map", "distributed_config", "tp_plan")


@dataclass
class _Model:
    kind: str  # "causal" | "traced"
    sequence_length: cst.BaseExpression | None = None
    task: str = ""  # the optimum-neuron class of a traced model (`NeuronModelForMaskedLM`)


Binding = tuple[Scope, str]  # a variable: the scope that binds the name, and the name


@dataclass
class _Facts:
    """What the whole file says about its inference models, before any rewrite. Variables are
    bindings, not names: `model` in one function is not `model` in another."""

    models: dict[Binding, str] = field(default_factory=dict)  # model variable -> kind
    padded: dict[Binding, Binding] = field(default_factory=dict)  # tokenizer output -> the model it feeds
    tokenizers: dict[Binding, Binding] = field(default_factory=dict)  # tokenizer -> the model it feeds
    pad_token_set: set[Binding] = field(default_factory=set)
    unpadded: set[Binding] = field(default_factory=set)  # models whose outputs padding would change
    padded_models: set[Binding] = field(default_factory=set)  # models some prompt is padded for
    prompts: set[Binding] = field(default_factory=set)  # everything a causal model's generate reads
    dicts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # consumable dict literals
    neuron_configs: set[str] = field(
        default_factory=set
    )  # vars from get_neuron_config, consumed by export
    precompile_vars: set[str] = field(default_factory=set)  # `neuron_parallel_compile` commands


Qualifier = Callable[[ast.AST], "str | None"]


def _inference_facts(source: str, table: ImportTable, scopes: ScopeTable) -> _Facts:
    facts = _Facts()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return facts

    def qualified(expr: ast.AST) -> str | None:
        dotted = ast_dotted_name(expr)
        return table.resolve_dotted(dotted) if dotted else None

    _find_loaded_models(tree, qualified, scopes, facts)
    splatted = _find_model_inputs(tree, qualified, scopes, facts)
    loads = name_loads(source)
    facts.precompile_vars = _precompile_commands(tree, qualified, loads)
    for name, keys in dict_literals(source).items():
        if splatted.get(name) and splatted[name] == loads.get(name) and set(keys) <= EXPORT_OPTIONS:
            facts.dicts[name] = keys
    _find_tokenizers(tree, scopes, facts)
    return facts


def _find_loaded_models(tree: ast.AST, qualified: Qualifier, scopes: ScopeTable, facts: _Facts) -> None:
    """The variables the old models and neuron configs are loaded into; tokenizers given a pad token."""
    for n in all_nodes(tree):
        if not isinstance(n, ast.Assign):
            continue
        if (
            len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Call)
        ):
            owner, _, method = (qualified(n.value.func) or "").rpartition(".")
            variable = scopes.binding_at(n, n.targets[0].id)
            if variable is not None and method in ("from_pretrained", "export") and owner in CAUSAL_LM:
                facts.models[variable] = "causal"
            elif variable is not None and method == "from_pretrained" and owner in TRACED:
                facts.models[variable] = "traced"
            elif method == "get_neuron_config" and owner in CAUSAL_LM:
                facts.neuron_configs.add(n.targets[0].id)
        for t in n.targets:
            if isinstance(t, ast.Attribute) and t.attr == "pad_token" and isinstance(t.value, ast.Name):
                variable = scopes.binding_at(t, t.value.id)
                if variable is not None:
                    facts.pad_token_set.add(variable)


def _find_model_inputs(tree: ast.AST, qualified: Qualifier, scopes: ScopeTable, facts: _Facts) -> dict[str, int]:
    """Record the variables fed to the migrated models (`model.generate(**inputs)`, `model(**inputs)`);
    return how often each name is `**`-unpacked into an old model's loading."""
    splatted: dict[str, int] = {}
    parents = parents_of(tree)
    invisible: set[int] = set()  # generate calls whose output padding leaves as it was
    reads: dict[Binding, ast.Name] = {}  # a read of each tokenizer output, to find the others
    for n in all_nodes(tree):
        if not isinstance(n, ast.Call):
            continue
        name = qualified(n.func)
        owner = (name or "").rpartition(".")[0]
        if owner in (*CAUSAL_LM, *TRACED) or name in PIPELINE:
            for k in n.keywords:
                if k.arg is None and isinstance(k.value, ast.Name):
                    splatted[k.value.id] = splatted.get(k.value.id, 0) + 1
        model = _model_called(n.func, scopes, facts.models)
        if model is None:
            continue
        if facts.models[model] == "causal":
            for value in [*n.args, *(k.value for k in n.keywords)]:
                for inner in ast.walk(value):
                    if isinstance(inner, ast.Name):
                        fed = scopes.binding_at(inner, inner.id)
                        if fed is not None:
                            facts.prompts.add(fed)
            if not padding_is_invisible(n, tree, scopes, parents):
                facts.unpadded.add(model)
                continue
            invisible.add(id(n))
        for value in [*n.args, *(k.value for k in n.keywords)]:
            for inner in ast.walk(value):
                if not isinstance(inner, ast.Name):
                    continue
                variable = scopes.binding_at(inner, inner.id)
                if variable is not None and variable != model:
                    facts.padded.setdefault(variable, model)
                    reads.setdefault(variable, inner)
    for variable, model in list(facts.padded.items()):
        if facts.models[model] == "causal" and not read_only_by(reads[variable], invisible, tree, scopes, parents):
            del facts.padded[variable]
            facts.unpadded.add(model)
    return splatted


def _model_called(func: ast.AST, scopes: ScopeTable, models: dict[Binding, str]) -> Binding | None:
    """The model variable a call runs: `model.generate(...)` of a causal LM, `model(...)` of a traced one."""
    if isinstance(func, ast.Attribute) and func.attr == "generate" and isinstance(func.value, ast.Name):
        variable = scopes.binding_at(func.value, func.value.id)
        return variable if variable is not None and models.get(variable) == "causal" else None
    if isinstance(func, ast.Name):
        variable = scopes.binding_at(func, func.id)
        return variable if variable is not None and models.get(variable) == "traced" else None
    return None


def _precompile_commands(tree: ast.AST, qualified: Qualifier, loads: dict[str, int]) -> set[str]:
    """Variables holding a `neuron_parallel_compile` command that are only ever run as one."""
    runs: dict[str, int] = {}
    commands: set[str] = set()
    for n in all_nodes(tree):
        if (  # a run whose statement goes with it: its result is read nowhere (`if run(cmd):` stays)
            isinstance(n, ast.Expr)
            and isinstance(n.value, ast.Call)
            and qualified(n.value.func) in SHELL_RUNNERS
            and n.value.args
            and isinstance(n.value.args[0], ast.Name)
        ):
            runs[n.value.args[0].id] = runs.get(n.value.args[0].id, 0) + 1
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            text = _ast_text(n.value)
            if text is not None and "neuron_parallel_compile" in text.split():
                commands.add(n.targets[0].id)
    return {name for name in commands if runs.get(name) and runs[name] == loads.get(name)}


def _find_tokenizers(tree: ast.AST, scopes: ScopeTable, facts: _Facts) -> None:
    """The tokenizers whose outputs (`inputs = tokenizer(..., return_tensors=...)`) feed the models."""
    for n in all_nodes(tree):
        if not (
            isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
        ):
            continue
        target = scopes.binding_at(n, n.targets[0].id)
        if (
            target in facts.padded
            and isinstance(n.value, ast.Call)
            and any(k.arg == "return_tensors" for k in n.value.keywords)
        ):
            facts.padded_models.add(facts.padded[target])
        if (
            target in facts.padded
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name)
            and any(k.arg == "return_tensors" for k in n.value.keywords)
        ):
            tokenizer = scopes.binding_at(n.value.func, n.value.func.id)
            if tokenizer is not None:
                facts.tokenizers.setdefault(tokenizer, facts.padded[target])


class OptimumInference(RenamingCodemod):
    """Migrates optimum-neuron inference models and pipelines to transformers with static shapes.

    ## What it does
    The inference `NeuronModelForCausalLM` (imported from `optimum.neuron`, not the training
    class of `optimum.neuron.models.training`) loaded with `export=True` and shape/compiler
    options, given directly or through `**dict` unpacking, or built with `get_neuron_config` +
    `export`, becomes `AutoModelForCausalLM.from_pretrained(model_id, dtype=..., device_map=...)`
    followed by a generation config with a static KV cache of `sequence_length` tokens
    (`cache_implementation="static"`, `max_cache_len`), chunked prefill (`prefill_chunk_size`)
    and, with `--target neuron`, `CompileConfig(backend="neuron", fullgraph=True, dynamic=False,
    mode="default")`. Prompts handed to `generate` are left-padded to a multiple of the prefill
    chunk. `num_cores` / `tensor_parallel_size` other than 1 become
    `distributed_config=DistributedConfig(tp_size=...)` and a `torchrun` launch (a size this
    tool cannot read also gets a TODO: with 1 the model would stay on the CPU).
    Encoder models (`NeuronModelForSequenceClassification`, ...) become their `AutoModelFor...`
    class compiled with `dynamic=False`, and their inputs are tokenized to the exported
    `sequence_length`; their `tensor_parallel_size` becomes a TODO, since encoder classes
    rarely have a tensor-parallel plan. `optimum.neuron.pipeline` becomes
    `transformers.pipeline` (a `tensor_parallel_size` there is a TODO).

    ## Why
    There is no ahead-of-time export natively: `generate` compiles the forward pass itself when
    the cache is static (for the portable target transformers picks
    `CompileConfig(backend="neuron", dynamic=False, mode="default")` on a Neuron device), and
    every new input shape compiles anew, so the shapes the export fixed are kept by padding.

    ## Example
    ```python
    model = NeuronModelForCausalLM.from_pretrained(model_id, export=True, batch_size=1, sequence_length=2048, num_cores=2)
    inputs = tokenizer(prompt, return_tensors="pt")
    ```

    ## Use instead
    ```python
    model = AutoModelForCausalLM.from_pretrained(model_id, distributed_config=DistributedConfig(tp_size=2))
    model.generation_config.update(cache_implementation="static", max_cache_len=2048, prefill_chunk_size=128)
    inputs = tokenizer(prompt, return_tensors="pt", padding=True, pad_to_multiple_of=model.generation_config.prefill_chunk_size, padding_side="left")
    ```

    ## Fix safety
    The model loads from the original checkpoint: a directory of Neuron-compiled artifacts
    (exported earlier with `export=True` or `optimum-cli export neuron`) cannot be loaded and
    gets a TODO. Padding changes nothing in the generated tokens: every architecture
    optimum-neuron exports takes `position_ids`, which `generate` derives from the attention
    mask (a model without them, such as BlenderBot, would see its positions shifted; see
    docs/architectures.md). The first `generate` call compiles. optimum-neuron generated from
    right-padded prompts, taking each row's positions from the attention mask; transformers
    continues every row after the last column, so a prompt padded on the right continues after
    its pad tokens: tokenize with `padding_side="left"` (the new tokens are then `out[:,
    inputs["input_ids"].shape[1]:]`). A `neuron_config=` the tool cannot read set the export's
    shapes, precision and tensor parallelism: its sequence length becomes
    `generation_config.max_cache_len`, its dtype `dtype=`, and a tensor-parallel size above 1
    `distributed_config=DistributedConfig(tp_size=...)` under torchrun. Traced exports with
    `auto_cast` computed in lower precision inside the compiled graph while weights, inputs and
    outputs stayed float32, which `torch.autocast` reproduces. transformers shards a model only
    across processes, and only one whose class has a tensor-parallel plan (`base_model_tp_plan`,
    which encoders usually lack); a model loaded in a notebook kernel loads whole on one device.
    A pipeline's export fixed its inputs' shapes: padding each call to them lets one compiled
    graph serve all inputs, where each new shape otherwise compiles anew. `**` options of a
    pipeline are passed on to the model, which rejects optimum-neuron's export options
    (`batch_size`, `sequence_length`, `tensor_parallel_size`, compiler options). Attributes of
    the exported model (`neuron_config`, its compiled graphs, its `checkpoint` folder) have no
    counterpart on a transformers model.
    """

    code = "NM021"
    name = "optimum-inference"
    summary = "optimum-neuron inference models and pipelines -> transformers with a static cache and torch.compile"
    triggers = (*CAUSAL_LM, *TRACED, *PIPELINE)
    markers = ("optimum-cli", "neuron_parallel_compile")
    RENAMES: ClassVar[dict[str, tuple[str, str]]] = RENAMES
    # optimum.neuron is not among the old-stack PACKAGES (its aliases may name the new classes); the
    # triggers already require an optimum.neuron import.
    needs_old_stack_import = False
    manual: ClassVar[dict[str, str]] = {
        f"{OPTIMUM}.NeuronModelForSeq2SeqLM": 'use `AutoModelForSeq2SeqLM` with `generate(..., cache_implementation="static")` on the `neuron` device',
        f"{OPTIMUM}.NeuronWhisperForConditionalGeneration": 'use `WhisperForConditionalGeneration` with `cache_implementation="static"` on `neuron`',
        f"{OPTIMUM}.NeuronSentenceTransformers": "use `SentenceTransformer(model_id, device=...)`, inputs padded to a fixed length",
        f"{OPTIMUM}.NeuronModelForEmbedding": "use `AutoModel` with its pooling, `torch.compile(dynamic=False)`, fixed-length inputs",
        f"{OPTIMUM}.NeuronTracedModel": "use the transformers model class, compiled with `torch.compile(dynamic=False)`",
        f"{OPTIMUM}.NeuronModelForCausalLM.get_neuron_config": "the shapes go to the generation config now (`max_cache_len`, `prefill_chunk_size`)",
        f"{OPTIMUM}.utils.synchronize_hub_cache": "the optimum-neuron Hub cache of compiled models has no native counterpart; drop the call",
        f"{OPTIMUM}.cache": "the optimum-neuron Hub cache of compiled models has no native counterpart",
    }

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.facts = _Facts()
        self._dict_values: dict[str, dict[str, cst.BaseExpression]] = {}
        # (binding, config variable) -> its options: a name in another function is another variable
        self._config_values: dict[tuple[object, str], dict[str, cst.BaseExpression]] = {}
        self._opaque_configs: set[tuple[object, str]] = set()  # ... given `**` dicts unread
        self._models: dict[Binding, _Model] = {}
        self._target: str | None = None
        self._dropped = 0  # inside a statement that goes whole (a pre-compilation run, its command)

    # -- whole-file facts -----------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        assert self.ctx.scopes is not None
        self.facts = _inference_facts(self.ctx.source, self.ctx.imports, self.ctx.scopes)

    # -- statements -----------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self._target = target.value if isinstance(target, cst.Name) else None
        self._dropped += self._target in self.facts.precompile_vars

    def visit_Expr(self, node: cst.Expr) -> None:
        self._dropped += self._shell_step(node) is not None

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> Any:
        target = self._target
        self._target = None
        self._dropped -= target in self.facts.precompile_vars
        if target is None:
            return updated_node
        if target in self.facts.dicts:
            entries = dict_entries(updated_node.value)
            if entries is not None:
                self._dict_values[target] = entries
                self.changed(f"`{target}` (export options) folded into the model loading")
                return self.ctx.remove(updated_node)
        if target in self.facts.precompile_vars:
            self.changed(f"removed `{target}`, the `neuron_parallel_compile` command")
            return self.ctx.remove(updated_node)
        if target in self.facts.neuron_configs and self._causal_config(original_node.value):
            call = updated_node.value
            assert isinstance(call, cst.Call)
            values, opaque = self._keywords(call)
            self._config_values[self._variable(target)] = values
            if opaque:
                self._opaque_configs.add(self._variable(target))
            self.changed("`get_neuron_config(...)` folded into the model loading")
            return self.ctx.remove(updated_node)
        tokenizer = self.ctx.binding_key(target)
        model = self.facts.tokenizers.get(tokenizer) if tokenizer is not None else None
        if (
            model is not None
            and self.facts.models.get(model) == "causal"
            and tokenizer not in self.facts.pad_token_set
        ):
            self.ctx.insert_after(
                stmt(
                    f"if {target}.pad_token is None:\n    {target}.pad_token = {target}.eos_token\n"
                )
            )
        return updated_node

    # -- shell steps -----------------------------------------------------------------------------
    def _shell_step(self, node: cst.Expr) -> str | None:
        """The old-stack step a statement runs and that goes with it (`neuron_parallel_compile`,
        `optimum-cli export neuron`, `optimum-cli neuron cache`), or None."""
        call = node.value
        if not (isinstance(call, cst.Call) and self.qualify(call.func) in SHELL_RUNNERS and call.args):
            return None
        first = call.args[0].value
        if isinstance(first, cst.Name) and first.value in self.facts.precompile_vars:
            return PRECOMPILE
        words = (_command_text(first) or "").split()
        if PRECOMPILE in words:
            return PRECOMPILE
        step = " ".join(words[:3])
        return step if step in ("optimum-cli export neuron", "optimum-cli neuron cache") else None

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> Any:
        step = self._shell_step(original_node)
        if step is None:
            return updated_node
        self._dropped -= 1
        if step == PRECOMPILE:
            self.changed("removed the `neuron_parallel_compile` pre-compilation run")
            self.ctx.note(self.code, PRECOMPILE_NOTE)
        else:
            self.changed(f"removed the `{step}` step")
            self.ctx.note(
                self.code,
                f"`{step}` is gone: there is no ahead-of-time export or Hub cache of compiled models natively; the first call of the model compiles, and the Neuron compile cache keeps the result",
            )
        return self.ctx.remove(updated_node)

    # A command kept whole (its run is not a statement of its own, or it is built in pieces):
    # without its prefix it would train for real, so it stays, with a TODO.
    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        if not self._dropped and PRECOMPILE in updated_node.value.split():
            self.todo(PRECOMPILE_TODO)
        return updated_node

    def leave_FormattedStringText(
        self, original_node: cst.FormattedStringText, updated_node: cst.FormattedStringText
    ) -> cst.FormattedStringText:
        if not self._dropped and PRECOMPILE in updated_node.value.split():
            self.todo(PRECOMPILE_TODO)
        return updated_node

    # -- what only optimum-neuron's models have ------------------------------------------------
    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        attribute = original_node.attr.value
        receiver = original_node.value
        if attribute in NEURON_MODEL_ONLY and not (isinstance(receiver, cst.Name) and receiver.value == "self"):
            self.todo(NEURON_MODEL_ONLY[attribute].format(code=code_of(original_node)))
        return super().leave_Attribute(original_node, updated_node)  # `neuron.NeuronModelForCausalLM`

    def _asks_for_neuron_attribute(self, call: cst.Call) -> None:
        """`hasattr(model, "chunked_prefill_model")`: always False natively."""
        if not (isinstance(call.func, cst.Name) and call.func.value in ("hasattr", "getattr") and len(call.args) >= 2):
            return
        attribute = literal(call.args[1].value)
        if isinstance(attribute, str) and attribute in NEURON_MODEL_ONLY:
            self.todo(NEURON_MODEL_ONLY[attribute].format(code=f"{code_of(call.args[0].value)}.{attribute}"))

    # -- calls ----------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self._asks_for_neuron_attribute(original_node)
        name = self.qualify(original_node.func)
        owner, _, method = (name or "").rpartition(".")
        if owner in CAUSAL_LM and method in ("from_pretrained", "export"):
            return self._causal_lm(updated_node)
        if owner in TRACED and method == "from_pretrained":
            return self._traced(updated_node, owner.rpartition(".")[2])
        if name in PIPELINE:
            return self._pipeline(updated_node)
        func = original_node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "push_to_hub"
            and isinstance(func.value, cst.Name)
            and self.ctx.binding_key(func.value.value) in self._models
        ):
            return self._push_to_hub(updated_node)
        inputs = self.ctx.binding_key(self._target) if self._target is not None else None
        if keyword(updated_node, "return_tensors") is not None and inputs in self.facts.padded:
            return self._pad_inputs(updated_node, self.facts.padded[inputs])
        if keyword(updated_node, "return_tensors") is not None and inputs in self.facts.prompts:
            self._check_padding_side(updated_node)
        return updated_node

    def _check_padding_side(self, call: cst.Call) -> None:
        """Prompts a user pads as optimum-neuron 0.4.5 needed (right: it rejected left padding, and
        took each row's positions from the mask) continue after their pad tokens natively."""
        padding = keyword(call, "padding")
        side = keyword(call, "padding_side")
        text = call.args[0].value if call.args and call.args[0].keyword is None else None
        if (
            padding is None
            or literal(padding.value) in (False, "do_not_pad")
            or (side is not None and literal(side.value) == "left")
            or isinstance(text, cst.SimpleString | cst.FormattedString | cst.ConcatenatedString)
        ):
            return
        self.todo(
            'transformers continues right-padded prompts after their pad tokens: tokenize with `padding_side="left"`'
        )

    def _options(self, call: cst.Call) -> tuple[list[cst.Arg], dict[str, cst.BaseExpression], bool]:
        """The call's plain arguments, and the export options (dict splats and config folded in)."""
        kept: list[cst.Arg] = []
        options: dict[str, cst.BaseExpression] = {}
        opaque = False
        for arg in call.args:
            if (
                arg.star == "**"
                and isinstance(arg.value, cst.Name)
                and arg.value.value in self._dict_values
            ):
                options.update(self._dict_values[arg.value.value])
                continue
            if (
                arg.star == "**"
                and isinstance(arg.value, cst.Dict)
                and dict_entries(arg.value) is not None
            ):
                options.update(dict_entries(arg.value) or {})
                continue
            if arg.star:
                opaque = True
                kept.append(arg)
                continue
            if arg.keyword is not None and arg.keyword.value == "neuron_config":
                folded = (
                    self._config_values.get(self._variable(arg.value.value))
                    if isinstance(arg.value, cst.Name)
                    else None
                )
                if isinstance(arg.value, cst.Name) and self._variable(arg.value.value) in self._opaque_configs:
                    opaque = True
                if folded is None:
                    self.todo(
                        "`neuron_config=` held shapes, dtype and tensor parallelism: pass `max_cache_len`, `dtype=`, `DistributedConfig`"
                    )
                options.update(folded or {})
            if (
                arg.keyword is not None
                and arg.keyword.value in EXPORT_OPTIONS
                and arg.keyword.value not in LOADING_KEPT
            ):
                options.setdefault(EXPORT_ALIASES.get(arg.keyword.value, arg.keyword.value), arg.value)
                continue
            kept.append(arg)
        if len([a for a in kept if a.keyword is None and not a.star]) > 1:
            # `export(model_id, neuron_config)` given positionally.
            positional = [a for a in kept if a.keyword is None and not a.star]
            second = positional[1]
            if isinstance(second.value, cst.Name):
                options.update(self._config_values.get(self._variable(second.value.value), {}))
                opaque = opaque or self._variable(second.value.value) in self._opaque_configs
            kept = [a for a in kept if a is not second]
        # optimum-neuron names the checkpoint `model_id` (`export`, `from_pretrained`);
        # transformers' `from_pretrained` takes it first, as `pretrained_model_name_or_path`.
        named = next((a for a in kept if a.keyword is not None and a.keyword.value in MODEL_ID_KEYWORDS), None)
        if named is not None and not any(a.keyword is None and not a.star for a in kept):
            assert named.keyword is not None
            self.changed(f"`{named.keyword.value}=` -> the first argument of `from_pretrained`")
            kept = [cst.Arg(named.value), *(a for a in kept if a is not named)]
        return kept, options, opaque

    def _keywords(self, call: cst.Call) -> tuple[dict[str, cst.BaseExpression], bool]:
        """The keywords of `call`, with the `**` dicts this tool can read folded in; and whether
        some come through a `**` it cannot read."""
        values: dict[str, cst.BaseExpression] = {}
        opaque = False
        for arg in call.args:
            if arg.keyword is not None:
                values[arg.keyword.value] = arg.value
            elif arg.star == "**":
                entries = dict_entries(arg.value)
                if entries is None and isinstance(arg.value, cst.Name):
                    entries = self._dict_values.get(arg.value.value)
                if entries is None:
                    opaque = True
                values.update(entries or {})
        return values, opaque

    def _variable(self, name: str) -> tuple[object, str]:
        """`name` with the variable it is here (a new object where none is sure)."""
        return (self.ctx.binding_key(name) or object(), name)

    def _causal_config(self, value: cst.BaseExpression) -> bool:
        """Is `value` a `get_neuron_config(...)` call of a causal-LM class (what export folds in)?"""
        if not isinstance(value, cst.Call):
            return False
        owner, _, method = (self.qualify(value.func) or "").rpartition(".")
        return method == "get_neuron_config" and owner in CAUSAL_LM

    def _dtype_arg(
        self, options: dict[str, cst.BaseExpression], traced: bool = False
    ) -> cst.Arg | None:
        """The model's `dtype=`, always written where the export's is known: transformers 5 would
        otherwise load the checkpoint's own dtype. Without options, a traced export computed in
        float32 (the dtype transformers 4 loaded it in), a decoder in bfloat16 (optimum-neuron's
        `NxDNeuronConfig` default)."""
        if "dtype" in options:
            return make_arg("dtype", options["dtype"])
        if "torch_dtype" in options:
            return make_arg("dtype", options["torch_dtype"])
        if traced and ("auto_cast" in options or "auto_cast_type" in options):
            return self._traced_cast(options)
        if "auto_cast_type" in options:
            value = literal(options["auto_cast_type"])
            if value in CAST_DTYPES:
                torch = self.ctx.torch()
                self.changed(f"`auto_cast_type={value!r}` -> `dtype=torch.{CAST_DTYPES[value]}`")
                if "auto_cast" in options and literal(options["auto_cast"]) not in ("all", ...):
                    self.ctx.note(
                        self.code,
                        f"`auto_cast` cast only some operations (matmuls) to {value}; natively the whole model runs in `torch.{CAST_DTYPES[value]}`",
                    )
                return make_arg("dtype", f"{torch}.{CAST_DTYPES[value]}")
            self.todo(
                f"`auto_cast_type={code_of(options['auto_cast_type'])}` chose the compute dtype: pass `dtype=torch.bfloat16` (or the one it names) to `from_pretrained`"
            )
            return make_arg("dtype", f"{self.ctx.torch()}.float32")  # until a person picks one, as loaded by default
        return make_arg("dtype", f"{self.ctx.torch()}.{'float32' if traced else 'bfloat16'}")

    def _traced_cast(self, options: dict[str, cst.BaseExpression]) -> cst.Arg | None:
        """The export of a traced model cast inside the compiled graph only when `auto_cast` was
        set (optimum-neuron ignored `auto_cast_type` otherwise); its inputs, outputs and weights
        stayed float32. Only `auto_cast="all"` casts every operation, as a model dtype does."""
        mode = literal(options["auto_cast"]) if "auto_cast" in options else None
        given = ", ".join(
            f"`{k}={code_of(options[k])}`" for k in ("auto_cast", "auto_cast_type") if k in options
        )
        cast = literal(options["auto_cast_type"]) if "auto_cast_type" in options else "bf16"
        dtype = CAST_DTYPES.get(cast) if isinstance(cast, str) else None
        if mode is None or mode == "none" or (mode is not ... and dtype == "float32"):
            self.changed(f"dropped {given}: the export computed in float32, as the model does")
            return make_arg("dtype", f"{self.ctx.torch()}.float32")
        if mode != "all" or dtype is None:
            what = "the matmuls" if mode == "matmul" else "the operations `auto_cast` named"
            self.todo(
                f"{given} autocast {what}: call under `torch.autocast(..., dtype=torch.{dtype or 'bfloat16'})`"
            )
            return make_arg("dtype", f"{self.ctx.torch()}.float32")  # the weights stayed float32
        self.changed(f"{given} -> `dtype=torch.{dtype}`")
        self.ctx.note(
            self.code,
            f"`auto_cast=\"all\"` computed in {cast} behind float32 inputs and outputs; natively the model runs in `torch.{dtype}` and returns `torch.{dtype}` tensors: `.float()` them before NumPy reads them",
        )
        return make_arg("dtype", f"{self.ctx.torch()}.{dtype}")

    def _device_args(
        self, options: dict[str, cst.BaseExpression], shardable: bool = True, placed: list[cst.Arg] | None = None
    ) -> list[cst.Arg]:
        """Where the model goes: `device_map`, or a `DistributedConfig` for `tensor_parallel_size`;
        nothing where the call's own arguments `placed` say it already (a second keyword would
        not compile)."""
        if any(a.keyword is not None and a.keyword.value in PLACEMENT for a in placed or ()):
            return []
        tp_expr = options.get("tensor_parallel_size", options.get("num_cores"))
        device = '"neuron"' if self.ctx.target.neuron else self.ctx.device_expr()
        if tp_expr is None or literal(tp_expr) == 1:
            return [make_arg("device_map", device)]
        given = f"`{'tensor_parallel_size' if 'tensor_parallel_size' in options else 'num_cores'}={code_of(tp_expr)}`"
        if not shardable:
            self.todo(
                f"{given}: now loads whole on one device; if its class has a `base_model_tp_plan`, pass `DistributedConfig(tp_size={code_of(tp_expr)})`"
            )
            return [make_arg("device_map", device)]
        if self.ctx.notebook:
            self.todo(
                f"{given}: a notebook cannot shard this model, it now loads whole on one device; to shard it, run it as a script under `torchrun`"
            )
            return [make_arg("device_map", device)]
        config = self.ctx.need_from("transformers.distributed", "DistributedConfig")
        if literal(tp_expr) is ...:
            self.todo(
                f"`tp_size={code_of(tp_expr)}`: when it is 1, pass `device_map=...` instead of `distributed_config`, or the model stays on the CPU"
            )
        self.changed(
            f"`num_cores` / `tensor_parallel_size` -> `DistributedConfig(tp_size={code_of(tp_expr)})`"
        )
        self.ctx.note(
            self.code,
            f"tensor parallelism needs one process per core: launch with `torchrun --nproc_per_node={code_of(tp_expr)} ...`",
        )
        # optimum-neuron sharded the model from one process; transformers shards it over processes.
        self.ctx.comment(f"# Launch with: torchrun --nproc_per_node={code_of(tp_expr)} {self.ctx.script_name} (one process per shard)")
        return [make_arg("distributed_config", f"{config}(tp_size={code_of(tp_expr)})")]

    def _report_dropped(self, options: dict[str, cst.BaseExpression]) -> None:
        for key, value in options.items():
            if key in EXPORT_DROPPED and key != "neuron_config":
                self.changed(f"dropped `{key}={code_of(value)}`: {EXPORT_DROPPED[key]}")
        if "dynamic_batch_size" in options and literal(options["dynamic_batch_size"]) is not False:
            self.todo(
                "`dynamic_batch_size` split batches into compiled-size pieces: pad or split batches to a fixed size"
            )
        if "batch_size" in options:
            self.ctx.note(
                self.code,
                f"`batch_size={code_of(options['batch_size'])}` was compiled in; natively each new batch size compiles anew, so keep batches at that size",
            )

    def _causal_lm(self, call: cst.Call) -> cst.Call:
        kept, options, opaque = self._options(call)
        if opaque:
            self.todo(
                "export options in a `**` dict this tool cannot see: `sequence_length` -> `generation_config.max_cache_len`, drop compiler options"
            )
        exporting = isinstance(call.func, cst.Attribute) and call.func.attr.value == "export"
        compiled = None if exporting else compiled_artifacts_todo(options, "model")
        if compiled is not None:
            self.todo(compiled)
        sequential_loading(self.ctx)
        args = list(kept)
        dtype = self._dtype_arg(options)
        if dtype is not None:
            args.append(dtype)
        args += self._device_args(options, placed=kept)
        self._report_dropped(options)
        if exporting:
            assert isinstance(call.func, cst.Attribute)
            call = call.with_changes(func=call.func.with_changes(attr=cst.Name("from_pretrained")))
        self.changed(
            "inference `NeuronModelForCausalLM` -> `AutoModelForCausalLM` with a static cache"
        )
        self.ctx.note(
            self.code,
            "the first `generate` call compiles (static cache, chunked prefill); later calls with the same padded shapes reuse the compiled graphs",
        )
        if self._target is not None:
            self._generation_config(self._target, options.get("sequence_length"))
        else:
            self.todo(
                f"static cache: `model.generation_config.update({', '.join(keywords(STATIC_CACHE))}, max_cache_len=<seq_len>, prefill_chunk_size={PREFILL_CHUNK_LIMIT})`"
            )
        return with_args(call, args)

    def _generation_config(self, model: str, sequence_length: cst.BaseExpression | None) -> None:
        variable = self.ctx.binding_key(model)
        if variable is not None:
            self._models[variable] = _Model("causal", sequence_length)
        parts = keywords(STATIC_CACHE)
        if sequence_length is not None:
            parts.append(f"max_cache_len={code_of(sequence_length)}")
        parts.append(f"prefill_chunk_size={prefill_chunk(literal(sequence_length))}")
        if self.ctx.target.neuron:
            compile_config = self.ctx.need_from("transformers", "CompileConfig")
            parts.append(f"compile_config={compile_config}({', '.join(keywords(NEURON_COMPILE))})")
        comment = "# Static shapes, as the export fixed them: a static KV cache, and prompts prefilled in\n# chunks (each new prompt length compiles anew unless prompts are padded to a multiple of the chunk).\n"
        if variable in self.facts.padded_models and variable not in self.facts.unpadded:
            comment = "# Static shapes, as the export fixed them: a static KV cache, and prompts prefilled in\n# chunks (padded to a multiple of the chunk) so that generate compiles a bounded set of graphs.\n"
        if variable in self.facts.unpadded:
            self.ctx.note(
                self.code,
                f"the prompts of `{model}` are not padded: this code reads the generated output whole (the pad tokens would come first), so each new prompt length compiles anew; to bound the graphs, slice the new tokens off by the padded input length (`out[:, inputs[\"input_ids\"].shape[1]:]`) and tokenize with `{', '.join(f'{k}={v}' for k, v in prompt_padding(model).items())}`",
            )
        update = stmt(f"{comment}{model}.generation_config.update({', '.join(parts)})\n")
        if len(code_of(update).splitlines()[-1]) > 100:
            inner = "".join(f"    {p},\n" for p in parts)
            update = stmt(f"{comment}{model}.generation_config.update(\n{inner})\n")
        self.ctx.insert_after(update)

    def _traced(self, call: cst.Call, task: str) -> cst.Call:
        new_class = TRACED_TASKS[task]
        kept, options, opaque = self._options(call)
        if opaque:
            self.todo(
                "export options in a `**` dict this tool cannot see: pad inputs to the exported shapes, drop the compiler options"
            )
        compiled = compiled_artifacts_todo(options, "model")
        if compiled is not None:
            self.todo(compiled)
        sequential_loading(self.ctx)
        args = list(kept)
        dtype = self._dtype_arg(options, traced=True)
        if dtype is not None:
            args.append(dtype)
        args += self._device_args(options, shardable=False, placed=kept)
        self._report_dropped(options)
        self.changed(
            f"traced `{new_class}` -> transformers `{new_class}` compiled with `dynamic=False`"
        )
        if self._target is not None:
            variable = self.ctx.binding_key(self._target)
            if variable is not None:
                self._models[variable] = _Model("traced", options.get("sequence_length"), task)
            backend = 'backend="neuron", ' if self.ctx.target.neuron else ""
            self.ctx.insert_after(
                stmt(
                    f"# Compiled for fixed input shapes, as the export was.\n{self._target}.compile({backend}dynamic=False)\n"
                )
            )
            if "sequence_length" in options and task in POOLED_TEXT_TASKS:
                self.ctx.note(
                    self.code,
                    f"inputs are tokenized to the exported `sequence_length` ({code_of(options['sequence_length'])}) so the compiled graph is reused",
                )
            elif task in TOKEN_TASKS:
                self.ctx.note(
                    self.code,
                    f"`{self._target}` returns one output per token: its inputs keep their own length (optimum-neuron padded them to the exported `sequence_length` and cut the outputs back; padded natively, the outputs would gain rows for the pad tokens), so each new input length compiles anew",
                )
        return with_args(call, args)

    def _push_to_hub(self, call: cst.Call) -> cst.BaseExpression:
        """optimum-neuron's `push_to_hub(save_directory, repository_id, private, revision, token,
        endpoint)` created the repository and uploaded the folder, whatever else was saved in it
        (the tokenizer); transformers' `push_to_hub` uploads the model alone. A helper uploads the
        folder as optimum-neuron did."""
        repository = arg_value(call, 1, "repository_id")
        directory = arg_value(call, 0, "save_directory")
        positional = [a for a in call.args if a.keyword is None]
        if repository is None or directory is None or any(a.star for a in call.args) or len(positional) > 2:
            self.todo(
                "`push_to_hub(save_directory, repository_id)`: `HfApi().create_repo(repository_id, exist_ok=True)`, then `upload_folder`"
            )
            return call
        helper = self.ctx.unused_name("push_folder_to_hub")
        source = PUSH_FOLDER.replace("$name", helper).replace("$HfApi", self.ctx.need_from("huggingface_hub", "HfApi"))
        self.ctx.need_helper(helper, source)
        self.changed(f"`push_to_hub(save_directory, repository_id)` -> `{helper}(...)`, which uploads the folder as optimum-neuron did")
        first = [cst.Arg(directory.value), cst.Arg(repository.value)]
        rest = [a for a in call.args if a.keyword is not None and a.keyword.value not in ("save_directory", "repository_id")]
        return call.with_changes(func=expr(helper), args=fix_trailing_comma([*first, *rest]))

    def _pipeline(self, call: cst.Call) -> cst.Call:
        kept: list[cst.Arg] = []
        options: dict[str, cst.BaseExpression] = {}
        for arg in call.args:
            key = arg.keyword.value if arg.keyword is not None else None
            if arg.star == "**":
                entries = dict_entries(arg.value)
                if entries is None and isinstance(arg.value, cst.Name):
                    entries = self._dict_values.get(arg.value.value)
                if entries is None:
                    self.todo(
                        f"`**{code_of(arg.value)}` may hold optimum-neuron export options, which the model rejects: keep only model keywords in it"
                    )
                    kept.append(arg)
                    continue
                for name, value in entries.items():
                    if name in EXPORT_OPTIONS and name not in LOADING_KEPT and name not in ("dtype", "torch_dtype"):
                        options[name] = value
                    else:
                        kept.append(make_arg(name, value))
                continue
            if key in ("input_shapes", "compiler_args"):
                entries = dict_entries(arg.value)
                if entries is None and isinstance(arg.value, cst.Name):
                    entries = self._dict_values.get(arg.value.value)
                if entries is None:
                    self.todo(
                        f"`{key}={code_of(arg.value)}`: pad pipeline inputs to the exported shapes and drop the compiler options"
                    )
                else:
                    options.update(entries)
                continue
            if key in ("export", *TP_KEYWORDS, "sequence_length"):
                options[key] = arg.value
                continue
            kept.append(arg)
        self._report_dropped({k: v for k, v in options.items() if k != "batch_size"})
        model = arg_value(call, 1, "model")
        compiled = compiled_artifacts_todo(options, "model")
        if compiled is not None and (
            model is None
            or isinstance(model.value, cst.SimpleString | cst.FormattedString | cst.ConcatenatedString)
            or (isinstance(model.value, cst.Name) and self.ctx.binding_key(model.value.value) not in self._models)
        ):
            self.todo(compiled)
        tp_expr = options.get("tensor_parallel_size", options.get("num_cores"))
        if tp_expr is not None and literal(tp_expr) != 1:
            self.todo(
                f"`{'tensor_parallel_size' if 'tensor_parallel_size' in options else 'num_cores'}={code_of(tp_expr)}`: load the model with `distributed_config=DistributedConfig(tp_size=...)` under torchrun, pass it as `model=`"
            )
        if keyword(call, "device") is None and keyword(call, "device_map") is None:
            kept.append(
                make_arg("device", '"neuron"' if self.ctx.target.neuron else self.ctx.device_expr())
            )
        if "sequence_length" in options:
            self.todo(
                f'inputs were fixed at `sequence_length={code_of(options["sequence_length"])}`: pass `padding="max_length", max_length={code_of(options["sequence_length"])}, truncation=True` per call'
            )
        self.changed("`optimum.neuron.pipeline` -> `transformers.pipeline`")
        return with_args(call, kept)

    def _pad_inputs(self, call: cst.Call, variable: Binding) -> cst.Call:
        info = self._models.get(variable)
        if info is None:
            return call
        model = variable[1]
        present = {a.keyword.value for a in call.args if a.keyword is not None}
        args = [
            a
            for a in call.args
            if not (
                a.keyword is not None
                and a.keyword.value in ("padding", "max_length", "pad_to_multiple_of")
            )
        ]
        if info.kind == "causal":
            # Left, whatever side was given: generation continues after the last column, and
            # optimum-neuron 0.4.5 code padded right (it rejected left padding).
            side = keyword(call, "padding_side")
            if side is not None and literal(side.value) != "left":
                self.changed(f"`padding_side={code_of(side.value)}` -> `padding_side=\"left\"`: transformers generates after the last column")
            args = [a for a in args if a is not side]
            new = [
                make_arg(key, value) for key, value in prompt_padding(model).items()
            ]
            self.changed(
                "prompt left-padded to a multiple of the prefill chunk (one prefill graph per padded length)"
            )
        else:
            if info.task not in POOLED_TEXT_TASKS:
                padded = call  # per-token outputs, images, audio: the inputs keep their shapes
            elif info.sequence_length is None:
                self.todo(
                    'pad these inputs to the length the model was exported for (`padding="max_length", max_length=...`)'
                )
                return call
            else:
                new = [
                    make_arg("padding", '"max_length"'),
                    make_arg("max_length", info.sequence_length),
                ]
                if "truncation" not in present:
                    new.append(make_arg("truncation", "True"))
                self.changed("inputs tokenized to the exported `sequence_length`")
                padded = with_args(call, [*args, *new])
            # The traced model took host tensors; a native model wants them on its device.
            return cst.Call(
                func=cst.Attribute(value=padded, attr=cst.Name("to")),
                args=[cst.Arg(cst.parse_expression(f"{model}.device"))],
            )
        return with_args(call, [*args, *new])


def _command_text(node: cst.BaseExpression) -> str | None:
    """The leading literal words of a shell command given as a string or a list of strings."""
    if isinstance(node, cst.List | cst.Tuple):
        words = []
        for element in node.elements:
            value = literal(element.value)
            if not isinstance(value, str):
                break
            words.append(value)
        return " ".join(words) or None
    if isinstance(node, cst.FormattedString):
        text = "".join(p.value for p in node.parts if isinstance(p, cst.FormattedStringText))
        return text or None
    value = literal(node)
    return value if isinstance(value, str) else None


def _ast_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else " {} "
            for v in node.values
        )
    return None
