"""The `neuron-migrate check` subcommand: find files, check them in parallel, fix, report.

Exit codes follow ruff: 0 nothing found (or everything fixed), 1 findings remain (or, with
`--diff`, fixes are pending), 2 usage, configuration or internal error, or a file that could
not be read or parsed (after every other file has been checked). `--exit-zero` turns 1 into 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_migrate.checks import output, suppressions
from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import FileReport, Severity
from neuron_migrate.checks.notebooks import check_notebook, notebook_diff
from neuron_migrate.checks.rules import known_codes, resolve_selection, unknown_prefixes
from neuron_migrate.core import config as configuration
from neuron_migrate.core.files import SourceError, decode_source, discover, read_source, write_back
from neuron_migrate.core.jobs import run_jobs
from neuron_migrate.core.notebook_file import is_notebook
from neuron_migrate.core.source import file_diff

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
SUFFIXES = (".py", ".ipynb")


def _codes(value: str) -> tuple[str, ...]:
    codes = tuple(c.strip().upper() for c in value.split(",") if c.strip())
    unknown = unknown_prefixes(codes)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown rule code {unknown[0]!r} (see `neuron-migrate rules`)"
        )
    return codes


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "check",
        help="lint for static-shape hazards and unsupported ops (and fix the safe ones)",
        description="Point at the lines that will recompile, break graphs, sync the host or fail on "
        "Trainium's static-shape compiler. Findings print as `path:line:col: CODE severity: message`; "
        "`[*]` marks those `--fix` can fix. Settings come from [tool.neuron-migrate] in the "
        "nearest pyproject.toml above each file.",
        epilog="Exit status: 0 no findings (or all fixed); 1 findings remain, or --diff has fixes "
        "to show; 2 usage or configuration error, or a file could not be read or parsed.",
    )
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="files or folders (default: .); '-' reads stdin"
    )
    parser.add_argument(
        "--output-format",
        choices=output.FORMATS,
        default="text",
        help="how findings are printed (default: text)",
    )
    parser.add_argument(
        "--statistics",
        action="store_true",
        help="print the number of findings per rule and severity instead of each finding "
        "(as JSON with --output-format json)",
    )
    parser.add_argument(
        "--show-fixes", action="store_true", help="with --fix, list the fixes applied per file"
    )
    parser.add_argument(
        "--add-noqa",
        action="store_true",
        help="add `# noqa: CODE` to every line with a finding (merged into an existing `# noqa:`)",
    )
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    parser.add_argument("--fix", action="store_true", help="apply the safe fixes")
    parser.add_argument(
        "--unsafe-fixes",
        action="store_true",
        help="with --fix or --diff, apply the unsafe fixes too",
    )
    parser.add_argument(
        "--diff", action="store_true", help="print the fixes as unified diffs; change nothing"
    )
    parser.add_argument(
        "--select",
        type=_codes,
        default=None,
        metavar="CODES",
        help="only these rule codes or prefixes (comma-separated; ALL)",
    )
    parser.add_argument(
        "--extend-select",
        type=_codes,
        default=(),
        metavar="CODES",
        help="rule codes or prefixes to enable on top of the selection (comma-separated)",
    )
    parser.add_argument(
        "--ignore",
        type=_codes,
        default=(),
        metavar="CODES",
        help="skip these rule codes or prefixes (comma-separated)",
    )
    parser.add_argument(
        "--target",
        choices=configuration.TARGETS,
        default=None,
        help="portable (default) or neuron: the spellings fixes use",
    )
    parser.add_argument(
        "--min-severity",
        choices=configuration.SEVERITIES,
        default=None,
        help="the least severity shown (default: warning; info adds findings outside hot code)",
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="use this pyproject.toml for every file"
    )
    parser.add_argument("--isolated", action="store_true", help="ignore pyproject.toml files")
    parser.add_argument(
        "--force-exclude",
        action="store_true",
        help="apply `exclude` to files named on the command line too",
    )
    parser.add_argument(
        "--stdin-filename", metavar="PATH", help="the name of the file read from stdin ('-')"
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="worker processes (default: one per CPU)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    return parser


@dataclass(frozen=True)
class Job:
    path: Path
    options: CheckOptions
    mode: str  # "check" | "fix" | "diff" | "noqa"
    frames: bool = False  # `--output-format full`: render the code frame where the text is


def options_for(args: argparse.Namespace, config: configuration.Config, path: Path) -> CheckOptions:
    """The settings for one file: the configuration first, then the command line over it."""
    codes = resolve_selection(config.select_for(known_codes()), config.ignores_for(path))
    if args.select is not None or args.ignore:
        codes = resolve_selection(args.select, tuple(args.ignore), base=codes)
    extend = getattr(args, "extend_select", ())  # callers that build their own namespace
    if extend:
        codes = codes | resolve_selection(tuple(extend), tuple(args.ignore))
    severity = args.min_severity or config.min_severity or "warning"
    return CheckOptions(
        codes=codes,
        target=args.target or config.target or "portable",
        min_severity=Severity.parse(severity),
        fix=args.fix or args.diff,
        unsafe_fixes=args.unsafe_fixes,
    )


def process(job: Job) -> FileReport:
    """Read, check and (with --fix) write one file; runs in a worker process."""
    try:
        source = read_source(job.path)
    except SourceError as exc:
        return FileReport(path=str(job.path), error=str(exc))
    notebook = job.path.suffix == ".ipynb"
    check = check_notebook if notebook else check_source
    report = check(source.text, str(job.path), job.options)
    if job.mode == "noqa" and not notebook and report.error is None and report.diagnostics:
        text, report.noqa_added = suppressions.add_noqa(source.text, report.diagnostics)
        if report.noqa_added:
            try:
                write_back(source, text)
                report.written = True
            except SourceError as exc:
                report.error = str(exc)
    if job.mode == "fix" and report.changed and report.error is None:
        try:
            write_back(source, report.fixed or source.text)
            report.written = True
        except SourceError as exc:
            report.error = str(exc)
    if job.mode == "diff" and report.changed:
        diff = notebook_diff if notebook else file_diff
        report.diff = diff(str(job.path), source.text, report.fixed or "")
    if job.frames:
        final = report.fixed if report.fixed is not None else source.text
        if notebook:
            _notebook_frames(report, final)
        else:
            for d in report.diagnostics:
                d.frame = output.code_frame(final, d)
    report.original, report.fixed = "", None  # the text need not travel back from the worker
    return report


def _notebook_frames(report: FileReport, raw: str) -> None:
    """Code frames for notebook findings, from the source of the cell each one is in."""
    import json

    try:
        cells = json.loads(raw)["cells"]
    except (ValueError, KeyError, TypeError):
        return
    for d in report.diagnostics:
        if d.cell is not None and 0 < d.cell <= len(cells):
            source = cells[d.cell - 1].get("source", "")
            d.frame = output.code_frame("".join(source) if isinstance(source, list) else str(source), d)


def _crashed(job: Job, why: str) -> FileReport:
    return FileReport(path=str(job.path), error=f"{job.path}:1:1: internal error: {why}")


def _check_stdin(
    args: argparse.Namespace, configs: configuration.Configs
) -> tuple[list[FileReport], str | None]:
    name = args.stdin_filename or "-"
    data = sys.stdin.buffer.read()
    try:
        text, _, _ = decode_source(data, name)
    except SourceError as exc:
        return [FileReport(path=name, error=str(exc))], None
    path = Path(args.stdin_filename or "stdin.py")
    config = configs.for_path(path)
    notebook = path.suffix == ".ipynb" if args.stdin_filename else is_notebook(text)
    check = check_notebook if notebook else check_source
    report = check(text, name, options_for(args, config, path))
    if args.output_format == "full":
        final = report.fixed if report.fixed is not None else text
        if notebook:
            _notebook_frames(report, final)
        else:
            for d in report.diagnostics:
                d.frame = output.code_frame(final, d)
    fixed = None
    if args.fix and not args.diff:
        fixed = report.fixed if report.fixed is not None else text
    elif args.diff and report.changed:
        report.diff = (notebook_diff if notebook else file_diff)(name, text, report.fixed or "")
    return [report], fixed


def run(args: argparse.Namespace) -> int:
    fixing = args.fix and not args.diff
    mode = "diff" if args.diff else "fix" if args.fix else "noqa" if args.add_noqa else "check"
    if args.add_noqa and (args.fix or args.diff or args.paths == ["-"]):
        print("neuron-migrate: --add-noqa cannot be combined with --fix, --diff or stdin", file=sys.stderr)
        return EXIT_ERROR
    try:
        fixed_config = None
        if args.config is not None:
            fixed_config = configuration.load(args.config)
        elif args.isolated:
            fixed_config = configuration.Config()
        configs = configuration.Configs(fixed_config)
        _validate(configs, args.paths or ["."])
    except configuration.ConfigError as exc:
        print(f"neuron-migrate: {exc}", file=sys.stderr)
        return EXIT_ERROR

    stdin_fixed = None
    problems: list[str] = []
    if args.paths == ["-"]:
        try:
            reports, stdin_fixed = _check_stdin(args, configs)
        except configuration.ConfigError as exc:
            print(f"neuron-migrate: {exc}", file=sys.stderr)
            return EXIT_ERROR
    elif "-" in args.paths:
        print("neuron-migrate: '-' (stdin) cannot be combined with other paths", file=sys.stderr)
        return EXIT_ERROR
    else:
        jobs: list[Job] = []
        try:
            for given in map(Path, args.paths or ["."]):
                if not given.exists():
                    problems.append(f"{given}: no such file or directory")
                    continue
                for path in discover([given], SUFFIXES):
                    config = configs.for_path(path)
                    explicit = path == given
                    if config.excluded(path) and (not explicit or args.force_exclude):
                        continue
                    jobs.append(
                        Job(path, options_for(args, config, path), mode, args.output_format == "full")
                    )
        except configuration.ConfigError as exc:
            print(f"neuron-migrate: {exc}", file=sys.stderr)
            return EXIT_ERROR
        reports = run_jobs(process, jobs, args.jobs, _crashed)

    _print(reports, args, stdin_fixed)
    for problem in problems:
        print(f"neuron-migrate: {problem}", file=sys.stderr)
    if args.show_fixes and fixing:
        print(output.fixes_applied(reports), end="", file=sys.stderr)
    noqa_added = sum(r.noqa_added for r in reports) if args.add_noqa else None
    if not args.quiet and args.paths != ["-"]:
        print(
            output.summary(reports, fixing=fixing, diff=args.diff, noqa_added=noqa_added),
            end="",
            file=sys.stderr,
        )
    if args.add_noqa:
        return EXIT_ERROR if problems or any(r.error for r in reports) else EXIT_OK
    if problems or any(r.error for r in reports):
        return EXIT_ERROR
    if args.exit_zero:
        return EXIT_OK
    if args.diff:
        return EXIT_FINDINGS if any(r.changed for r in reports) else EXIT_OK
    return EXIT_FINDINGS if any(r.diagnostics for r in reports) else EXIT_OK


def _validate(configs: configuration.Configs, paths: list[str]) -> None:
    """Load the configuration of each path named, so that a broken one stops the run early."""
    for given in paths:
        if given != "-" and os.path.exists(given):
            config = configs.for_path(Path(given))
            for codes in (
                config.select or (),
                config.ignore,
                *(c for _, c in config.per_file_ignores),
            ):
                unknown = unknown_prefixes(tuple(codes))
                if unknown:
                    raise configuration.ConfigError(
                        f"{config.source}: [tool.neuron-migrate]: unknown rule code {unknown[0]!r}"
                    )


def _print(reports: list[FileReport], args: argparse.Namespace, stdin_fixed: str | None) -> None:
    out = sys.stdout
    for report in reports:
        if report.error:
            print(report.error, file=sys.stderr)
    if args.diff:
        for report in reports:
            if report.diff:
                out.write(report.diff)
        return
    if stdin_fixed is not None:
        out.write(stdin_fixed)
        for report in reports:
            for d in report.diagnostics:
                print(output.text_line(report.path, d), file=sys.stderr)
        return
    if args.add_noqa:
        return
    if args.statistics:
        out.write(output.statistics(reports, args.output_format))
    elif args.output_format == "full":
        out.write(output.as_full(reports))
    elif args.output_format == "json":
        out.write(output.as_json(reports))
    elif args.output_format == "sarif":
        enabled: set[str] = set()
        for report in reports:
            enabled.update(d.code for d in report.diagnostics)
        out.write(output.as_sarif(reports, sorted(enabled | _selected(args))))
    elif args.output_format == "github":
        out.write(output.as_github(reports))
    else:
        out.write(output.as_text(reports))


def _selected(args: argparse.Namespace) -> set[str]:
    selected = set(resolve_selection(args.select, tuple(args.ignore)))
    if args.extend_select:
        selected |= resolve_selection(tuple(args.extend_select), tuple(args.ignore))
    return selected
