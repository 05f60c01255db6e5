"""The `neuron-migrate` command line: builds the parser from each tool's own and dispatches.

Each tool is imported only when it runs, so `check` never loads the rewrite engine (LibCST).

Exit codes follow ruff in every subcommand: 0 nothing left to do, 1 findings, changes or manual
items remain, 2 usage or internal error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from neuron_migrate import __version__
from neuron_migrate.rewrite import command as rewrite_command

EXIT_ERROR = 2


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
