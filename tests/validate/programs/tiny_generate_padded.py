"""Greedy generation for a left-padded batch with a tiny random Llama (nothing is downloaded)."""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    prompt = torch.tensor([[3, 5, 9, 13, 17], [0, 0, 4, 8, 16]])  # the second row is padded
    mask = (prompt != 0).long()
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=args.new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    print(out.tolist())


if __name__ == "__main__":
    main()
