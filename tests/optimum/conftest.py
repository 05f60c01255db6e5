"""Tiny local models, tokenizer and data for running the migrated optimum-neuron examples on CPU.

Nothing is downloaded: the models are built from configs with a fixed seed and saved next to a
word-level tokenizer made with the `tokenizers` library. Tensor-parallel runs go through
`train_with_torchrun`, which lets accelerate accept them on CPU processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

from neuron_migrate.rewrite.codemods.base import TARGETS
from neuron_migrate.rewrite.engine import Options, rewrite_source
from tests.helpers import torchrun as torchrun_helper

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "ran",
    "fast",
    "slow",
    "big",
    "small",
    "red",
    "blue",
    "green",
    "hello",
    "world",
    "neuron",
    "train",
    "model",
    "data",
    "is",
    "was",
    "good",
    "bad",
    "happy",
    "sad",
    "day",
    "night",
]
SENTENCES = [
    ("the cat sat on the mat", 1),
    ("a dog ran fast", 1),
    ("hello world neuron", 0),
    ("the big red model is good", 1),
    ("a small blue cat was sad", 0),
    ("the dog was bad at night", 0),
    ("green data is happy", 1),
    ("the slow model ran on a mat", 0),
]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny_llama")
    _tokenizer().save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def _tiny_bert_config(num_labels: int) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        pad_token_id=0,
        num_labels=num_labels,
    )


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    out = tmp_path_factory.mktemp("tiny_bert")
    _tokenizer().save_pretrained(out)
    torch.manual_seed(0)
    config = _tiny_bert_config(num_labels=2)
    BertForSequenceClassification(config).eval().save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_bert_tagger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A token classifier (one output per token) with the tokenizer of `tiny_bert`."""
    import torch
    from transformers import BertForTokenClassification

    out = tmp_path_factory.mktemp("tiny_bert_tagger")
    _tokenizer().save_pretrained(out)
    torch.manual_seed(1)
    config = _tiny_bert_config(num_labels=5)
    BertForTokenClassification(config).eval().save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_stable_diffusion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Stable Diffusion pipeline of 32x32 images, with a LoRA adapter (`lora/`) and a
    ControlNet (`controlnet/`) beside it, all random and tiny."""
    import torch
    from diffusers import (
        AutoencoderKL,
        ControlNetModel,
        DDIMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    out = tmp_path_factory.mktemp("tiny_sd")
    letters = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for letter in "abcdefghijklmnopqrstuvwxyz":
        letters.setdefault(letter, len(letters))
        letters.setdefault(letter + "</w>", len(letters))
    (out / "vocab.json").write_text(json.dumps(letters))
    (out / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(out / "vocab.json"), str(out / "merges.txt"), model_max_length=12)
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(letters),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=12,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 32),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=8,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(8, 16, 16, 16),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        norm_num_groups=8,
        sample_size=32,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=DDIMScheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(out / "pipeline")
    ControlNetModel.from_unet(unet).save_pretrained(out / "controlnet")
    adapter = LoraConfig(r=2, lora_alpha=2, target_modules=["to_q", "to_v"], init_lora_weights=False)
    pipe.unet.add_adapter(adapter)
    StableDiffusionPipeline.save_lora_weights(
        out / "lora", unet_lora_layers=get_peft_model_state_dict(pipe.unet), weight_name="style.safetensors"
    )
    return out


@pytest.fixture(scope="session")
def sentences(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "sentences.jsonl"
    out.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in SENTENCES))
    return out


def migrate_example(
    name: str, directory: Path, target: str = "portable", expected_todos: tuple[str, ...] = ()
) -> Path:
    """Migrate an example; it must need no person, except for the TODOs `expected_todos` name
    (a phrase of each)."""
    source = EXAMPLES / name
    result = rewrite_source(source.read_text(), str(source), Options(target=TARGETS[target]))
    assert result.error is None, result.error
    assert result.changed
    left = [m.marker for m in result.manual if not any(e in m.marker for e in expected_todos)]
    assert not left, left
    assert len(result.manual) == len(expected_todos), [m.marker for m in result.manual]
    out = directory / name
    out.write_text(result.migrated)
    return out


def run_script(path: Path, *args: str) -> str:
    """Run a migrated script in this interpreter (imports are already warm) and return its stdout."""
    buffer = io.StringIO()
    argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        with contextlib.redirect_stdout(buffer):
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv
    return buffer.getvalue()


@pytest.fixture
def eager_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """`torch.compile` without a backend picks inductor on CPU (a C++ build per graph): use the
    `eager` backend instead, which keeps dynamo's tracing and shape guards."""
    import torch

    original_compile = torch.compile
    original_module_compile = torch.nn.Module.compile

    def compile_(model=None, **kwargs):
        kwargs.setdefault("backend", "eager")
        return original_compile(model, **kwargs)

    def module_compile(self, *args, **kwargs):
        kwargs.setdefault("backend", "eager")
        return original_module_compile(self, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(torch.nn.Module, "compile", module_compile)


# -- tensor parallelism under torchrun on CPU ------------------------------------------------------

CPU_TENSOR_PARALLEL = '''\
"""Test-only: accelerate 1.15 refuses a tensor-parallel ParallelismConfig on CPU processes
(MULTI_CPU); on Trainium the type is MULTI_NEURON and the stock class accepts it."""
import accelerate
from accelerate.utils import DistributedType


class CpuParallelismConfig(accelerate.ParallelismConfig):
    def _validate_accelerator(self, accelerator):
        if (
            accelerator.distributed_type == DistributedType.MULTI_CPU
            and self.total_size == accelerator.num_processes
        ):
            return
        return super()._validate_accelerator(accelerator)
'''

RUN_AND_REPORT = '''\
"""Run a migrated training script; rank 0 prints each step's loss and the model's tp_size and
dp_size (the data-parallel ranks its `DistributedConfig` forms)."""
import os
import runpy
import sys

import accelerate
import transformers

from cpu_tensor_parallel import CpuParallelismConfig

# The Trainer builds `ParallelismConfig(tp_size=..., dp_shard_size=...)` from the sharded model
# itself; the sizes must be given to the constructor, which is where the device mesh that splits
# the batches between data-parallel ranks takes them from.
accelerate.ParallelismConfig = CpuParallelismConfig

train = transformers.Trainer.train


def train_and_report(self, *args, **kwargs):
    result = train(self, *args, **kwargs)
    if int(os.environ.get("RANK", "0")) == 0:
        for entry in self.state.log_history:
            if "loss" in entry:
                print(f"step {entry['step']} loss {entry['loss']:.7f}", flush=True)
        print(f"tp_size {getattr(self.model, 'tp_size', None) or 1}", flush=True)
        distributed = getattr(self.model.config, "distributed_config", None)
        print(f"dp_size {getattr(distributed, 'dp_size', None) or 1}", flush=True)
    return result


transformers.Trainer.train = train_and_report
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def train_with_torchrun(script: Path, processes: int, *args: str) -> tuple[list[float], int, str]:
    """Run a migrated training script (under torchrun when `processes` > 1, gloo on CPU):
    rank 0's per-step losses, the trained model's `tp_size`, and the output."""
    directory = script.parent
    (directory / "cpu_tensor_parallel.py").write_text(CPU_TENSOR_PARALLEL)
    (directory / "run_and_report.py").write_text(RUN_AND_REPORT)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(directory), str(ROOT)]),
        OMP_NUM_THREADS="1",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    launcher = (
        ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        if processes > 1
        else []
    )
    command = [sys.executable, *launcher, str(directory / "run_and_report.py"), str(script), *args]
    proc = torchrun_helper.run(command, cwd=directory, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    losses = [float(v) for v in re.findall(r"^step \d+ loss ([0-9.]+)$", proc.stdout, re.M)]
    tp_size = int(re.search(r"^tp_size (\d+)$", proc.stdout, re.M).group(1))  # type: ignore[union-attr]
    return losses, tp_size, proc.stdout
