"""`neuron-migrate validate ORIGINAL.ipynb MIGRATED.ipynb` on public-corpus notebooks.

    python benchmarks/validate/corpus_rerun.py [NOTEBOOK ...] [--keep DIR] [--json FILE]

The corpus notebooks were saved on TPUs or Trainium hosts, or not run at all, so their saved
outputs cannot be reproduced here. This script makes outputs that can: (a) it runs each original,
in a scratch copy, in a Jupyter kernel of the reference environment (torch 2.9 + torch_xla 2.9 on
XLA:CPU, `neuron-migrate env reference`); (b) migrates that executed copy with `neuron-migrate
rewrite --output-dir` (portable target); (c) re-runs the migrated copy in a kernel of this Python
with `neuron-migrate validate executed.ipynb migrated.ipynb --json`; (d) plants a slip, the first
`lr=`/`learning_rate=` of the migrated notebook times ten, and checks that the first cell the slip
makes differ (one that is the same without it) is the planted one. As a control, the same slip is also planted in the original
and re-run in the reference environment: it tells what the comparison finds from what the
migration lets through.

Neither kernel may reach the network: pip is given no index, Hugging Face is offline. Cells that
download fail on both sides. The notebooks run as they are, with no parameter overrides.

Prints one markdown row per run and, with --json, writes every run's per-cell verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from neuron_migrate.validate import refenv
from neuron_migrate.validate.notebook_rerun import (
    DIFFERS,
    NEW_ERROR,
    NO_SAVED_OUTPUT,
    SAME,
    code_cells,
    from_json,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path.home() / ".cache" / "neuron-migrate" / "corpus"
# The two torch_xla notebooks of the corpus that need no Trainium/TPU, no fastai and no
# `neuronxcc`; the second downloads a diffusion model, which fails offline on both sides.
DEFAULT_NOTEBOOKS = (
    "xla__contrib__kaggle__distributed-pytorch-xla-basics-with-pjrt.ipynb",
    "xla__contrib__kaggle__pytorch-xla-2-0-on-kaggle.ipynb",
)
REFERENCE_KERNEL = "neuron-migrate-reference"
LEARNING_RATE = re.compile(
    r"\b(lr|learning_rate)(\s*=\s*)([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)"
)
CELL_TIMEOUT = 600


def offline_env(**extra: str) -> dict[str, str]:
    """This process's environment with the network closed to what the notebooks run: pip gets
    no index and no local wheels (a `!pip install` cell fails, installing nothing), Hugging Face
    stays offline. PJRT_DEVICE is the reference kernel's alone: natively it is never set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PJRT_DEVICE"}
    env |= {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "HF_HUB_OFFLINE": "1"}
    return env | extra


def reference_kernelspec(python: Path, folder: Path) -> Path:
    """A JUPYTER_PATH folder with one kernel spec, REFERENCE_KERNEL, running `python`."""
    spec = folder / "kernels" / REFERENCE_KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    kernel = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "torch 2.9 + torch_xla 2.9 (XLA:CPU)",
        "language": "python",
        "env": {"PJRT_DEVICE": "CPU"},
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1))
    return folder


def execute_in_reference(notebook_path: Path, executed: Path, jupyter_path: Path) -> float:
    """Runs `notebook_path` in the reference kernel, in `executed`'s folder, and saves it there
    with its outputs; returns the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(notebook_path, as_version=4)
    env = offline_env(JUPYTER_PATH=str(jupyter_path))
    os.environ["JUPYTER_PATH"] = str(jupyter_path)  # where the kernel spec manager looks
    client = NotebookClient(
        notebook, kernel_name=REFERENCE_KERNEL, timeout=CELL_TIMEOUT, allow_errors=True,
        resources={"metadata": {"path": str(executed.parent)}},
    )  # fmt: skip
    start = time.perf_counter()
    client.execute(env=env)
    nbformat.write(notebook, executed)
    return time.perf_counter() - start


def migrate(executed: Path, into: Path) -> Path:
    """`executed` migrated into `into`; rewrite's exit status 1 only says manual items remain."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuron_migrate",
            "rewrite",
            "-q",
            "--output-dir",
            str(into),
            str(executed),
        ],
        env=offline_env(PYTHONPATH=str(ROOT)),
        check=False,
    )
    if done.returncode not in (0, 1) or not (into / executed.name).exists():
        raise SystemExit(f"rewrite {executed}: failed (exit status {done.returncode})")
    return into / executed.name


def validate(original: Path, rerun: Path, *, python: Path | None = None) -> tuple[dict, float]:
    """The document of `validate original rerun` (in `rerun`'s folder, with `python`'s kernel
    where given), and the seconds it took."""
    result = rerun.with_suffix(".validate.json")
    command = [sys.executable, "-m", "neuron_migrate", "validate", str(original), str(rerun)]
    command += ["--json", str(result), "--timeout", str(CELL_TIMEOUT)]
    extra = {"PYTHONPATH": str(ROOT)}
    if python is not None:
        command += ["--migrated-python", str(python)]
        extra["PJRT_DEVICE"] = "CPU"
    start = time.perf_counter()
    subprocess.run(command, env=offline_env(**extra), stdout=subprocess.DEVNULL, check=False)
    seconds = time.perf_counter() - start
    if not result.exists():
        raise SystemExit(f"validate {original} {rerun}: no result (see its output above)")
    return json.loads(result.read_text()), seconds


def plant(notebook_path: Path, planted: Path) -> int | None:
    """Writes `notebook_path` with its first learning rate times ten to `planted`; the number of
    the code cell changed, or None where the notebook sets none."""
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)
    for number, cell in enumerate(code_cells(notebook), 1):
        found = LEARNING_RATE.search(cell.source)
        if found:
            name, equals, value = found.groups()
            times_ten = f"{name}{equals}{float(value) * 10:g}"
            cell.source = cell.source[: found.start()] + times_ten + cell.source[found.end() :]
            planted.parent.mkdir(exist_ok=True)
            nbformat.write(notebook, planted)
            return number
    return None


def first_changed_cell(faithful: dict, planted: dict) -> int | None:
    """The first cell the slip makes differ: the same without it, not with it. A cell that
    differs without the slip tells nothing: `!printenv` prints the kernel's own variables, and a
    process `xmp.spawn` forks may lose what it printed last."""
    unchanged = {cell["number"] for cell in faithful["cells"] if cell["verdict"] == SAME}
    return next(
        (
            c["number"]
            for c in planted["cells"]
            if c["number"] in unchanged and c["verdict"] != SAME
        ),
        None,
    )


def slip_verdict(planted_cell: int, found: int | None, planted: dict) -> str:
    if found == planted_cell:
        return "found there"
    cell = next(c for c in planted["cells"] if c["number"] == planted_cell)
    if found is None and cell["verdict"] == NEW_ERROR:
        return f"changes no output: the cell raises before it trains ({cell['detail']})"
    return f"NOT found (first change: {found})"


def counts(document: dict) -> dict[str, int]:
    verdicts = Counter(cell.verdict for cell in from_json(document).cells)
    return {verdict: verdicts[verdict] for verdict in (SAME, DIFFERS, NEW_ERROR, NO_SAVED_OUTPUT)}


def row(label: str, document: dict, seconds: float, note: str = "") -> str:
    numbers = " | ".join(str(n) for n in counts(document).values())
    differing = ", ".join(
        f"{cell['number']} {cell['verdict']}"
        for cell in document["cells"]
        if cell["verdict"] in (DIFFERS, NEW_ERROR)
    )
    return (
        f"| {label} | {len(document['cells'])} | {numbers} | {differing} | {note} | {seconds:.0f} |"
    )


def run_one(source: Path, scratch: Path, jupyter_path: Path, python: Path) -> dict[str, Any]:
    folder = scratch / source.stem
    folder.mkdir(parents=True, exist_ok=True)
    executed = folder / source.name
    executed_seconds = execute_in_reference(source, executed, jupyter_path)
    migrated = migrate(executed, folder / "migrated")
    report: dict[str, Any] = {"notebook": source.name, "executed_seconds": round(executed_seconds)}
    # Each side re-run as it is, then with the slip: the slip is found where a verdict changes.
    for side, notebook, kernel_python in (
        ("migrated", migrated, None),
        ("original in the reference kernel (control)", executed, python),
    ):
        faithful, seconds = validate(executed, notebook, python=kernel_python)
        report[side] = {"seconds": round(seconds), "counts": counts(faithful), **faithful}
        print(row(f"{source.name}, {side}", faithful, seconds), flush=True)
        planted_path = folder / f"planted-{len(report) - 1}" / notebook.name
        planted_cell = plant(notebook, planted_path)
        if planted_cell is None:
            report[side]["planted"] = None
            continue
        planted, seconds = validate(executed, planted_path, python=kernel_python)
        found = first_changed_cell(faithful, planted)
        report[side]["planted"] = {
            "cell": planted_cell,
            "first_changed_cell": found,
            "seconds": round(seconds),
            **planted,
        }
        note = f"lr x10 in cell {planted_cell}: " + slip_verdict(planted_cell, found, planted)
        print(row(f"{source.name}, {side}, lr x10", planted, seconds, note), flush=True)
    if report["migrated"]["planted"] is None:
        print(f"| {source.name}: no `lr=` or `learning_rate=` to plant a slip in |", flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path,
        help=f"corpus notebooks (default: the two in DEFAULT_NOTEBOOKS, from {CORPUS})",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, help="the scratch folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write every run's per-cell verdicts here")
    args = parser.parse_args()
    python, line = refenv.check()
    if python is None:
        raise SystemExit(line)
    sources = args.notebooks or [CORPUS / name for name in DEFAULT_NOTEBOOKS]
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="neuron-migrate-corpus-rerun-"))
    jupyter_path = reference_kernelspec(python, scratch / "jupyter")
    print(
        "| run | code cells | same | differs | new error | no saved output "
        "| cells that differ | planted slip | s |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    reports = [run_one(source, scratch, jupyter_path, python) for source in sources]
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
