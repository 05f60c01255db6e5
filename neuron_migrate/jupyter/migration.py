"""Migrating a cell, a script or a notebook for a Jupyter user: the rewrite engine's result, ready to show.

A `Migration` renders itself: as HTML in a notebook (a side-by-side or unified diff with the
changes, the manual items and the notes) and as text everywhere else (a unified diff, as
`neuron-migrate rewrite --diff` prints it). A single cell goes through the notebook reader, so its
IPython magics and shell lines are masked and restored exactly as in a notebook file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.core.files import SourceError, read_source, write_back
from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import render
from neuron_migrate.rewrite.codemods.base import TARGETS
from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.notebook import rewrite_notebook
from neuron_migrate.rewrite.results import Change, ManualItem, Note

VIEWS = ("side", "unified")


@dataclass
class Migration:
    """What migrating one cell, script or notebook produced."""

    label: str  # how the user calls the input: "In [3]", "train.py", "tutorial.ipynb"
    original: str
    migrated: str
    kind: str = "cell"  # "cell" | "script" | "notebook"
    changes: list[Change] = field(default_factory=list)
    manual: list[ManualItem] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    error: str | None = None
    cells: list[tuple[int, str, str]] = field(
        default_factory=list
    )  # notebook: (index, old, new) of changed cells
    view: str = "side"

    @property
    def changed(self) -> bool:
        return self.error is None and self.migrated != self.original

    def headline(self) -> str:
        if self.error:
            return f"{self.label}: not migrated: {self.error}"
        if not self.changed and not self.manual:
            return f"{self.label}: nothing to migrate"
        # Import tidying is not listed as a change of its own.
        parts = [plural(len(self.changes), "change") if self.changes else "imports updated"]
        if self.kind == "notebook":
            parts[0] += f" in {plural(len(self.cells), 'cell')}"
        if self.manual:
            parts.append(f"{plural(len(self.manual), 'manual item')} to review")
        if self.notes:
            parts.append(plural(len(self.notes), "note"))
        return f"{self.label}: {', '.join(parts)}"

    def pairs(self) -> list[tuple[str, str, str]]:
        """(title, old, new) for each diff to show: one for a cell or script, one per changed cell."""
        if self.kind == "notebook":
            return [(f"cell {index + 1}", old, new) for index, old, new in self.cells]
        return [(self.label, self.original, self.migrated)]

    def diff_text(self) -> str:
        return "".join(
            render.unified_diff(old, new, f"a/{title}", f"b/{title}")
            for title, old, new in self.pairs()
        )

    def diff_html(self, view: str | None = None) -> str:
        view = view or self.view
        context = None if self.kind == "cell" else 3
        blocks = []
        for title, old, new in self.pairs():
            if view == "unified":
                blocks.append(render.unified_html(old, new, f"a/{title}", f"b/{title}"))
            else:
                blocks.append(
                    render.side_by_side(
                        old, new, f"{title} (original)", f"{title} (migrated)", context
                    )
                )
        return "".join(blocks)

    def findings_html(self) -> str:
        return render.migration_findings_html(self.changes, self.manual, self.notes)

    def _repr_html_(self) -> str:
        tone = "bad" if self.error else "warn" if self.manual else "ok"
        word = (
            "error"
            if self.error
            else "review"
            if self.manual
            else "migrated"
            if self.changed
            else "unchanged"
        )
        head = (
            f'<div class="nm-migration" style="margin: 2px 0;">{render.badge(word, tone)} '
            f"<b>{render.escape(self.headline())}</b></div>"
        )
        if self.error or not self.changed:
            return head + self.findings_html()
        body = self.diff_html() + self.findings_html()
        if self.kind == "cell":
            body += render.code_block(self.migrated, "Migrated cell (to copy)")
        return head + body

    def __repr__(self) -> str:
        text = [self.headline()]
        if self.changed:
            text.append(self.diff_text().rstrip("\n"))
        findings = render.migration_findings_text(self.changes, self.manual, self.notes)
        if findings:
            text.append(findings)
        return "\n".join(text)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def _options(target: str) -> Options:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (choose from {', '.join(sorted(TARGETS))})")
    return Options(target=TARGETS[target])


def _one_cell_notebook(source: str) -> str:
    cell: dict[str, Any] = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": source,
    }
    notebook = {
        "cells": [cell],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook)


def migrate_cell(source: str, target: str = "portable", label: str = "cell") -> Migration:
    """Migrate the code of one notebook cell (magics and shell lines included)."""
    outcome = rewrite_notebook(_one_cell_notebook(source), label, _options(target), strict=True).result
    error = outcome.error.replace(f"{label}:cell 1:", f"{label}:") if outcome.error else None
    migrated = source
    if outcome.changed:
        migrated = json.loads(outcome.migrated)["cells"][0]["source"]
    manual = [ManualItem(m.code, m.message, m.line, m.column) for m in outcome.manual]
    return Migration(label, source, migrated, "cell", outcome.changes, manual, outcome.notes, error)


def migrate_path(path: str | Path, target: str = "portable") -> Migration:
    """Migrate a script or a notebook on disk, without writing anything."""
    path = Path(path)
    try:
        text = read_source(path).text
    except SourceError as exc:
        return Migration(str(path), "", "", _kind(path), error=str(exc))
    if path.suffix == ".ipynb":
        notebook = rewrite_notebook(text, str(path), _options(target))
        outcome = notebook.result
        cells = notebook.cells
    else:
        outcome = rewrite_source(text, str(path), _options(target))
        cells = []
    return Migration(
        str(path),
        text,
        outcome.migrated if outcome.error is None else text,
        _kind(path),
        outcome.changes,
        outcome.manual,
        outcome.notes,
        outcome.error,
        cells,
    )


def _kind(path: Path) -> str:
    return "notebook" if path.suffix == ".ipynb" else "script"


def apply(migration: Migration) -> None:
    """Write a script or notebook migration back to its file (atomically; refuses if the file
    changed on disk since it was migrated)."""
    if migration.kind == "cell":
        raise ValueError("a cell migration has no file to write")
    if migration.error:
        raise ValueError(migration.error)
    source = read_source(Path(migration.label))
    if source.text != migration.original:
        raise SourceError(
            f"{migration.label}: changed on disk since it was migrated; migrate it again"
        )
    write_back(source, migration.migrated)


def notebook_code_cells(text: str) -> list[tuple[int, str]]:
    """(index, source) of the Python code cells of a notebook's JSON text (0-based indexes,
    counting every cell). Raises ValueError for text that is not a notebook."""
    notebook = json.loads(text)
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise ValueError("no 'cells'")
    result = []
    for index, cell in enumerate(notebook["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        language = ((cell.get("metadata") or {}).get("vscode") or {}).get("languageId")
        if language not in (None, "python"):
            continue
        source = cell.get("source", "")
        result.append((index, "".join(source) if isinstance(source, list) else source))
    return result
