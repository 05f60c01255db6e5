"""`neuron-migrate check` for notebook users: a notebook file as last saved, or the cells run in
this kernel, checked as `neuron-migrate check nb.ipynb` checks a notebook (the cells as one module,
magics masked), with a rendering for notebooks.

Two kinds of cell hold Python that the command line skips as another language, and are checked
here: a `%%writefile *.py` cell (the script a tutorial writes and then runs) and a `%%trainium`
cell; their first line is set aside and the body checked with the other cells.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.command import options_for
from neuron_migrate.checks.notebooks import check_notebook as check_notebook_text
from neuron_migrate.core import config as configuration
from neuron_migrate.core.notebook_cells import cell_magic, writes_python_file
from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import render
from neuron_migrate.jupyter.migration import notebook_code_cells

SEVERITY_TONES = {"error": "bad", "warning": "warn", "info": "ok"}
_CELL_MAGIC_LINE = re.compile(r"^[ \t]*%%", re.MULTILINE)


@dataclass(frozen=True)
class Cell:
    label: str  # "cell 4" (notebook file) or "In [7]" (this session)
    source: str


@dataclass(frozen=True)
class CellFinding:
    label: str  # the cell ("cell 4", "In [7]"); empty in a script
    line: int  # in the cell
    column: int
    code: str
    message: str
    severity: str
    fixable: bool = False  # `neuron-migrate check --fix` has a safe fix (scripts only: notebooks are never fixed)

    @property
    def place(self) -> str:
        return (
            f"{self.label}:{self.line}:{self.column}"
            if self.label
            else f"{self.line}:{self.column}"
        )

    def text(self, where: str) -> str:
        mark = "[*] " if self.fixable else ""
        return (
            f"{where}:{self.place}: {self.code} {mark}{self.message}"
            if where
            else f"{self.place}: {self.code} {mark}{self.message}"
        )


@dataclass
class CheckReport:
    """What the checks found in a set of cells; renders itself in a notebook."""

    source: str  # the notebook's path, or "" for the cells of this session
    cells: int = 0  # code cells given
    findings: list[CellFinding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def headline(self) -> str:
        what = self.source or "the cells run in this session"
        if self.errors:
            return f"{what}: not checked ({self.errors[0]})"
        found = plural(len(self.findings), "finding") if self.findings else "no findings"
        fixable = sum(f.fixable for f in self.findings)
        extra = [plural(self.cells, "code cell")] if self.cells else []
        if fixable:
            extra.append(f"{fixable} with a safe fix ([*])")
        return f"{what}: {found}" + (f" ({', '.join(extra)})" if extra else "")

    def __repr__(self) -> str:
        lines = [f.text(self.source) for f in self.findings]
        lines.append(self.headline())
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        tone = "bad" if self.errors else "warn" if self.findings else "ok"
        word = "error" if self.errors else "findings" if self.findings else "clean"
        parts = [
            f'<div class="nm-check">{render.badge(word, tone)} <b>{render.escape(self.headline())}</b></div>'
        ]
        if self.findings:
            cell = "padding: 1px 8px; text-align: left; vertical-align: top; border: none;"
            rows = "".join(
                f'<tr class="nm-finding"><td style="{cell} white-space: nowrap;">'
                f"{render.escape(f.place)}</td>"
                f'<td style="{cell}">{render.code_tag(f.code)}</td>'
                f'<td style="{cell}">{render.badge(f.severity, SEVERITY_TONES.get(f.severity, "warn"))}</td>'
                f'<td style="{cell}">{render.prose(f.message)}{" <i>(safe fix)</i>" if f.fixable else ""}</td></tr>'
                for f in self.findings
            )
            head = "".join(
                f'<th style="{cell}">{h}</th>' for h in ("where", "rule", "severity", "finding")
            )
            parts.append(
                f'<table class="nm-findings" style="border-collapse: collapse; margin-top: 4px;">'
                f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
            )
        return "".join(parts)


def _python_body(source: str) -> str:
    """A `%%trainium` or `%%writefile *.py` cell with its `%%` line made a comment, so that the
    body is checked as Python; any other cell as it is."""
    magic = cell_magic(source)
    if magic is None or not (magic[0] == "trainium" or writes_python_file(source)):
        return source
    start = _CELL_MAGIC_LINE.search(source).end() - 2  # type: ignore[union-attr]
    return f"{source[:start]}# {source[start:]}"


def _as_notebook(cells: list[Cell]) -> str:
    """The cells as a notebook's JSON, with the first line of a Python-body magic set aside."""
    sources = [_python_body(cell.source) for cell in cells]
    return json.dumps(
        {
            "cells": [{"cell_type": "code", "metadata": {}, "source": s} for s in sources],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def _options(where: Path, flags: dict[str, Any]) -> CheckOptions:
    """The options `neuron-migrate check` would use for a file at `where`, with these flags."""
    args = argparse.Namespace(
        select=flags.get("select"),
        ignore=flags.get("ignore") or (),
        min_severity=flags.get("min_severity"),
        target=flags.get("target"),
        fix=False,
        diff=False,
        unsafe_fixes=False,
    )
    return options_for(args, configuration.Configs().for_path(where), where)


def check_cells(cells: list[Cell], path: str = "", **flags: Any) -> CheckReport:
    """Check cells as `neuron-migrate check` checks a notebook at `path` (its pyproject.toml
    settings apply). `flags` are the command line's: select, ignore, min_severity, target."""
    report = CheckReport(source=path, cells=len(cells))
    where = Path(path) if path else Path.cwd() / "session.ipynb"
    try:
        options = _options(where, flags)
    except configuration.ConfigError as exc:
        report.errors.append(str(exc))
        return report
    checked = check_notebook_text(_as_notebook(cells), str(where), options)

    def label(number: int | None) -> str:
        return cells[number - 1].label if number and 0 < number <= len(cells) else "?"

    if checked.error:
        # `where:cell N:line:col: message` -> `In [7]:line:col: message`
        located = re.match(rf"{re.escape(str(where))}:cell (\d+):(.*)", checked.error, re.DOTALL)
        report.errors.append(
            f"{label(int(located.group(1)))}:{located.group(2)}" if located else checked.error
        )
        return report
    report.findings = [
        CellFinding(label(d.cell), d.line, d.column, d.code, d.text, d.severity.label)
        for d in checked.diagnostics
    ]
    return report


def check_script(text: str, path: str, **flags: Any) -> CheckReport:
    """Check a script's text as `neuron-migrate check` checks the file at `path`."""
    report = CheckReport(source=path, cells=0)
    try:
        checked = check_source(text, path, _options(Path(path), flags))
    except configuration.ConfigError as exc:
        report.errors.append(str(exc))
        return report
    if checked.error:
        report.errors.append(checked.error)
        return report
    report.findings = [
        CellFinding(
            "",
            d.line,
            d.column,
            d.code,
            d.text,
            d.severity.label,
            d.fix is not None and d.fix.safe,
        )
        for d in checked.diagnostics
    ]
    return report


def notebook_cells(text: str) -> list[Cell]:
    """The Python code cells of a notebook's JSON text, labelled `cell N` (1-based, counting
    every cell, as JupyterLab numbers them)."""
    return [Cell(f"cell {index + 1}", source) for index, source in notebook_code_cells(text)]


def check_notebook(path: str | Path, **flags: Any) -> CheckReport:
    """Check a notebook file as last saved."""
    return check_cells(notebook_cells(Path(path).read_text(encoding="utf-8")), str(path), **flags)
