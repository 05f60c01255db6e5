"""The `neuron-migrate sweep` subcommand: every causal-LM architecture of the installed
transformers, generated and trained with static shapes on the stand-in `neuron` backend.

Exit codes follow ruff: 0 every architecture generates and trains, 1 some do not, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from neuron_migrate.core.files import write_atomic
from neuron_migrate.sweep import lint, report, runner
from neuron_migrate.sweep.tiny import Architecture, causal_lm_architectures

EXIT_OK, EXIT_FAILURES, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_RESULTS = Path("build/sweep")
# Ten architectures of different families (dense, MoE, encoder-decoder heads, state-space,
# ALiBi, absolute positions) that are quick to compile: the sweep of the default test run.
SUBSET = (
    "llama", "gpt2", "qwen2", "mistral", "phi", "gpt_neox", "bloom", "opt", "mixtral", "mamba",
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "sweep",
        help="generate and train every causal-LM architecture of transformers with static shapes",
        description="Build a tiny random model of every causal-LM architecture of the installed "
        "transformers (or of those named), generate and train it as migrated code does on "
        "Trainium, on a stand-in `neuron` compile backend that rejects what Neuron rejects, "
        "and say for each whether it holds and why not. Each architecture runs in a process "
        "of its own with a deadline; results are kept per architecture, so a second run "
        "resumes where the first stopped.",
        epilog="Exit status: 0 every architecture generates and trains; 1 some do not; 2 usage error.",
    )
    parser.add_argument("architectures", nargs="*", metavar="ARCH", help="model types such as llama (default: all)")
    parser.add_argument("--subset", action="store_true", help=f"the ten architectures of the test run ({', '.join(SUBSET)})")
    parser.add_argument("-j", "--jobs", type=_positive, default=os.cpu_count() or 1, metavar="N", help="probes at a time (default: one per CPU)")
    parser.add_argument("--timeout", type=_positive, default=300, metavar="S", help="CPU seconds one architecture may use (default: 300; most use 10 to 30)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, metavar="DIR", help=f"the record of each architecture (default: {DEFAULT_RESULTS})")
    parser.add_argument("--fresh", action="store_true", help="probe every architecture again, even those the results folder holds")
    parser.add_argument("--recorded", action="store_true", help="probe nothing: write the outputs from the records the results folder holds (an architecture without one is listed as not run)")
    parser.add_argument("--from", dest="source", type=Path, metavar="JSON", help="take the records from a JSON written by --json instead of running the probes (re-measures the check columns)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every record as one JSON list")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="write the table (docs/architectures.md)")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="write the outcomes as a PNG")
    parser.add_argument("-q", "--quiet", action="store_true", help="no line per architecture")
    return parser


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def selected(args: argparse.Namespace) -> list[Architecture]:
    known = {a.model_type: a for a in causal_lm_architectures()}
    names = list(args.architectures) + (list(SUBSET) if args.subset else [])
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"not a causal-LM architecture of transformers: {', '.join(unknown)}")
    return [known[n] for n in dict.fromkeys(names)] if names else list(known.values())


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.source is not None:
        try:
            records = json.loads(args.source.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"neuron-migrate sweep: error: {args.source}: {exc}", file=sys.stderr)
            return EXIT_ERROR
    else:
        try:
            architectures = selected(args)
        except ValueError as exc:
            print(f"neuron-migrate sweep: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        if args.recorded:
            records = runner.recorded(architectures, args.results, runner.versions())
        else:
            records = _probe(architectures, args)
            if records is None:
                return EXIT_INTERRUPTED
    lint.measure(records)
    _write(records, args)
    summary = report.summarise(records)
    print(f"{summary.headline()} ({time.perf_counter() - started:.0f} s)")
    return EXIT_OK if summary.both == summary.total else EXIT_FAILURES


def _probe(architectures: list[Architecture], args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """Every architecture's record, from the probes; None if interrupted."""
    try:
        return runner.run_probes(
            architectures,
            args.results,
            jobs=args.jobs,
            cpu_seconds=args.timeout,
            reuse=not args.fresh,
            versions=runner.versions(),
            report=lambda progress: None if args.quiet else _progress(progress),
        )
    except KeyboardInterrupt:
        print(f"interrupted: the records so far are in {args.results}; run again to resume", file=sys.stderr)
        return None


def _progress(progress: runner.Progress) -> None:
    record = progress.record
    outcomes = ", ".join(f"{stage} {report.outcome(record, stage)}" for stage in ("generate", "train"))
    reused = " (earlier result)" if progress.reused else f" ({record.get('seconds', 0):.0f} s)"
    print(f"[{progress.done}/{progress.total}] {record['architecture']}: {outcomes}{reused}", flush=True)


def _write(records: list[dict[str, Any]], args: argparse.Namespace) -> None:
    if args.json is not None:
        write_atomic(args.json, (json.dumps(records, indent=1) + "\n").encode())
    if args.plot is not None:
        report.plot(records, args.plot)
    if args.markdown is not None:
        picture = os.path.relpath(args.plot, args.markdown.parent) if args.plot else None
        write_atomic(args.markdown, report.markdown(records, picture).encode())
