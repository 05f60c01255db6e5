"""The codemods' tables against the real libraries.

Everything the optimum-neuron, torch_neuronx and neuronx-distributed codemods write must exist
in the installed transformers / TRL / peft / torch; everything they read from optimum-neuron
must exist in optimum-neuron 0.4.5's own source, read from its wheel with `ast` (never imported:
it needs torch_xla). The wheel is downloaded for the test; without network the test is skipped.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from neuron_migrate.rewrite.codemods.neuronx_distributed import NeuronxDistributed
from neuron_migrate.rewrite.codemods.neuronx_trace import NeuronxTrace
from neuron_migrate.rewrite.codemods.optimum import diffusion as diffusion
from neuron_migrate.rewrite.codemods.optimum import fields as fields
from neuron_migrate.rewrite.codemods.optimum import inference as inference
from neuron_migrate.rewrite.codemods.optimum import training as training

OPTIMUM_NEURON = "optimum-neuron==0.4.5"


# -- what the migrated code uses exists ------------------------------------------------------


def _resolve(module: str, name: str) -> object:
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    "target", sorted({*training.RENAMES.values(), *inference.RENAMES.values()})
)
def test_rename_targets_exist(target: tuple[str, str]) -> None:
    _resolve(*target)


def test_distributed_config_fields() -> None:
    from transformers.distributed import DistributedConfig

    fields = {f.name for f in dataclasses.fields(DistributedConfig)}
    assert {"tp_size", "pp_size", "enable_sequence_parallel", "fsdp_size", "ep_size"} <= fields
    # The helper's call, with the data-parallel remainder of 4 processes at TP=2.
    DistributedConfig(tp_size=2, pp_size=1, fsdp_size=4 // 2, enable_sequence_parallel=True)


def test_from_pretrained_keywords() -> None:
    from transformers import PreTrainedModel

    source = inspect.getsource(PreTrainedModel.from_pretrained)
    for keyword in ("distributed_config", "device_map", "dtype"):
        assert f'"{keyword}"' in source or f"{keyword}:" in source or f"{keyword}=" in source, (
            keyword
        )


def test_generation_config_fields() -> None:
    from transformers import CompileConfig, GenerationConfig
    from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS

    config = GenerationConfig()
    unused = config.update(
        cache_implementation="static",
        max_cache_len=64,
        prefill_chunk_size=16,
        compile_config=CompileConfig(
            backend="neuron", fullgraph=True, dynamic=False, mode="default"
        ),
    )
    assert unused == {}
    assert "static" in ALL_CACHE_IMPLEMENTATIONS
    config.validate()
    assert {"backend", "fullgraph", "dynamic", "mode"} <= set(
        inspect.signature(CompileConfig).parameters
    )


def test_training_arguments_and_trainer_keywords() -> None:
    from transformers import Trainer, TrainingArguments
    from trl import SFTConfig, SFTTrainer

    args = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert {"warmup_steps", "torch_compile", "activation_checkpointing", "bf16"} <= args
    sft = {f.name for f in dataclasses.fields(SFTConfig)}
    assert {
        "max_length",
        "model_init_kwargs",
        "packing",
        "packing_strategy",
        "pad_to_multiple_of",
    } <= sft
    assert "wrapped" in inspect.getsource(importlib.import_module("trl.trainer.sft_config"))
    for trainer in (Trainer, SFTTrainer):
        assert "processing_class" in inspect.signature(trainer.__init__).parameters


def test_tokenizer_and_pipeline_keywords() -> None:
    from transformers import PreTrainedTokenizerBase, pipeline

    call = inspect.signature(PreTrainedTokenizerBase.__call__).parameters
    assert {
        "padding",
        "pad_to_multiple_of",
        "padding_side",
        "max_length",
        "truncation",
        "return_tensors",
    } <= set(call)
    assert "device" in inspect.signature(pipeline).parameters


def test_torch_spellings() -> None:
    import torch

    assert "dynamic" in inspect.signature(torch.compile).parameters
    assert "backend" in inspect.signature(torch.compile).parameters
    assert callable(torch.nn.Module.compile)
    assert callable(torch.accelerator.current_accelerator)


def test_environment_variables_are_read() -> None:
    """`HF_DEACTIVATE_ASYNC_LOAD` (--target neuron) and `TENSORBOARD_LOGGING_DIR` (`logging_dir`)."""
    loading = inspect.getsource(importlib.import_module("transformers.core_model_loading"))
    assert 'is_env_variable_true("HF_DEACTIVATE_ASYNC_LOAD")' in loading
    integrations = inspect.getsource(
        importlib.import_module("transformers.integrations.integration_utils")
    )
    assert 'os.getenv("TENSORBOARD_LOGGING_DIR"' in integrations


def test_neuron_compile_paths_pass_dynamic_false() -> None:
    """Why no `torch._dynamo.config.automatic_dynamic_shapes = False` is emitted: every compile
    the migrated code triggers on Neuron already passes `dynamic=False`, which turns automatic
    dynamic shapes off for that compile."""
    from transformers import Trainer

    trainer_source = inspect.getsource(Trainer)
    assert (
        'dynamic=False if self.args.torch_compile_backend == "neuron" else None' in trainer_source
    )
    modeling = inspect.getsource(importlib.import_module("transformers.modeling_utils"))
    assert 'if self.device.type in ("tpu", "neuron"):' in modeling
    assert 'CompileConfig(backend=self.device.type, dynamic=False, mode="default")' in modeling
    eval_frame = inspect.getsource(importlib.import_module("torch._dynamo.eval_frame"))
    assert "automatic_dynamic_shapes=False" in eval_frame


def test_dynamic_false_compiles_static_graphs() -> None:
    import torch
    import torch._dynamo

    shapes = []

    def backend(gm, example_inputs):  # type: ignore[no-untyped-def]
        shapes.append([x for x in example_inputs if isinstance(x, torch.SymInt)])
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(lambda x: x * 2, backend=backend, dynamic=False)
    for n in (4, 6, 8):
        fn(torch.ones(n))
    torch._dynamo.reset()
    assert len(shapes) == 3 and not any(shapes)


def test_peft_targets() -> None:
    import peft

    for name in ("get_peft_model", "PeftModel", "PeftModelForCausalLM", "LoraConfig"):
        assert hasattr(peft, name)


def test_peft_and_diffusers_do_not_replace_torch() -> None:
    import torch

    assert torch.__version__.startswith("2.13")


# -- what the codemods read exists in optimum-neuron 0.4.5 --------------------------------------


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ast.Module]:
    """optimum-neuron 0.4.5's Python sources, parsed, by path inside the wheel."""
    target = tmp_path_factory.mktemp("optimum_neuron_wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            OPTIMUM_NEURON,
            "--no-deps",
            "--quiet",
            "-d",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    wheels = list(target.glob("optimum_neuron-0.4.5-*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"cannot download {OPTIMUM_NEURON}: {proc.stderr.strip()[-300:]}")
    sources = {}
    with zipfile.ZipFile(wheels[0]) as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # its regexes use invalid escapes
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in archive.namelist():
            if name.endswith(".py"):
                sources[name] = ast.parse(archive.read(name).decode("utf-8"))
    return sources


def _class(wheel: dict[str, ast.Module], path: str, name: str) -> ast.ClassDef:
    for node in ast.walk(wheel[path]):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not in {path}")


def _function(scope: ast.AST, name: str) -> ast.FunctionDef:
    for node in ast.walk(scope):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not found")


def _fields(cls: ast.ClassDef) -> list[str]:
    return [
        s.target.id
        for s in cls.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    ]


def _parameters(fn: ast.FunctionDef) -> set[str]:
    args = fn.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}


def _strings(node: ast.AST) -> set[str]:
    return {
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_training_argument_fields_are_all_handled(wheel: dict[str, ast.Module]) -> None:
    """Every NeuronTrainingArguments field that TrainingArguments lacks has an entry."""
    from transformers import TrainingArguments

    neuron = set(
        _fields(
            _class(wheel, "optimum/neuron/trainers/training_args.py", "NeuronTrainingArguments")
        )
    )
    native = {f.name for f in dataclasses.fields(TrainingArguments)}
    handled = (
        set(fields.TRAINING_FIELDS) | set(fields.PARALLEL_FIELDS) | {"warmup_ratio", "logging_dir"}
    )
    assert neuron - native == handled
    assert not handled & native  # nothing valid natively is ever removed


def test_sft_config_fields(wheel: dict[str, ast.Module]) -> None:
    sft = wheel["optimum/neuron/trainers/sft_config.py"]
    post_init = _function(
        _class(wheel, "optimum/neuron/trainers/sft_config.py", "NeuronSFTConfig"), "__post_init__"
    )
    assert {"max_seq_length", "padding_free"} <= {
        n.attr for n in ast.walk(post_init) if isinstance(n, ast.Attribute)
    }
    assert sft is not None


def test_training_neuron_config_fields(wheel: dict[str, ast.Module]) -> None:
    fields = set(
        _fields(_class(wheel, "optimum/neuron/models/training/config.py", "TrainingNeuronConfig"))
    )
    assert {
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "sequence_parallel_enabled",
        "gradient_checkpointing",
        "fuse_qkv",
    } <= fields


def test_training_model_from_pretrained_takes_trn_config(wheel: dict[str, ast.Module]) -> None:
    auto = _class(wheel, "optimum/neuron/models/training/modeling_auto.py", "_BaseNeuronModelClass")
    params = list(_function(auto, "from_pretrained").args.args)
    assert [a.arg for a in params[:3]] == ["cls", "pretrained_model_name_or_path", "trn_config"]
    mixin = _function(wheel["optimum/neuron/models/training/modeling_utils.py"], "from_pretrained")
    assert {"torch_dtype", "attn_implementation"} <= _strings(mixin) | _parameters(mixin)


def test_renamed_classes_exist(wheel: dict[str, ast.Module]) -> None:
    defined: set[str] = set()
    for path, tree in wheel.items():
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                defined.add(f"{module}.{node.name}")
            if isinstance(node, ast.ImportFrom):
                defined.update(f"{module}.{alias.asname or alias.name}" for alias in node.names)
    lazy = set()  # names of `_LazyModule` packages: the strings of their `_import_structure`
    for path, tree in wheel.items():
        if path.endswith("/__init__.py") and "_import_structure" in ast.unparse(tree):
            package = path.removesuffix("/__init__.py").replace("/", ".")
            lazy.update(f"{package}.{value}" for value in _strings(tree))
    old = {*training.RENAMES, *inference.RENAMES}
    old.discard("optimum.neuron.modeling_decoder.NeuronModelForCausalLM")  # optimum-neuron < 0.1
    missing = sorted(name for name in old if name not in defined | lazy)
    assert not missing


def test_traced_task_classes_match_the_wheel(wheel: dict[str, ast.Module]) -> None:
    modeling = wheel["optimum/neuron/modeling.py"]
    for node in modeling.body:
        if isinstance(node, ast.ClassDef) and node.name in inference.TRACED_TASKS:
            auto = next(
                s.value.id
                for s in node.body
                if isinstance(s, ast.Assign)
                and s.targets[0].id == "auto_model_class"
                and isinstance(s.value, ast.Name)  # type: ignore[attr-defined]
            )
            assert inference.TRACED_TASKS[node.name] == auto, node.name


def test_inference_keywords_exist(wheel: dict[str, ast.Module]) -> None:
    """Every export/loading keyword the inference codemod consumes is one optimum-neuron 0.4.5 takes."""
    traced = _function(
        _class(wheel, "optimum/neuron/modeling_traced.py", "NeuronTracedModel"), "_export"
    )
    decoder = _class(
        wheel, "optimum/neuron/models/inference/modeling_utils.py", "NeuronPreTrainedModel"
    )
    shapes = set(
        _fields(_class(wheel, "optimum/neuron/utils/argument_utils.py", "InputShapesArguments"))
    )
    pipeline = _function(wheel["optimum/neuron/pipelines/transformers/base.py"], "pipeline")
    accepted = (
        _parameters(traced)
        | _parameters(_function(decoder, "get_neuron_config"))
        | _parameters(_function(decoder, "export"))
        | shapes
        | _parameters(pipeline)
        | _strings(pipeline)  # kwargs.pop("num_cores"), "sequence_length", ...
    )
    # `dtype` is transformers' own spelling, passed through; the aliases are earlier releases' names.
    consumed = set(fields.EXPORT_OPTIONS) - {"dtype", *fields.EXPORT_ALIASES}
    assert sorted(consumed - accepted) == []


def test_trace_keywords_exist() -> None:
    """torch_neuronx 2.x is not on PyPI (the package there is a placeholder), so the trace options
    are checked against the names the codemod documents instead."""
    assert "compiler_args" in inspect.getsource(NeuronxTrace)
    assert NeuronxDistributed.manual  # the table of TODOs is non-empty


def test_manual_tables_name_real_replacements() -> None:
    import torch.distributed.checkpoint as dcp
    import torch.distributed.pipelining as pipelining
    import torch.distributed.tensor.parallel as tp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    for name in (
        "ColwiseParallel",
        "RowwiseParallel",
        "SequenceParallel",
        "parallelize_module",
        "loss_parallel",
    ):
        assert hasattr(tp, name)
    for name in ("pipeline", "PipelineStage", "ScheduleGPipe", "Schedule1F1B"):
        assert hasattr(pipelining, name)
    assert callable(dcp.save) and callable(dcp.load) and callable(dcp.async_save)
    assert callable(init_device_mesh) and callable(fully_shard) and MixedPrecisionPolicy


def test_prefill_chunk_leaves_room_to_generate() -> None:
    assert inference.prefill_chunk(2048) == 128
    assert inference.prefill_chunk(64) == 16
    assert inference.prefill_chunk(None) == 128


def test_examples_are_ours() -> None:
    for path in Path(__file__).resolve().parents[2].joinpath("examples").glob("optimum_*.py"):
        assert '"""' in path.read_text().splitlines()[0]


@pytest.mark.parametrize("old", sorted(diffusion.PIPELINES))
def test_diffusion_targets_exist(old: str) -> None:
    import diffusers

    new, denoiser = diffusion.PIPELINES[old]
    pipeline = getattr(diffusers, new)
    assert denoiser in inspect.signature(pipeline.__init__).parameters
    assert "torch_dtype" in inspect.getsource(diffusers.DiffusionPipeline.from_pretrained)


def test_diffusion_names_exist_in_the_wheel(wheel: dict[str, ast.Module]) -> None:
    classes = {
        node.name
        for node in wheel["optimum/neuron/modeling_diffusion.py"].body
        if isinstance(node, ast.ClassDef)
    }
    assert set(diffusion.PIPELINES) <= classes
    shapes = set(
        _fields(_class(wheel, "optimum/neuron/utils/argument_utils.py", "InputShapesArguments"))
    )
    assert set(diffusion.CALL_SHAPES) <= shapes
    source = set()
    # `export` belongs to optimum's `OptimizedModel.from_pretrained`; the wheel passes it on in
    # `pipelines/transformers/base.py`.
    for path in (
        "optimum/neuron/modeling_diffusion.py",
        "optimum/neuron/modeling_traced.py",
        "optimum/neuron/pipelines/transformers/base.py",
    ):
        for node in ast.walk(wheel[path]):
            if isinstance(node, ast.FunctionDef):
                source |= _parameters(node)
    # The LoRA and IP-Adapter options are read by name from the export's keywords.
    parser = _class(wheel, "optimum/neuron/utils/argument_utils.py", "NeuronArgumentParser")
    assert sorted(set(diffusion.KNOWN) - source - shapes - _strings(parser)) == []


def test_neuron_defaults_differ_natively(wheel: dict[str, ast.Module]) -> None:
    """Each default the migration writes out is optimum-neuron 0.4.5's, and the native class
    would take another one: so it must be written, and nothing else is."""
    from transformers import TrainingArguments
    from trl import SFTConfig

    neuron = _class(wheel, "optimum/neuron/trainers/training_args.py", "NeuronTrainingArguments")
    constants = {  # class constants a field default may name (`default=default_optim`)
        target.id: statement.value.value
        for statement in neuron.body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    defaults = {}
    for statement in neuron.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.value, ast.Call):
            for keyword in statement.value.keywords:
                if keyword.arg == "default" and isinstance(statement.target, ast.Name):
                    if isinstance(keyword.value, ast.Constant):
                        defaults[statement.target.id] = keyword.value.value
                    elif isinstance(keyword.value, ast.Name) and keyword.value.id in constants:
                        defaults[statement.target.id] = constants[keyword.value.id]
    # A `None` default that `__post_init__` replaces (`if self.report_to is None: ... self.report_to = "all"`).
    post_init = next(s for s in neuron.body if isinstance(s, ast.FunctionDef) and s.name == "__post_init__")
    for node in ast.walk(post_init):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Attribute):
            name = node.test.left.attr
            is_none = isinstance(node.test.ops[0], ast.Is) and ast.unparse(node.test.comparators[0]) == "None"
            for assign in ast.walk(node):
                if is_none and defaults.get(name, ...) is None and isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Constant) and ast.unparse(assign.targets[0]) == f"self.{name}":
                    defaults[name] = assign.value.value
    for table, native in (
        (fields.NEURON_DEFAULTS, TrainingArguments),
        (fields.SFT_NEURON_DEFAULTS, SFTConfig),
    ):
        native_defaults = {f.name: f.default for f in dataclasses.fields(native)}
        for name, value in table.items():
            assert defaults[name] == value, name
            assert native_defaults[name] != value, name


def test_training_loader_keywords_were_ignored(wheel: dict[str, ast.Module]) -> None:
    """optimum-neuron's training `from_pretrained` popped each keyword the migration drops."""
    mixin = _function(wheel["optimum/neuron/models/training/modeling_utils.py"], "from_pretrained")
    popped = {
        call.args[0].value
        for call in ast.walk(mixin)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "pop"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }
    assert set(fields.TRAINING_LOADER_IGNORED) <= popped


def test_diffusion_call_overrides_match_diffusers() -> None:
    import diffusers

    for new, _ in diffusion.PIPELINES.values():
        parameters = inspect.signature(getattr(diffusers, new).__call__).parameters
        assert (new in diffusion.SIZED) == ("height" in parameters and "width" in parameters), new
        if new in diffusion.SEQUENCE_LENGTH:
            assert "max_sequence_length" in parameters, new
    loading = inspect.getsource(diffusers.DiffusionPipeline.from_pretrained)
    for name in ("torch_dtype", "revision", "variant", "use_safetensors", "low_cpu_mem_usage"):
        assert name in loading
    pipeline = diffusers.StableDiffusionPipeline
    assert {"load_lora_weights", "fuse_lora", "load_ip_adapter"} <= set(dir(pipeline))
    assert "controlnet" in inspect.signature(diffusers.StableDiffusionControlNetPipeline.__init__).parameters


def test_traced_task_kinds_are_tasks() -> None:
    assert set(inference.TRACED_TASKS) >= inference.POOLED_TEXT_TASKS
    assert set(inference.TRACED_TASKS) >= inference.TOKEN_TASKS
    assert not inference.POOLED_TEXT_TASKS & inference.TOKEN_TASKS
