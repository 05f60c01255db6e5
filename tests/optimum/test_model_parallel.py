"""The model-parallel sizes of optimum-neuron reach the model natively, or a TODO says where.

optimum-neuron sharded whatever model its trainer was given by `tensor_parallel_size` /
`pipeline_parallel_size`; transformers 5.23 shards a model only while loading it, when
`from_pretrained` gets `distributed_config` (`modeling_utils.py`: `distributed_config =
kwargs.pop("distributed_config", None)`). Values of 1 shard nothing and may go; any other value,
or one this tool cannot see, must reach that `from_pretrained` or leave a TODO at the spot.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from neuron_migrate.rewrite.engine import rewrite_source
from tests.optimum.conftest import ROOT, train_with_torchrun

FIXTURES = ROOT / "tests" / "fixtures" / "rewrite" / "optimum_training"
TODO = "# TODO(neuron-migrate NM02"
# Every parsed `NeuronTrainingArguments` also gets the bf16 TODO (`--bf16` trained through fp32
# master weights), which is not about the model-parallel sizes.
BF16 = "fp32 master weights"


def sizes_todos(migrated: str) -> list[str]:
    """The TODO lines of a migration, less the bf16 one."""
    return [line for line in migrated.splitlines() if TODO in line and BF16 not in line]


def migrate(source: str) -> str:
    result = rewrite_source(textwrap.dedent(source), "train.py")
    assert result.error is None, result.error
    return result.migrated


def load_keywords(migrated: str) -> dict[str, str]:
    """The keywords of the one `from_pretrained` call assigned to `model`, as source."""
    for node in ast.walk(ast.parse(migrated)):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "model"
            and isinstance(node.value, ast.Call)
        ):
            return {k.arg or "**": ast.unparse(k.value) for k in node.value.keywords}
    raise AssertionError("no `model = ...from_pretrained(...)` in\n" + migrated)


def test_variable_tensor_parallel_size_reaches_a_plain_model() -> None:
    migrated = migrate(
        """
        from transformers import AutoModelForCausalLM
        from optimum.neuron import NeuronTrainer, NeuronTrainingArguments

        tp = 8
        args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=tp)
        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
        trainer = NeuronTrainer(model=model, args=args, train_dataset=ds)
        """
    )
    # The processes beyond `tp` are data parallelism, as they were on optimum-neuron.
    assert (
        load_keywords(migrated)["distributed_config"]
        == "DistributedConfig(tp_size=tp, fsdp_size=WORLD_SIZE // tp, enable_sequence_parallel=True)"
    )
    assert "tensor_parallel_size" not in migrated and not sizes_todos(migrated)


def test_literal_sizes_reach_a_model_loaded_before_the_arguments() -> None:
    migrated = migrate(
        """
        from transformers import AutoModelForCausalLM
        from optimum.neuron import NeuronTrainer, NeuronTrainingArguments

        def train(ds):
            model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
            args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=8, pipeline_parallel_size=2)
            NeuronTrainer(model, args, train_dataset=ds).train()
        """
    )
    assert (
        load_keywords(migrated)["distributed_config"] == "DistributedConfig(tp_size=8, pp_size=2, enable_sequence_parallel=True)"
    )
    # transformers cannot add data parallelism beside pipeline parallelism: said, not emitted.
    (todo,) = sizes_todos(migrated)
    assert "`pp_size=2`" in todo and "data parallelism" in todo


def test_a_variable_rebound_before_the_load_is_a_todo() -> None:
    migrated = migrate(
        """
        from transformers import AutoModelForCausalLM
        from optimum.neuron import NeuronTrainer, NeuronTrainingArguments

        tp = 8
        args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=tp)
        tp = 1
        model = AutoModelForCausalLM.from_pretrained("m")
        trainer = NeuronTrainer(model=model, args=args)
        """
    )
    assert "distributed_config" not in load_keywords(migrated)
    assert "tensor_parallel_size=tp" in migrated and sizes_todos(migrated)  # the TODO quotes it


def test_default_sizes_go_and_reads_of_them_stay_valid() -> None:
    migrated = migrate(
        """
        from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
        from optimum.neuron.models.training import NeuronModelForCausalLM

        args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=1)
        model = NeuronModelForCausalLM.from_pretrained("m", args.trn_config)
        print(args.tensor_parallel_size, args.pipeline_parallel_size)
        trainer = NeuronTrainer(model=model, args=args)
        """
    )
    assert "trn_config" not in migrated and "args.tensor_parallel_size" not in migrated
    assert "distributed_config" not in migrated and "print(1, 1)" in migrated
    assert not sizes_todos(migrated)


def test_sizes_behind_dict_unpacking_are_a_todo_not_a_default() -> None:
    migrated = migrate(
        """
        from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
        from optimum.neuron.models.training import NeuronModelForCausalLM

        def other():
            args = NeuronTrainingArguments(output_dir="elsewhere")  # the same name, unsharded

        def train(kwargs):
            args = NeuronTrainingArguments(**kwargs)
            model = NeuronModelForCausalLM.from_pretrained("m", trn_config=args.trn_config)
            NeuronTrainer(model, args).train()
        """
    )
    assert load_keywords(migrated)["distributed_config"] == "args.trn_config"  # not dropped
    assert migrated.count(TODO) >= 2  # at `**kwargs` and at the read of `args.trn_config`
    # Read again, `args` is no Neuron class any more: the TODO already says what a rerun would.
    assert rewrite_source(migrated, "train.py").migrated == migrated


def test_sizes_of_arguments_this_tool_cannot_see_are_a_todo_at_the_load() -> None:
    migrated = migrate(
        """
        from transformers import AutoModelForCausalLM
        from optimum.neuron import NeuronTrainer

        def train(training_args, ds):
            model = AutoModelForCausalLM.from_pretrained("m")
            return NeuronTrainer(model=model, args=training_args, train_dataset=ds).train()
        """
    )
    lines = migrated.splitlines()
    load = next(i for i, line in enumerate(lines) if line.lstrip().startswith("model ="))
    assert lines[load - 1].lstrip().startswith(TODO) and "tensor_parallel_size" in lines[load - 1]


def test_parsed_flags_reach_the_model_through_the_function_that_trains() -> None:
    migrated = migrate(
        """
        from transformers import AutoModelForCausalLM
        from optimum.neuron import NeuronHfArgumentParser, NeuronTrainer, NeuronTrainingArguments

        def training_function(script_args, training_args):
            model = AutoModelForCausalLM.from_pretrained(script_args.model_id)
            NeuronTrainer(model=model, args=training_args).train()

        def main():
            parser = NeuronHfArgumentParser([ScriptArguments, NeuronTrainingArguments])
            script_args, training_args = parser.parse_args_into_dataclasses()
            training_function(script_args, training_args)
        """
    )
    assert "def training_function(script_args, training_args, parallel_args):" in migrated
    assert "training_function(script_args, training_args, parallel_args)\n" in migrated
    assert "script_args, training_args, parallel_args = parser" in migrated
    assert load_keywords(migrated)["distributed_config"] == "parallel_args.to_distributed_config()"
    assert not sizes_todos(migrated)


def test_lazy_load_sizes_that_do_not_reach_the_load_are_a_todo() -> None:
    migrated = migrate(
        """
        from transformers import AutoModelForSeq2SeqLM
        from optimum.neuron.distributed import lazy_load_for_parallelism

        def load(training_args):
            with lazy_load_for_parallelism(tensor_parallel_size=training_args.tensor_parallel_size):
                model = AutoModelForSeq2SeqLM.from_pretrained("t5-small")
            return model
        """
    )
    assert "lazy_load_for_parallelism" in migrated.split(TODO, 1)[1]  # quoted by the TODO
    assert "shards while loading" not in str(rewrite_source(migrated).changes)


def test_sft_config_sizes_reach_the_model_trl_loads() -> None:
    migrated = migrate(
        """
        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

        config = NeuronSFTConfig(output_dir="out", tensor_parallel_size=8)
        trainer = NeuronSFTTrainer(model="meta-llama/Llama-2-7b-hf", args=config, train_dataset=ds)
        """
    )
    assert (
        'model_init_kwargs={"distributed_config": DistributedConfig(tp_size=8, fsdp_size=WORLD_SIZE // 8, enable_sequence_parallel=True), "device_map": None}'
        in migrated
    )


@pytest.mark.parametrize(
    ("call", "reaches"),
    [
        ('NeuronModelForCausalLM.from_pretrained("m", export=True, tensor_parallel_size=8)', True),
        ('NeuronModelForCausalLM.from_pretrained("m", export=True, num_cores=tp)', True),
        (
            'NeuronModelForSequenceClassification.from_pretrained("m", export=True, tensor_parallel_size=2)',
            False,
        ),
        (
            'NeuronStableDiffusionXLPipeline.from_pretrained("m", export=True, tensor_parallel_size=8)',
            False,
        ),
        ('pipeline("text-generation", "m", export=True, tensor_parallel_size=8)', False),
    ],
)
def test_inference_sizes_reach_the_load_or_leave_a_todo(call: str, reaches: bool) -> None:
    name = call.split(".")[0].split("(")[0]
    migrated = migrate(f"from optimum.neuron import {name}\n\nmodel = {call}\n")
    keywords = load_keywords(migrated)
    if reaches:
        assert keywords["distributed_config"].startswith("DistributedConfig(tp_size=")
    else:
        assert "distributed_config" not in keywords and sizes_todos(migrated)


# -- the migrated fixture trains, sharded, under torchrun ----------------------------------------


@pytest.mark.slow
def test_tensor_parallel_training_is_sharded_and_matches_one_process(
    tmp_path: Path, tiny_llama: Path, sentences: Path
) -> None:
    """The migrated script, run with `--tensor_parallel_size 2` under torchrun (gloo, CPU),
    trains a model that is really sharded (tp_size 2), with the losses of an unsharded run."""
    source = FIXTURES / "tensor_parallel_plain_model.in.py"
    result = rewrite_source(source.read_text(), str(source))
    assert result.error is None and not sizes_todos(result.migrated)
    script = tmp_path / "train.py"
    script.write_text(result.migrated)
    common = ["--model_dir", str(tiny_llama), "--data", str(sentences)]
    single, single_tp, _ = train_with_torchrun(
        script, 1, *common, "--output_dir", "tp1", "--tensor_parallel_size", "1"
    )
    sharded, sharded_tp, _ = train_with_torchrun(
        script, 2, *common, "--output_dir", "tp2", "--tensor_parallel_size", "2"
    )
    assert (single_tp, sharded_tp) == (1, 2)
    assert len(single) == len(sharded) == 3
    assert sharded == pytest.approx(single, abs=1e-5)
