"""Supervised fine-tuning of a causal LM with optimum-neuron's NeuronSFTTrainer and tensor parallelism.

Old-stack patterns shown here:
  * ``NeuronHfArgumentParser`` over a script dataclass and ``NeuronSFTConfig`` (H10, H03)
  * model-parallel flags on the command line (``--tensor_parallel_size 2``) reaching the
    training model through ``training_args.trn_config`` (H02, H12)
  * the training ``NeuronModelForCausalLM`` from ``optimum.neuron.models.training`` (H04)
    with ``torch_dtype`` and the NKI ``flash_attention_2`` kernel
  * ``is_main_worker()`` for rank-0 printing

Launch on Trainium (old stack):
    torchrun --nproc_per_node=2 optimum_sft_tensor_parallel.py \\
        --model_id <model dir> --dataset_path data.jsonl --output_dir out \\
        --tensor_parallel_size 2 --bf16 --max_steps 20
"""

from dataclasses import dataclass, field

import torch
from datasets import load_dataset
from transformers import AutoTokenizer

from optimum.neuron import NeuronHfArgumentParser as HfArgumentParser
from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer
from optimum.neuron.models.training import NeuronModelForCausalLM
from optimum.neuron.utils import is_main_worker


@dataclass
class ScriptArguments:
    model_id: str = field(metadata={"help": "Model directory or Hub id."})
    dataset_path: str = field(metadata={"help": "A JSON-lines file with a `text` column."})


def main():
    parser = HfArgumentParser((ScriptArguments, NeuronSFTConfig))
    script_args, training_args = parser.parse_args_into_dataclasses()

    tokenizer = AutoTokenizer.from_pretrained(script_args.model_id)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = load_dataset("json", data_files=script_args.dataset_path, split="train")

    # The trn_config carries the tensor/pipeline parallel sizes given on the command line.
    trn_config = training_args.trn_config
    dtype = torch.bfloat16 if training_args.bf16 else torch.float32
    model = NeuronModelForCausalLM.from_pretrained(
        script_args.model_id,
        trn_config,
        torch_dtype=dtype,
        attn_implementation="flash_attention_2",
    )

    trainer = NeuronSFTTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    result = trainer.train()
    trainer.save_model(training_args.output_dir)
    if is_main_worker():
        print(f"train_loss {result.training_loss:.6f}")
        print(f"tensor_parallel_size {training_args.tensor_parallel_size}")


if __name__ == "__main__":
    main()
