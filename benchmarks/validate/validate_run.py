"""Wall time of a whole `validate` run on an example, next to the two programs run plainly.

Usage (from the repo root): python benchmarks/validate/validate_run.py [--repeat 3]
The programs run at the same time under validate, so on a machine with enough cores its time is
close to the slower program's plus the comparison; on 2 cores they share them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.validate import refenv

ROOT = Path(__file__).resolve().parents[2]


def wall(cmd: list[str], expect: int = 0) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        cmd, env=dict(os.environ, PJRT_DEVICE="CPU"), capture_output=True, text=True
    )
    if done.returncode != expect:
        raise SystemExit(
            f"{cmd}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--example", default="xla_single_mpdeviceloader.py")
    parser.add_argument("--steps", default="8")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    reference = refenv.default_python()
    if reference is None or not reference.exists():
        raise SystemExit("no reference environment: run `neuron-migrate env reference` first")
    original = ROOT / "examples" / args.example
    with tempfile.TemporaryDirectory() as tmp:
        migrated = Path(tmp) / args.example
        migrated.write_text(rewrite_source(original.read_text(), str(original), Options()).migrated)
        steps = ["--steps", args.steps]
        cases = {
            "original alone (torch_xla 2.9)": [str(reference), str(original), *steps],
            "migrated alone (torch 2.13)": [sys.executable, str(migrated), *steps],
            "validate original migrated": [
                sys.executable,
                "-m",
                "neuron_migrate.validate",
                "validate",
                str(original),
                str(migrated),
                "--",
                *steps,
            ],
        }
        results = {name: min(wall(cmd) for _ in range(args.repeat)) for name, cmd in cases.items()}
    for name, seconds in results.items():
        print(f"{name:<34}{seconds:8.2f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
