"""One architecture, in a process of its own: build the tiny model, generate, train, and write
what happened as one JSON record.

Importing this module imports torch, transformers and TRL, and the parts of Dynamo every compile
needs: the sweep preloads it once into the process that forks the probes.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import resource
import time
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # never a real torch_neuronx here
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny models are built, nothing is downloaded

import torch
import torch._dynamo
import torch._functorch.aot_autograd
import transformers
import transformers.generation.utils
import trl.trainer.sft_trainer  # noqa: F401

from neuron_migrate.core import neuron_backend
from neuron_migrate.core.files import write_atomic
from neuron_migrate.sweep import causes, generation, training
from neuron_migrate.sweep.runner import versions
from neuron_migrate.sweep.tiny import Architecture, CannotShrink, tiny_model

TRANSFORMERS = Path(transformers.__file__).parent


def probe(architecture: Architecture, save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The record of one architecture, saved after each stage so that a probe killed in one
    keeps what the others found (`docs/architectures.md` describes its fields)."""
    started = time.perf_counter()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    if not neuron_backend.register():
        raise RuntimeError("a real `neuron` compile backend is installed: the sweep counts with the stand-in only")
    record: dict[str, Any] = {
        "architecture": architecture.model_type,
        "class": architecture.class_name,
        "modeling_file": modeling_file(architecture.class_name),
        "versions": versions(),
    }
    try:
        model = tiny_model(architecture)
    except CannotShrink as exc:
        reason = str(exc).strip().splitlines()[0][:300]
        record["build"] = {"ok": False, "cause": causes.CANNOT_BUILD, "reason": reason}
        save(_finish(record, started))
        return record
    record["build"] = {"ok": True, "parameters": sum(p.numel() for p in model.parameters())}
    save(_finish(record, started))
    stage = time.perf_counter()
    generated = generation.run(model, model.config)
    record["generate"] = _stage(dataclasses.asdict(generated), stage)
    traced = set(neuron_backend.STATE.traced)
    record["compiled_code"] = compiled_functions(traced)
    save(_finish(record, started))
    stage = time.perf_counter()
    trained = training.run(lambda: tiny_model(architecture), model.config)
    record["train"] = _stage(dataclasses.asdict(trained), stage)
    record["compiled_code"] = compiled_functions(traced | neuron_backend.STATE.traced)
    save(_finish(record, started))
    return record


def _stage(result: dict[str, Any], started: float) -> dict[str, Any]:
    """A stage's result with its paths inside transformers made relative, and its duration;
    generated tokens and losses are kept only where they disagree with the reference."""
    if result["ok"]:
        for key in ("tokens", "losses", "reference"):
            result.pop(key, None)
    result = json.loads(json.dumps(result).replace(f"{TRANSFORMERS}{os.sep}", "transformers/"))
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _finish(record: dict[str, Any], started: float) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 1)
    record["peak_rss_mb"] = round(usage.ru_maxrss / 1024)
    return record


def main(architecture: Architecture, out: Path) -> None:
    """The body of a probe process: its record goes to `out`, with the error that ended it early."""
    saved: dict[str, Any] = {}

    def save(record: dict[str, Any]) -> None:
        saved.update(record)
        write_atomic(out, (json.dumps(saved, indent=1) + "\n").encode())

    try:
        probe(architecture, save)
    except Exception as exc:
        save({"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"})
        raise


def modeling_file(class_name: str) -> str | None:
    module = getattr(transformers, class_name).__module__
    path = Path(__import__(module, fromlist=["_"]).__file__ or "")
    return relative(str(path))


def relative(filename: str) -> str:
    """A path inside transformers as `transformers/models/x/modeling_x.py`; others unchanged."""
    path = Path(filename)
    if path.is_relative_to(TRANSFORMERS):
        return f"transformers/{path.relative_to(TRANSFORMERS).as_posix()}"
    return filename


def compiled_functions(traced: set[tuple[str, int]]) -> dict[str, list[list[int]]]:
    """The functions of transformers whose code the compiled graphs ran, as line spans per file."""
    spans: dict[str, set[tuple[int, int]]] = {}
    for file, line in traced:
        if not Path(file).is_relative_to(TRANSFORMERS):
            continue
        span = _enclosing_function(file, line)
        if span is not None:
            spans.setdefault(relative(file), set()).add(span)
    return {file: sorted(map(list, found)) for file, found in sorted(spans.items())}


def _enclosing_function(file: str, line: int) -> tuple[int, int] | None:
    best = None
    for start, end in _function_spans(file):
        if start <= line <= end and (best is None or start > best[0]):
            best = (start, end)
    return best


@cache
def _function_spans(file: str) -> tuple[tuple[int, int], ...]:
    tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )
