"""The IPython magics: `%%neuron_migrate` migrates a cell, `%neuron_migrate_check` checks the
notebook, and `%%trainium` runs a cell only where a Trainium device is present."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from neuron_migrate.jupyter import render
from neuron_migrate.jupyter.migration import VIEWS, migrate_cell
from neuron_migrate.rewrite.codemods.base import TARGETS

SEVERITIES = ("info", "warning", "error")


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from neuron_migrate.checks.rules import unknown_prefixes

    codes = tuple(c.strip().upper() for c in value.split(",") if c.strip())
    unknown = unknown_prefixes(codes)
    if unknown:
        raise UsageError(f"unknown rule code {unknown[0]!r} (see `neuron-migrate rules`)")
    return codes


def current_notebook(user_ns: dict[str, Any]) -> Path | None:
    """The file of the notebook this kernel serves, when the frontend says (JupyterLab and
    Notebook 7 through `__session__`, VS Code through `__vsc_ipynb_file__`)."""
    for value in (
        user_ns.get("__vsc_ipynb_file__"),
        user_ns.get("__session__"),
        os.environ.get("JPY_SESSION_NAME"),
    ):
        if isinstance(value, str) and value.endswith(".ipynb") and Path(value).is_file():
            return Path(value)
    return None


def neuron_device() -> str | None:
    """The name of the Neuron accelerator this process can use, if any."""
    import torch

    accelerator = torch.accelerator.current_accelerator(check_available=True)
    return str(accelerator) if accelerator is not None and accelerator.type == "neuron" else None


class CellFailed(Exception):
    """Code run by a magic raised; its traceback was shown already, so this one shows one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class SkippedCell:
    """What a `%%trainium` cell shows where it does not run."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Skipped: {self.reason}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        return f'<div class="nm-skipped">{render.badge("skipped", "warn")} {render.escape(self.reason)}</div>'


@magics_class
class NeuronMigrateMagics(Magics):
    @magic_arguments()
    @argument(
        "--target",
        choices=sorted(TARGETS),
        default="portable",
        help="portable (default): code that runs on Trainium, CUDA and CPU alike; "
        "neuron: the explicit 'neuron' device and backend spellings",
    )
    @argument("--run", action="store_true", help="run the migrated cell after showing it")
    @argument(
        "--view",
        choices=VIEWS,
        default="side",
        help="side (default): original and migrated side by side; unified: one unified diff",
    )
    @cell_magic("neuron_migrate")  # type: ignore[arg-type]
    def neuron_migrate(self, line: str, cell: str) -> None:
        """Migrate this cell's old-stack code (PyTorch/XLA, optimum-neuron, torch_neuronx) to native
        PyTorch and show the result next to the original, with what changed and what is left to do.

        The cell itself is not run: its code needs the old stack. With --run, the migrated code
        runs in its place, in this kernel.
        """
        args = parse_argstring(self.neuron_migrate, line)
        migration = migrate_cell(cell, args.target, f"In [{self._cell_number()}]")
        migration.view = args.view
        display(migration)
        if args.run:
            if migration.error:
                raise UsageError(f"not run: the cell could not be migrated ({migration.error})")
            self._run(migration.migrated, "the migrated cell")

    @magic_arguments()
    @argument(
        "path",
        nargs="?",
        help="the notebook to check (default: this notebook when the frontend names it, "
        "else the cells run in this session)",
    )
    @argument(
        "--select", metavar="CODES", help="only these rule codes or prefixes (comma-separated)"
    )
    @argument(
        "--ignore", metavar="CODES", help="skip these rule codes or prefixes (comma-separated)"
    )
    @argument(
        "--min-severity",
        choices=SEVERITIES,
        help="the least severity shown (default: warning; info adds findings outside hot code)",
    )
    @argument("--target", choices=sorted(TARGETS), help="portable (default) or neuron")
    @line_magic("neuron_migrate_check")  # type: ignore[arg-type]
    def neuron_migrate_check(self, line: str) -> Any:
        """Check this notebook for static-shape hazards, as `neuron-migrate check` checks a file.

        Finds what recompiles, breaks graphs, syncs the host or fails on Trainium's static-shape
        compiler; findings read `cell N:line:col: CODE message`. The notebook is read as last
        saved; where the frontend does not say which notebook this is, the cells run in this
        session are checked instead (`In [N]:line:col`).
        """
        from neuron_migrate.jupyter.check import Cell, check_cells, check_notebook

        args = parse_argstring(self.neuron_migrate_check, line)
        flags = {
            "select": _codes(args.select),
            "ignore": _codes(args.ignore) or (),
            "min_severity": args.min_severity,
            "target": args.target,
        }
        path = Path(args.path) if args.path else current_notebook(self._shell.user_ns)
        if path is not None:
            if not path.is_file():
                raise UsageError(f"{path}: no such notebook")
            try:
                return check_notebook(path, **flags)
            except ValueError as exc:  # not JSON
                raise UsageError(f"{path}: not a notebook ({exc})") from None
        history = self._shell.history_manager.input_hist_raw
        current = self._cell_number()
        cells = [
            Cell(f"In [{number}]", source)
            for number, source in enumerate(history)
            if number
            and number != current
            and not source.lstrip().startswith("%neuron_migrate_check")
        ]
        return check_cells(cells, **flags)

    @magic_arguments()
    @argument(
        "device",
        nargs="?",
        default="auto",
        help="the device the notebook is meant to run on, e.g. its papermill parameter: "
        "auto (default) or neuron run the cell where a Neuron device is present; "
        "anything else (cpu) skips it",
    )
    @cell_magic("trainium")  # type: ignore[arg-type]
    def trainium(self, line: str, cell: str) -> Any:
        """Run this cell only on a machine with a Trainium (Neuron) device; elsewhere show that it
        was skipped, so that a notebook runs top to bottom on a CPU machine too."""
        args = parse_argstring(self.trainium, line)
        if args.device not in ("auto", "neuron"):
            return SkippedCell(
                f"this cell needs a Trainium (Neuron) device, and this run is on {args.device!r}."
            )
        device = neuron_device()
        if device is None:
            return SkippedCell(
                "this cell needs a Trainium (Neuron) device, and this machine has none. "
                "On a trn1/trn2 instance with TorchNeuron it runs as written."
            )
        self._run(cell, f"this cell (on {device})")
        return None

    @property
    def _shell(self) -> Any:
        assert self.shell is not None, "the magics are registered with a shell"
        return self.shell

    def _cell_number(self) -> int:
        # IPython counts the cell being run before running it.
        return max(self._shell.execution_count - 1, 1)

    def _run(self, code: str, what: str) -> None:
        """Run code as a cell of its own; if it raises, fail this cell too (after the code's own
        traceback), so that "Run All" and notebook runners stop here as for any failing cell."""
        result = self._shell.run_cell(code, store_history=False)
        if not result.success:
            error = result.error_in_exec or result.error_before_exec
            raise CellFailed(f"{what} raised {type(error).__name__}: {error}")


def register(ipython: Any) -> None:
    ipython.register_magics(NeuronMigrateMagics)


def unregister(ipython: Any) -> None:
    registered = ipython.magics_manager.magics
    for kind, name in (
        ("cell", "neuron_migrate"),
        ("line", "neuron_migrate_check"),
        ("cell", "trainium"),
    ):
        magic = registered[kind].get(name)
        if magic is not None and isinstance(getattr(magic, "__self__", None), NeuronMigrateMagics):
            del registered[kind][name]
