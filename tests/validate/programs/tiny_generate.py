"""Greedy generation with a tiny random Llama built from a config (nothing is downloaded)."""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init-seed", type=int, default=0)
    parser.add_argument("--new-tokens", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(args.init_seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config).eval()
    prompt = torch.tensor([[1, 5, 9, 13, 17], [2, 4, 8, 16, 32]])
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=args.new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    print(out.tolist())


if __name__ == "__main__":
    main()
