"""The IPython magics: `%%neuron_migrate` migrates a cell, `%neuron_migrate_check` checks the
notebook, and `%%trainium` runs a cell only where a Trainium device is present."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import bridge, render, session
from neuron_migrate.jupyter.migration import MAGIC, VIEWS, migrate_cell
from neuron_migrate.rewrite.codemods.base import TARGETS

SEVERITIES = ("info", "warning", "error")
CHECK_MAGIC = "neuron_migrate_check"


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from neuron_migrate.checks.rules import unknown_prefixes

    codes = tuple(c.strip().upper() for c in value.split(",") if c.strip())
    unknown = unknown_prefixes(codes)
    if unknown:
        raise UsageError(f"unknown rule code {unknown[0]!r} (see `neuron-migrate rules`)")
    return codes


def usage(magic: Any) -> str:
    """What `--help` prints: the usage line, the description and the options."""
    return str(magic.parser.format_help()).replace("::\n\n  ", "usage: ", 1).rstrip()


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
        return render.output(
            f'<div class="nm-skipped">{render.badge("skipped", "warn")} {render.escape(self.reason)}</div>'
        )


@magics_class
class NeuronMigrateMagics(Magics):
    @magic_arguments(name=f"%{MAGIC}")
    @argument("-h", "--help", action="store_true", help="show this help; migrate nothing")
    @argument(
        "--target",
        choices=sorted(TARGETS),
        default="portable",
        help="portable (default): code that runs on Trainium, CUDA and CPU alike; "
        "neuron: the explicit 'neuron' device and backend spellings",
    )
    @argument("--run", action="store_true", help="run the migrated cell after showing it")
    @argument(
        "--replace",
        action="store_true",
        help="replace this cell with the migrated code (the frontend puts it in the cell)",
    )
    @argument("--insert", action="store_true", help="insert the migrated code as a new cell below")
    @argument(
        "--view",
        choices=VIEWS,
        default="auto",
        help="auto (default): side by side, one column where the output is narrow; "
        "side: always side by side; unified: one unified diff",
    )
    @cell_magic(MAGIC)  # type: ignore[arg-type]
    def neuron_migrate(self, line: str, cell: str) -> None:
        """Migrate this cell's old-stack code (PyTorch/XLA, optimum-neuron, torch_neuronx) to native
        PyTorch and show the result next to the original, with what changed and what is left to do.

        The cell is migrated as part of its notebook: imports and names from the cells before it
        count (the notebook as saved, where it holds this cell; else the cells this kernel ran),
        and what the migration adds for it elsewhere (an import, a helper) comes into the cell.
        The cell itself is not run: its code needs the old stack. With --run, the migrated code
        runs in its place, in this kernel; with --replace or --insert it goes into the notebook.
        """
        args = parse_argstring(self.neuron_migrate, line)
        if args.help:
            print(usage(self.neuron_migrate))
            return
        if args.replace and args.insert:
            raise UsageError("--replace and --insert: choose one")
        number = self._cell_number()
        user_ns = self._shell.user_ns
        migration = migrate_cell(
            cell, args.target, f"In [{number}]", self._context(number), user_ns.__contains__
        )
        migration.view = args.view
        display(migration)
        if (args.run or args.replace or args.insert) and migration.error:
            raise UsageError(f"the cell could not be migrated ({migration.error})")
        if args.replace or args.insert:
            self._shell.set_next_input(migration.migrated, replace=args.replace)
        if args.run:
            self._run(migration.migrated, "the migrated cell")

    def _context(self, number: int) -> list[session.Cell]:
        """The cells before this one: in the saved notebook when it holds this cell as it is,
        else the cells this kernel ran before it."""
        located = session.notebook_path(self._shell.user_ns)
        history = self._shell.history_manager.input_hist_raw
        this = history[number] if number < len(history) else None
        if located is not None and this is not None:
            from neuron_migrate.jupyter.check import notebook_cells

            try:
                cells = notebook_cells(located.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                cells = []
            sources = [c.source for c in cells]
            if this in sources:
                return cells[: sources.index(this)]
        return session.ran_cells(self._shell, before=number)

    @magic_arguments(name=CHECK_MAGIC)
    @argument("-h", "--help", action="store_true", help="show this help; check nothing")
    @argument(
        "path",
        nargs="?",
        help="the notebook to check, as saved (default: this notebook, as this kernel ran it)",
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
    @line_magic(CHECK_MAGIC)  # type: ignore[arg-type]
    def neuron_migrate_check(self, line: str) -> Any:
        """Check this notebook for static-shape hazards, as `neuron-migrate check` checks a file.

        Finds what recompiles, breaks graphs, syncs the host or fails on Trainium's static-shape
        compiler; findings read `cell N:line:col: CODE message`. Without PATH, this notebook is
        checked as saved when the saved file holds every cell this kernel ran; otherwise the
        cells as the kernel ran them (`In [N]:line:col`) are checked, and the report says why.
        """
        from neuron_migrate.jupyter.check import check_cells, check_notebook, notebook_cells

        args = parse_argstring(self.neuron_migrate_check, line)
        if args.help:
            print(usage(self.neuron_migrate_check))
            return None
        flags = {
            "select": _codes(args.select),
            "ignore": _codes(args.ignore) or (),
            "min_severity": args.min_severity,
            "target": args.target,
        }
        if args.path:
            path = Path(args.path)
            if not path.is_file():
                raise UsageError(f"{path}: no such notebook")
            try:
                return check_notebook(path, **flags)
            except ValueError as exc:  # not JSON
                raise UsageError(f"{path}: not a notebook ({exc})") from None
        ran = [
            cell
            for cell in session.ran_cells(self._shell, before=self._cell_number())
            if not cell.source.lstrip().startswith(f"%{CHECK_MAGIC}")
        ]
        located = session.notebook_path(self._shell.user_ns)
        if located is None:
            report = check_cells(ran, **flags)
            report.notice = (
                "the frontend does not say which notebook this is, so the cells this kernel "
                "ran are checked (name the file to check it as saved)"
            )
            return report
        try:
            saved = notebook_cells(located.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{located.path}: not a notebook ({exc})") from None
        sources = {cell.source for cell in saved}
        unsaved = [cell.label for cell in ran if cell.source not in sources]
        if unsaved:
            report = check_cells(ran, str(located.path), **flags)  # its pyproject.toml applies
            report.source = ""  # the cells, not the file
            report.notice = (
                f"{located.path} has unsaved changes ({_few(unsaved)} ran code the saved file "
                "does not hold), so the cells as this kernel ran them are checked; save the "
                "notebook to check it as a whole"
            )
            return report
        report = check_notebook(located.path, **flags)
        tab = bridge.current()
        if tab is not None and tab.dirty:
            report.notice = (
                "the open tab has unsaved changes, which this check of the saved file does not see"
            )
        return report

    @magic_arguments(name="%trainium")
    @argument("-h", "--help", action="store_true", help="show this help; run nothing")
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
        if args.help:
            print(usage(self.trainium))
            return None
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


def _few(labels: list[str]) -> str:
    """The last three of `labels` (the ones a user ran most recently), and how many more."""
    shown = ", ".join(labels[-3:])
    return shown + (f" and {plural(len(labels) - 3, 'earlier cell')}" if len(labels) > 3 else "")


LOADED = (
    "neuron-migrate: %%neuron_migrate migrates a cell, %neuron_migrate_check checks this "
    "notebook, %%trainium runs a cell only on Trainium (--help on each)"
)


def register(ipython: Any) -> None:
    ipython.register_magics(NeuronMigrateMagics)
    bridge.start()
    print(LOADED)
    if bridge.extension_missing(ipython):
        print(f"neuron-migrate: {bridge.EXTENSION_MISSING}")


def unregister(ipython: Any) -> None:
    registered = ipython.magics_manager.magics
    for kind, name in (
        ("cell", MAGIC),
        ("line", CHECK_MAGIC),
        ("cell", "trainium"),
    ):
        magic = registered[kind].get(name)
        if magic is not None and isinstance(getattr(magic, "__self__", None), NeuronMigrateMagics):
            del registered[kind][name]
