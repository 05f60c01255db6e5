"""Notebooks for `check`: the kernel's code cells as one module, each `%%writefile x.py` script
as a file of its own, findings and fixes per cell.

The cells the kernel runs are joined in order (an import in cell 1 is seen from cell 5), cut by
marker comments. IPython magics, shell commands and `?` help are masked as IPython reads them
(see neuron_migrate.core.notebook_cells), so line numbers stay as they are; cells in other
languages (`%%bash`, `%%html`, ...) are skipped. Findings carry their cell (1-based, counting
every cell as Jupyter shows them) and the line within it, and so do the lines named in their
messages. `--fix` edits the sources of the cells it fixes and no other byte of the file.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, replace

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Diagnostic, FileReport
from neuron_migrate.core.notebook_cells import (
    PYTHON_CELL_MAGICS,
    Masked,
    Span,
    cell_magic,
    mask,
    written_script,
)
from neuron_migrate.core.notebook_file import RawCell, locate_cells, replace_sources, source_text
from neuron_migrate.core.source import file_diff

_LINE_IN_MESSAGE = re.compile(r"\bat line (\d+)\b")


@dataclass
class _Module:
    """Python checked as one text: the kernel's cells, or the script of a `%%writefile` cell."""

    cells: list[tuple[RawCell, Masked]]
    marker: str

    @property
    def text(self) -> str:
        return "".join(f"{self.marker}\n{masked.text}\n" for _, masked in self.cells)

    def origin(self, text: str) -> list[tuple[int, int]]:
        """For each line of `text` (this module, or its fixed version): (cell number, line in it)."""
        places: list[tuple[int, int]] = []
        position, line = -1, 0
        for row in text.split("\n"):
            if row == self.marker:
                position, line = position + 1, 0
            else:
                line += 1
            cell = self.cells[max(position, 0)][0].index + 1
            places.append((cell, line))
        return places

    def sources(self, fixed: str) -> dict[int, str] | None:
        """The new source of each cell a fix changed; None if the cells cannot be told apart."""
        parts = fixed.split(f"{self.marker}\n")
        if len(parts) != len(self.cells) + 1 or parts[0]:
            return None
        changed = {}
        for (cell, masked), text in zip(self.cells, parts[1:], strict=True):
            try:
                new = masked.unmask(text[:-1] if text.endswith("\n") else text)
            except ValueError:
                return None
            if new != cell.source:
                changed[cell.index] = new
        return changed


def _modules(raw: str, cells: list[RawCell]) -> list[_Module]:
    token = secrets.token_hex(4)
    while token in raw:
        token = secrets.token_hex(4)
    marker = f"# neuron-migrate-cell-{token}"
    count = 0

    def placeholder(span: Span) -> str:
        nonlocal count
        count += 1
        return f"_nm_magic_{token}_{count}"

    kernel = _Module([], marker)
    modules = [kernel]
    for cell in cells:
        if cell.cell_type != "code" or cell.language not in (None, "python"):
            continue
        script = written_script(cell.source)
        if script is not None:
            modules.append(_Module([(cell, script)], marker))
            continue
        magic = cell_magic(cell.source)
        if magic is None or magic[0] in PYTHON_CELL_MAGICS:
            kernel.cells.append((cell, mask(cell.source, placeholder)))
    return [module for module in modules if module.cells]


def check_notebook(raw: str, path: str, options: CheckOptions) -> FileReport:
    """Check (and with `options.fix`, fix) the code cells of a notebook; never raises for bad input."""
    report = FileReport(path=path, original=raw)
    try:
        notebook = json.loads(raw)
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
            raise ValueError("no cells")
        cells = locate_cells(raw, notebook)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        report.error = f"{path}:1:1: not a readable notebook: {exc}"
        return report

    new_sources: dict[int, str] = {}
    modules = _modules(raw, cells)
    for module in modules:
        checked = check_source(module.text, path, options)
        if checked.error:
            report.error = _relocate_error(checked.error, path, module.origin(module.text))
            report.diagnostics = []
            return report
        fixed = checked.fixed if checked.changed and checked.fixed is not None else module.text
        sources = module.sources(fixed)
        if sources is None:
            report.error = f"{path}:1:1: internal error: a fix crossed a cell boundary; notebook left unchanged"
            return report
        new_sources.update(sources)
        report.fixes_applied += checked.fixes_applied
        origin = module.origin(fixed)
        report.diagnostics += [_in_cell(d, origin) for d in checked.diagnostics]
    report.diagnostics.sort(key=lambda d: (d.cell or 0, d.line, d.column, d.code))
    report.skipped = not report.diagnostics and not new_sources
    if new_sources:
        report.fixed = replace_sources(raw, cells, new_sources)
        report.changed = report.fixed != raw
    return report


def _in_cell(d: Diagnostic, origin: list[tuple[int, int]]) -> Diagnostic:
    """`d` with its lines counted in its cell, in its position and in its message."""

    def place(line: int) -> tuple[int, int]:
        return origin[line - 1] if 0 < line <= len(origin) else (origin[-1][0], line)

    cell, row = place(d.line)
    end_cell, end_row = place(d.end_line)
    d.cell = cell
    d.line, d.end_line = row, end_row if end_cell == cell else row
    d.statement_end = place(d.statement_end)[1] if d.statement_end else 0

    def named(match: re.Match[str]) -> str:
        other, line = place(int(match.group(1)))
        return f"at line {line}" if other == cell else f"at cell {other}, line {line}"

    d.message = _LINE_IN_MESSAGE.sub(named, d.message)
    d.where = _LINE_IN_MESSAGE.sub(named, d.where)
    if d.fix is not None:
        edits = tuple(
            replace(e, row=place(e.row)[1], end_row=place(e.end_row)[1]) for e in d.fix.edits
        )
        d.fix = replace(d.fix, edits=edits)
    return d


def _relocate_error(error: str, path: str, origin: list[tuple[int, int]]) -> str:
    match = re.match(rf"{re.escape(path)}:(\d+):(\d+): (.*)", error)
    if not match or not 0 < int(match.group(1)) <= len(origin):
        return error
    cell, line = origin[int(match.group(1)) - 1]
    return f"{path}:cell {cell}:{line}:{match.group(2)}: {match.group(3)}"


def notebook_diff(path: str, before: str, after: str) -> str:
    """What `--fix` changes in a notebook: one diff per changed cell, labelled `path:cell N`."""
    old, new = json.loads(before)["cells"], json.loads(after)["cells"]
    return "".join(
        file_diff(
            f"{path}:cell {number}", source_text(a.get("source")), source_text(b.get("source"))
        )
        for number, (a, b) in enumerate(zip(old, new, strict=True), start=1)
        if a.get("source") != b.get("source")
    )
