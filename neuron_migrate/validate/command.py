"""The `neuron-migrate validate` and `neuron-migrate env` subcommands.

Exit status of `validate`: 0 everything compared matches, 1 something diverges, 2 an error (a
program failed or timed out, recorded nothing, or the reference environment is missing).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_MATCH, EXIT_DIVERGE, EXIT_ERROR = 0, 1, 2

VALIDATE_EPILOG = """\
Both programs get the arguments after `--`. The original runs in the reference environment (the
old stack: torch 2.9 + torch_xla 2.9) when it imports torch_xla, the migrated one in this Python.
Nothing is edited: a hook started through PYTHONPATH seeds everything and records every loss that
has backward() called on it, the gradients before the first optimizer step, the final parameters
(named through the module that holds them), what generate() returns and, with --forward, the first
output of one module class. A program the hook could not attach to is an error, not a comparison.

What ran: each side's line says where its recorded tensors lived, its process-group and
torch.compile backends, how many processes recorded and which collectives they called. A migrated
program that still computed through torch_xla (transformers picks the XLA device whenever torch_xla
imports) gets no MATCH: run it with USE_TORCH_XLA=0, or with --migrated-python naming a Python
without torch_xla.

Multi-process: XLA on CPU cannot run collectives, so on a CPU host the original runs as one
process. A migrated data-parallel program run with --nproc 2 is then checked against itself: its
ranks train on different shards and must still end with the same parameters; a missing gradient
all-reduce makes them drift apart.

Working directory: both programs start in this one unless --original-cwd / --migrated-cwd say
otherwise. They run at the same time, so give each its own where they write files under relative
paths (checkpoints, logs) or find data and modules through them (`sys.path.append('..')`).
The runs after the first (the noise floor, reruns) each start in a fresh copy of their folder as it
was before validate ran anything, so a program that will not overwrite its outputs runs again.

Random draws: the two stacks draw from different generators (XLA has its own on the device), so
the same seed gives different dropout masks and noise. validate makes every draw meant for a
device, or in a 16-bit type, on the host from torch's generator, in both programs, so they draw
the same numbers; --native-random leaves each stack to its own generator, --no-dropout turns
dropout off in both.

Tolerances follow the dtypes seen (parameters, autocast, XLA_USE_BF16): fp32 losses within
1e-6 + 1e-5*|ref| per step and tensors within 1e-5 + 1e-4*max|ref|. Parameters and gradients are
judged against the largest magnitude over all parameters, as neuron_allclose scales by the global
maximum. Where a side computes in bf16, the original runs a third time with its low precision
turned off, and each item is judged by R = ||migrated - fp32|| / ||original - fp32||, against
the noise floor of that precision: a faithful migration is near 1 (--noise-floor migrated runs the
migrated program in float32 instead; --noise-floor off falls back to bf16 tolerances, 2e-2 and
1.6e-2). Where float32 runs differ past the fp32 tolerances by numbers alone (another backend's
kernels round differently, a gradient that is zero but for rounding), the original runs a third
time in float64 and what the tolerances left is judged by R against that floor. Where the float64
run cannot serve (rounding amplified step by step, as BatchNorm over a small batch does, sends it
along a trajectory of its own) or leaves an item diverging, the original runs twice more in
float32 with every module output moved by one ulp, and each item is judged by
R = ||migrated - original|| / ||perturbed - original|| against the farther of the two (the
perturbation floor); the loss row says from which step the curves part. The table says which
rule judged each item, and the result which floor judged the verdict. A change of precision policy is itself a
divergence. --precision names the tolerance class; --rtol and --atol override the tolerances (and
turn the noise floor off).

Where generated tokens part, every program runs again with its generate() calls following the
original's tokens (teacher forcing): the logits are compared position by position, and the first
parting is called a near tie or a real difference. With several ranks, every rank is compared and
the first to diverge is named. --localize reruns the first diverging step recording every module's
output, the gradients and the updates, and names the first module, gradient or update that differs
by more than the floor the comparison used allows it (R ≤ 1.2 per module), the floor runs rerun too.

--compile-stats runs one or two programs under a stand-in `neuron` compile backend that, like the
real one, rejects dynamic shapes (torch.compile's default backend is sent to it, as on Trainium),
and counts compiled graphs, recompiles with their reasons, and graph breaks; torch_xla programs
report XLA's own compile count.

Notebooks: `validate ORIGINAL.ipynb MIGRATED.ipynb` runs only the migrated notebook, in a fresh
kernel of this Python (or --migrated-python) in its own folder (or --migrated-cwd), --timeout per
cell, and compares each code cell's outputs with those saved in the original: numbers in the text
within --rtol/--atol (default 1e-4 and 1e-6; integers exactly), the rest of the text after
normalising whitespace, addresses, elapsed times and device names, images by size; stderr is not
compared. Code cells pair by position (by source where the counts differ).

Exit status: 0 everything compared matches; 1 something diverges; 2 a program failed, timed out or
recorded nothing, the migrated program matched but ran on XLA, or the reference environment is
missing.
"""


class _ValidateParser(argparse.ArgumentParser):
    """Everything after the first `--` belongs to the programs, wherever the options stand.

    (Plain argparse would fold those arguments into PROGRAM, or reject them when an option stands
    between the programs and `--`.)
    """

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        rest: list[str] = []
        if "--" in args:
            at = args.index("--")
            args, rest = args[:at], args[at + 1 :]
        parsed, extras = super().parse_known_args(args, namespace)
        parsed.script_args = rest
        return parsed, extras


def add_parsers(commands: Any) -> None:
    """Adds `validate` and `env` to the `neuron-migrate` subcommands."""
    default_class = commands._parser_class
    commands._parser_class = _ValidateParser
    try:
        validate = commands.add_parser(
            "validate",
            help="run the original and the migrated program side by side and diff what they compute",
            description="Run the original and the migrated program, each in its own Python, and compare "
            "per-step losses, gradients, final parameters, forward outputs and generated tokens with "
            "dtype-aware tolerances.",
            epilog=VALIDATE_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    finally:
        commands._parser_class = default_class
    add_validate_arguments(validate)
    env = commands.add_parser("env", help="build the environments that validate runs programs in")
    env_commands = env.add_subparsers(dest="env_command", metavar="ENV_COMMAND")
    reference = env_commands.add_parser(
        "reference",
        help="build the reference (old-stack) virtualenv: torch 2.9, torch_xla 2.9, transformers 4.57",
        description="Create a virtualenv at DIR with the old stack (torch==2.9.0, torch-xla==2.9.0, "
        "torchvision==0.24.0, tensorboard and the transformers release optimum-neuron 0.4.5 pins). "
        "Does nothing if DIR already holds a "
        "complete one. validate finds it through $NEURON_MIGRATE_REFERENCE_PYTHON, or at "
        "~/.cache/neuron-migrate/refenv.",
    )
    reference.add_argument(
        "dir",
        type=Path,
        metavar="DIR",
        nargs="?",
        help="where (default: ~/.cache/neuron-migrate/refenv)",
    )
    reference.add_argument(
        "--python", metavar="PYTHON", help="the Python to base it on (default: this one's base)"
    )


def add_validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "programs",
        nargs="+",
        metavar="PROGRAM",
        help="ORIGINAL MIGRATED (with --compile-stats: one or two programs); arguments after `--` go to "
        "both; two .ipynb: the migrated notebook re-run against the original's saved outputs",
    )
    parser.add_argument(
        "--original-python",
        type=Path,
        metavar="PYTHON",
        help="interpreter for the original (default: the reference env if it imports torch_xla, else this Python)",
    )
    parser.add_argument(
        "--migrated-python",
        type=Path,
        metavar="PYTHON",
        help="interpreter for the migrated program (default: this Python)",
    )
    parser.add_argument(
        "--original-cwd",
        type=Path,
        metavar="DIR",
        help="working directory of the original (default: this one)",
    )
    parser.add_argument(
        "--migrated-cwd",
        type=Path,
        metavar="DIR",
        help="working directory of the migrated program (default: this one)",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="run the migrated program under torchrun with N processes (default: plain python)",
    )
    parser.add_argument(
        "--original-nproc",
        type=int,
        metavar="N",
        help="run the original under torchrun with N processes (default: plain python)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for random, numpy and torch in both programs (default 0)",
    )
    parser.add_argument(
        "--no-dropout", action="store_true", help="turn dropout off in both programs"
    )
    parser.add_argument(
        "--native-random",
        action="store_true",
        help="let each stack draw random numbers on its own device generator (default: on the host, "
        "the same numbers on both sides)",
    )
    parser.add_argument(
        "--localize",
        action="store_true",
        help="where something diverges, rerun the first diverging step module by module and name "
        "the first module, gradient or update that differs",
    )
    parser.add_argument(
        "--noise-floor",
        choices=("original", "migrated", "off"),
        default="original",
        help="which program runs again to measure the noise floor: in float32 under a bf16 run, "
        "in float64 under a float32 run the fp32 tolerances do not settle (default: the original; "
        "off: tolerances only)",
    )
    parser.add_argument(
        "--forward",
        metavar="CLASS",
        help="also compare the first output of the module of this class (e.g. LlamaForCausalLM)",
    )
    parser.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="tolerance class (default: from the dtypes seen)",
    )
    parser.add_argument("--rtol", type=float, help="override the relative tolerance of every item")
    parser.add_argument("--atol", type=float, help="override the absolute tolerance of every item")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write the result as JSON to PATH ('-' or no value: stdout, instead of the table)",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PATH.png",
        help="plot loss curves and their relative difference (needs matplotlib)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="write a report with its plots: HTML for .html, Markdown otherwise (needs matplotlib)",
    )
    parser.add_argument(
        "--compile-stats",
        action="store_true",
        help="count compiled graphs, recompiles and graph breaks under a stand-in `neuron` backend instead of comparing",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        metavar="SECONDS",
        help="stop both programs after this long; with notebooks, a cell that runs this long (default 600)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="keep captures and logs here (default: a temporary folder, removed)",
    )


def run(args: argparse.Namespace) -> int:
    if args.command == "env":
        return run_env(args)
    return run_validate(args)


def run_env(args: argparse.Namespace) -> int:
    from neuron_migrate.validate import refenv

    if getattr(args, "env_command", None) != "reference":
        print(
            "neuron-migrate env: say which environment, e.g. `neuron-migrate env reference DIR`",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        refenv.ensure(
            args.dir or refenv.DEFAULT_DIR, args.python, log=lambda m: print(m, file=sys.stderr)
        )
    except refenv.RefEnvError as exc:
        print(f"neuron-migrate env reference: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_MATCH


def _error(message: str) -> int:
    print(f"neuron-migrate validate: {message}", file=sys.stderr)
    return EXIT_ERROR


def run_validate(args: argparse.Namespace) -> int:
    scripts, script_args = args.programs, getattr(args, "script_args", [])
    notebooks = [s for s in scripts if s.lower().endswith(".ipynb")]
    if notebooks and (len(notebooks) != 2 or len(scripts) != 2):
        return _error(
            "give two notebooks (ORIGINAL.ipynb MIGRATED.ipynb: the migrated one is re-run against "
            "the original's saved outputs) or two programs"
        )
    if notebooks:
        from neuron_migrate.validate import notebook_rerun

        return notebook_rerun.run_command(args)
    from neuron_migrate.validate.runner import CaptureOptions

    if not args.compile_stats and len(scripts) != 2:
        return _error("give two programs: ORIGINAL MIGRATED [-- ARGS...]")
    if len(scripts) > 2:
        return _error("give one or two programs; arguments for them go after `--`")
    for script in scripts:
        if not Path(script).is_file():
            return _error(f"{script}: no such file")
    if any(n is not None and n < 1 for n in (args.nproc, args.original_nproc)):
        return _error("--nproc and --original-nproc must be at least 1")
    labels = ["original", "migrated"] if len(scripts) == 2 else ["program"]
    programs = []
    for label, script in zip(labels, scripts, strict=True):
        program = _program(args, label, Path(script), script_args)
        if isinstance(program, str):
            return _error(program)
        programs.append(program)
    options = CaptureOptions(
        args.seed,
        args.no_dropout,
        args.forward,
        args.compile_stats,
        host_random=not args.native_random,
    )
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="neuron-migrate-validate-"))
    try:
        return _validate(args, programs, options, work_dir)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)


def _program(args: argparse.Namespace, label: str, path: Path, script_args: list[str]):
    """One side's Program, or the message saying why it cannot run."""
    from neuron_migrate.validate import refenv
    from neuron_migrate.validate.runner import Program, default_python, imports_torch_xla

    python = args.original_python if label == "original" else args.migrated_python
    if python is None and imports_torch_xla(path):
        python = refenv.default_python()
        if python is None or not python.exists():
            where = f"{refenv.ENV_VAR}={python}" if python else str(refenv.DEFAULT_DIR)
            return (
                f"{path} imports torch_xla, but no reference environment was found ({where}): "
                "build one with `neuron-migrate env reference`, or pass --original-python "
                "(or --migrated-python)"
            )
    python = Path(python or default_python())
    if not python.exists():
        return f"{python}: no such interpreter"
    cwd = args.original_cwd if label == "original" else args.migrated_cwd
    if cwd is not None and not cwd.is_dir():
        return f"{cwd}: no such directory"
    if cwd is not None:  # the program and its interpreter, as named from here
        path, python = path.absolute(), python.absolute()
    nproc = args.original_nproc if label == "original" else args.nproc
    return Program(label, path, python, list(script_args), nproc, cwd)


def _validate(args: argparse.Namespace, programs: list, options: Any, work_dir: Path) -> int:
    if args.compile_stats:
        return _compile_stats(args, programs, options, work_dir)
    from neuron_migrate.validate import pipeline, report

    settings = pipeline.Settings(
        capture=options,
        precision=args.precision,
        rtol=args.rtol,
        atol=args.atol,
        timeout=args.timeout,
        localize=args.localize,
        noise_floor=args.noise_floor,
    )
    result = pipeline.validate(
        programs, settings, work_dir, log=lambda m: print(f"validate: {m}", file=sys.stderr)
    )
    if args.json != "-":
        print(report.format_table(result))
    if args.json:
        _emit(report.as_json(result), args.json)
    try:
        if args.plot and result.comparison is not None:
            report.plot(result.comparison, args.plot)
        if args.report:
            report.write(report.document(result), args.report)
    except ImportError:
        return _error("--plot and --report need matplotlib: pip install matplotlib")
    return result.exit_code


def _compile_stats(args: argparse.Namespace, programs: list, options: Any, work_dir: Path) -> int:
    from neuron_migrate.validate import compile_stats, report
    from neuron_migrate.validate.pipeline import Settings, run_errors
    from neuron_migrate.validate.runner import run_programs

    work_dir.mkdir(parents=True, exist_ok=True)
    runs = run_programs(programs, options, work_dir, args.timeout)
    errors = run_errors(runs, Settings(capture=options, timeout=args.timeout))
    summaries = [compile_stats.summarise(r) for r in runs]
    exit_code = EXIT_ERROR if errors else EXIT_MATCH
    if args.json != "-":
        print("\n".join(report.describe_run(r) for r in runs))
        print(compile_stats.format_summaries(summaries))
        for warning in report.capture_warnings(runs):
            print(f"warning: {warning}")
        for error in errors:
            print(f"error: {error}")
    if args.json:
        import json

        text = json.dumps(
            {
                "exit_code": exit_code,
                "errors": errors,
                "runs": [report.run_json(r) for r in runs],
                "compile": [s.as_dict() for s in summaries],
            },
            indent=1,
        )
        _emit(text, args.json)
    return exit_code


def _emit(text: str, destination: str) -> None:
    if destination == "-":
        print(text)
    else:
        Path(destination).write_text(text + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m neuron_migrate.validate ...`: the same two subcommands without the main CLI."""
    parser = argparse.ArgumentParser(prog="neuron-migrate")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_parsers(commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_ERROR
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    return run(args)
