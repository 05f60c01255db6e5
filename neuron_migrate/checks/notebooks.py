"""Notebooks for `check`: the code cells of an `.ipynb` checked as one module, findings per cell.

Cells are joined in order (an import in cell 1 is seen from cell 5). IPython magics, shell
commands and `?` help are masked as IPython reads them (see neuron_migrate.core.notebook_cells),
so line numbers stay as they are; cells in other languages (`%%bash`, `%%html`, ...) are skipped.
Findings carry their cell (1-based, counting every cell as Jupyter shows them) and the line
within it. Fixes are not offered for notebooks: `check` reports, `rewrite` edits notebooks.
"""

from __future__ import annotations

import json
import re

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import FileReport
from neuron_migrate.core.notebook_cells import PYTHON_CELL_MAGICS, cell_magic, mask


def _text(source: object) -> str:
    return "".join(source) if isinstance(source, list) else str(source or "")


def check_notebook(raw: str, path: str, options: CheckOptions) -> FileReport:
    """Check the code cells of a notebook; never raises for bad input."""
    try:
        notebook = json.loads(raw)
        cells = notebook["cells"] if isinstance(notebook, dict) else None
        if not isinstance(cells, list):
            raise ValueError("no cells")
    except (ValueError, KeyError) as exc:
        return FileReport(path=path, error=f"{path}:1:1: not a readable notebook: {exc}")

    module: list[str] = []
    origin: list[tuple[int, int]] = []  # module line (0-based) -> (cell number, line in cell)
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = _text(cell.get("source", ""))
        magic = cell_magic(source)
        if magic is not None and magic[0] not in PYTHON_CELL_MAGICS:
            continue  # another language
        for index, line in enumerate(mask(source).text.split("\n")):
            module.append(line)
            origin.append((number, index + 1))
    text = "\n".join(module) + "\n"
    report = check_source(
        text, path, CheckOptions(options.codes, options.target, options.min_severity)
    )
    if report.error:
        report.error = _relocate_error(report.error, path, origin)
        return report
    for d in report.diagnostics:
        cell, row = origin[d.line - 1] if d.line - 1 < len(origin) else (0, d.line)
        end_cell, end_row = (
            origin[d.end_line - 1] if d.end_line - 1 < len(origin) else (cell, d.end_line)
        )
        d.cell = cell
        d.line, d.end_line = row, end_row if end_cell == cell else row
        d.fix = None
    report.original = ""
    return report


def _relocate_error(error: str, path: str, origin: list[tuple[int, int]]) -> str:
    match = re.match(rf"{re.escape(path)}:(\d+):(\d+): (.*)", error)
    if not match or int(match.group(1)) - 1 >= len(origin):
        return error
    cell, line = origin[int(match.group(1)) - 1]
    return f"{path}:cell {cell}:{line}:{match.group(2)}: {match.group(3)}"
