"""Capture overhead per training step: the same loop timed with and without the capture hook.

`train_loop.py` times its own steps (after a warm-up), so start-up, imports and the exit-time write
are not counted: what remains is what the hook adds to every step (the backward() wrapper, one
scalar clone per loss, the optimizer step hooks, the random-draw wrappers). Each configuration
runs `--repeat` times, a plain run and a captured run back to back each time; the overhead is the
median of those pairs' ratios, so load from other processes that drifts over minutes moves both
runs of a pair alike, and beside it the ratio of the fastest runs (best of N), which load can only
slow down. `--baseline-capture DIR` (another checkout's `neuron_migrate/validate/child`)
times that capture too, in the same rounds, so a change to the capture is measured against the one
before it. Usage (from the repo root):

    python benchmarks/validate/capture_overhead.py [--repeat 5] [--only xla|eager]
        [--reference-python PATH] [--baseline-capture DIR] [--json F]
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
from neuron_migrate.validate.runner import CHILD_DIR, CaptureOptions, Program, environment

LOOP = Path(__file__).with_name("train_loop.py")


def ms_per_step(
    python: Path, args: list[str], capture: Path | None, work: Path
) -> tuple[float, float]:
    """(median wall ms, CPU ms) per step, with the capture in folder `capture` or without one."""
    program = Program("bench", LOOP, python, args)
    env = dict(os.environ)
    if capture is not None:
        env = environment(program, CaptureOptions(), work / "capture")
        env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(CHILD_DIR), str(capture), 1)
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
    parser.add_argument("--only", choices=("eager", "xla"), help="run only these loops")
    parser.add_argument(
        "--baseline-capture",
        type=Path,
        metavar="DIR",
        help="also time the capture in DIR (another checkout's neuron_migrate/validate/child)",
    )
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
    if args.only:
        cases = [c for c in cases if ("XLA" in c[0]) == (args.only == "xla")]
    captures = {"captured": CHILD_DIR}
    if args.baseline_capture:
        captures["baseline"] = args.baseline_capture.resolve()
    results = []
    header = "".join(
        f"{f'{label} ms':>14}{'CPU overhead':>14}{'best-of-N':>14}" for label in captures
    )
    print(f"{'loop':<40}{'plain ms/step':>15}{header}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, python, loop_args in cases:
            runs: dict[str, list[tuple[float, float]]] = {"plain": []}
            runs.update({label: [] for label in captures})
            for _ in range(args.repeat):
                runs["plain"].append(ms_per_step(python, loop_args, None, Path(tmp)))
                for label, child in captures.items():
                    runs[label].append(ms_per_step(python, loop_args, child, Path(tmp)))
            result: dict = {
                "loop": name,
                "plain_ms": statistics.median(x[0] for x in runs["plain"]),
            }
            line = f"{name:<40}{result['plain_ms']:>15.3f}"
            for label in captures:
                pairs = list(zip(runs["plain"], runs[label], strict=True))
                result[f"{label}_ms"] = statistics.median(x[0] for x in runs[label])
                result[f"{label}_overhead"] = statistics.median(b[0] / a[0] for a, b in pairs) - 1
                result[f"{label}_cpu_overhead"] = (
                    statistics.median(b[1] / a[1] for a, b in pairs) - 1
                )
                # The fastest run of each: what load from other processes can only slow down.
                result[f"{label}_best_overhead"] = (
                    min(x[0] for x in runs[label]) / min(x[0] for x in runs["plain"]) - 1
                )
                line += (
                    f"{result[f'{label}_ms']:>14.3f}{result[f'{label}_cpu_overhead']:>14.1%}"
                    f"{result[f'{label}_best_overhead']:>14.1%}"
                )
            results.append(result | {f"{label}_runs": r for label, r in runs.items()})
            print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
