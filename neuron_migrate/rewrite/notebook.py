"""Notebooks as input: migrate the code cells of an `.ipynb`, touch no other byte of the JSON.

The code cells are joined into one module (so an import in cell 1 and its use in cell 5 are
seen together), separated by marker comments; IPython magics and shell commands, found as IPython
finds them (neuron_migrate.core.notebook_cells), are masked with placeholders that are valid
Python and restored byte for byte; the Python a `%time`/`%timeit`/`%prun` line runs, and the body
of a `%%time` cell, are migrated as Python. `%%writefile x.py` cells are migrated as files of their own;
cells in other languages (`%%bash`, `%%html`, ...) are left alone. Writing replaces only the
`source` values of the cells that changed, in the notebook's own layout (indentation, key order,
escaping, ids, outputs and metadata stay as they were).
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import secrets
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from neuron_migrate.core.newer_syntax import newer_python_hint
from neuron_migrate.core.notebook_cells import (
    PYTHON_CELL_MAGICS,
    Command,
    Masked,
    Span,
    cell_magic,
    mask,
    writes_python_file,
)
from neuron_migrate.core.notebook_file import RawCell, locate_cells, replace_sources
from neuron_migrate.core.oldstack import LEFTOVER_CODE, PRECISION
from neuron_migrate.rewrite.codemods.xla_env import CHILD_PRECISION_TODO, STARTS_PYTHON
from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.results import Change, FileResult, ManualItem, Note
from neuron_migrate.rewrite.shell import (
    EXPORT_READ_LATER,
    ShellRewrite,
    old_stack_command,
    rewrite_shell_command,
    scripts_run,
)
from neuron_migrate.rewrite.verify import CODE as VERIFY_CODE
from neuron_migrate.rewrite.verify.siblings import script_left_behind


class NotebookError(Exception):
    """A notebook that cannot be migrated safely; one line, with the path."""


# -- the rewrite ---------------------------------------------------------------------------------


@dataclass
class NotebookResult:
    result: FileResult
    cells: list[tuple[int, str, str]] = field(default_factory=list)  # (index, old, new) changed cells


def rewrite_notebook(
    raw: str, path: str, options: Options, clear_outputs: bool = False, strict: bool = False
) -> NotebookResult:
    """Migrate the Python in a notebook; errors come back in the result, never as exceptions.
    A code cell that is not Python is left as it is, with a note; `strict` makes it an error."""
    result = FileResult(path=path, original=raw, migrated=raw)
    cells = _read_cells(raw, path, result)
    if cells is None:
        return NotebookResult(result)
    new_sources = _migrate_cells(raw, cells, path, options, result, strict)
    if not new_sources:
        return NotebookResult(result)
    return _write_sources(raw, cells, new_sources, clear_outputs, result)


def _read_cells(raw: str, path: str, result: FileResult) -> list[RawCell] | None:
    """The cells of a Python notebook; None (with the error, or `skipped`, in `result`) otherwise."""
    try:
        notebook = json.loads(raw)
    except json.JSONDecodeError as exc:
        result.error = f"{path}:{exc.lineno}:{exc.colno}: not a valid notebook (invalid JSON: {exc.msg})"
        return None
    if not isinstance(notebook, dict) or "cells" not in notebook:
        result.error = f"{path}:1:1: not a notebook (no 'cells')"
        return None
    if notebook.get("nbformat") != 4:
        result.error = f"{path}:1:1: nbformat {notebook.get('nbformat')} is not supported (only nbformat 4); convert it with `jupyter nbconvert --to notebook`"
        return None
    language = ((notebook.get("metadata") or {}).get("kernelspec") or {}).get("language", "python")
    if str(language).lower() != "python":
        result.skipped = True
        return None
    try:
        return locate_cells(raw, notebook)
    except (ValueError, KeyError, IndexError, AssertionError) as exc:
        result.error = f"{path}:1:1: cannot locate the cell sources: {exc}"
        return None


def _migrate_cells(
    raw: str, cells: list[RawCell], path: str, options: Options, result: FileResult, strict: bool = False
) -> dict[int, str] | None:
    """The new source of each cell that changed; None when the Python cells could not be migrated.
    `strict`: a cell that is not Python is an error, not a cell to leave as it is."""
    token = secrets.token_hex(4)
    while token in raw:
        token = secrets.token_hex(4)
    counter = itertools.count(1)

    def placeholder(span: Span) -> str:
        return f"_nm_magic_{token}_{next(counter)}"

    joined: list[tuple[RawCell, Masked]] = []
    scripts: list[RawCell] = []
    new_sources: dict[int, str] = {}
    for cell in cells:
        if cell.cell_type != "code" or (cell.language not in (None, "python")):
            continue
        magic = cell_magic(cell.source)
        if magic is None or magic[0] in PYTHON_CELL_MAGICS:
            masked = mask(cell.source, placeholder)
            problem = _not_python(masked.text)
            if problem is None:
                joined.append((cell, masked))
            elif strict:
                result.error = f"{path}:cell {cell.index + 1}:{problem.replace(': ', ': SyntaxError: ', 1)}"
                return None
            else:  # a broken cell, or one that holds another language: the others still migrate
                result.notes.append(
                    Note(LEFTOVER_CODE, f"cell {cell.index + 1} is not Python ({problem}): left as it is, not migrated")
                )
        elif writes_python_file(cell.source):
            scripts.append(cell)
    environments, launched = _started_with(joined, scripts)
    for cell in scripts:
        _writefile_cell(cell, path, options, result, new_sources, launched.get(_written_name(cell) or "", {}))
    if joined and not _migrate_joined(
        joined, f"# neuron-migrate-cell-{token}", path, options, result, new_sources, environments
    ):
        return None
    return new_sources


@dataclass(frozen=True)
class _Environments:
    """The precision switches the notebook's processes start with, where it says so for every run."""

    kernel: dict[str, str] = field(default_factory=dict)  # the kernel's own, from `%env XLA_USE_BF16=1`
    # The `%%writefile` scripts that got the switches of the `!` lines that run them.
    scripts: frozenset[str] = frozenset()
    # The switches each `!` line that starts Python sets for it: its own, and the kernel's it inherits.
    lines: dict[Command, frozenset[str]] = field(default_factory=dict)
    written: frozenset[str] = frozenset()  # the names of the scripts the `%%writefile` cells write


def _written_name(cell: RawCell) -> str | None:
    """The file name a `%%writefile name.py` cell writes; None where it appends (`-a`)."""
    magic = cell_magic(cell.source)
    words = magic[1].split() if magic is not None else []
    if not words or any(word in ("-a", "--append") for word in words):
        return None
    return words[-1].rsplit("/", 1)[-1]


def _starts_python(command: Command, rewrite: ShellRewrite | None) -> bool:
    """A `!` line that is kept and starts a Python process (a script, `python`, `torchrun`)."""
    if command.span.kind != "shell" or (rewrite is not None and rewrite.removes):
        return False
    return bool(scripts_run(command.text)) or STARTS_PYTHON.search(command.text) is not None


def _started_with(joined: list[tuple[RawCell, Masked]], scripts: list[RawCell]) -> tuple[_Environments, dict[str, dict[str, str]]]:
    """What `%env` and `!VAR=1 command` lines set, as `os.environ[...] = ...` and `env=` would:
    the kernel's own precision switches (a `%env` at the top level of a cell, set nowhere else to
    another value), those of each `!` line that starts Python (its own, and the kernel's, which it
    inherits), and each `%%writefile` script's, where every line that runs it sets the same."""
    kernel: dict[str, bool] = {}
    on: set[str] = set()  # turned on by the `%env` lines so far
    lines: dict[Command, frozenset[str]] = {}
    for _cell, masked in joined:
        for command in masked.commands:
            if command.span.kind not in ("shell", "magic"):
                continue
            rewrite = rewrite_shell_command(command.text)
            if rewrite is not None and rewrite.kernel:
                for variable in rewrite.variables:
                    sure = variable in rewrite.switches and command.span.column == 0
                    kernel[variable] = kernel.get(variable, True) and sure
                    (on.add if variable in rewrite.switches else on.discard)(variable)
            elif _starts_python(command, rewrite):
                lines[command] = frozenset(on | set(rewrite.switches if rewrite else ()))
    runs: dict[str, set[frozenset[str]]] = {}
    for command, switches in lines.items():
        for script in scripts_run(command.text):
            runs.setdefault(script, set()).add(switches)
    written = {name for name in map(_written_name, scripts) if name is not None}
    launched = {
        script: dict.fromkeys(sorted(next(iter(switches))), "1")
        for script, switches in runs.items()
        if script in written and len(switches) == 1 and next(iter(switches))
    }
    own = {variable: "1" for variable, sure in kernel.items() if sure and variable in PRECISION}
    return _Environments(own, frozenset(launched), lines, frozenset(written)), launched


def _not_python(text: str) -> str | None:
    """Why a masked cell does not parse as Python (`line:col: message`), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(text)
    except SyntaxError as exc:
        return f"{exc.lineno or 1}:{exc.offset or 1}: {exc.msg}{newer_python_hint(text)}"
    except ValueError as exc:  # a null byte
        return str(exc)
    return None


def _migrate_joined(
    joined: list[tuple[RawCell, Masked]],
    marker: str,
    path: str,
    options: Options,
    result: FileResult,
    out: dict[int, str],
    environments: _Environments,
) -> bool:
    """Migrate the masked cells as one module, cut at `marker` lines; False on an error."""
    module = "".join(f"{marker}\n{masked.text}\n" for _, masked in joined)
    sub = rewrite_source(module, path, options, environments.kernel)
    if sub.error:
        result.error = _cell_position(sub.error, path, module, marker, joined)
        return False
    parts = sub.migrated.split(f"{marker}\n")
    if len(parts) != len(joined) + 1 or parts[0].strip():
        result.error = f"{path}:1:1: internal error: cell boundaries were not preserved; notebook left unchanged"
        return False
    result.manual.extend(_locate(sub.manual, sub.migrated, marker, joined))
    commands, by_hand = _rewrite_shell_commands(joined, options, result, environments)
    for (cell, masked), text in zip(joined, parts[1:], strict=True):
        try:
            new = masked.unmask(text[:-1] if text.endswith("\n") else text, commands)
        except ValueError:
            result.error = f"{path}:cell {cell.index + 1}: internal error: a magic or shell command was lost; notebook left unchanged"
            return False
        steps = [(commands.get(command, command.text), by_hand[command]) for command in masked.commands if command in by_hand]
        new = _mark_by_hand(new, steps, cell.index + 1, result) if steps else new
        if new[:1] == "\n" and cell.source[:1] != "\n":
            new = new.lstrip("\n")  # the lines that opened the cell went: no blank line opens it now
        if new != cell.source:
            out[cell.index] = new
    result.changes.extend(sub.changes)
    result.notes.extend(sub.notes)
    result.verification = sub.verification  # the cells were checked as the kernel runs them: joined
    return True


def _write_sources(
    raw: str,
    cells: list[RawCell],
    new_sources: dict[int, str],
    clear_outputs: bool,
    result: FileResult,
) -> NotebookResult:
    """The notebook with the new sources put in, every other byte as it was."""
    try:
        result.migrated = replace_sources(raw, cells, new_sources, clear_outputs)
    except ValueError as exc:
        result.error = f"{result.path}:1:1: internal error: {exc}; left unchanged"
        result.migrated = raw
        return NotebookResult(result)
    changed = [(c.index, c.source, new_sources[c.index]) for c in cells if c.index in new_sources]
    return NotebookResult(result, changed)


def _read_elsewhere(path: str, command: Command, joined: list[tuple[RawCell, Masked]]) -> bool:
    """Does any other line of the notebook name `path`? (An unknown path: assume so.)"""
    if not path:
        return True
    sources = "".join(cell.source for cell, _masked in joined)
    return sources.count(path) > command.text.count(path)


def _rewrite_shell_commands(
    joined: list[tuple[RawCell, Masked]], options: Options, result: FileResult, environments: _Environments
) -> tuple[dict[Command, str], dict[Command, ManualItem]]:
    """New text for the `!`/`%env` commands that configure or launch old-stack work (see
    neuron_migrate.rewrite.shell), and the old-stack steps that must stay, as manual items. A
    precision switch that did not become a dtype policy (in the kernel, or in the script the
    line runs) gets a TODO at the line, as the same switch written in Python does."""
    new: dict[Command, str] = {}
    by_hand: dict[Command, ManualItem] = {}
    for _cell, masked in joined:
        for command in masked.commands:
            shell = command.span.kind in ("shell", "magic")
            rewrite = rewrite_shell_command(command.text) if shell else None
            needs = old_stack_command(command.text) if shell and rewrite is None else None
            if needs is not None and options.enabled("NM020"):
                by_hand[command] = ManualItem("NM020", needs)
            lost = _precision_left_out(rewrite, command, environments) if shell else None
            if lost is not None and options.enabled("NM009") and command not in by_hand:
                by_hand[command] = ManualItem("NM009", lost)
            if command not in by_hand and _starts_python(command, rewrite) and options.enabled(VERIFY_CODE):
                left = _script_left_behind(command, result.path, options, environments)
                if left is not None:
                    by_hand[command] = ManualItem(VERIFY_CODE, left)
            if rewrite is None or not options.enabled(rewrite.code):
                continue
            if rewrite.exported is not None and _read_elsewhere(rewrite.exported[0], command, joined):
                output, model = rewrite.exported
                message = EXPORT_READ_LATER.format(output=f"`{output}`" if output else "a folder", model=model or "the model it exported")
                by_hand[command] = ManualItem(rewrite.code, message)
                continue
            if rewrite.removes and command.span.assigned:
                # `x = !step ...`: no comment can stand where the output is used.
                what = rewrite.message.removeprefix("removed ")
                message = f"{what} is old-stack work, but its output is assigned: remove it by hand"
                by_hand[command] = ManualItem(rewrite.code, message)
                continue
            # An indented command may be all there is in its block, which needs a statement.
            indented = rewrite.removes and command.span.column
            new[command] = f"pass  {rewrite.text}" if indented else rewrite.text
            result.changes.append(Change(rewrite.code, rewrite.message))
    return new, by_hand


def _script_left_behind(command: Command, path: str, options: Options, environments: _Environments) -> str | None:
    """Why a script a `!` line runs keeps the notebook on the old stack (see `script_left_behind`);
    None for a notebook that is not a file (nothing is beside it)."""
    if not Path(path).is_file():
        return None
    folder = Path(path).parent
    for script in scripts_run(command.text, as_written=True):
        why = script_left_behind(script, folder, options.migrated_together, environments.written)
        if why is not None:
            return why
    return None


def _precision_left_out(rewrite: ShellRewrite | None, command: Command, environments: _Environments) -> str | None:
    """The TODO for a precision switch a shell line sets (or a `!` line inherits from `%env`) that
    did not become the dtype policy of the process it was for."""
    if rewrite is not None and rewrite.kernel:
        missing = [variable for variable in rewrite.switches if variable not in environments.kernel]
        if not missing:
            return None
        dtype = PRECISION[missing[0]]
        return (
            f"`{missing[0]}=1` set this kernel's precision ({dtype} on the device), but not for every run (it "
            "is indented, or set to another value elsewhere): where it applies, cast where data moves to the device "
            f"(`model.to(device, torch.{dtype})`, float inputs, and `dtype=torch.{dtype}` for models loaded with `from_pretrained`)"
        )
    switches = sorted(environments.lines.get(command, ()))
    scripts = scripts_run(command.text)
    if not switches or (scripts and all(script in environments.scripts for script in scripts)):
        return None
    return CHILD_PRECISION_TODO.format(variable=switches[0], dtype=PRECISION[switches[0]])


def _mark_by_hand(source: str, steps: list[tuple[str, ManualItem]], cell: int, result: FileResult) -> str:
    """`source` with a TODO line above each command (as it now reads) left for a person. A marker
    there from an earlier run stays as it is: the rewrite reports it with the other markers."""
    position = 0
    for text, item in steps:
        at = source.find(text, position)
        if at < 0:
            continue
        start = source.rfind("\n", 0, at) + 1
        indent = re.match(r"[ \t]*", source[start:]).group()  # type: ignore[union-attr]
        position = at + len(text)
        if (source[:start].splitlines() or [""])[-1].strip() == item.marker:
            continue
        ending = "\r\n" if source[start:].partition("\n")[0].endswith("\r") else "\n"
        source = f"{source[:start]}{indent}{item.marker}{ending}{source[start:]}"
        position += len(indent) + len(item.marker) + len(ending)
        line = source.count("\n", 0, start) + 1
        result.manual.append(ManualItem(item.code, item.message, line, len(indent) + 1, cell=cell))
    return source


def _writefile_cell(
    cell: RawCell, path: str, options: Options, result: FileResult, out: dict[int, str], environment: dict[str, str]
) -> None:
    """Migrate a `%%writefile` script as a file of its own, started with `environment` (the
    precision switches of the `!` lines that run it)."""
    header, _, body = cell.source.partition("\n")
    sub = rewrite_source(body, f"{path}:cell {cell.index + 1}", options, environment)
    if sub.error:
        result.error = sub.error
        return
    if sub.migrated != body:
        out[cell.index] = f"{header}\n{sub.migrated}"
    result.changes.extend(sub.changes)
    result.notes.extend(sub.notes)
    result.manual.extend(
        ManualItem(m.code, m.message, m.line + 1, m.column, cell=cell.index + 1) for m in sub.manual
    )


def _cell_lines(text: str, marker: str) -> list[tuple[int, int]]:
    """For each line of the joined module: (position of its cell among the joined ones, line in cell)."""
    mapping: list[tuple[int, int]] = []
    cell, line = -1, 0
    for row in text.split("\n"):
        if row == marker:
            cell, line = cell + 1, 0
            mapping.append((cell, 0))
            continue
        line += 1
        mapping.append((cell, line))
    return mapping


def _locate(items: list[ManualItem], text: str, marker: str, joined: list[tuple[RawCell, Masked]]) -> list[ManualItem]:
    mapping = _cell_lines(text, marker)
    located = []
    for item in items:
        position, line = mapping[item.line - 1] if 0 < item.line <= len(mapping) else (0, item.line)
        index = joined[max(position, 0)][0].index
        located.append(ManualItem(item.code, item.message, line, item.column, cell=index + 1))
    return located


def _cell_position(error: str, path: str, module: str, marker: str, joined: list[tuple[RawCell, Masked]]) -> str:
    """Turn `path:LINE:COL: msg` in the joined module into `path:cell N:LINE:COL: msg`."""
    match = re.match(re.escape(path) + r":(\d+):(\d+): (.*)$", error)
    if not match:
        return error
    mapping = _cell_lines(module, marker)
    row = int(match.group(1))
    if not 0 < row <= len(mapping):
        return error
    position, line = mapping[row - 1]
    index = joined[max(position, 0)][0].index
    return f"{path}:cell {index + 1}:{line}:{match.group(2)}: {match.group(3)}"
