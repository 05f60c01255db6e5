"""Capture overhead per training step: the same loop timed with and without the capture hook.

`train_loop.py` times its own steps (after a warm-up), so start-up, imports and the exit-time write
are not counted: what remains is what the hook adds to every step (the backward() wrapper, one
scalar clone per loss, the optimizer step hooks). Each configuration runs `--repeat` times,
alternating plain and captured, and the median run is kept: on a shared machine the load of
other processes moves single runs a lot, both ways. Usage (from the repo root):

    python benchmarks/validate/capture_overhead.py [--repeat 5] [--reference-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from neuron_migrate.validate import refenv
from neuron_migrate.validate.runner import CaptureOptions, Program, environment

LOOP = Path(__file__).with_name("train_loop.py")


def ms_per_step(python: Path, args: list[str], capture: bool, work: Path) -> tuple[float, float]:
    """(median wall ms, CPU ms) per step."""
    program = Program("bench", LOOP, python, args)
    env = environment(program, CaptureOptions(), work / "capture") if capture else dict(os.environ)
    env.update(PJRT_DEVICE="CPU", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [str(python), str(LOOP), *args], env=env, check=True, capture_output=True, text=True
    )
    found = re.search(r"ms_per_step ([0-9.]+) cpu_ms_per_step ([0-9.]+)", done.stdout)
    assert found, done.stdout
    return float(found.group(1)), float(found.group(2))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference-python", type=Path, default=refenv.default_python())
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    cases = [
        (
            "torch 2.13 eager, MLP hidden 32 (tiny)",
            Path(sys.executable),
            ["--hidden", "32", "--steps", "400"],
        ),
        (
            "torch 2.13 eager, MLP hidden 256",
            Path(sys.executable),
            ["--hidden", "256", "--steps", "200"],
        ),
        (
            "torch 2.13 eager, MLP hidden 1024",
            Path(sys.executable),
            ["--hidden", "1024", "--steps", "100"],
        ),
    ]
    if args.reference_python and args.reference_python.exists():
        cases.append(
            (
                "torch_xla 2.9 XLA:CPU, MLP hidden 256",
                args.reference_python,
                ["--xla", "--hidden", "256", "--steps", "400"],
            )
        )
    results = []
    print(f"{'loop':<40}{'plain ms/step':>15}{'captured':>10}{'overhead':>10}{'CPU overhead':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, python, loop_args in cases:
            plain, captured = [], []
            for _ in range(args.repeat):
                plain.append(ms_per_step(python, loop_args, False, Path(tmp)))
                captured.append(ms_per_step(python, loop_args, True, Path(tmp)))
            p, c = statistics.median(x[0] for x in plain), statistics.median(x[0] for x in captured)
            pc, cc = (
                statistics.median(x[1] for x in plain),
                statistics.median(x[1] for x in captured),
            )
            results.append(
                {
                    "loop": name,
                    "plain_ms": p,
                    "captured_ms": c,
                    "overhead": c / p - 1,
                    "cpu_overhead": cc / pc - 1,
                    "plain_runs": plain,
                    "captured_runs": captured,
                }
            )
            print(f"{name:<40}{p:>15.3f}{c:>10.3f}{c / p - 1:>10.1%}{cc / pc - 1:>14.1%}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
