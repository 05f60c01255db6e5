"""The `neuron-migrate` command line: builds the parser from each tool's own and dispatches.

Each tool is imported only when it runs, so `check` never loads the rewrite engine (LibCST).

Exit codes follow ruff in every subcommand: 0 nothing left to do, 1 findings, changes or manual
items remain, 2 usage or internal error. Output cut short by its reader (`| head`) ends the
command quietly with 141, as SIGPIPE ends `cat` or `git`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from neuron_migrate import __version__
from neuron_migrate.rewrite import command as rewrite_command

EXIT_ERROR = 2
EXIT_BROKEN_PIPE = 128 + 13  # what the shell reports for a process that SIGPIPE ended


def build_parser() -> argparse.ArgumentParser:
    from neuron_migrate.checks import command as check_command
    from neuron_migrate.sweep import command as sweep_command
    from neuron_migrate.validate import command as validate_command

    parser = argparse.ArgumentParser(
        prog="neuron-migrate",
        description="Migrate AWS Trainium code from PyTorch/XLA to native PyTorch (TorchNeuron).",
    )
    parser.add_argument("--version", action="version", version=f"neuron-migrate {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    rewrite_command.add_parser(commands)
    check_command.add_parser(commands)
    validate_command.add_parsers(commands)
    sweep_command.add_parser(commands)
    rules = commands.add_parser("rules", help="show the documentation of a rule, or list them all")
    rules.add_argument("code", nargs="?", help="a rule code such as NM003")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _dispatch(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe prints a traceback
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null: whatever is still buffered must not fail again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(AttributeError, OSError):  # a stdout that is no file (a test's capture)
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_ERROR
    if args.command == "rewrite":
        return rewrite_command.run(args)
    if args.command == "rules":
        from neuron_migrate import catalog

        return catalog.run(args)
    if args.command in ("validate", "env"):
        from neuron_migrate.validate import command as validate_command

        return validate_command.run(args)
    if args.command == "check":
        from neuron_migrate.checks import command as check_command

        return check_command.run(args)
    if args.command == "sweep":
        from neuron_migrate.sweep import command as sweep_command

        return sweep_command.run(args)
    parser.print_help()
    return EXIT_ERROR
