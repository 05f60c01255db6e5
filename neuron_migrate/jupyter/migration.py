"""Migrating a cell, a script or a notebook for a Jupyter user: the rewrite engine's result, ready to
show, and the edits that apply it.

A `Migration` renders itself: as HTML in a notebook (a diff with the changes, the manual items
and the notes) and as text everywhere else (a unified diff, as `neuron-migrate rewrite --diff`
prints it). A cell is migrated as the last cell of the notebook it belongs to (`context`: the
cells before it), so that its imports and names from earlier cells are seen, exactly as
`neuron-migrate rewrite nb.ipynb` sees them; what the migration adds elsewhere for the cell (an
import, a helper such as `DeviceLoader`) comes with the cell, unless the kernel has it already.
"""

from __future__ import annotations

import ast
import json
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neuron_migrate.core.files import SourceError, read_source, write_back
from neuron_migrate.core.notebook_cells import PYTHON_CELL_MAGICS, cell_magic, mask
from neuron_migrate.core.notebook_file import locate_cells, replace_sources
from neuron_migrate.core.oldstack import CONVENTIONAL_ALIASES
from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import cell_names, render
from neuron_migrate.jupyter.bridge import Edit
from neuron_migrate.jupyter.session import Cell
from neuron_migrate.rewrite.codemods.base import TARGETS
from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.notebook import NotebookResult, rewrite_notebook
from neuron_migrate.rewrite.results import Change, ManualItem, Note

VIEWS = ("auto", "side", "unified")
MAGIC = "neuron_migrate"  # the cell magic whose body is old-stack code that never ran


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
    view: str = "auto"
    context: str = ""  # a cell: the cells it was migrated after ("In [1] to In [6]"), if any
    carried: list[str] = field(default_factory=list)  # a cell: names brought in from elsewhere
    unresolved: dict[str, str] = field(default_factory=dict)  # old-stack alias -> its module
    target: str = "portable"  # a notebook: what it was migrated for, and is again for `needed_by`

    @property
    def changed(self) -> bool:
        return self.error is None and self.migrated != self.original

    @property
    def tone(self) -> str:
        if self.error:
            return "bad"
        return "warn" if self.manual or self.unresolved else "ok"

    def verdict(self) -> str:
        """One word for the badge."""
        if self.error:
            return "error"
        if self.unresolved and not self.changed:
            return "not found"
        return "review" if self.manual else "migrated" if self.changed else "unchanged"

    def headline(self) -> str:
        if self.error:
            return f"{self.label}: not migrated: {self.error.removeprefix(f'{self.label}:')}"
        if self.unresolved and not self.changed and not self.manual:
            return f"{self.label}: {self.unresolved_text()}"
        if not self.changed and not self.manual:
            return f"{self.label}: nothing to migrate"
        if self.changed:
            # Import tidying is not listed as a change of its own.
            parts = [plural(len(self.changes), "change") if self.changes else "imports updated"]
            if self.kind == "notebook":
                parts[0] += f" in {plural(len(self.cells), 'cell')}"
        else:  # migrated already: what is left are its TODO comments
            parts = ["nothing left to change"]
        if self.manual:
            parts.append(f"{plural(len(self.manual), 'manual item')} to review")
        if self.notes:
            parts.append(plural(len(self.notes), "note"))
        return f"{self.label}: {', '.join(parts)}"

    def unresolved_text(self) -> str:
        """Why old-stack names were left: they are imported nowhere this migration could see."""
        names = sorted(self.unresolved)
        usual = "; ".join(f"`{n}` is usually `{self.unresolved[n]}`" for n in names)
        where = (
            f"this cell or the cells before it ({self.context})" if self.context else "this cell"
        )
        these = "it" if len(names) == 1 else "them"
        return (
            f"{_listed(f'`{n}`' for n in names)} {'is' if len(names) == 1 else 'are'} not imported "
            f"in {where}, so nothing of {these} was migrated ({usual}): run the cell that imports "
            f"{these}, or import {these} in this cell"
        )

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
        context = None if self.kind == "cell" else 3
        return "".join(
            render.diff_html(old, new, title, view or self.view, context)
            for title, old, new in self.pairs()
        )

    def findings_html(self) -> str:
        notes = list(self.notes)
        if self.carried:
            notes.insert(0, Note("", f"Brought into this cell: {_listed(self.carried)}."))
        if self.unresolved and (self.changed or self.manual):
            notes.insert(0, Note("", self.unresolved_text()))
        return render.migration_findings_html(self.changes, self.manual, notes)

    def _repr_html_(self) -> str:
        head = render.headline(self.verdict(), self.tone, self.headline())
        if self.error or not self.changed:
            return render.output(head + self.findings_html())
        body = self.diff_html() + self.findings_html()
        if self.kind == "cell":
            body += render.migrated_cell(self.migrated)
        return render.output(head + body)

    def __repr__(self) -> str:
        text = [self.headline()]
        if self.changed:
            text.append(self.diff_text().rstrip("\n"))
        findings = render.migration_findings_text(self.changes, self.manual, self.notes)
        if findings:
            text.append(findings)
        if self.carried:
            text.append(f"  note    brought into this cell: {_listed(self.carried)}")
        if self.unresolved and (self.changed or self.manual):
            text.append(f"  note    {self.unresolved_text()}")
        return "\n".join(text)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    # -- applying ---------------------------------------------------------------------------------

    def needed_by(self, index: int) -> list[int]:
        """The changed cells (0-based) an Apply of cell `index` writes: itself, the cells where the
        migration puts what it uses (an import, a helper such as `DeviceLoader`), and the cells
        whose migration would change once those are written (a model traced in one cell and
        loaded back in another migrate together). So whatever the order of the cells applied, the
        notebook ends as the migration of the whole notebook leaves it."""
        if index not in {i for i, _, _ in self.cells}:
            return []
        wanted = self._with_definitions_used({index})
        while True:
            moved = self._moved_by(wanted)
            if not moved:
                return sorted(wanted)
            wanted = self._with_definitions_used(wanted | moved)

    def _with_definitions_used(self, wanted: set[int]) -> set[int]:
        """`wanted` and the changed cells where the migration adds a name they read, in turn."""
        old = {i: o for i, o, _ in self.cells}
        new = {i: n for i, _, n in self.cells}
        added = {
            i: {
                name
                for name in cell_names.definitions(new[i])
                if name not in cell_names.definitions(old[i])
            }
            for i in new
        }
        wanted, cells = set(wanted), list(wanted)
        while cells:
            i = cells.pop()
            names = cell_names.free_names(new[i])
            for j, defined_there in added.items():
                if j not in wanted and names & defined_there:
                    wanted.add(j)
                    cells.append(j)
        return wanted

    def _moved_by(self, wanted: set[int]) -> set[int]:
        """The changed cells outside `wanted` whose migration changes once `wanted` is written."""
        written = {index: new for index, _, new in self.edit(wanted).cells}
        cells = locate_cells(self.original)
        after = rewrite_notebook(
            replace_sources(self.original, cells, written), self.label, _options(self.target)
        )
        if after.result.error:
            return set()
        now = {index: new for index, old, new in self.cells if old != new}
        later = {index: new for index, old, new in after.cells if old != new}
        return {i for i in now if i not in wanted and now[i] != later.get(i)}

    def edit(self, cells: Iterable[int] | None = None) -> Edit:
        """The edit that writes this migration, or only the given notebook cells (0-based)."""
        if self.kind == "cell":
            raise ValueError("a cell migration has no file to write")
        if self.error:
            raise ValueError(self.error)
        if self.kind == "script":
            return Edit(Path(self.label), text=(self.original, self.migrated))
        wanted = None if cells is None else set(cells)
        chosen = [c for c in self.cells if wanted is None or c[0] in wanted]
        if wanted is not None:
            chosen = _keeping_imports_of_the_rest(
                chosen, [c for c in self.cells if c[0] not in wanted]
            )
        return Edit(Path(self.label), cells=chosen)


def _listed(items: Iterable[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _options(target: str) -> Options:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (choose from {', '.join(sorted(TARGETS))})")
    # Checked against the kernel's own libraries: where the migrated code will run.
    return Options(target=TARGETS[target], verify_in=sys.executable)


def _notebook(sources: Sequence[str]) -> str:
    cells: list[dict[str, Any]] = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
        for s in sources
    ]
    notebook = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook)


# -- one cell, in its notebook --------------------------------------------------------------------


def _cell_problem(source: str) -> str | None:
    """Why a cell cannot be migrated as Python (`line:col: SyntaxError: ...`), or None."""
    magic = cell_magic(source)
    if (
        magic is not None
        and magic[0] not in PYTHON_CELL_MAGICS
        and magic[0] not in ("file", "writefile")
    ):
        return f"1:1: a %%{magic[0]} cell is not Python"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(mask(source).text)
    except SyntaxError as exc:
        if magic is not None and magic[0] in ("file", "writefile"):
            return None  # a file that is not Python: the rewrite leaves it as it is
        return f"{exc.lineno or 1}:{exc.offset or 1}: SyntaxError: {exc.msg}"
    except ValueError as exc:
        return f"1:1: {exc}"
    return None


def _body(source: str) -> str:
    """The old-stack code of an earlier cell: a `%%neuron_migrate` cell never ran its body, but
    its imports and names are the notebook's all the same."""
    magic = cell_magic(source)
    if magic is not None and magic[0] == MAGIC:
        return source.split("\n", 1)[1] if "\n" in source else ""
    return source


def _minus(items: Sequence[Any], taken: Sequence[Any]) -> list[Any]:
    """`items` without one occurrence of each of `taken` (what a cell adds to its notebook's list)."""
    left = Counter(taken)
    kept = []
    for item in items:
        if left[item]:
            left[item] -= 1
        else:
            kept.append(item)
    return kept


def _span(context: Sequence[Cell]) -> str:
    if not context:
        return ""
    return context[0].label if len(context) == 1 else f"{context[0].label} to {context[-1].label}"


def _nothing(_name: str) -> bool:
    return False


def migrate_cell(
    source: str,
    target: str = "portable",
    label: str = "cell",
    context: Sequence[Cell] = (),
    defined: Callable[[str], bool] = _nothing,
) -> Migration:
    """Migrate the code of one notebook cell (magics and shell lines included), after `context`,
    the cells before it. `defined(name)` says whether the kernel has `name` already: what the
    migration needs from elsewhere is brought into the cell only where it does not."""
    # Names no cell before binds are the headline's to tell (`unresolved`), not TODOs in the cell.
    options = replace(_options(target), marks_unbound_aliases=False)
    problem = _cell_problem(source)
    if problem is not None:
        return Migration(label, source, source, "cell", error=f"{label}:{problem}")
    earlier = [_body(cell.source) for cell in context]
    outcome = rewrite_notebook(_notebook([*earlier, source]), label, options)
    if outcome.result.error and earlier:
        # An earlier cell the engine cannot take: migrate the cell on its own.
        return migrate_cell(source, target, label, (), defined)
    if outcome.result.error:
        error = outcome.result.error.replace(f"{label}:cell 1:", f"{label}:")
        return Migration(label, source, source, "cell", error=error)
    before = rewrite_notebook(_notebook(earlier), label, options) if earlier else None
    index = len(earlier)
    migrated = dict((i, new) for i, _, new in outcome.cells).get(index, source)
    if earlier:
        migrated = cell_names.without_unused_old_imports(migrated)
    carried, shift = _carried(source, migrated, outcome, earlier, defined), 0
    if carried:
        migrated, shift = cell_names.with_definitions(migrated, list(carried.values()))
    unresolved = {
        name: CONVENTIONAL_ALIASES[name]
        for name in sorted(cell_names.free_names(source) & set(CONVENTIONAL_ALIASES))
        if not defined(name) and not any(name in cell_names.definitions(cell) for cell in earlier)
    }
    base = before.result if before is not None else None
    return Migration(
        label,
        source,
        migrated,
        "cell",
        _minus(outcome.result.changes, base.changes if base else []),
        [
            ManualItem(m.code, m.message, m.line + shift, m.column)
            for m in outcome.result.manual
            if m.cell == index + 1
        ],
        _minus(outcome.result.notes, base.notes if base else []),
        context=_span(context),
        carried=list(carried),
        unresolved=unresolved,
    )


def _carried(
    source: str,
    migrated: str,
    outcome: NotebookResult,
    earlier: list[str],
    defined: Callable[[str], bool],
) -> dict[str, str]:
    """The definitions the migrated cell uses that the migration put into earlier cells (an
    import, a helper, and what they use in turn) and the kernel does not have yet: by name, as
    written there, in the order of the notebook."""
    new_sources = dict((i, new) for i, _, new in outcome.cells)
    available: dict[str, str] = {}
    for position, old in enumerate(earlier):
        for name, text in cell_names.definitions(new_sources.get(position, old)).items():
            available.setdefault(name, text)
    wanted: set[str] = set()
    missing = {
        name
        for name in cell_names.free_names(migrated) - cell_names.free_names(source)
        if not defined(name)
    }
    while missing:
        wanted |= missing
        found = [available[name] for name in missing if name in available]
        missing = {
            n for text in found for n in cell_names.free_names(text) if not defined(n)
        } - wanted
    return {name: text for name, text in available.items() if name in wanted}


def _keeping_imports_of_the_rest(
    chosen: list[tuple[int, str, str]], rest: list[tuple[int, str, str]]
) -> list[tuple[int, str, str]]:
    """The cells to write, each keeping the imports that the cells left as they were still read
    (`xm` of a cell not applied yet): the whole-notebook migration dropped them, since it migrated
    those cells too. Applying those cells later drops them then."""
    still_read = set().union(*(cell_names.free_names(old) for _, old, _ in rest)) if rest else set()
    kept = []
    for index, old, new in chosen:
        present = cell_names.definitions(new)
        wanted = [
            text
            for name, text in cell_names.definitions(old).items()
            if name in still_read and name not in present and text.startswith(("import ", "from "))
        ]
        if wanted:
            new = cell_names.with_definitions(new, list(dict.fromkeys(wanted)))[0]
        kept.append((index, old, new))
    return kept


# -- scripts and notebooks ------------------------------------------------------------------------


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
        target=target,
    )


def _kind(path: Path) -> str:
    return "notebook" if path.suffix == ".ipynb" else "script"


def write(edit: Edit) -> bool:
    """Make `edit` on disk (atomically); False when the file holds what it writes already (an
    undo after a save of a stale tab put the original back, say). Refuses, with SourceError,
    where the file holds neither what the edit expects nor what it writes: it changed since."""
    source = read_source(edit.path)
    if edit.text is not None:
        old, new = edit.text
        if source.text == new:
            return False
        if source.text != old:
            raise SourceError(
                f"{edit.path}: edited since the migration was written, so it is not restored"
                if edit.undoing
                else f"{edit.path}: changed on disk since it was migrated; migrate it again"
            )
        write_back(source, new)
        return True
    try:
        cells = locate_cells(source.text)
    except (ValueError, KeyError, IndexError) as exc:
        raise SourceError(f"{edit.path}: not a readable notebook ({exc})") from None
    by_index = {cell.index: cell for cell in cells}
    for index, old, new in edit.cells:
        if index not in by_index or by_index[index].source not in (old, new):
            raise SourceError(
                f"{edit.path}: cell {index + 1} was edited since the migration was written, so "
                "the cells are not restored"
                if edit.undoing
                else f"{edit.path}: cell {index + 1} changed on disk since it was migrated; "
                "migrate it again"
            )
    new_sources = {index: new for index, old, new in edit.cells if by_index[index].source == old}
    if not new_sources:
        return False
    write_back(source, replace_sources(source.text, cells, new_sources))
    return True


def apply(migration: Migration) -> None:
    """Write a script or notebook migration back to its file (atomically; refuses if the file
    changed on disk since it was migrated)."""
    write(migration.edit())


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
