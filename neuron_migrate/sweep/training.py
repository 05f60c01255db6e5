"""Training as the migration of `NeuronTrainer` / `NeuronSFTTrainer` emits it, against eager.

The migrated script trains with TRL, which pads every batch to a multiple of 128 on Neuron, and
with `torch_compile=True`, for which transformers compiles the model as its Trainer does on a
`neuron` device (the Trainer's own accelerator builds the compiled model here). Each step is a
compiled forward and backward and one step of the Trainer's default optimizer. The eager twin,
same weights, takes the same steps: the losses must agree within fp32 tolerance, and a step in a
bucket already compiled must not compile again.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Any

from neuron_migrate.core import neuron_backend
from neuron_migrate.core.static_shapes import TRL_NEURON_PAD_MULTIPLE
from neuron_migrate.sweep import causes
from neuron_migrate.sweep.generation import prompts, word_tokenizer

# Two batches of real lengths that pad to the same bucket (2 x 128): the second step must reuse
# the graphs of the first.
BATCHES = ((0, 2), (1, 2))
LENGTH_SCALE = 4  # the prompts, repeated, are 68 to 116 tokens long
RTOL, ATOL = 1e-4, 1e-6


@dataclass
class TrainingResult:
    ok: bool
    cause: str | None = None
    reason: str | None = None
    where: str | None = None
    graphs: int = 0
    buckets: int = 0
    recompiles: list[str] = field(default_factory=list)
    graph_breaks: list[str] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)


def batches(config: Any) -> list[dict[str, Any]]:
    """Padded batches as TRL's collator builds them on Neuron."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    tokenizer = word_tokenizer(config)
    texts = [" ".join([text] * LENGTH_SCALE) for text in prompts(config)]
    collate = DataCollatorForLanguageModeling(
        pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=TRL_NEURON_PAD_MULTIPLE
    )
    examples = [{"input_ids": tokenizer(text)["input_ids"]} for text in texts]
    return [collate([examples[i] for i in batch]) for batch in BATCHES]


def run(make_model: Any, config: Any) -> TrainingResult:
    data = batches(config)
    buckets = len({tuple(b["input_ids"].shape) for b in data})
    eager = make_model().train()
    try:
        reference = _steps(eager, _optimizer(eager), data)
    except Exception as exc:
        failure = causes.uncompiled_failure(exc)
        return TrainingResult(False, failure.cause, failure.reason, failure.where, buckets=buckets)
    model = make_model().train()
    optimizer = _optimizer(model)
    seen: set[tuple[int, ...]] = set()
    losses: list[float] = []
    with neuron_backend.recording() as log:
        compiled = _compiled_as_the_trainer_does(model)
        try:
            for batch in data:
                shape = tuple(batch["input_ids"].shape)
                before = log.graphs
                losses += _steps(compiled, optimizer, [batch])
                if shape in seen and log.graphs > before:
                    failure = causes.recompile_failure(log.recompiles, log.graphs)
                    return _result(False, failure, log, buckets, losses, reference)
                seen.add(shape)
        except Exception as exc:
            return _result(False, causes.classify(exc), log, buckets, losses, reference)
    if not _close(losses, reference):
        failure = causes.Failure(causes.MISMATCH, f"losses {losses} against eager {reference}")
        return _result(False, failure, log, buckets, losses, reference)
    return _result(True, None, log, buckets, losses, reference)


def _compiled_as_the_trainer_does(model: Any) -> Any:
    """`torch_compile=True` on a neuron device: transformers picks the `neuron` backend, and its
    Trainer compiles through accelerate with the options it sets for it (`dynamic=False`)."""
    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            torch_compile=True,
            torch_compile_backend=neuron_backend.NAME,
            use_cpu=True,
            report_to="none",
        )
        trainer = Trainer(model=model, args=args)
        return trainer.accelerator.prepare_model(model)


def _optimizer(model: Any) -> Any:
    """The Trainer's default optimizer with its default settings."""
    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(output_dir=output_dir, use_cpu=True, report_to="none")
        optimizer_class, options = Trainer.get_optimizer_cls_and_kwargs(args, model)
    return optimizer_class(model.parameters(), **options)


def _steps(model: Any, optimizer: Any, data: list[dict[str, Any]]) -> list[float]:
    losses = []
    for batch in data:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().item())
    return losses


def _close(losses: list[float], reference: list[float]) -> bool:
    return len(losses) == len(reference) and all(
        abs(a - b) <= ATOL + RTOL * abs(b) for a, b in zip(losses, reference, strict=True)
    )


def _result(
    ok: bool,
    failure: causes.Failure | None,
    log: neuron_backend.CompileLog,
    buckets: int,
    losses: list[float],
    reference: list[float],
) -> TrainingResult:
    return TrainingResult(
        ok,
        failure.cause if failure else None,
        failure.reason if failure else None,
        failure.where if failure else None,
        log.graphs,
        buckets,
        list(log.recompiles),
        [f"{b.where}: {b.reason}" for b in log.graph_breaks],
        losses,
        reference,
    )
