"""Text generation with optimum-neuron's inference NeuronModelForCausalLM, exported on first load.

Old-stack patterns shown here:
  * ``from optimum.neuron import NeuronModelForCausalLM`` (the *inference* class, H04)
  * ``from_pretrained(model_id, export=True, **compiler_args, **input_shapes)`` with the
    compiler and shape options in dict literals (H05, H13; pitfall 4.1 "kwargs through dict
    unpacking")
  * ``num_cores`` and ``auto_cast_type`` compiler options
  * a single, unpadded prompt handed to ``generate``

Run on Trainium (old stack):
    python optimum_causal_lm_generation.py --model_id <model dir> --prompt "the cat"
"""

import argparse

from transformers import AutoTokenizer

from optimum.neuron import NeuronModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_id", required=True)
    parser.add_argument("--prompt", action="append", required=True)
    parser.add_argument("--max_new_tokens", type=int, default=8)
    args = parser.parse_args()

    # Compile once for a fixed batch and context length.
    compiler_args = {"num_cores": 1, "auto_cast_type": "fp32"}
    input_shapes = {"batch_size": 1, "sequence_length": 64}
    model = NeuronModelForCausalLM.from_pretrained(args.model_id, export=True, **compiler_args, **input_shapes)
    tokenizer = AutoTokenizer.from_pretrained(args.model_id)

    for prompt in args.prompt:
        inputs = tokenizer(prompt, return_tensors="pt")
        outputs = model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
        new_tokens = outputs[0, inputs["input_ids"].shape[1]:]
        print("tokens", " ".join(str(t) for t in new_tokens.tolist()))


if __name__ == "__main__":
    main()
