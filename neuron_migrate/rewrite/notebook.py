"""Notebooks as input: migrate the code cells of an `.ipynb`, touch no other byte of the JSON.

The code cells are joined into one module (so an import in cell 1 and its use in cell 5 are
seen together), separated by marker comments; IPython magics and shell commands, found as IPython
finds them (neuron_migrate.core.notebook_cells), are masked with placeholders that are valid
Python and restored byte for byte. `%%writefile x.py` cells are migrated as files of their own;
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
from neuron_migrate.core.oldstack import LEFTOVER_CODE
from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.results import Change, FileResult, ManualItem, Note
from neuron_migrate.rewrite.shell import old_stack_command, rewrite_shell_command


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
            _writefile_cell(cell, path, options, result, new_sources)
    if joined and not _migrate_joined(
        joined, f"# neuron-migrate-cell-{token}", path, options, result, new_sources
    ):
        return None
    return new_sources


def _not_python(text: str) -> str | None:
    """Why a masked cell does not parse as Python (`line:col: message`), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(text)
    except SyntaxError as exc:
        return f"{exc.lineno or 1}:{exc.offset or 1}: {exc.msg}"
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
) -> bool:
    """Migrate the masked cells as one module, cut at `marker` lines; False on an error."""
    module = "".join(f"{marker}\n{masked.text}\n" for _, masked in joined)
    sub = rewrite_source(module, path, options)
    if sub.error:
        result.error = _cell_position(sub.error, path, module, marker, joined)
        return False
    parts = sub.migrated.split(f"{marker}\n")
    if len(parts) != len(joined) + 1 or parts[0].strip():
        result.error = f"{path}:1:1: internal error: cell boundaries were not preserved; notebook left unchanged"
        return False
    result.manual.extend(_locate(sub.manual, sub.migrated, marker, joined))
    commands, by_hand = _rewrite_shell_commands(joined, options, result)
    for (cell, masked), text in zip(joined, parts[1:], strict=True):
        try:
            new = masked.unmask(text[:-1] if text.endswith("\n") else text, commands)
        except ValueError:
            result.error = f"{path}:cell {cell.index + 1}: internal error: a magic or shell command was lost; notebook left unchanged"
            return False
        steps = [(command, by_hand[command]) for command in masked.commands if command in by_hand]
        new = _mark_by_hand(new, steps, cell.index + 1, result) if steps else new
        if new != cell.source:
            out[cell.index] = new
    result.changes.extend(sub.changes)
    result.notes.extend(sub.notes)
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


def _rewrite_shell_commands(
    joined: list[tuple[RawCell, Masked]], options: Options, result: FileResult
) -> tuple[dict[Command, str], dict[Command, ManualItem]]:
    """New text for the `!`/`%env` commands that configure or launch old-stack work (see
    neuron_migrate.rewrite.shell), and the old-stack steps that must stay, as manual items."""
    new: dict[Command, str] = {}
    by_hand: dict[Command, ManualItem] = {}
    for _cell, masked in joined:
        for command in masked.commands:
            shell = command.span.kind in ("shell", "magic")
            rewrite = rewrite_shell_command(command.text) if shell else None
            needs = old_stack_command(command.text) if shell and rewrite is None else None
            if needs is not None and options.enabled("NM020"):
                by_hand[command] = ManualItem("NM020", needs)
            if rewrite is None or not options.enabled(rewrite.code):
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
            note = Note(
                "NM009",
                "precision policy changed: an XLA bf16 switch was removed from a shell line; "
                "cast in the training code where data moves to the device (`model.to(device, "
                "torch.bfloat16)` and float inputs) or use `torch.autocast`",
            )
            if rewrite.precision and note not in result.notes:
                result.notes.append(note)
    return new, by_hand


def _mark_by_hand(source: str, steps: list[tuple[Command, ManualItem]], cell: int, result: FileResult) -> str:
    """`source` with a TODO line above each old-stack step left in place. A marker there from an
    earlier run stays as it is: the rewrite reports it with the other markers."""
    position = 0
    for command, item in steps:
        at = source.find(command.text, position)
        if at < 0:
            continue
        start = source.rfind("\n", 0, at) + 1
        indent = re.match(r"[ \t]*", source[start:]).group()  # type: ignore[union-attr]
        position = at + len(command.text)
        if (source[:start].splitlines() or [""])[-1].strip() == item.marker:
            continue
        ending = "\r\n" if source[start:].partition("\n")[0].endswith("\r") else "\n"
        source = f"{source[:start]}{indent}{item.marker}{ending}{source[start:]}"
        position += len(indent) + len(item.marker) + len(ending)
        line = source.count("\n", 0, start) + 1
        result.manual.append(ManualItem(item.code, item.message, line, len(indent) + 1, cell=cell))
    return source


def _writefile_cell(cell: RawCell, path: str, options: Options, result: FileResult, out: dict[int, str]) -> None:
    header, _, body = cell.source.partition("\n")
    sub = rewrite_source(body, f"{path}:cell {cell.index + 1}", options)
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
