"""The migration app: pick a script, a notebook or one of its cells, review the migration next to
the original with what changed, what is left to do and what `check` still finds, then apply it.

Built from plain ipywidgets, so it runs wherever widgets do, and its state lives in traitlets:
setting `file_picker.value` or calling `apply_button.click()` does what a click in the browser
does (which is how the tests drive it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import ipywidgets as widgets

from neuron_migrate.core.files import SourceError, discover
from neuron_migrate.core.wording import plural
from neuron_migrate.jupyter import render
from neuron_migrate.jupyter.check import CheckReport, check_cells, check_script, notebook_cells
from neuron_migrate.jupyter.migration import Migration, apply, migrate_path, notebook_code_cells
from neuron_migrate.rewrite.codemods.base import TARGETS

WHOLE_FILE = -1


class MigrationApp(widgets.VBox):
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
            options=[("side by side", "side"), ("unified", "unified")],
            value="side",
            description="View",
        )
        self.headline = widgets.HTML()
        self.diff = widgets.HTML(layout=widgets.Layout(max_height="480px", overflow="auto"))
        self.findings = widgets.HTML()
        self.checks = widgets.HTML()
        self.apply_button = widgets.Button(
            description="Apply", button_style="primary", icon="check"
        )
        self.status = widgets.HTML()
        super().__init__(
            [
                widgets.HBox([self.file_picker, self.cell_picker]),
                widgets.HBox([self.target_picker, self.view_picker]),
                self.headline,
                self.diff,
                self.findings,
                self.checks,
                widgets.HBox([self.apply_button, self.status]),
            ]
        )
        self.add_class("nm-migration-app")
        self._fill_files()
        self.file_picker.observe(self._file_changed, names="value")
        self.cell_picker.observe(lambda _: self._show(), names="value")
        self.target_picker.observe(self._target_changed, names="value")
        self.view_picker.observe(lambda _: self._show(), names="value")
        self.apply_button.on_click(self._apply)
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

    def _fill_files(self) -> None:
        options = []
        for path in self.files:
            key = (path, self.target_picker.value)
            migration = self._cache.get(key) or migrate_path(path, self.target_picker.value)
            self._cache[key] = migration
            mark = (
                "error"
                if migration.error
                else "to migrate"
                if migration.changed
                else "nothing to do"
            )
            options.append((f"{path}  ({mark})", str(path)))
        current = self.file_picker.value
        self.file_picker.options = options
        if current in {value for _, value in options}:
            self.file_picker.value = current
        elif options:
            # The first file with something to do is the one a user came for.
            pending = [value for label, value in options if label.endswith("(to migrate)")]
            self.file_picker.value = pending[0] if pending else options[0][1]

    def _file_changed(self, _change: object = None) -> None:
        migration = self.migration
        self.status.value = ""
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
        self.cell_picker.value = WHOLE_FILE
        self._show()

    def _target_changed(self, _change: object) -> None:
        self._fill_files()
        self._file_changed()

    # -- views ------------------------------------------------------------------------------------

    def _show(self) -> None:
        migration = self.migration
        if migration is None:
            self.headline.value = "<i>No Python scripts or notebooks found.</i>"
            self.diff.value = self.findings.value = self.checks.value = ""
            self.apply_button.disabled = True
            return
        view = self.view_picker.value
        index = self.cell_picker.value
        if migration.kind == "notebook" and index != WHOLE_FILE and not migration.error:
            # One cell: its diff and its TODOs (the engine reports changes per notebook).
            old = dict(notebook_code_cells(migration.original)).get(index, "")
            new = next((n for i, _, n in migration.cells if i == index), old)
            manual = [m for m in migration.manual if m.cell == index + 1]
            cell = Migration(f"cell {index + 1}", old, new, "cell", manual=manual)
            state = "changed" if cell.changed else "unchanged"
            todo = f", {plural(len(manual), 'manual item')} to review" if manual else ""
            self.headline.value = _headline(
                migration, f"{migration.label}, cell {index + 1}: {state}{todo}"
            )
            self.diff.value = cell.diff_html(view) if cell.changed else ""
            self.findings.value = cell.findings_html()
        else:
            self.headline.value = _headline(migration, migration.headline())
            self.diff.value = migration.diff_html(view) if migration.changed else ""
            self.findings.value = migration.findings_html()
        self.checks.value = self._checks_html(migration)
        self.apply_button.disabled = not migration.changed
        self.apply_button.description = f"Apply to {Path(migration.label).name}"

    def _checks_html(self, migration: Migration) -> str:
        """What `neuron-migrate check` finds in the migrated code (static-shape hazards)."""
        if migration.error:
            return ""
        report = self.check(migration)
        if not report.findings and not report.errors:
            return f'<div style="margin-top: 6px;">{render.badge("clean", "ok")} <code>neuron-migrate check</code> finds nothing in the migrated code.</div>'
        return f'<div style="margin-top: 6px;"><b>Static-shape check of the migrated code</b>{report._repr_html_()}</div>'

    def check(self, migration: Migration) -> CheckReport:
        """`neuron-migrate check` on the migrated code of a file."""
        if migration.kind == "notebook":
            return check_cells(notebook_cells(migration.migrated), migration.label)
        return check_script(migration.migrated, migration.label)

    # -- apply ------------------------------------------------------------------------------------

    def _apply(self, _button: object = None) -> None:
        migration = self.migration
        if migration is None or not migration.changed:
            return
        try:
            apply(migration)
        except (SourceError, ValueError) as exc:
            self.status.value = f"{render.badge('not written', 'bad')} {render.escape(str(exc))}"
            return
        path = Path(migration.label)
        for key in [k for k in self._cache if k[0] == path]:
            del self._cache[key]
        self._fill_files()
        self._file_changed()
        what = plural(len(migration.changes), "change")
        todo = (
            f"; {plural(len(migration.manual), 'TODO comment')} to review"
            if migration.manual
            else ""
        )
        self.status.value = (
            f"{render.badge('written', 'ok')} {render.escape(f'{path}: {what}{todo}')}"
        )


def _headline(migration: Migration, text: str) -> str:
    tone = "bad" if migration.error else "warn" if migration.manual else "ok"
    word = (
        "error"
        if migration.error
        else "review"
        if migration.manual
        else "to migrate"
        if migration.changed
        else "nothing to do"
    )
    return f"{render.badge(word, tone)} <b>{render.escape(text)}</b>"
