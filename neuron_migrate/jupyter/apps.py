"""The migration app: pick a script, a notebook or one of its cells, review the migration next to
the original with what changed, what is left to do and what `check` still finds, apply it, see
what was written, undo it, go on to the next. For a notebook, Re-run and compare runs its
migration in a fresh kernel and shows, cell by cell, whether the outputs are those it saved.

Apply writes what is selected (one cell, or the whole file). A file open in a JupyterLab tab of
this window is changed in that tab, which saves it (see `bridge`): the tab's own undo works, and
no later save of the tab brings the old code back. Any other file is written on disk, atomically,
and only if what the migration replaces is still there.

Built from plain ipywidgets, so it runs wherever widgets do, and its state lives in traitlets:
setting `file_picker.value` or calling `apply_button.click()` does what a click in the browser
does (which is how the tests drive it).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import ipywidgets as widgets
from IPython import get_ipython

from neuron_migrate.core.files import SourceError, discover
from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import bridge, render
from neuron_migrate.jupyter.check import CheckReport, check_cells, check_script, notebook_cells
from neuron_migrate.jupyter.dashboard import ValidationDashboard
from neuron_migrate.jupyter.migration import Migration, migrate_path, notebook_code_cells, write
from neuron_migrate.jupyter.views import StaticView
from neuron_migrate.rewrite.codemods.base import TARGETS

WHOLE_FILE = -1


@dataclass
class Applied:
    """One write the app made, kept to show it and to undo it."""

    edit: bridge.Edit
    what: str  # "train.py" or "tutorial.ipynb, cell 4"
    how: str  # "through its open tab" or "on disk"
    todos: int
    changes: int | None = None  # for a whole file (the engine counts changes per file)


class MigrationApp(StaticView, widgets.VBox):
    """Review and apply migrations of the scripts and notebooks under `paths`.

    app = MigrationApp(["train.py", "notebooks/"])
    app   # in a notebook: shows the app
    """

    def __init__(self, paths: Iterable[str | Path] = (".",), target: str = "portable") -> None:
        if target not in TARGETS:
            raise ValueError(
                f"unknown target {target!r} (choose from {', '.join(sorted(TARGETS))})"
            )
        self.files = discover([Path(p) for p in paths], (".py", ".ipynb"))
        self._cache: dict[tuple[Path, str], Migration] = {}
        self.done: list[Applied] = []  # what Apply wrote, newest last (Undo takes it back)
        self.file_picker = widgets.Dropdown(description="File", layout=widgets.Layout(width="60%"))
        self.cell_picker = widgets.Dropdown(description="Cell", layout=widgets.Layout(width="30%"))
        self.target_picker = widgets.ToggleButtons(
            options=sorted(TARGETS, key=lambda t: t != "portable"),
            value=target,
            description="Target",
            tooltips=[
                "code that runs on Trainium, CUDA and CPU alike",
                "the explicit 'neuron' device and backend spellings",
            ],
        )
        self.view_picker = widgets.ToggleButtons(
            options=[("auto", "auto"), ("side by side", "side"), ("unified", "unified")],
            value="auto",
            description="View",
            tooltips=[
                "side by side, one column where the output is narrow",
                "always side by side",
                "one unified diff",
            ],
        )
        self.headline = widgets.HTML()
        self.diff = widgets.HTML(layout=widgets.Layout(max_height="560px", overflow="auto"))
        self.findings = widgets.HTML()
        self.checks = widgets.HTML()

        def fit() -> widgets.Layout:  # room for "Apply cell 4 to tutorial.ipynb"
            return widgets.Layout(width="auto", flex="0 0 auto")

        self.apply_button = widgets.Button(
            description="Apply", button_style="primary", icon="check", layout=fit()
        )
        self.undo_button = widgets.Button(
            description="Undo", icon="undo", disabled=True, layout=fit()
        )
        self.next_button = widgets.Button(
            description="Next", icon="arrow-right", disabled=True, layout=fit()
        )
        self.rerun_button = widgets.Button(
            description="Re-run and compare",
            icon="refresh",
            tooltip="run the migrated notebook in a fresh kernel and compare each cell's outputs "
            "with those saved in the original",
            layout=fit(),
        )
        self.status = widgets.HTML()
        self.review = widgets.HTML()  # what the last Apply wrote
        # Re-run and compare shows its table here (a validation dashboard of the two notebooks).
        self.rerun: ValidationDashboard | None = None
        self._rerun_copy: Path | None = None
        self.rerun_box = widgets.VBox()
        # Where JupyterLab lacks the extension, the app writes to disk behind an open tab's back.
        self.notice = widgets.HTML()
        if bridge.extension_missing(get_ipython()):
            missing = bridge.EXTENSION_MISSING
            self.notice.value = _status("note", "warn", missing[0].upper() + missing[1:])
        super().__init__(
            [
                widgets.HBox([self.file_picker, self.cell_picker]),
                widgets.HBox([self.target_picker, self.view_picker]),
                self.headline,
                self.diff,
                self.findings,
                self.checks,
                widgets.HBox(
                    [
                        self.apply_button,
                        self.undo_button,
                        self.next_button,
                        self.rerun_button,
                        self.status,
                    ]
                ),
                self.notice,
                self.review,
                self.rerun_box,
            ]
        )
        self.add_class("nm-migration-app")
        self._fill_files()
        self.file_picker.observe(self._file_changed, names="value")
        self.cell_picker.observe(lambda _: self._show(), names="value")
        self.target_picker.observe(self._target_changed, names="value")
        self.view_picker.observe(lambda _: self._show(), names="value")
        self.apply_button.on_click(self._apply)
        self.undo_button.on_click(self._undo)
        self.next_button.on_click(self._next)
        self.rerun_button.on_click(lambda _: self.rerun_and_compare())
        self._file_changed()

    def __repr__(self) -> str:
        migration = self.migration
        return f"MigrationApp: {migration.headline() if migration else 'no Python scripts or notebooks found'}"

    # -- state ------------------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        value = self.file_picker.value
        return Path(value) if value else None

    @property
    def migration(self) -> Migration | None:
        """The migration of the selected file, for the selected target."""
        if self.path is None:
            return None
        key = (self.path, self.target_picker.value)
        if key not in self._cache:
            self._cache[key] = migrate_path(self.path, self.target_picker.value)
        return self._cache[key]

    @property
    def cell(self) -> int | None:
        """The selected cell (0-based), or None for the whole file."""
        value = self.cell_picker.value
        return None if value in (None, WHOLE_FILE) else int(value)

    def _fill_files(self) -> None:
        options = []
        for path in self.files:
            key = (path, self.target_picker.value)
            migration = self._cache.get(key) or migrate_path(path, self.target_picker.value)
            self._cache[key] = migration
            options.append((f"{path}  ({_state(migration)})", str(path)))
        current = self.file_picker.value
        self.file_picker.options = options
        if current in {value for _, value in options}:
            self.file_picker.value = current
        elif options:
            # The first file with something to do is the one a user came for.
            pending = [value for label, value in options if label.endswith("(to migrate)")]
            self.file_picker.value = pending[0] if pending else options[0][1]

    def _file_changed(self, _change: object = None, cell: int = WHOLE_FILE) -> None:
        migration = self.migration
        if migration is not None and migration.kind == "notebook" and not migration.error:
            changed = {index for index, _, _ in migration.cells}
            options: list[tuple[str, int]] = [("whole notebook", WHOLE_FILE)]
            options += [
                (f"cell {index + 1}{'  (changes)' if index in changed else ''}", index)
                for index, _ in notebook_code_cells(migration.original)
            ]
            self.cell_picker.options = options
            self.cell_picker.layout.display = None
        else:
            self.cell_picker.options = [("whole file", WHOLE_FILE)]
            self.cell_picker.layout.display = "none"
        values = {value for _, value in self.cell_picker.options}
        self.cell_picker.value = cell if cell in values else WHOLE_FILE
        self._show()

    def _target_changed(self, _change: object) -> None:
        self._fill_files()
        self._file_changed()

    # -- views ------------------------------------------------------------------------------------

    def _selection(self) -> tuple[Migration, str]:
        """What is selected, as a migration of its own, with its headline."""
        migration = self.migration
        assert migration is not None
        index = self.cell
        if migration.kind != "notebook" or index is None or migration.error:
            return migration, migration.headline()
        # One cell: its diff and its TODOs (the engine reports changes per notebook).
        old = dict(notebook_code_cells(migration.original)).get(index, "")
        new = next((n for i, _, n in migration.cells if i == index), old)
        manual = [m for m in migration.manual if m.cell == index + 1]
        cell = Migration(f"cell {index + 1}", old, new, "cell", manual=manual)
        state = "changed" if cell.changed else "unchanged"
        todo = f", {plural(len(manual), 'manual item')} to review" if manual else ""
        return cell, f"{migration.label}, cell {index + 1}: {state}{todo}"

    def _show(self) -> None:
        migration = self.migration
        if migration is None:
            self.headline.value = "<i>No Python scripts or notebooks found.</i>"
            self.diff.value = self.findings.value = self.checks.value = ""
            self.apply_button.disabled = True
            self.rerun_button.layout.display = "none"
            self._buttons()
            return
        view = self.view_picker.value
        shown, text = self._selection()
        self.headline.value = render.headline(_state(migration), migration.tone, text)
        self.diff.value = render.output(shown.diff_html(view)) if shown.changed else ""
        self.findings.value = render.output(
            shown.findings_html() if shown is not migration else migration.findings_html()
        )
        self.checks.value = self._checks_html(migration)
        self.apply_button.disabled = not shown.changed
        name = Path(migration.label).name
        where = f"cell {self.cell + 1} to " if self.cell is not None else ""
        self.apply_button.description = f"Apply {where}{name}"
        notebook = migration.kind == "notebook" and not migration.error
        self.rerun_button.layout.display = None if notebook else "none"
        self._buttons()

    def _buttons(self) -> None:
        self.undo_button.disabled = not self.done
        following = self._following()
        self.next_button.disabled = following is None
        self.next_button.description = f"Next: {following[1]}" if following else "Next"
        self.publish()

    def _checks_html(self, migration: Migration) -> str:
        """What `neuron-migrate check` finds in the migrated code (static-shape hazards)."""
        if migration.error:
            return ""
        report = self.check(migration)
        if not report.findings and not report.errors:
            return render.output(
                f'<div style="margin-top: 6px;">{render.badge("clean", "ok")} '
                "<code>neuron-migrate check</code> finds nothing in the migrated code.</div>"
            )
        return (
            '<div style="margin-top: 6px;"><b>Static-shape check of the migrated code</b></div>'
            + report._repr_html_()
        )

    def check(self, migration: Migration) -> CheckReport:
        """`neuron-migrate check` on the migrated code of a file."""
        if migration.kind == "notebook":
            return check_cells(notebook_cells(migration.migrated), migration.label)
        return check_script(migration.migrated, migration.label)

    def static_html(self) -> str:
        parts = [self.headline.value, self.diff.value, self.findings.value, self.checks.value]
        rerun = self.rerun.static_html() if self.rerun is not None else ""
        return "".join(parts) + self.status.value + self.review.value + rerun

    # -- re-run and compare -----------------------------------------------------------------------

    def rerun_and_compare(self, timeout: float = 600) -> bool:
        """Run the selected notebook's migration in a fresh kernel, in the background, and compare
        each code cell's outputs with those saved in the notebook (`neuron-migrate validate
        NOTEBOOK MIGRATED`); the table shows below. False (saying why) when it cannot start.

        The migration runs from a copy in a temporary folder, in the notebook's own folder (the
        files it reads are there), whether or not it was applied: Apply changes the cells' code
        and keeps the outputs they saved."""
        migration = self.migration
        if migration is None or migration.kind != "notebook" or migration.error:
            return False
        if self.rerun is not None and self.rerun.validation and self.rerun.validation.running:
            self.rerun.status.value = render.badge("already running", "warn")
            return False
        original = Path(migration.label)
        if self._rerun_copy is not None:  # the last run's copy: only its table is kept
            shutil.rmtree(self._rerun_copy.parent, ignore_errors=True)
        copy = Path(tempfile.mkdtemp(prefix="neuron-migrate-rerun-")) / original.name
        copy.write_text(migration.migrated, encoding="utf-8")
        self._rerun_copy = copy
        options = ["--migrated-cwd", str(original.parent.resolve())]
        if self.rerun is None:
            self.rerun = ValidationDashboard(owner=self)
            self.rerun_box.children = [self.rerun]
        return self.rerun.start(original, copy, options=options, timeout=timeout)

    # -- apply, undo, next ------------------------------------------------------------------------

    def _apply(self, _button: object = None) -> None:
        migration = self.migration
        if migration is None or self.apply_button.disabled:
            return
        shown, _ = self._selection()
        if self.cell is None:
            edit, what = migration.edit(), migration.label
        else:
            cells = migration.needed_by(self.cell)
            edit = migration.edit(cells)
            what = f"{migration.label}, {_cells(cells)}"

        def written(how: str) -> None:
            changes = len(migration.changes) if self.cell is None else None
            applied = Applied(edit, what, how, len(shown.manual), changes)
            self.done.append(applied)
            self._reload(migration.label)
            self.status.value = _status("written", "ok", _said(applied))
            self.review.value = _review(applied, self.view_picker.value)
            self._buttons()

        self._write(edit, f"writing {what}", written)

    def _undo(self, _button: object = None) -> None:
        if not self.done:
            return
        applied = self.done[-1]

        def undone(how: str) -> None:
            self.done.pop()
            self._reload(str(applied.edit.path))
            self.status.value = _status("undone", "ok", f"{applied.what}: restored {how}")
            self.review.value = ""
            self._buttons()

        self._write(applied.edit.undo(), f"restoring {applied.what}", undone)

    def _write(self, edit: bridge.Edit, doing: str, then: Callable[[str], None]) -> None:
        """Make `edit` in the file's open tab, or on disk where no tab has it open; then `then(how)`."""
        self.apply_button.disabled = self.undo_button.disabled = True
        self.status.value = f"<i>{render.escape(doing)}...</i>"

        def on_disk() -> None:
            try:
                wrote = write(edit)
            except SourceError as exc:
                self._failed(str(exc), edit)
                return
            then("on disk" if wrote else "(the file held it already)")

        def answered(reply: bridge.Reply) -> None:
            if reply.get("done"):
                then(
                    "(its open tab held it already)"
                    if reply.get("already")
                    else "through its open tab"
                )
            elif not reply.get("open"):
                on_disk()
            else:
                self._failed(str(reply.get("error") or "the open tab refused the change"), edit)

        tab = bridge.current()
        if tab is None or not tab.edit(edit, answered):
            on_disk()

    def _failed(self, why: str, edit: bridge.Edit) -> None:
        self.status.value = _status("not undone" if edit.undoing else "not written", "bad", why)
        self._show()

    def _reload(self, label: str) -> None:
        """Forget the migrations of a file that was written, and show it again as it is now."""
        path = Path(label)
        for key in [k for k in self._cache if k[0] == path]:
            del self._cache[key]
        cell = self.cell_picker.value
        self._fill_files()
        self._file_changed(cell=cell if self.path == path else WHOLE_FILE)

    def _following(self) -> tuple[tuple[str, int], str] | None:
        """What Next shows: with a cell picked, the next cell with changes below it; else
        another file to migrate; else (with a cell picked) the first cell with changes above.
        None when nothing is left."""
        migration = self.migration
        if migration is None:
            return None
        others = []
        if migration.kind == "notebook" and self.cell is not None and not migration.error:
            others = [i for i, _, _ in migration.cells if i != self.cell]
            below = [i for i in others if i > self.cell]
            if below:
                return (str(self.path), below[0]), f"cell {below[0] + 1}"
        for path in self.files:
            other = self._cache.get((path, self.target_picker.value))
            if path != self.path and other is not None and other.changed:
                return (str(path), WHOLE_FILE), path.name
        if others:
            return (str(self.path), others[0]), f"cell {others[0] + 1}"
        return None

    def _next(self, _button: object = None) -> None:
        following = self._following()
        if following is None:
            return
        (value, cell), _ = following
        self.status.value = self.review.value = ""
        if value == self.file_picker.value:
            self.cell_picker.value = cell
        else:
            self.file_picker.value = value  # shows its first cell with changes, or the file
            if cell != WHOLE_FILE:
                self.cell_picker.value = cell


def _state(migration: Migration) -> str:
    if migration.error:
        return "error"
    if migration.changed:
        return "to migrate"
    return "to review" if migration.manual else "nothing to do"


def _status(word: str, tone: str, text: str) -> str:
    return f"{render.badge(word, tone)} {render.escape(text)}"


def _cells(indexes: list[int]) -> str:
    """`cell 4`, `cells 2 and 4`."""
    numbers = [str(i + 1) for i in indexes]
    if len(numbers) == 1:
        return f"cell {numbers[0]}"
    return f"cells {', '.join(numbers[:-1])} and {numbers[-1]}"


def _said(applied: Applied) -> str:
    todo = f"; {plural(applied.todos, 'TODO comment')} to review" if applied.todos else ""
    changes = f": {plural(applied.changes, 'change')}" if applied.changes else ""
    return f"{applied.what} written {applied.how}{changes}{todo}"


def _review(applied: Applied, view: str) -> str:
    """What an Apply wrote, as diffs: to read it over, and to undo it if it is not right."""
    edit = applied.edit
    if edit.text is not None:
        pairs = [(edit.path.name, *edit.text)]
    else:
        pairs = [(f"{edit.path.name}, cell {i + 1}", old, new) for i, old, new in edit.cells]
    diffs = "".join(render.diff_html(old, new, title, view, 3) for title, old, new in pairs)
    return render.output(
        f'<details class="nm-review"><summary>What was written ({render.escape(applied.what)})'
        f"</summary>{diffs}</details>"
    )
