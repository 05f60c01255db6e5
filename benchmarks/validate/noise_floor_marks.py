"""The measurements behind the noise-floor marks: R of faithful bf16 migrations, and of bugs.

For each case the original runs on the old stack (torch_xla 2.9, XLA:CPU) in bf16, again in
float32 (the floor), and the migrated program natively; the table lists R per compared item.
Faithful migrations must stay under the mark for whole runs (`noise_floor.RUN_THRESHOLD`); the
planted bugs show how far a real difference lands. Usage (from the repo root, reference env built):

    python benchmarks/validate/noise_floor_marks.py [--steps 8] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.validate import noise_floor, pipeline, refenv
from neuron_migrate.validate.runner import Program, default_python

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BF16 = "xla_bf16_env.py"
# name: (example, (text, planted text) or None for the faithful migration)
CASES = {
    "XLA_USE_BF16, faithful": (BF16, None),
    "autocast bf16, faithful": ("xla_step_closure.py", None),
    "XLA_USE_BF16, learning rate x1.2": (BF16, ("lr=args.lr,", "lr=args.lr * 1.2,")),
    "XLA_USE_BF16, GELU tanh approximation": (BF16, ("nn.GELU()", 'nn.GELU(approximate="tanh")')),
    "XLA_USE_BF16, no gradient clipping": (
        BF16,
        ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)", "pass"),
    ),
}
ITEMS = ("losses", "initial", "gradients", "parameters")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="8")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    reference = refenv.default_python()
    if reference is None or not reference.exists():
        raise SystemExit("no reference environment: run `neuron-migrate env reference` first")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (example, planted) in CASES.items():
            source = EXAMPLES / example
            migrated = rewrite_source(source.read_text(), str(source), Options()).migrated
            if planted is not None:
                assert migrated.count(planted[0]) == 1, (name, planted[0])
                migrated = migrated.replace(*planted)
            work = Path(tmp) / str(len(rows))
            work.mkdir()
            (work / example).write_text(migrated)
            programs = [
                Program("original", source, reference, ["--steps", args.steps]),
                Program("migrated", work / example, default_python(), ["--steps", args.steps]),
            ]
            result = pipeline.validate(programs, pipeline.Settings(timeout=1200), work / "run")
            comparison = result.comparison
            found = {i.key: i for i in comparison.items} if comparison else {}
            ratios = {k: (found[k].ratio.value if k in found and found[k].ratio else None) for k in ITEMS}
            rows.append({"case": name, "verdict": result.verdict, **ratios})
            cells = "".join(f"{v:>12.3f}" if v is not None else f"{'-':>12}" for v in ratios.values())
            print(f"{name:<40}{result.verdict:>9}{cells}", flush=True)
    print(f"mark for whole runs: R <= {noise_floor.RUN_THRESHOLD:g}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
