"""`neuron-migrate check` for notebook users: a notebook file as saved, or the cells as this kernel
ran them, checked as `neuron-migrate check nb.ipynb` checks a notebook (the kernel's cells as one
module, magics masked, each `%%writefile x.py` script as a file of its own), with a rendering for
notebooks that says what its severity filter leaves out.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.command import options_for
from neuron_migrate.checks.model import Diagnostic, Severity
from neuron_migrate.checks.notebooks import check_notebook as check_notebook_text
from neuron_migrate.core import config as configuration
from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import render
from neuron_migrate.jupyter.migration import notebook_code_cells
from neuron_migrate.jupyter.session import Cell

SEVERITY_TONES = {"error": "bad", "warning": "warn", "info": "ok"}
__all__ = ["Cell", "CellFinding", "CheckReport", "check_cells", "check_notebook", "check_script"]


@dataclass(frozen=True)
class CellFinding:
    label: str  # the cell ("cell 4", "In [7]"); empty in a script
    line: int  # in the cell
    column: int
    code: str
    message: str
    severity: str
    fixable: bool = False  # `neuron-migrate check --fix` has a safe fix for it

    @property
    def place(self) -> str:
        return (
            f"{self.label}:{self.line}:{self.column}"
            if self.label
            else f"{self.line}:{self.column}"
        )

    def text(self, where: str) -> str:
        mark = "[*] " if self.fixable else ""
        head = f"{where}:{self.place}" if where else self.place
        return f"{head}: {self.code} {mark}{self.message}"


@dataclass
class CheckReport:
    """What the checks found in a set of cells or a script; renders itself in a notebook."""

    source: str  # the notebook's or script's path, or "" for the cells of this session
    cells: int = 0  # code cells given
    findings: list[CellFinding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    hidden: dict[str, int] = field(default_factory=dict)  # severity -> findings below the threshold
    notice: str = ""  # what was checked instead of what was asked, and why

    def headline(self) -> str:
        what = self.source or "the cells run in this session"
        if self.errors:
            return f"{what}: not checked ({self.errors[0]})"
        found = plural(len(self.findings), "finding") if self.findings else "no findings"
        fixable = sum(f.fixable for f in self.findings)
        extra = [plural(self.cells, "code cell")] if self.cells else []
        if fixable:
            extra.append(f"{fixable} with a safe fix ([*])")
        if self.hidden:
            extra.append(self.hidden_text())
        return f"{what}: {found}" + (f" ({'; '.join(extra)})" if extra else "")

    def hidden_text(self) -> str:
        counts = [plural(n, f"{severity} finding") for severity, n in self.hidden.items()]
        lowest = min(self.hidden, key=lambda s: Severity.parse(s))
        return f"{' and '.join(counts)} not shown: --min-severity {lowest} shows them"

    def __repr__(self) -> str:
        lines = [f.text(self.source) for f in self.findings]
        lines.append(self.headline())
        if self.notice:
            lines.append(f"note: {self.notice}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def _repr_html_(self) -> str:
        tone = "bad" if self.errors else "warn" if self.findings or self.notice else "ok"
        word = "error" if self.errors else "findings" if self.findings else "clean"
        parts = [render.headline(word, tone, self.headline())]
        if self.notice:
            parts.append(
                f'<div class="nm-notice" style="margin: 2px 0;">{render.badge("note", "warn")} {render.prose(self.notice)}</div>'
            )
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
        return render.output("".join(parts))


def _as_notebook(cells: list[Cell]) -> str:
    return json.dumps(
        {
            "cells": [{"cell_type": "code", "metadata": {}, "source": c.source} for c in cells],
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


def _shown(
    report: CheckReport, diagnostics: list[Diagnostic], threshold: Severity
) -> list[Diagnostic]:
    """The findings at or above `threshold`; those below are counted in `report.hidden`."""
    below = Counter(d.severity for d in diagnostics if d.severity < threshold)
    report.hidden = {s.label: below[s] for s in sorted(below, reverse=True)}
    return [d for d in diagnostics if d.severity >= threshold]


def _finding(label: str, d: Diagnostic) -> CellFinding:
    fixable = d.fix is not None and d.fix.safe
    return CellFinding(label, d.line, d.column, d.code, d.text, d.severity.label, fixable)


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
    everything = replace(options, min_severity=Severity.INFO)
    checked = check_notebook_text(_as_notebook(cells), str(where), everything)

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
        _finding(label(d.cell), d)
        for d in _shown(report, checked.diagnostics, options.min_severity)
    ]
    return report


def check_script(text: str, path: str, **flags: Any) -> CheckReport:
    """Check a script's text as `neuron-migrate check` checks the file at `path`."""
    report = CheckReport(source=path, cells=0)
    try:
        options = _options(Path(path), flags)
        checked = check_source(text, path, replace(options, min_severity=Severity.INFO))
    except configuration.ConfigError as exc:
        report.errors.append(str(exc))
        return report
    if checked.error:
        report.errors.append(checked.error)
        return report
    report.findings = [
        _finding("", d) for d in _shown(report, checked.diagnostics, options.min_severity)
    ]
    return report


def notebook_cells(text: str) -> list[Cell]:
    """The Python code cells of a notebook's JSON text, labelled `cell N` (1-based, counting
    every cell, as JupyterLab numbers them)."""
    return [Cell(f"cell {index + 1}", source) for index, source in notebook_code_cells(text)]


def check_notebook(path: str | Path, **flags: Any) -> CheckReport:
    """Check a notebook file as saved."""
    return check_cells(notebook_cells(Path(path).read_text(encoding="utf-8")), str(path), **flags)
