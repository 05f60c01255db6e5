"""Inference with a model compiled ahead of time by torch_neuronx.trace, saved and reloaded.

Old-stack patterns shown here:
  * ``torch_neuronx.trace(model, example_inputs, compiler_args=..., compiler_workdir=...)`` (T01, T05)
  * ``torch.jit.save`` of the traced model and ``torch.jit.load`` of the file (T02, T03)
  * ``torch_neuronx.async_load`` before the first call (T04)
  * inputs padded to the traced shape, and a CPU reference to compare with

Run on Trainium (old stack):
    python neuronx_trace_inference.py --model_dir <dir> --sentence "the cat sat"
"""

import argparse

import torch
import torch_neuronx
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--sentence", action="append", required=True)
    parser.add_argument("--sequence_length", type=int, default=32)
    parser.add_argument("--save_path", default="model_neuron.pt")
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(args.model_dir, torchscript=True)
    model.eval()

    def encode(sentence):
        encoded = tokenizer(sentence, padding="max_length", max_length=args.sequence_length, truncation=True, return_tensors="pt")
        return encoded["input_ids"], encoded["attention_mask"]

    example_inputs = encode(args.sentence[0])
    model_neuron = torch_neuronx.trace(
        model,
        example_inputs,
        compiler_args=["--auto-cast", "none"],
        compiler_workdir="./compiler_workdir",
    )

    # Save the compiled artifact and load it back, as a serving process would.
    torch.jit.save(model_neuron, args.save_path)
    model_loaded = torch.jit.load(args.save_path)
    torch_neuronx.async_load(model_loaded)

    for sentence in args.sentence:
        inputs = encode(sentence)
        with torch.no_grad():
            logits = model_loaded(*inputs)[0]
            reference = model(*inputs)[0]
        close = torch.allclose(logits, reference, atol=1e-4)
        print(f"label {int(logits.argmax(-1))} matches_cpu {close}")


if __name__ == "__main__":
    main()
