"""Text classification fine-tuning with optimum-neuron's NeuronTrainer.

Old-stack patterns shown here:
  * ``from optimum.neuron import NeuronTrainer as Trainer`` (H01, aliased to the HF name)
  * ``NeuronTrainingArguments`` built in code with Neuron-only fields (H02): ``zero_1``,
    ``use_xser``, ``async_save``, ``skip_cache_push``, ``dataloader_prefetch_size`` and the
    transformers-4 fields ``overwrite_output_dir`` and ``warmup_ratio``
  * the deprecated ``tokenizer=`` argument of the trainer
  * fixed-length tokenization (``padding="max_length"``), as Neuron graphs need static shapes

Launch on Trainium (old stack):
    torchrun --nproc_per_node=2 optimum_trainer_classification.py --model_dir <dir> --data <file.jsonl>
"""

import argparse

from datasets import load_dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from optimum.neuron import NeuronTrainer as Trainer
from optimum.neuron import NeuronTrainingArguments


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--data", required=True, help="JSON lines with `text` and `label`")
    parser.add_argument("--output_dir", default="classifier")
    parser.add_argument("--max_steps", type=int, default=10)
    parser.add_argument("--max_length", type=int, default=32)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    dataset = load_dataset("json", data_files=args.data, split="train")

    def tokenize(batch):
        return tokenizer(batch["text"], padding="max_length", truncation=True, max_length=args.max_length)

    dataset = dataset.map(tokenize, batched=True, remove_columns=["text"])
    model = AutoModelForSequenceClassification.from_pretrained(args.model_dir, num_labels=2)

    training_args = NeuronTrainingArguments(
        output_dir=args.output_dir,
        overwrite_output_dir=True,
        per_device_train_batch_size=4,
        learning_rate=5e-4,
        warmup_ratio=0.1,
        max_steps=args.max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        zero_1=False,
        use_xser=False,
        async_save=False,
        skip_cache_push=True,
        dataloader_prefetch_size=2,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        tokenizer=tokenizer,
    )
    result = trainer.train()
    trainer.save_model(args.output_dir)
    print(f"train_loss {result.training_loss:.6f}")


if __name__ == "__main__":
    main()
