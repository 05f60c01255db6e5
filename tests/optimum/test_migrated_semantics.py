"""Migrated optimum-neuron and torch_neuronx programs compute what the old stack computed.

Each old-stack program here is migrated and run on the CPU with tiny local models; its output is
compared with an eager reference of what optimum-neuron 0.4.5 computed, written from its source
(the old stack itself cannot run here): traced encoders padded inputs to the exported length and
cut the outputs back (`modeling.py`, `remove_padding`), decoders generated from the prompt as
given (`generation_utils.py`), the diffusion export fused its LoRA adapters into the weights
(`exporters/neuron/utils.py`), and the training arguments had optimum-neuron's defaults
(`trainers/training_args.py`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from neuron_migrate.rewrite.engine import rewrite_source
from tests.optimum.conftest import ROOT, run_script

pytestmark = pytest.mark.slow
FIXTURES = ROOT / "tests" / "fixtures" / "rewrite"


def migrate_to(directory: Path, source: str, name: str = "program.py") -> Path:
    result = rewrite_source(textwrap.dedent(source), name)
    assert result.error is None, result.error
    path = directory / name
    path.write_text(result.migrated)
    return path


def values(output: str, label: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in output.splitlines() if line.startswith(label + " ")]


# -- encoders: one output per token, as optimum-neuron cut its padding back off ------------------

ENCODERS = """
    import sys
    from transformers import AutoTokenizer
    from optimum.neuron import NeuronModelForFeatureExtraction, NeuronModelForTokenClassification

    embedder_dir, tagger_dir = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(embedder_dir)
    embedder = NeuronModelForFeatureExtraction.from_pretrained(embedder_dir, export=True, batch_size=1, sequence_length=32)
    tagger = NeuronModelForTokenClassification.from_pretrained(tagger_dir, export=True, batch_size=1, sequence_length=32)
    features = tokenizer("the cat sat on the mat", return_tensors="pt")
    embedding = embedder(**features).last_hidden_state.mean(dim=1)
    print("embedding", " ".join(f"{v:.5f}" for v in embedding[0].tolist()))
    words = tokenizer("a dog ran fast", return_tensors="pt")
    logits = tagger(**words).logits
    print("tags", " ".join(f"{v:.5f}" for v in logits[0].flatten().tolist()))
"""


def _as_exported(model: torch.nn.Module, inputs: dict[str, torch.Tensor], length: int) -> torch.Tensor:
    """What optimum-neuron's traced model returned: the inputs padded on the right to the
    exported length (`_pad_to_compiled_shape`), the first output cut back (`remove_padding`)."""
    size = inputs["input_ids"].shape[1]
    padded = {k: torch.nn.functional.pad(v, (0, length - size)) for k, v in inputs.items()}
    with torch.no_grad():
        return model(**padded)[0][:, :size]


def test_per_token_outputs_keep_one_row_per_token(
    tmp_path: Path, tiny_bert: Path, tiny_bert_tagger: Path, eager_compile: None
) -> None:
    from transformers import AutoModel, AutoModelForTokenClassification, AutoTokenizer

    script = migrate_to(tmp_path, ENCODERS)
    assert 'padding="max_length"' not in script.read_text()
    output = run_script(script, str(tiny_bert), str(tiny_bert_tagger))
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    embedder = AutoModel.from_pretrained(tiny_bert).eval()
    tagger = AutoModelForTokenClassification.from_pretrained(tiny_bert_tagger).eval()
    hidden = _as_exported(embedder, dict(tokenizer("the cat sat on the mat", return_tensors="pt")), 32)
    logits = _as_exported(tagger, dict(tokenizer("a dog ran fast", return_tensors="pt")), 32)
    [embedding] = values(output, "embedding")
    [tags] = values(output, "tags")
    assert [float(v) for v in embedding.split()] == pytest.approx(hidden.mean(dim=1)[0].tolist(), abs=1e-4)
    assert [float(v) for v in tags.split()] == pytest.approx(logits[0].flatten().tolist(), abs=1e-4)


def test_traced_cast_without_auto_cast_stays_float32(
    tmp_path: Path, tiny_bert: Path, eager_compile: None
) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    script = migrate_to(
        tmp_path,
        """
        import sys
        from transformers import AutoTokenizer
        from optimum.neuron import NeuronModelForSequenceClassification

        model = NeuronModelForSequenceClassification.from_pretrained(
            sys.argv[1], export=True, batch_size=1, sequence_length=16, auto_cast_type="bf16"
        )
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
        logits = model(**tokenizer("hello world", return_tensors="pt")).logits
        print("logits", logits.dtype, " ".join(f"{v:.6f}" for v in logits[0].tolist()))
        """,
    )
    [line] = values(run_script(script, str(tiny_bert)), "logits")
    dtype, *printed = line.split()
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert).eval()
    expected = _as_exported(model, dict(tokenizer("hello world", return_tensors="pt")), 16)
    assert dtype == "torch.float32"
    assert [float(v) for v in printed] == pytest.approx(expected[0].tolist(), abs=1e-5)


# -- generation: padding only where nothing that counts the prompt sees it -------------------------

GENERATION = """
    import sys
    from transformers import AutoTokenizer
    from optimum.neuron import NeuronModelForCausalLM

    model = NeuronModelForCausalLM.from_pretrained(sys.argv[1], export=True, batch_size=1, sequence_length=64)
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    prompt = "the cat sat on the mat"

    inputs = tokenizer(prompt, return_tensors="pt")
    longest = model.generate(**inputs, max_length=16, do_sample=False)
    print("max_length", " ".join(map(str, longest[0].tolist())))

    prompt_ids = tokenizer.encode(prompt)
    sliced = tokenizer(prompt, return_tensors="pt")
    completion = model.generate(**sliced, max_new_tokens=5, do_sample=False)
    print("sliced", " ".join(map(str, completion[0, len(prompt_ids):].tolist())))

    ids = tokenizer(prompt, return_tensors="pt")
    unmasked = model.generate(ids["input_ids"], max_new_tokens=5, do_sample=False)
    print("ids_only", tokenizer.batch_decode(unmasked, skip_special_tokens=True)[0])

    right = tokenizer(prompt, return_tensors="pt", padding_side="right")
    text = model.generate(**right, max_new_tokens=5, do_sample=False)
    print("right", tokenizer.batch_decode(text, skip_special_tokens=True)[0])
    print("is_causal_lm", isinstance(model, NeuronModelForCausalLM))
"""


def test_generation_returns_what_the_unpadded_prompt_gives(tmp_path: Path, tiny_llama: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    script = migrate_to(tmp_path, GENERATION)
    migrated = script.read_text()
    assert migrated.count("pad_to_multiple_of") == 1  # only the prompt read whole is padded
    output = run_script(script, str(tiny_llama))

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    inputs = tokenizer("the cat sat on the mat", return_tensors="pt")
    size = inputs["input_ids"].shape[1]
    longest = model.generate(**inputs, max_length=16, do_sample=False)[0]
    five = model.generate(**inputs, max_new_tokens=5, do_sample=False)[0]
    assert values(output, "max_length") == [" ".join(map(str, longest.tolist()))]
    assert values(output, "sliced") == [" ".join(map(str, five[size:].tolist()))]
    text = tokenizer.decode(five, skip_special_tokens=True)
    assert values(output, "ids_only") == [text]
    assert values(output, "right") == [text]
    assert values(output, "is_causal_lm") == ["True"]


# -- diffusion: the LoRA adapter the export fused --------------------------------------------------

DIFFUSION = """
    import sys
    import torch
    from optimum.neuron import NeuronStableDiffusionControlNetPipeline, NeuronStableDiffusionPipeline

    root = sys.argv[1]
    pipe = NeuronStableDiffusionPipeline.from_pretrained(
        root + "/pipeline", export=True, batch_size=1, height=32, width=32, num_images_per_prompt=1,
        lora_model_ids=root + "/lora", lora_weight_names="style.safetensors", lora_adapter_names="style",
        lora_scales=0.7,
    )
    image = pipe("a cat", num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np").images[0]
    print("image", " ".join(f"{v:.5f}" for v in image.flatten()[:64].tolist()))

    posed = NeuronStableDiffusionControlNetPipeline.from_pretrained(
        root + "/pipeline", export=True, batch_size=1, height=32, width=32, controlnet_ids=root + "/controlnet"
    )
    condition = torch.zeros(1, 3, 32, 32)
    posed_image = posed("a cat", image=condition, num_inference_steps=2, output_type="np").images[0]
    print("posed", posed_image.shape)
"""


def test_lora_adapter_is_fused_as_the_export_fused_it(
    tmp_path: Path, tiny_stable_diffusion: Path, eager_compile: None
) -> None:
    from diffusers import StableDiffusionPipeline

    script = migrate_to(tmp_path, DIFFUSION)
    assert "lora_model_ids" not in script.read_text()
    output = run_script(script, str(tiny_stable_diffusion))
    reference = StableDiffusionPipeline.from_pretrained(tiny_stable_diffusion / "pipeline")
    reference.load_lora_weights(tiny_stable_diffusion / "lora", weight_name="style.safetensors")
    reference.fuse_lora(lora_scale=0.7)
    image = reference(
        "a cat", num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np", height=32, width=32
    ).images[0]
    [printed] = values(output, "image")
    assert [float(v) for v in printed.split()] == pytest.approx(image.flatten()[:64].tolist(), abs=1e-4)
    plain = StableDiffusionPipeline.from_pretrained(tiny_stable_diffusion / "pipeline")
    unstyled = plain(
        "a cat", num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np", height=32, width=32
    ).images[0]
    assert abs(image - unstyled).max() > 1e-3, "the adapter changes nothing: the test proves nothing"
    assert values(output, "posed") == ["(32, 32, 3)"]


# -- torch_neuronx: a trace in its own name, and a trace of it ------------------------------------


def test_traces_of_traces_save_and_load_the_module_weights(
    tmp_path: Path, eager_compile: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = (FIXTURES / "neuronx_trace" / "traces_of_traces.in.py").read_text()
    result = rewrite_source(source, "traces_of_traces.py")
    assert result.error is None
    namespace: dict[str, object] = {"__name__": "__main__"}
    torch.manual_seed(0)
    exec(compile(result.migrated, "traces_of_traces.py", "exec"), namespace)
    model, restored, example = namespace["model"], namespace["restored"], namespace["example"]
    assert torch.equal(restored(example), model(example))  # type: ignore[operator]
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    for name in ("model.pt", "serving.pt"):
        fresh.load_state_dict(torch.load(name))  # plain module keys, no `_orig_mod.`
        assert torch.equal(fresh(example), model(example))  # type: ignore[operator]


# -- training arguments: optimum-neuron's defaults -----------------------------------------------

ARGUMENTS = """
    import sys
    from dataclasses import dataclass
    from optimum.neuron import NeuronHfArgumentParser, NeuronSFTConfig, NeuronTrainingArguments

    @dataclass
    class ScriptArguments:
        model_id: str = "tiny"

    constructed = NeuronTrainingArguments(output_dir=sys.argv[1], use_cpu=True, report_to="none")
    sft = NeuronSFTConfig(output_dir=sys.argv[1], use_cpu=True, report_to="none")
    parser = NeuronHfArgumentParser((ScriptArguments, NeuronSFTConfig))
    script_args, parsed = parser.parse_args_into_dataclasses(
        args=["--output_dir", sys.argv[1], "--use_cpu", "--report_to", "none"]
    )
    for name, args in (("constructed", constructed), ("sft", sft), ("parsed", parsed)):
        print(name, args.per_device_train_batch_size, args.per_device_eval_batch_size,
              args.average_tokens_across_devices, args.learning_rate, args.bf16,
              args.activation_checkpointing, args.logging_steps)
"""


def test_training_arguments_keep_optimum_neuron_defaults(tmp_path: Path) -> None:
    script = migrate_to(tmp_path, ARGUMENTS)
    output = run_script(script, str(tmp_path / "out"))
    # NeuronTrainingArguments 0.4.5: batch sizes 1, no token averaging across ranks, lr 5e-5,
    # no bf16, no gradient checkpointing, a log every 500 steps.
    neuron = "1 1 False 5e-05 False False 500"
    assert values(output, "constructed") == [neuron]
    assert values(output, "sft") == [neuron]
    assert values(output, "parsed") == [neuron]


def test_parsed_flags_reach_the_model_loaded_in_train(tmp_path: Path, tiny_llama: Path) -> None:
    source = (FIXTURES / "optimum_training" / "trn_config_through_train.in.py").read_text()
    source = source.replace("    trainer.train()\n", '    print("loaded", type(model).__name__, type(trainer).__name__)\n')
    script = migrate_to(tmp_path, source, "trn_config_through_train.py")
    output = run_script(
        script, "--model_id", str(tiny_llama), "--output_dir", str(tmp_path / "out"), "--use_cpu", "--report_to", "none"
    )
    assert values(output, "loaded") == ["LlamaForCausalLM Trainer"]
