"""The `neuron-migrate rewrite` subcommand: find files, migrate them in parallel, write, report.

Exit codes follow ruff: 0 nothing left to do, 1 changes pending or manual items remain,
2 usage or internal error (a file that could not be read or parsed counts, after every other
file has been processed).

The engine (and with it LibCST and every codemod) is imported when a rewrite runs, not when
the command line is built: `neuron-migrate check` and `rules` start without it.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuron_migrate.core import config as configuration
from neuron_migrate.core import selection
from neuron_migrate.core.files import (
    SourceError,
    decode_source,
    discover,
    read_source,
    write_atomic,
    write_back,
)
from neuron_migrate.core.jobs import run_jobs
from neuron_migrate.core.notebook_file import is_notebook
from neuron_migrate.core.wording import plural
from neuron_migrate.rewrite.report import as_json, as_markdown, manual_lines, summary, unified_diff
from neuron_migrate.rewrite.results import Change, FileResult

if TYPE_CHECKING:
    from neuron_migrate.rewrite.engine import Options

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
    from neuron_migrate.catalog import rule_codes

    unknown = selection.unknown(codes, rule_codes())
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown rule code {unknown[0]!r} (see `neuron-migrate rules`)")
    return codes


def _module_name(value: str) -> str:
    if not value.isidentifier():
        raise argparse.ArgumentTypeError(f"{value!r} is not a Python module name")
    return value


def add_parser(commands: Any) -> argparse.ArgumentParser:
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
        choices=sorted(configuration.TARGETS),
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
    rewrite.add_argument(
        "--helpers-module",
        type=_module_name,
        metavar="NAME",
        help="put the helper functions and classes the migration writes into NAME.py in each folder, "
        "once, and import them there, instead of a copy in every script",
    )
    rewrite.add_argument(
        "--target-python",
        metavar="PATH",
        help="check each migrated file's imports and calls against the libraries of this interpreter "
        "(default: the one running neuron-migrate); `--ignore NM091` skips the check",
    )
    rewrite.add_argument(
        "--stdin-filename",
        metavar="PATH",
        help="the name of the file read from stdin ('-'): its configuration applies, and `.ipynb` "
        "migrates it as a notebook (default: notebook JSON is recognised as such)",
    )
    rewrite.add_argument("-j", "--jobs", type=int, default=0, metavar="N", help="worker processes (default: one per CPU)")
    rewrite.add_argument("-q", "--quiet", action="store_true", help="print only errors and the manual items")

    return rewrite


def process(job: Job) -> FileResult:
    """Read, migrate and (depending on the mode) write one file. Runs in a worker process."""
    from neuron_migrate.rewrite.engine import rewrite_source
    from neuron_migrate.rewrite.notebook import rewrite_notebook

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


def _rewrite_stdin(args: argparse.Namespace, configs: configuration.Configs) -> int:
    """Migrate stdin to stdout: a notebook as a notebook, named by `--stdin-filename` or
    recognised by its JSON, anything else as Python."""
    from neuron_migrate.rewrite.engine import rewrite_source
    from neuron_migrate.rewrite.notebook import rewrite_notebook

    path = Path(args.stdin_filename) if args.stdin_filename else None
    name = args.stdin_filename or "<stdin>"
    options = _options(args, configs.for_path(path or Path.cwd()), path)
    data = sys.stdin.buffer.read()
    try:
        text, encoding, bom = decode_source(data, name)
    except SourceError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    if path.suffix == ".ipynb" if path is not None else is_notebook(text):
        result = rewrite_notebook(text, name, options, args.clear_outputs).result
    else:
        result = rewrite_source(text, name, options)
    if result.error:
        print(result.error, file=sys.stderr)
        sys.stdout.buffer.write(data)
        return EXIT_ERROR
    sys.stdout.buffer.write((b"\xef\xbb\xbf" if bom else b"") + result.migrated.encode(encoding))
    for line in manual_lines(result):
        print(line, file=sys.stderr)
    return EXIT_PENDING if result.manual else EXIT_OK


def run(args: argparse.Namespace) -> int:
    try:
        configs = configuration.Configs(configuration.load(args.config) if args.config else None)
        if args.paths == ["-"]:
            return _rewrite_stdin(args, configs)
        if "-" in args.paths:
            print("neuron-migrate: '-' (stdin) cannot be combined with other paths", file=sys.stderr)
            return EXIT_ERROR
        mode = "diff" if args.diff else "check" if args.check else "output" if args.output_dir else "write"
        jobs, missing = _jobs(args, configs, mode)
    except configuration.ConfigError as exc:
        print(f"neuron-migrate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    clash = _output_clash(jobs)
    if clash:
        print(f"neuron-migrate: {clash}", file=sys.stderr)
        return EXIT_ERROR
    jobs = _beside_old_stack(jobs)
    together = frozenset(str(job.path.resolve()) for job in jobs)
    jobs = [replace(job, options=replace(job.options, migrated_together=together)) for job in jobs]
    jobs, meshes = _nxd_programs(jobs)
    jobs = _groups_made_elsewhere(jobs)
    if args.helpers_module:
        results, modules = _sharing_helpers(jobs, args, mode)
    else:
        results, modules = run_jobs(process, jobs, args.jobs, _crashed), []
    modules += _write_modules(meshes, mode)
    for message in missing:
        results.append(FileResult(path=message.split(":")[0], error=message))
    return _finish([*results, *modules], args, mode)


def _sharing_helpers(jobs: list[Job], args: argparse.Namespace, mode: str) -> tuple[list[FileResult], list[FileResult]]:
    """Migrate with `--helpers-module`: a first pass finds the helpers of each folder, files whose
    helpers clash with another's keep their own, then the files are migrated for real and each
    folder's module is written (or diffed) like any other file."""
    from neuron_migrate.rewrite.shared_helpers import merge, module_text, read_module

    dry = [replace(job, mode="diff") for job in jobs]
    first = run_jobs(process, dry, args.jobs, _crashed)
    folders: dict[Path, list[int]] = {}
    for index, job in enumerate(jobs):
        folders.setdefault((job.output or job.path).parent, []).append(index)
    modules: list[FileResult] = []
    alone: set[int] = set()  # jobs that keep their helpers
    for folder, indexes in folders.items():
        path = folder / f"{args.helpers_module}.py"
        before = path.read_text(encoding="utf-8") if path.is_file() else ""
        existing = read_module(before) if before else {}
        if existing is None:
            modules.append(FileResult(path=str(path), error=f"{path}:1:1: exists and was not written by --helpers-module; choose another NAME"))
            alone.update(indexes)
            continue
        taken, clashing = merge(existing, [first[i].shared_helpers for i in indexes])
        alone.update(indexes[position] for position in clashing)
        if taken != existing:
            names = ", ".join(f"`{name}`" for name in taken)
            change = Change("NM012", f"the helpers the folder's scripts import: {names}")
            modules.append(FileResult(path=str(path), original=before, migrated=module_text(taken), changes=[change]))
    final = [replace(job, options=replace(job.options, helpers_module=None)) if i in alone else job for i, job in enumerate(jobs)]
    if mode in ("write", "output"):
        results = run_jobs(process, final, args.jobs, _crashed)
        modules = [m for m in modules if m.error or any(results[i].shared_helpers for i in folders[Path(m.path).parent])]
        for module in modules:
            if module.error:
                continue
            try:
                write_atomic(Path(module.path), module.migrated.encode("utf-8"))
                module.written = True
            except OSError as exc:
                module.error = f"{module.path}: cannot write: {exc}"
        return results, modules
    again = [i for i in alone if first[i].shared_helpers]
    rerun = run_jobs(process, [replace(final[i], mode="diff") for i in again], args.jobs, _crashed)
    results = list(first)
    for i, result in zip(again, rerun, strict=True):
        results[i] = result
    return results, modules


def _beside_old_stack(jobs: list[Job]) -> list[Job]:
    """The jobs, those in a folder with old-stack scripts told so: their transformers and TRL
    code moves to the new versions with their neighbours' (the upgrade family runs on them)."""
    from neuron_migrate.rewrite.engine import PREFILTER

    folders: set[Path] = set()
    for job in jobs:
        if job.path.parent in folders or job.path.suffix != ".py":
            continue
        try:
            text = read_source(job.path).text
        except SourceError:
            continue
        if PREFILTER.search(text):
            folders.add(job.path.parent)
    return [replace(job, options=replace(job.options, beside_old_stack=True)) if job.path.parent in folders else job for job in jobs]


def _nxd_programs(jobs: list[Job]) -> tuple[list[Job], list[FileResult]]:
    """neuronx-distributed programs of several files (a script and its model code): each file
    learns its part, and each program migrated gets its folder's mesh module (see `nxd_program`)."""
    from neuron_migrate.rewrite.codemods.nxd_program import MESH_MODULE, MESH_MODULE_TEXT, programs

    parts = programs([job.path for job in jobs if job.options.enabled("NM025")])
    if not parts:
        return jobs, []
    modules: dict[Path, FileResult] = {}
    updated = []
    for job in jobs:
        part = parts.get(job.path)
        if part is None:
            updated.append(job)
            continue
        folder = (job.output or job.path).parent
        path = folder / f"{MESH_MODULE}.py"
        before = path.read_text(encoding="utf-8") if path.is_file() else ""
        if before and before != MESH_MODULE_TEXT and part.blocked is None:
            part = replace(part, blocked=f"`{path.name}` is in the folder already and was not written by this tool")
        elif part.blocked is None and before != MESH_MODULE_TEXT:
            change = Change("NM025", "the device mesh the folder's tensor-parallel program shares")
            modules[folder] = FileResult(path=str(path), original=before, migrated=MESH_MODULE_TEXT, changes=[change])
        updated.append(replace(job, options=replace(job.options, mesh_program=part)))
    return updated, list(modules.values())


def _groups_made_elsewhere(jobs: list[Job]) -> list[Job]:
    """Each module that a script of the run imports and gives a process group learns that script."""
    from neuron_migrate.rewrite.group_makers import group_made_for

    makers = group_made_for([job.path for job in jobs])
    return [
        replace(job, options=replace(job.options, group_made_by=makers[job.path.resolve()]))
        if job.path.resolve() in makers
        else job
        for job in jobs
    ]


def _write_modules(modules: list[FileResult], mode: str) -> list[FileResult]:
    """Write (in write and output modes) the modules a migration adds beside the files."""
    if mode not in ("write", "output"):
        return modules
    for module in modules:
        try:
            write_atomic(Path(module.path), module.migrated.encode("utf-8"))
            module.written = True
        except OSError as exc:
            module.error = f"{module.path}: cannot write: {exc}"
    return modules


def _jobs(args: argparse.Namespace, configs: configuration.Configs, mode: str) -> tuple[list[Job], list[str]]:
    """One job per file under the given paths (config `exclude` applies inside folders), and the
    paths that do not exist."""
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
    return jobs, missing


def _output_clash(jobs: list[Job]) -> str | None:
    """Two inputs that would be written to the same place under --output-dir, or a copy that would
    replace an input (the folder itself, through a symlink or `..`): refuse, write nothing. Writing
    in place is what leaving out --output-dir is for."""
    inputs = {Path(os.path.realpath(job.path)): job.path for job in jobs}
    claimed: dict[Path, Path] = {}
    for job in jobs:
        if job.output is None:
            continue
        key = Path(os.path.realpath(job.output))
        if key in inputs:
            over = "the original itself" if inputs[key] == job.path else f"the input {inputs[key]}"
            return (
                f"--output-dir: the copy of {job.path} would be written to {job.output}, over {over}; "
                "give another folder, or leave out --output-dir to migrate in place"
            )
        if key in claimed and claimed[key] != job.path:
            return (
                f"--output-dir: {claimed[key]} and {job.path} would both be written to {job.output}; "
                "migrate them in separate runs or give their common folder"
            )
        claimed[key] = job.path
    return None


def _options(args: argparse.Namespace, config: configuration.Config, path: Path | None) -> Options:
    """Command line first, then the nearest pyproject.toml, then the defaults."""
    from neuron_migrate.catalog import rewrite_codes
    from neuron_migrate.rewrite.codemods.base import TARGETS
    from neuron_migrate.rewrite.engine import Options

    select = args.select if args.select is not None else (config.select_for(rewrite_codes()) or ())
    ignores = config.ignores_for(path) if path is not None else config.ignore
    return Options(
        target=TARGETS[args.target or config.target or "portable"],
        select=tuple(select),
        ignore=(*args.ignore, *ignores),
        helpers_module=getattr(args, "helpers_module", None),
        verify_in=getattr(args, "target_python", None) or sys.executable,
    )


def _crashed(job: Job, why: str) -> FileResult:
    return FileResult(path=str(job.path), error=f"{job.path}:1:1: internal error: {why}")


def _what_changed(result: FileResult) -> str:
    """"3 changes", or, for a file given only TODO comments, that its code is as it was."""
    if result.changes:
        return plural(len(result.changes), "change")
    return f"{plural(len(result.manual), 'TODO')} added, code unchanged" if result.manual else "comments only"


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
            print(f"{verb} {result.path} ({_what_changed(result)})", file=err)
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


