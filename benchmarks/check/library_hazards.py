"""Measure each hazard of `neuron_migrate/checks/library_hazards.py` on a tiny model, with and without its fix.

Each case builds a tiny model from its transformers config class (fixed seed, nothing
downloaded), compiles it with `torch.compile(fullgraph=False, dynamic=False)` on a backend that
counts the graphs it compiles and the graphs each step runs, takes three steps, and records the
library lines Dynamo names for its graph breaks. Then the same with the fix. `--write`
regenerates the measured half of the table (`neuron_migrate/checks/library_hazards_measured.py`):
the line Dynamo names (the one whose installed text the table expects), the graphs per step
before and after the fix, and the model classes the architecture sweep's records
(`docs/architectures.json`) saw break at that line in training. `--check` compares the table
with the measurement, the installed source and the sweep, and exits 1 on a difference.

    python benchmarks/check/library_hazards.py [--check | --write] [--out library_hazards.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from neuron_migrate.checks.library_hazards import HAZARDS  # noqa: E402
from neuron_migrate.core import neuron_backend  # noqa: E402

STEPS = 3
SEQUENCE = 16
VOCABULARY = 64
SITE = Path(sysconfig.get_paths()["purelib"])
MEASURED_TABLE = ROOT / "neuron_migrate" / "checks" / "library_hazards_measured.py"


@dataclass
class Measure:
    graphs_compiled: int
    graphs_per_step: list[int]  # graphs run by each step (a step with N breaks runs N + 1)
    break_lines: list[str] = field(default_factory=list)  # library lines Dynamo named


@dataclass
class Case:
    key: str
    what: str
    build: Callable[[], Any]
    fix: Callable[[Any], None]
    train: bool


def _counting_backend(counts: dict[str, int]) -> Callable[..., Any]:
    def backend(gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        counts["compiled"] += 1

        def run(*args: Any) -> Any:
            counts["runs"] += 1
            return gm.forward(*args)

        return run

    return backend


def measure(model: Any, train: bool) -> Measure:
    import torch

    torch.manual_seed(0)
    ids = torch.randint(0, VOCABULARY, (2, SEQUENCE))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    counts = {"compiled": 0, "runs": 0}
    per_step = []
    with neuron_backend.recording() as log:
        compiled = torch.compile(
            model, backend=_counting_backend(counts), dynamic=False, fullgraph=False
        )
        for _ in range(STEPS):
            before = counts["runs"]
            if train:
                compiled(input_ids=ids, labels=ids).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            else:
                with torch.no_grad():
                    compiled(input_ids=ids)
            per_step.append(counts["runs"] - before)
        lines = sorted({_library_relative(b.where) for b in log.graph_breaks})
    return Measure(counts["compiled"], per_step, lines)


def _library_relative(where: str) -> str:
    path, _, line = where.rpartition(":")
    try:
        return f"{Path(path).resolve().relative_to(SITE.resolve())}:{line}"
    except ValueError:
        return where


def _llama(**extra: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=VOCABULARY, max_position_embeddings=64, **extra,
    )
    return LlamaForCausalLM(config)


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=VOCABULARY, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def _checkpointed() -> Any:
    model = _llama()
    model.gradient_checkpointing_enable()
    return model


def _set_use_cache(model: Any) -> None:
    model.config.use_cache = False


def _set_loss_type(model: Any) -> None:
    model.loss_type = "ForCausalLM"


DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
LINEAR = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}

CASES = (
    Case("loss-type", "GPT-2 training step", _gpt2, _set_loss_type, train=True),
    Case("gradient-checkpointing-use-cache", "Llama training step", _checkpointed, _set_use_cache, train=True),
    Case("dynamic-rope", "Llama forward", lambda: _llama(rope_parameters=DYNAMIC), lambda m: None, train=False),
)
FIXED_BUILD = {"dynamic-rope": lambda: _llama(rope_parameters=LINEAR)}


def run_case(case: Case) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    model = case.build().train(case.train)
    before = measure(model, case.train)
    torch.manual_seed(0)
    fixed = FIXED_BUILD[case.key]() if case.key in FIXED_BUILD else case.build()
    case.fix(fixed)
    after = measure(fixed.train(case.train), case.train)
    return {"key": case.key, "what": case.what, "before": asdict(before), "after": asdict(after)}


def measured_table(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The measured half of the table, from this run and the sweep's records."""
    table = {h.key: h for h in HAZARDS}
    measured = {}
    for result in results:
        hazard = table[result["key"]]
        named = [line for line in result["before"]["break_lines"] if _text_at(line).startswith(hazard.line_text)]
        where = named[0] if named else hazard.where
        measured[hazard.key] = {
            "where": where,
            "graphs": (result["before"]["graphs_per_step"][-1], result["after"]["graphs_per_step"][-1]),
            "classes": tuple(_swept_classes(where)),
        }
    return measured


def check(results: list[dict[str, Any]]) -> list[str]:
    """What in the table disagrees with this measurement, the installed sources or the sweep."""
    problems = []
    table = {h.key: h for h in HAZARDS}
    for key, measured in measured_table(results).items():
        hazard = table[key]
        result = next(r for r in results if r["key"] == key)
        if hazard.where not in result["before"]["break_lines"]:
            problems.append(f"{key}: Dynamo names {result['before']['break_lines']}, the table {hazard.where}")
        if measured["graphs"] != hazard.graphs:
            problems.append(f"{key}: {measured['graphs'][0]} graphs per step, {measured['graphs'][1]} fixed; the table {hazard.graphs}")
        if result["after"]["break_lines"]:
            problems.append(f"{key}: still breaks with the fix: {result['after']['break_lines']}")
        if not _text_at(hazard.where).startswith(hazard.line_text):
            problems.append(f"{key}: {hazard.where} is now `{_text_at(hazard.where)}`, not `{hazard.line_text}`")
        if sorted(measured["classes"]) != sorted(hazard.classes):
            problems.append(f"{key}: the sweep names {sorted(measured['classes'])}, the table {sorted(hazard.classes)}")
    return problems


def _text_at(where: str) -> str:
    path, _, line = where.rpartition(":")
    try:
        return (SITE / path).read_text(encoding="utf-8").splitlines()[int(line) - 1].strip()
    except (OSError, ValueError, IndexError):
        return ""


def _swept_classes(where: str) -> list[str]:
    records = json.loads((ROOT / "docs" / "architectures.json").read_text(encoding="utf-8"))
    return sorted(
        {
            r["class"]
            for r in records
            if any(b.startswith(where + ":") for b in (r.get("train") or {}).get("graph_breaks") or [])
        }
    )


def write_table(measured: dict[str, dict[str, Any]], path: Path) -> None:
    """`library_hazards_measured.py`, as the package reads it."""
    head = path.read_text(encoding="utf-8").split("MEASURED = ", 1)[0]
    lines = ["MEASURED = {"]
    for key, facts in measured.items():
        lines += [f"    {key!r}: {{", f"        \"where\": {facts['where']!r},", f"        \"graphs\": {facts['graphs']!r},"]
        classes = "".join(f"            {c!r},\n" for c in facts["classes"])
        lines.append(f"        \"classes\": (\n{classes}        )," if classes else '        "classes": (),')
        lines.append("    },")
    lines.append("}")
    path.write_text(head + "\n".join(lines).replace("'", '"') + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the table; exit 1 on a difference")
    parser.add_argument("--write", action="store_true", help="regenerate the measured half of the table")
    parser.add_argument("--out", type=Path, default=HERE / "library_hazards.json")
    args = parser.parse_args()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    results = [run_case(case) for case in CASES]
    for r in results:
        b, a = r["before"], r["after"]
        print(
            f"{r['key']}: {r['what']}: graphs per step {b['graphs_per_step']} "
            f"(compiled {b['graphs_compiled']}), breaks at {', '.join(b['break_lines']) or '-'}; "
            f"fixed: {a['graphs_per_step']} (compiled {a['graphs_compiled']})"
        )
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if args.write:
        write_table(measured_table(results), MEASURED_TABLE)
        print(f"wrote {MEASURED_TABLE.relative_to(ROOT)}")
    if args.check:
        problems = check(results)
        for problem in problems:
            print("MISMATCH", problem)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
