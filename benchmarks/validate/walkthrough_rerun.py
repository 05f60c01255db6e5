"""`neuron-migrate validate ORIGINAL.ipynb MIGRATED.ipynb` on the walkthroughs that saved outputs.

    python benchmarks/validate/walkthrough_rerun.py [--only 01 ...] [--keep DIR]

Copies `notebooks/` and `examples/` to a scratch folder (the walkthroughs write under
`notebooks/work`), migrates each walkthrough whose cells saved outputs with `neuron-migrate rewrite
--output-dir`, and re-runs the migrated copy against the original's saved outputs, in the
original's folder (`--migrated-cwd`). Then a planted slip: the learning rate of walkthrough 1's
training cell times ten, re-run against walkthrough 1 as committed and against walkthrough 1 run
again by this checkout (whose outputs differ from the committed ones only where neuron-migrate's
own output changed since), where the first cell that differs must be the one the slip changes.

A walkthrough the migration changes is also re-run unmigrated, which tells what the migration
changed from what no longer reproduces. Prints one markdown row per run: the count of each verdict, the first cell that differs and the
seconds the run took.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from neuron_migrate.validate.notebook_rerun import (
    DIFFERS,
    NEW_ERROR,
    NO_SAVED_OUTPUT,
    SAME,
    code_cells,
    from_json,
    read_notebook,
)

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "01_xla_training_loop.ipynb"
LEARNING_RATE = ("lr=0.05, momentum=0.9", "lr=0.5, momentum=0.9")
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def validate(original: Path, migrated: Path, folder: Path) -> tuple[dict, float]:
    """The document of one re-run, and its wall time; each starts with no `work/` left."""
    shutil.rmtree(folder / "work", ignore_errors=True)
    result = migrated.with_name(f"{migrated.stem}-against-{original.stem}.json")
    start = time.perf_counter()
    command = [sys.executable, "-m", "neuron_migrate", "validate", str(original), str(migrated)]
    command += ["--migrated-cwd", str(folder), "--json", str(result)]
    subprocess.run(command, env=ENV, stdout=subprocess.DEVNULL, check=False)
    seconds = time.perf_counter() - start
    if not result.exists():
        raise SystemExit(f"validate {original} {migrated}: no result (see its output above)")
    return json.loads(result.read_text()), seconds


def row(label: str, document: dict, seconds: float) -> str:
    result = from_json(document)
    counts = Counter(cell.verdict for cell in result.cells)
    first = result.first_difference
    where = f"{first.number} (`{first.first_line}`)" if first else "none"
    numbers = " | ".join(str(counts[v]) for v in (SAME, DIFFERS, NEW_ERROR, NO_SAVED_OUTPUT))
    differing = ", ".join(str(c.number) for c in result.cells if c.verdict in (DIFFERS, NEW_ERROR))
    return f"| {label} | {len(result.cells)} | {numbers} | {where} | {differing} | {seconds:.0f} |"


def resaved(original: Path, folder: Path, into: Path) -> Path:
    """`original` run top to bottom by this checkout and saved with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    shutil.rmtree(folder / "work", ignore_errors=True)
    notebook = nbformat.read(original, as_version=4)
    client = NotebookClient(
        notebook, kernel_name="python3", timeout=600, allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    )  # fmt: skip
    client.execute()
    nbformat.write(notebook, into)
    return into


def plant(migrated: Path, planted: Path) -> Path:
    """`migrated` with the learning rate of its training cell times ten (the source only: the
    cell's saved outputs show its code too)."""
    import nbformat

    notebook = nbformat.read(migrated, as_version=4)
    [cell] = [c for c in code_cells(notebook) if LEARNING_RATE[0] in c.source]
    cell.source = cell.source.replace(*LEARNING_RATE)
    planted.parent.mkdir(exist_ok=True)
    nbformat.write(notebook, planted)
    return planted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="walkthrough numbers (01 ...); default: all")
    parser.add_argument("--keep", type=Path, help="the scratch folder (default: a temporary one)")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="neuron-migrate-walkthroughs-"))
    notebooks = scratch / "notebooks"
    shutil.copytree(ROOT / "examples", scratch / "examples", dirs_exist_ok=True)
    shutil.copytree(
        ROOT / "notebooks", notebooks, dirs_exist_ok=True, ignore=shutil.ignore_patterns("work")
    )
    chosen = [
        path
        for path in sorted(notebooks.glob("0*.ipynb"))
        if any(cell.get("outputs") for cell in code_cells(read_notebook(path)))
        and (not args.only or path.name[:2] in args.only)
    ]
    migrated = scratch / "migrated"
    subprocess.run(
        [sys.executable, "-m", "neuron_migrate", "rewrite", "-q", "--output-dir", str(migrated)]
        + [str(path) for path in chosen],
        env=ENV,
        check=True,
    )
    print(
        "| notebook | code cells | same | differs | new error | no saved output "
        "| first cell that differs | cells that differ | s |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    for path in chosen:
        print(row(path.name, *validate(path, migrated / path.name, notebooks)), flush=True)
        if (migrated / path.name).read_bytes() != path.read_bytes():
            # What the migration changed, told from what no longer reproduces: the original alone.
            control = scratch / "control" / path.name
            control.parent.mkdir(exist_ok=True)
            shutil.copy(path, control)
            print(
                row(f"{path.name}, not migrated", *validate(path, control, notebooks)), flush=True
            )
    if any(path.name == PLANTED for path in chosen):
        planted = plant(migrated / PLANTED, scratch / "planted" / PLANTED)
        label = f"{PLANTED}, learning rate x10"
        print(
            row(
                f"{label}, against the committed outputs",
                *validate(notebooks / PLANTED, planted, notebooks),
            )
        )
        again = resaved(notebooks / PLANTED, notebooks, scratch / "planted" / f"resaved-{PLANTED}")
        print(
            row(
                f"{label}, against outputs saved by this checkout",
                *validate(again, planted, notebooks),
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
