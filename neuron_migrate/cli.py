"""The `neuron-migrate` command line.

Exit codes follow ruff: 0 nothing left to do, 1 changes pending or manual items remain,
2 usage or internal error (a file that could not be read or parsed counts, after every other
file has been processed).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate import __version__
from neuron_migrate import config as configuration
from neuron_migrate.codemods import CODEMODS
from neuron_migrate.codemods.base import TARGETS
from neuron_migrate.engine import Options, rewrite_source
from neuron_migrate.files import (
    SourceError,
    decode_source,
    discover,
    read_source,
    write_atomic,
    write_back,
)
from neuron_migrate.findings import FileResult
from neuron_migrate.notebook import rewrite_notebook
from neuron_migrate.report import as_json, as_markdown, manual_lines, summary, unified_diff
from neuron_migrate.rules import render_rule, rule_codes, rules_table

EXIT_OK, EXIT_PENDING, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True)
class Job:
    path: Path
    mode: str  # "write" | "diff" | "check" | "output"
    options: Options
    output: Path | None = None  # where the copy goes in --output-dir mode
    clear_outputs: bool = False  # notebooks: drop the outputs of the cells that changed


def _codes(value: str) -> tuple[str, ...]:
    codes = tuple(c.strip().upper() for c in value.split(",") if c.strip())
    known = rule_codes()
    for code in codes:
        if not any(k.startswith(code) for k in known):
            raise argparse.ArgumentTypeError(f"unknown rule code {code!r} (see `neuron-migrate rules`)")
    return codes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuron-migrate",
        description="Migrate AWS Trainium code from PyTorch/XLA to native PyTorch (TorchNeuron).",
    )
    parser.add_argument("--version", action="version", version=f"neuron-migrate {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    rewrite = commands.add_parser(
        "rewrite",
        help="migrate files in place (or show, check, or copy the result)",
        description="Migrate old-stack code to native PyTorch. Files are changed in place unless "
        "--diff, --check or --output-dir is given. Anything that cannot be migrated safely gets a "
        "`# TODO(neuron-migrate NMxxx): ...` comment at the spot and a line in the summary.",
        epilog="Exit status: 0 nothing left to do; 1 changes pending (--diff/--check) or manual "
        "items remain; 2 usage error, or a file could not be read, parsed or written.",
    )
    rewrite.add_argument("paths", nargs="+", metavar="PATH", help="files or folders ('-' reads stdin, writes stdout)")
    mode = rewrite.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print unified diffs, change nothing")
    mode.add_argument("--check", action="store_true", help="list files that would change, change nothing")
    mode.add_argument("--output-dir", type=Path, metavar="DIR", help="write migrated copies under DIR, keep the originals")
    rewrite.add_argument(
        "--target",
        choices=sorted(TARGETS),
        default=None,
        help="portable (default): code that runs on Trainium, CUDA and CPU alike; "
        "neuron: the explicit 'neuron' device and backend spellings",
    )
    rewrite.add_argument("--select", type=_codes, default=None, metavar="CODES", help="only these rule codes or prefixes (comma-separated); overrides `select` in pyproject.toml")
    rewrite.add_argument("--ignore", type=_codes, default=(), metavar="CODES", help="skip these rule codes or prefixes (comma-separated), on top of `ignore` in pyproject.toml")
    rewrite.add_argument("--config", type=Path, metavar="PYPROJECT", help="use this pyproject.toml's [tool.neuron-migrate] for every file (default: the nearest one above each file)")
    rewrite.add_argument("--report", type=Path, metavar="FILE", help="write a migration report (.md or .json)")
    rewrite.add_argument(
        "--clear-outputs",
        action="store_true",
        help="notebooks: clear the outputs of the cells that changed (they came from the old code); default: keep them",
    )
    rewrite.add_argument("-j", "--jobs", type=int, default=0, metavar="N", help="worker processes (default: one per CPU)")
    rewrite.add_argument("-q", "--quiet", action="store_true", help="print only errors and the manual items")

    from neuron_migrate.checks import command as check_command

    check_command.add_parser(commands)

    from neuron_migrate.validate import command as validate_command

    validate_command.add_parsers(commands)

    rules = commands.add_parser("rules", help="show the documentation of a rule, or list them all")
    rules.add_argument("code", nargs="?", help="a rule code such as NM003")
    return parser


def process(job: Job) -> FileResult:
    """Read, migrate and (depending on the mode) write one file. Runs in a worker process."""
    try:
        source = read_source(job.path)
    except SourceError as exc:
        return FileResult(path=str(job.path), error=str(exc))
    if job.path.suffix == ".ipynb":
        notebook = rewrite_notebook(source.text, str(job.path), job.options, job.clear_outputs)
        result = notebook.result
        result.cells = notebook.cells
    else:
        result = rewrite_source(source.text, str(job.path), job.options)
    if result.error:
        return result
    try:
        if job.mode == "write" and result.changed:
            write_back(source, result.migrated)
            result.written = True
        elif job.mode == "output" and job.output is not None:
            write_atomic(job.output, source.encode(result.migrated), source.mode)
            result.written = True
    except (SourceError, OSError, UnicodeEncodeError) as exc:
        result.error = str(exc) if isinstance(exc, SourceError) else f"{job.path}: cannot write: {exc}"
    return result


def _output_path(path: Path, root: Path | None, output_dir: Path) -> Path:
    if root is None:
        return output_dir / path.name
    return output_dir / path.relative_to(root)


def _rewrite_stdin(options: Options) -> int:
    data = sys.stdin.buffer.read()
    try:
        text, encoding, bom = decode_source(data, "<stdin>")
    except SourceError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    result = rewrite_source(text, "<stdin>", options)
    if result.error:
        print(result.error, file=sys.stderr)
        sys.stdout.buffer.write(data)
        return EXIT_ERROR
    sys.stdout.buffer.write((b"\xef\xbb\xbf" if bom else b"") + result.migrated.encode(encoding))
    for line in manual_lines(result):
        print(line, file=sys.stderr)
    return EXIT_PENDING if result.manual else EXIT_OK


def run_rewrite(args: argparse.Namespace) -> int:
    try:
        configs = configuration.Configs(configuration.load(args.config) if args.config else None)
        if args.paths == ["-"]:
            return _rewrite_stdin(_options(args, configs.for_path(Path.cwd()), None))
        if "-" in args.paths:
            print("neuron-migrate: '-' (stdin) cannot be combined with other paths", file=sys.stderr)
            return EXIT_ERROR
        mode = "diff" if args.diff else "check" if args.check else "output" if args.output_dir else "write"
        jobs: list[Job] = []
        missing = []
        for given in map(Path, args.paths):
            if not given.exists():
                missing.append(f"{given}: no such file or directory")
                continue
            root = given if given.is_dir() else None
            for path in discover([given], (".py", ".ipynb")):
                config = configs.for_path(path)
                if path != given and config.excluded(path):
                    continue
                output = _output_path(path, root, args.output_dir) if args.output_dir else None
                jobs.append(Job(path, mode, _options(args, config, path), output, args.clear_outputs))
    except configuration.ConfigError as exc:
        print(f"neuron-migrate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    results = _run_jobs(jobs, args.jobs)
    for message in missing:
        results.append(FileResult(path=message.split(":")[0], error=message))
    return _finish(results, args, mode)


def _options(args: argparse.Namespace, config: configuration.Config, path: Path | None) -> Options:
    """Command line first, then the nearest pyproject.toml, then the defaults."""
    rewrite_codes = [code for code in rule_codes() if code.startswith("NM0")]
    select = args.select if args.select is not None else (config.select_for(rewrite_codes) or ())
    ignores = config.ignores_for(path) if path is not None else config.ignore
    return Options(
        target=TARGETS[args.target or config.target or "portable"],
        select=tuple(select),
        ignore=(*args.ignore, *ignores),
    )


def _run_jobs(jobs: Sequence[Job], workers: int) -> list[FileResult]:
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(jobs) < 8:
        return [process(job) for job in jobs]
    # Order-preserving, so output and reports do not depend on the number of workers.
    results: list[FileResult | None] = [None] * len(jobs)
    retry: list[int] = []
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        futures = [pool.submit(process, job) for job in jobs]
        for i, (job, future) in enumerate(zip(jobs, futures, strict=True)):
            try:
                results[i] = future.result()
            except BrokenProcessPool:
                retry.append(i)  # a worker died: find out which file killed it, one at a time
            except Exception as exc:
                results[i] = FileResult(path=str(job.path), error=f"{job.path}:1:1: internal error: {exc!r}")
    for i in retry:
        with ProcessPoolExecutor(max_workers=1) as solo:
            try:
                results[i] = solo.submit(process, jobs[i]).result()
            except Exception as exc:
                path = jobs[i].path
                results[i] = FileResult(path=str(path), error=f"{path}:1:1: internal error: the worker died ({exc!r})")
    return [r for r in results if r is not None]


def _finish(results: list[FileResult], args: argparse.Namespace, mode: str) -> int:
    out, err = sys.stdout, sys.stderr
    for result in results:
        if result.error:
            print(result.error, file=err)
            continue
        if mode == "diff" and result.changed:
            out.write(unified_diff(result))
        elif mode == "check" and result.changed:
            print(f"Would migrate {result.path}", file=out)
        elif not args.quiet and result.changed:
            verb = "Migrated" if mode in ("write", "output") else "Would migrate"
            print(f"{verb} {result.path} ({len(result.changes)} changes)", file=err)
        for line in manual_lines(result):
            print(line, file=err)
    if not args.quiet:
        for result in results:
            for note in result.notes:
                print(f"note: {result.path}: {note.code} {note.message}", file=err)
        print(summary(results, applied=mode in ("write", "output")), file=err)
    if args.report:
        target = args.target or "portable"
        text = as_json(results, target) if args.report.suffix == ".json" else as_markdown(results, target)
        write_atomic(args.report, text.encode("utf-8"))
    if any(r.error for r in results):
        return EXIT_ERROR
    pending = mode in ("diff", "check") and any(r.changed for r in results)
    if pending or any(r.manual for r in results):
        return EXIT_PENDING
    return EXIT_OK


def run_rules(args: argparse.Namespace) -> int:
    if args.code is None:
        print(rules_table())
        return EXIT_OK
    text = render_rule(args.code.upper())
    if text is None:
        print(f"neuron-migrate: unknown rule code {args.code!r} (see `neuron-migrate rules`)", file=sys.stderr)
        return EXIT_ERROR
    print(text)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_ERROR
    if args.command == "rewrite":
        return run_rewrite(args)
    if args.command == "rules":
        return run_rules(args)
    if args.command in ("validate", "env"):
        from neuron_migrate.validate import command as validate_command

        return validate_command.run(args)
    if args.command == "check":
        from neuron_migrate.checks import command as check_command

        return check_command.run(args)
    parser.print_help()
    return EXIT_ERROR


__all__ = ["CODEMODS", "main"]
