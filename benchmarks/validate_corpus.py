"""Real old-stack scripts, migrated, against their originals under `neuron-migrate validate`.

    python benchmarks/validate_corpus.py [--only NAME ...] [--json out.json] [--keep DIR]

The public repositories of the corpus (../shared/corpus/README.md) hold a few training scripts
that run on a CPU host with torch_xla 2.9 (`PJRT_DEVICE=CPU`). For each, this script exports the
script's folder (and the folders it imports from) from a fetched copy of its repository at the
commit of `repos.tsv`, migrates a copy of those folders with `neuron-migrate rewrite`, writes the
small data the script reads, and runs

    neuron-migrate validate ORIGINAL MIGRATED --original-python REF --migrated-python REF -- ARGS

Both sides run with the reference environment's Python (torch 2.9 + torch_xla 2.9, torchvision
0.24): torchvision does not import beside a newer torch, and the same torch on both sides compares
the old stack with native code, which is exactly what the migration must preserve. Each side runs
in its own copy of the folder, so relative data paths, checkpoints and `sys.path.append('..')`
resolve there.

Nothing of the corpus is kept in the project: the repositories are read at run time from the
fetch root ($NEURON_MIGRATE_MIRROR, default ../.mirror: `OWNER+NAME/repo`, bare git folders) and
the commits from $NEURON_MIGRATE_REPOS (default ../shared/corpus/repos.tsv). Without them, or
without the reference environment, the script says what is missing and exits 0.

Exit status: 1 when a script that must match does not; 0 otherwise. A case known not to match
says why (a defect of a rewrite rule, an API left to a person, a script that does not train); its
verdict is reported and does not fail the run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("NEURON_MIGRATE_MIRROR", ROOT.parent / ".mirror"))
REPOS_TSV = Path(
    os.environ.get("NEURON_MIGRATE_REPOS", ROOT.parent / "shared" / "corpus" / "repos.tsv")
)
REFENV_PYTHON = Path(
    os.environ.get(
        "NEURON_MIGRATE_REFERENCE_PYTHON",
        Path.home() / ".cache" / "neuron-migrate" / "refenv" / "bin" / "python",
    )
)
SAMPLES, SDK = "aws-neuron/aws-neuron-samples", "aws-neuron/aws-neuron-sdk"
XLA, ACADEMIC = "pytorch/xla", "alpharomercoma/torchneuronx"
MNIST_FLAGS = ("--fake_data", "--num_epochs", "1")
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b.*:")


@dataclass(frozen=True)
class Case:
    """One script: where it lives, how to run it, what it reads, what validate should say."""

    name: str
    repo: str
    script: str  # path inside the repository
    args: tuple[str, ...] = ()
    also: tuple[str, ...] = ()  # other folders of the repository that the script imports from
    mnist: tuple[str, ...] = ()  # where it reads MNIST: folders relative to its own, or absolute
    nproc: int | None = None  # torchrun processes for the migrated side (None: plain python)
    original_nproc: int | None = None  # and for the original
    known: str = ""  # why this case is known not to match (empty: it must match)


CASES = (
    Case("mnist_mlp/train", SAMPLES, "torch-neuronx/training/mnist_mlp/train.py",
         mnist=("MNIST_DATA_train",)),
    Case("mnist_mlp/train_xmp", SAMPLES, "torch-neuronx/training/mnist_mlp/train_xmp.py",
         mnist=("MNIST_DATA_train",), nproc=1),
    Case("mnist_mlp/train_torchrun", SAMPLES, "torch-neuronx/training/mnist_mlp/train_torchrun.py",
         mnist=("/tmp/MNIST_DATA_train",), nproc=2, original_nproc=2,
         known="on the CPU, torch_xla 2.9 under torchrun gives each process a world of its own "
               "(`xr.world_size()` is 1, with or without `init_method='xla://'`), so the original trains "
               "two unsynchronised copies on the whole dataset; the migrated program is the data-parallel "
               "run of two that torchrun starts on Trainium"),
    Case("resnet50/run_image_classification", SAMPLES,
         "torch-neuronx/training/resnet50/run_image_classification.py",
         ("--fake_data", "--model", "resnet18", "--max_steps", "3", "--image_dim", "64"),
         also=("torch-neuronx/training/common",), nproc=1),
    Case("sdk mnist_mlp/train_monitor", SDK, "src/examples/pytorch/mnist_mlp/train_monitor.py",
         mnist=("MNIST_DATA_train",),
         known="the script defines main() but never calls it: neither side trains"),
    Case("sdk mnist_mlp/train_tb", SDK, "src/examples/pytorch/mnist_mlp/train_tb.py",
         mnist=("MNIST_DATA_train",)),
    Case("xla test_train_mp_mnist", XLA, "test/test_train_mp_mnist.py",
         (*MNIST_FLAGS, "--batch_size", "256"), nproc=1),
    Case("xla test_train_mp_mnist_zero1", XLA, "test/test_train_mp_mnist_zero1.py", MNIST_FLAGS,
         nproc=1),
    Case("xla test_train_mp_mnist_fsdp_with_ckpt", XLA,
         "test/test_train_mp_mnist_fsdp_with_ckpt.py", MNIST_FLAGS, nproc=1,
         known="torch_xla's FSDP is left to a person under TODOs: the migrated program "
         "still wraps the model in it, which keeps the weights on the XLA device"),
    Case("xla train_decoder_only_base", XLA, "examples/train_decoder_only_base.py",
         ("--num-steps", "5", "--hidden-size", "128", "--intermediate-size", "256",
          "--num-layers", "1")),
    Case("torchneuronx academic/train_academic", ACADEMIC, "academic/train_academic.py",
         ("--dataset", "mnist", "--arch", "mlp", "--epochs", "1", "--data-dir", "./data",
          "--no-augment", "--out", "academic.json"), mnist=("data",)),
)  # fmt: skip


@dataclass
class Outcome:
    case: Case
    verdict: str  # match | diverge | error | skipped (what validate said, or why it did not run)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def regressed(self) -> bool:
        """A case that must match and does not (one whose repository is not fetched is skipped)."""
        return not self.case.known and self.verdict not in ("match", "skipped")


def missing_inputs() -> str | None:
    """What this benchmark lacks on this machine, or None when it can run."""
    if not REPOS_TSV.is_file():
        return f"no list of repositories at {REPOS_TSV} (set NEURON_MIGRATE_REPOS)"
    if not MIRROR.is_dir():
        return f"no fetched repositories at {MIRROR} (set NEURON_MIGRATE_MIRROR)"
    if not REFENV_PYTHON.exists():
        return (
            f"no reference environment at {REFENV_PYTHON}: build it with "
            "`neuron-migrate env reference` (or set NEURON_MIGRATE_REFERENCE_PYTHON)"
        )
    probe = subprocess.run([str(REFENV_PYTHON), "-c", "import torchvision"], capture_output=True)
    if probe.returncode != 0:
        return f"{REFENV_PYTHON} has no torchvision: update it with `neuron-migrate env reference`"
    return None


def read_commits(path: Path) -> dict[str, str]:
    commits = {}
    for line in path.read_text().splitlines():
        if line.strip():
            repo, commit = line.split()[:2]
            commits[repo] = commit
    return commits


def git_dir(repo: str) -> Path:
    return MIRROR / repo.replace("/", "+") / "repo"


def export_folder(repository: Path, commit: str, folder: str, dest: Path) -> None:
    """The files directly in `folder` at `commit` (not its subfolders), under dest/folder."""
    git = ["git", f"--git-dir={repository}"]
    listing = subprocess.run(
        [*git, "ls-tree", "-z", commit, folder.rstrip("/") + "/"],
        capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        blob = subprocess.run([*git, "cat-file", "blob", sha], capture_output=True)
        if blob.returncode == 0:  # a blob the fetch left out (large data) is not needed to run
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_bytes(blob.stdout)


def write_fake_mnist(root: Path, n_train: int = 512, n_test: int = 128) -> None:
    """The idx files torchvision's MNIST reads from root/MNIST/raw: random pixels and labels."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        pixels = bytes(rng.randrange(256) for _ in range(n * 28 * 28))
        labels = bytes(rng.randrange(10) for _ in range(n))
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, n, 28, 28) + pixels
        )
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels)


def neuron_migrate(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neuron_migrate", *args], capture_output=True, text=True, **kwargs
    )


@dataclass(frozen=True)
class Layout:
    """Where one case's copies live: <work>/original, <work>/migrated, <work>/validate."""

    work: Path
    case: Case

    def script(self, side: str) -> Path:
        return self.work / side / self.case.script

    @property
    def folders(self) -> tuple[str, ...]:
        return (str(Path(self.case.script).parent), *self.case.also)


def prepare(layout: Layout, commit: str) -> list[str]:
    """Exports the original folders, migrates a copy, writes the data; returns rewrite's notes."""
    case, original, migrated = layout.case, layout.work / "original", layout.work / "migrated"
    for folder in layout.folders:
        export_folder(git_dir(case.repo), commit, folder, original)
    shutil.copytree(original, migrated)
    done = neuron_migrate("rewrite", *(str(migrated / f) for f in layout.folders))
    notes = []
    if done.returncode == 2:  # 1 only means that TODOs were left
        notes.append(f"rewrite failed: {(done.stderr or done.stdout).strip()[-300:]}")
    todos = [
        line.split("TODO(neuron-migrate ", 1)[1].split(")")[0]
        for line in layout.script("migrated").read_text(errors="replace").splitlines()
        if "TODO(neuron-migrate " in line
    ]
    if todos:
        notes.append(f"TODOs in the script: {', '.join(sorted(set(todos)))}")
    for side in ("original", "migrated"):
        for where in case.mnist:
            folder = layout.script(side).parent / where  # an absolute `where` stays as it is
            if not (folder / "MNIST" / "raw").is_dir():
                write_fake_mnist(folder)
    return notes


def validate(layout: Layout, timeout: float) -> tuple[str, list[str]]:
    """Runs validate on the pair; its verdict and what explains it."""
    case, original, migrated = layout.case, layout.script("original"), layout.script("migrated")
    work = layout.work / "validate"
    report = work / "report.json"
    argv = [
        "validate", str(original), str(migrated), f"--json={report}", f"--work-dir={work}",
        "--original-python", str(REFENV_PYTHON), "--migrated-python", str(REFENV_PYTHON),
        "--original-cwd", str(original.parent), "--migrated-cwd", str(migrated.parent),
        "--timeout", str(timeout),
    ]  # fmt: skip
    if case.nproc is not None:
        argv += ["--nproc", str(case.nproc)]
    if case.original_nproc is not None:
        argv += ["--original-nproc", str(case.original_nproc)]
    env = dict(os.environ, PJRT_DEVICE="CPU")
    try:
        done = neuron_migrate(*argv, "--", *case.args, env=env, timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        return "error", [f"validate itself did not finish within {timeout + 120:g} s"]
    try:
        document = json.loads(report.read_text())
    except (OSError, ValueError):
        return "error", [f"validate exit {done.returncode}: {done.stderr.strip()[-300:]}"]
    return document["verdict"], _explain(document)


def _explain(document: dict) -> list[str]:
    notes = [
        f"{item['title']}: {item['detail'] or 'diverges'}"
        for item in document.get("items", [])
        if item["verdict"] == "diverge"
    ]
    for run in document["runs"]:
        if run["timed_out"]:
            notes.append(f"{run['label']} timed out")
        elif run["returncode"] != 0:
            notes.append(
                f"{run['label']} exit {run['returncode']}: {_last_error(Path(run['log']))}"
            )
    if not notes:
        notes += [error.splitlines()[0] for error in document["errors"]]
    judged = document.get("judged_by")
    if judged:
        settled = [
            f"{item['key']} R {_number(item['ratio']['r'])}"
            for item in document.get("items", [])
            if item.get("ratio")
        ]
        notes.append(f"judged by the {judged}" + (f" ({', '.join(settled)})" if settled else ""))
    notes += [_what_ran(run) for run in document["runs"] if run.get("what_ran")]
    return notes


def _what_ran(run: dict) -> str:
    """`original ran on xla:0 (pg xla, 1 process, xm.all_reduce x3)`: what a verdict measured."""
    ran = run["what_ran"]
    parts = [f"{ran['processes']} process{'es' if ran['processes'] != 1 else ''}"]
    parts += [f"pg {b}" for b in ran["process_group_backends"]]
    parts += [f"compile {b}" for b in ran["compile_backends"]]
    parts += [f"{name} x{count}" for name, count in ran["collectives"].items()]
    return f"{run['label']} ran on {', '.join(ran['devices']) or 'nothing'} ({', '.join(parts)})"


def _number(value: float | str) -> str:
    return f"{value:.2g}" if isinstance(value, float) else str(value)


def _last_error(log: Path) -> str:
    """The last `SomeError: message` line of a log (a torchrun worker's, not the launcher's)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "no log"
    lines = [RANK_PREFIX.sub("", line).strip() for line in text.splitlines()]
    errors = [
        line for line in lines if EXCEPTION_LINE.match(line) and "ChildFailedError" not in line
    ]
    if errors:
        return errors[-1][:240]
    return next((line[:240] for line in reversed(lines) if line), "no output")


def run_case(case: Case, commits: dict[str, str], work: Path, timeout: float) -> Outcome:
    started = time.monotonic()
    commit = commits.get(case.repo)
    if commit is None or not git_dir(case.repo).is_dir():
        return Outcome(case, "skipped", [f"{case.repo} is not fetched"])
    layout = Layout(work, case)
    try:
        notes = prepare(layout, commit)
    except subprocess.CalledProcessError as exc:
        return Outcome(
            case, "error", [f"export failed: {exc.stderr.decode(errors='replace')[-200:]}"]
        )
    verdict, why = validate(layout, timeout)
    if case.known:
        why.append(f"known: {case.known}" if verdict != "match" else "matches now: drop `known`")
    return Outcome(case, verdict, notes + why, time.monotonic() - started)


def format_table(outcomes: list[Outcome]) -> str:
    rows = [("script", "verdict", "seconds", "notes")]
    for o in outcomes:
        verdict = o.verdict.upper() + (" (must match)" if o.regressed else "")
        rows.append((o.case.name, verdict, f"{o.seconds:.0f}", "; ".join(o.notes)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[3]
             for row in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="the case named NAME, or the cases whose name contains it")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per validate run")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the outcomes here too")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="build the folders here and keep them"
    )
    args = parser.parse_args(argv)
    missing = missing_inputs()
    if missing:
        print(f"validate_corpus: skipped: {missing}")
        return 0
    commits = read_commits(REPOS_TSV)
    names = {c.name for c in CASES}
    cases = [  # a whole case name picks that case alone; a part of one, every case holding it
        c
        for c in CASES
        if not args.only or any(n == c.name or (n not in names and n in c.name) for n in args.only)
    ]
    root = args.keep or Path(tempfile.mkdtemp(prefix="neuron-migrate-validate-corpus-"))
    outcomes = []
    try:
        for i, case in enumerate(cases):
            outcome = run_case(case, commits, root / f"{i:02d}", args.timeout)
            print(f"{case.name}: {outcome.verdict} ({outcome.seconds:.0f} s)", flush=True)
            outcomes.append(outcome)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(format_table(outcomes))
    if args.json:
        args.json.write_text(json.dumps(
            [{"script": o.case.name, "verdict": o.verdict, "known": o.case.known,
              "notes": o.notes, "seconds": round(o.seconds, 1)} for o in outcomes], indent=1,
        ) + "\n")  # fmt: skip
    return 1 if any(o.regressed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
