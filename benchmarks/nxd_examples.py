"""A neuronx-distributed training example, migrated, trained at several parallel sizes on the CPU.

    python benchmarks/nxd_examples.py [--repo GIT_DIR] [--dtype float32|float64] [--json out.json]
                                      [--keep DIR]

NxD's BERT pretraining example (`examples/training/tp_dp_bert_hf_pretrain/
tp_dp_bert_large_hf_pretrain_hdf5.py`: tensor parallel attention, data parallel replicas) is
exported from a fetched copy of aws-neuron/neuronx-distributed (a bare git folder, default
../.mirror/aws-neuron+neuronx-distributed/repo; nothing of it is kept in the project), migrated with
`neuron-migrate rewrite`, and run unchanged under `torch.distributed.run` on the CPU (gloo) at
TP=1, TP=2 and DP=2 x TP=2, a few optimizer steps each, on small synthetic HDF5 shards in the
format it reads. `nxd_examples/cpu_launcher.py` starts each worker: it swaps the hub's
bert-large-uncased for a seeded tiny BERT, sets every parameter from its name so that each
parallel size starts from the same whole model, and records the losses the example logs.

Runs that must agree: TP=2 against TP=1 (same batch), DP=2 x TP=2 against DP=2 x TP=1, and
DP=2 x TP=1 against TP=1 with twice the batch (the same samples per step). The example averages
gradients with `xm.reduce_gradients`, which divides the data-parallel sum by the world size
(DP x TP), not by DP, and the migration keeps that: with TP > 1 its gradients are 1/TP of the
mean, which the clipping threshold and AdamW's eps do not ignore. The "mean" runs replace the
migrated `average_gradients_in_group` by the mean over the data-parallel group (as NxD's own
`bucket_allreduce_gradients` computes it) to show that the rest of the migrated program agrees.
One more run feeds batches without padding, which transformers 5 turns into a crash of the
example's attention subclass.

Exit status: 1 when the migrated file still imports the old stack, or a run that must agree does
not, or a run fails that is not known to; 0 otherwise (also when the repository is not fetched).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("NEURON_MIGRATE_MIRROR", ROOT.parent / ".mirror"))
REPO = MIRROR / "aws-neuron+neuronx-distributed" / "repo"
EXAMPLE = "examples/training/tp_dp_bert_hf_pretrain/tp_dp_bert_large_hf_pretrain_hdf5.py"
LAUNCHER = Path(__file__).resolve().parent / "nxd_examples"
OLD_STACK = ("torch_xla", "neuronx_distributed")
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception)\b.*:")

STEPS, BATCH, ACCUMULATION, SEQ_LEN, MAX_PRED = 5, 4, 2, 32, 5
SAMPLES_PER_SHARD, VOCAB = 128, 128
TOLERANCE = {"float32": 1e-5, "float64": 1e-10}  # largest relative difference of a step's loss
GRADIENT_SCALE = (
    "the example's `xm.reduce_gradients(optimizer, groups=<data-parallel groups>)` divides the "
    "group's sum by the world size (DP x TP); the migrated `average_gradients_in_group` keeps "
    "`grad /= dist.get_world_size()`, so with TP > 1 the gradients are 1/TP of the mean"
)
FULL_LENGTH = (
    "transformers 5 renamed BertSelfAttention's second parameter `position_embedding_type` to "
    "`is_causal`: the example's `super().__init__(config, position_embedding_type)` sets "
    "`is_causal=None`, and a batch without padding (no attention mask) reaches sdpa with it"
)


@dataclass(frozen=True)
class Run:
    """One torchrun of the migrated example: its size, and the run its losses must equal."""

    name: str
    nproc: int
    tp: int
    batch: int = BATCH
    against: str = ""  # the run whose losses this one's must equal
    gradient_mean: bool = False  # replace `average_gradients_in_group` by the mean
    full_length: bool = False  # shards without padding
    known: str = ""  # why this run is known to differ from `against`, or to fail


RUNS = (
    Run("TP=1", 1, 1),
    Run("TP=2", 2, 2, against="TP=1", known=GRADIENT_SCALE),
    Run("TP=2 mean", 2, 2, against="TP=1", gradient_mean=True),
    Run("TP=1 batch x2", 1, 1, batch=2 * BATCH),
    Run("DP=2xTP=1", 2, 1, against="TP=1 batch x2"),
    Run("DP=2xTP=2", 4, 2, against="DP=2xTP=1", known=GRADIENT_SCALE),
    Run("DP=2xTP=2 mean", 4, 2, against="DP=2xTP=1", gradient_mean=True),
    Run("TP=1 no padding", 1, 1, full_length=True, known=FULL_LENGTH),
)


@dataclass
class Result:
    run: Run
    losses: list[float] = field(default_factory=list)
    checksum: float | None = None  # of the whole model at the start: equal in every run
    error: str = ""
    seconds: float = 0.0


@dataclass
class Migration:
    summary: str
    todos: list[str]
    old_imports: list[str]  # `line N: import ...` of the old stack left in the migrated file


def export_example(repo: Path, commit: str, dest: Path) -> Path:
    """The example's folder at `commit`, under dest; returns the script's path."""
    folder = str(Path(EXAMPLE).parent)
    archive = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", commit, folder], capture_output=True, check=True
    )
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest / EXAMPLE


def neuron_migrate_command() -> list[str]:
    entry = Path(sys.executable).parent / "neuron-migrate"
    return [str(entry)] if entry.exists() else [sys.executable, "-m", "neuron_migrate"]


def migrate(script: Path) -> Migration:
    done = subprocess.run(
        [*neuron_migrate_command(), "rewrite", str(script.parent)], capture_output=True, text=True
    )
    if done.returncode == 2:
        raise SystemExit(f"nxd_examples: rewrite failed: {(done.stderr or done.stdout)[-400:]}")
    lines = (done.stdout + done.stderr).splitlines()
    summary = next((line for line in reversed(lines) if line.startswith("Migrated")), "")
    text = script.read_text()
    todos = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if "TODO(neuron-migrate" in line
    ]
    return Migration(summary, todos, old_stack_imports(text))


def old_stack_imports(text: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in OLD_STACK for name in names):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def write_shards(folder: Path, full_length: bool, shards: int = 2, seed: int = 0) -> None:
    """HDF5 shards as the example's `pretraining_dataset` reads them, named for its glob
    `*_training_*.hdf5`. Every sample masks MAX_PRED tokens, so that the loss of a batch is the
    mean of the losses of its halves (what makes DP=2 comparable with one process); without
    `full_length` every sample is padded."""
    import h5py

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    n, s = SAMPLES_PER_SHARD, SEQ_LEN
    for shard in range(shards):
        lengths = np.full(n, s) if full_length else rng.integers(s // 2, s, size=n)
        mask = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int64)
        ids = rng.integers(5, VOCAB, size=(n, s)) * mask
        ids[:, 0] = 1
        segments = ((np.arange(s)[None, :] >= (lengths // 2)[:, None]) & (mask == 1)).astype(int)
        positions = np.stack(
            [
                np.sort(rng.choice(np.arange(1, length), MAX_PRED, replace=False))
                for length in lengths
            ]
        )  # position 0 would end the list of masked tokens
        data = {
            "input_ids": ids, "input_mask": mask, "segment_ids": segments,
            "masked_lm_positions": positions,
            "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
            "next_sentence_labels": rng.integers(0, 2, size=n),
        }  # fmt: skip
        with h5py.File(folder / f"synthetic_training_{shard}.hdf5", "w") as out:
            for key, value in data.items():
                out.create_dataset(key, data=value.astype(np.int32))


def example_args(run: Run, data: Path, output: Path) -> list[str]:
    return [
        "--data_dir", str(data), "--output_dir", str(output),
        "--metrics_file", str(output / "results.json"),
        "--batch_size", str(run.batch), "--grad_accum_usteps", str(ACCUMULATION),
        "--steps_this_run", str(STEPS), "--max_steps", str(2 * STEPS), "--warmup_steps", "0",
        "--lr", "5e-3", "--seq_len", str(SEQ_LEN), "--max_pred_len", str(MAX_PRED),
        "--tensor_parallel_size", str(run.tp),
    ]  # fmt: skip


def run_example(run: Run, script: Path, work: Path, dtype: str, timeout: float) -> Result:
    started = time.monotonic()
    folder = work / re.sub(r"\W+", "_", run.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    scalars = folder / "scalars.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "PYTHONPATH")}
    env.update(
        OMP_NUM_THREADS="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=str(LAUNCHER),
        NXD_EXAMPLES_SCALARS=str(scalars), NXD_EXAMPLES_DTYPE=dtype,
    )  # fmt: skip
    if run.gradient_mean:
        env["NXD_EXAMPLES_GRADIENT_MEAN"] = "1"
    data = work / ("data_full_length" if run.full_length else "data")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={run.nproc}", "-m", "cpu_launcher", str(script),
        *example_args(run, data, folder / "output"),
    ]  # fmt: skip
    log = folder / "log.txt"
    result = Result(run)
    try:
        with log.open("w") as out:
            done = subprocess.run(
                command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            )
        if done.returncode != 0:
            result.error = last_error(log)
    except subprocess.TimeoutExpired:
        result.error = f"timed out after {timeout:g} s"
    read_scalars(scalars, result)
    result.seconds = time.monotonic() - started
    return result


def read_scalars(path: Path, result: Result) -> None:
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["tag"] == "step loss":
            result.losses.append(record["value"])
        elif record["tag"] == "init checksum":
            result.checksum = record["value"]


def last_error(log: Path) -> str:
    """The last `SomeError: message` line of a worker (not the launcher's ChildFailedError)."""
    lines = [
        RANK_PREFIX.sub("", line).strip() for line in log.read_text(errors="replace").splitlines()
    ]
    errors = [line for line in lines if EXCEPTION_LINE.match(line) and "ChildFailed" not in line]
    return (errors[-1] if errors else next((ln for ln in reversed(lines) if ln), "no output"))[:300]


def largest_difference(losses: list[float], reference: list[float]) -> float | None:
    if not losses or len(losses) != len(reference):
        return None
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference, strict=True))


def verdict(result: Result, by_name: dict[str, Result], tolerance: float) -> tuple[str, bool]:
    """What this run shows, and whether that fails the benchmark."""
    run = result.run
    if result.error or len(result.losses) != STEPS:
        failure = result.error or f"{len(result.losses)} of {STEPS} losses logged"
        return (f"fails as known: {failure}", False) if run.known else (f"FAILS: {failure}", True)
    if not run.against:
        return ("reference", False)
    difference = largest_difference(result.losses, by_name[run.against].losses)
    if difference is None:
        return (f"no reference ({run.against} did not finish)", True)
    agrees = difference <= tolerance
    if run.known:
        return (f"{'agrees' if agrees else 'differs'} ({difference:.1e}): known", False)
    return (f"{'agrees' if agrees else 'DIFFERS'} ({difference:.1e})", not agrees)


def loss_table(results: list[Result], digits: int) -> str:
    shown = [r for r in results if r.losses]
    lines = ["| step | " + " | ".join(r.run.name for r in shown) + " |"]
    lines.append("|---:|" + "---:|" * len(shown))
    for step in range(STEPS):
        cells = [f"{r.losses[step]:.{digits}f}" if step < len(r.losses) else "" for r in shown]
        lines.append(f"| {step + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(results: list[Result], tolerance: float) -> tuple[str, bool]:
    by_name = {r.run.name: r for r in results}
    lines = [
        "| run | processes | against | max rel. difference | verdict | s |",
        "|---|---:|---|---:|---|---:|",
    ]
    failed = False
    checksums = {round(r.checksum, 9) for r in results if r.checksum is not None}
    for r in results:
        said, fails = verdict(r, by_name, tolerance)
        failed |= fails
        difference = (
            largest_difference(r.losses, by_name[r.run.against].losses) if r.run.against else None
        )
        cell = f"{difference:.2e}" if difference is not None else ""
        lines.append(
            f"| {r.run.name} | {r.run.nproc} | {r.run.against} | {cell} | {said} | {r.seconds:.0f} |"
        )
    if len(checksums) > 1:
        lines.append(f"\nstarting models differ between runs (checksums {sorted(checksums)})")
        failed = True
    return "\n".join(lines), failed


def report_migration(migration: Migration) -> None:
    print(f"rewrite: {migration.summary}")
    print(f"TODOs left ({len(migration.todos)}):")
    for todo in migration.todos:
        print(f"  {todo}")
    if migration.old_imports:
        print("old-stack imports left in the migrated file:")
        for line in migration.old_imports:
            print(f"  {line}")
    else:
        print("no import of torch_xla or neuronx_distributed left")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repo", type=Path, default=REPO, help="bare git folder of neuronx-distributed"
    )
    parser.add_argument("--commit", default="HEAD", help="the commit to export (default HEAD)")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32",
                        help="float64 turns the model to float64 once it is built: rounding then "
                             "cannot hide a real difference")  # fmt: skip
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="these runs (and their references)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results here too")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="work here and keep the folder")
    args = parser.parse_args(argv)
    if not (args.repo / "HEAD").is_file():
        print(f"nxd_examples: skipped: no neuronx-distributed repository at {args.repo} (--repo)")
        return 0
    try:
        import h5py  # noqa: F401  (the example reads its data with it, and so do we)
    except ImportError:
        print(f"nxd_examples: skipped: h5py is not installed in {sys.prefix}")
        return 0
    work = args.keep or Path(tempfile.mkdtemp(prefix="neuron-migrate-nxd-examples-"))
    try:
        return run_all(args, work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def chosen_runs(only: list[str] | None) -> list[Run]:
    if not only:
        return list(RUNS)
    names = set(only)
    names |= {run.against for run in RUNS if run.name in names and run.against}
    return [run for run in RUNS if run.name in names]


def run_all(args: argparse.Namespace, work: Path) -> int:
    script = export_example(args.repo, args.commit, work / "migrated")
    migration = migrate(script)
    report_migration(migration)
    runs = chosen_runs(args.only)
    for full_length in {run.full_length for run in runs}:
        write_shards(work / ("data_full_length" if full_length else "data"), full_length)
    results = []
    for run in runs:
        result = run_example(run, script, work, args.dtype, args.timeout)
        print(f"{run.name}: {len(result.losses)} losses, {result.seconds:.0f} s"
              + (f", {result.error}" if result.error else ""), flush=True)  # fmt: skip
        results.append(result)
    tolerance = TOLERANCE[args.dtype]
    print(
        f"\nLoss per optimizer step ({args.dtype}; {STEPS} steps of {ACCUMULATION} micro-batches)\n"
    )
    print(loss_table(results, 7 if args.dtype == "float32" else 12))
    table, failed = summary_table(results, tolerance)
    print(f"\nAgainst the run each must equal (tolerance {tolerance:g} relative)\n")
    print(table)
    for note in sorted({r.run.known for r in results if r.run.known}):
        print(f"\nknown: {note}")
    if args.json:
        args.json.write_text(json.dumps({
            "summary": migration.summary, "todos": migration.todos,
            "old_imports": migration.old_imports, "dtype": args.dtype,
            "runs": [{"name": r.run.name, "processes": r.run.nproc, "tp": r.run.tp,
                      "batch": r.run.batch, "against": r.run.against, "losses": r.losses,
                      "error": r.error, "seconds": round(r.seconds, 1)} for r in results],
        }, indent=1) + "\n")  # fmt: skip
    return 1 if failed or migration.old_imports else 0


if __name__ == "__main__":
    sys.exit(main())
