"""Sentence classification with an optimum-neuron traced encoder (NeuronModelForSequenceClassification).

Old-stack patterns shown here:
  * ``NeuronModelForSequenceClassification.from_pretrained(..., export=True, ...)`` with the
    static input shapes (``batch_size``, ``sequence_length``) and ``auto_cast`` options (H06)
  * inputs tokenized with dynamic padding (the traced model padded them to the exported shape)

Run on Trainium (old stack):
    python optimum_encoder_classification.py --model_dir <dir> --sentence "the cat sat"
"""

import argparse

import torch
from transformers import AutoTokenizer

from optimum.neuron import NeuronModelForSequenceClassification


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--sentence", action="append", required=True)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = NeuronModelForSequenceClassification.from_pretrained(
        args.model_dir,
        export=True,
        batch_size=1,
        sequence_length=32,
        auto_cast="matmul",
        auto_cast_type="fp32",
    )

    for sentence in args.sentence:
        inputs = tokenizer(sentence, return_tensors="pt", padding=True)
        with torch.no_grad():
            logits = model(**inputs).logits
        label = int(logits.argmax(-1))
        print(f"label {label} logits {' '.join(f'{v:.4f}' for v in logits[0].tolist())}")


if __name__ == "__main__":
    main()
