"""Diff rendering, and migrating cells, scripts and notebooks for display (and applying them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from neuron_migrate.core.files import SourceError
from neuron_migrate.jupyter import Diff, migrate_cell, migrate_path, render
from neuron_migrate.jupyter.migration import apply, notebook_code_cells

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """\
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
x = torch.ones(2).to(device)
xm.mark_step()
"""


def rows(html: str, kind: str) -> int:
    return html.count(f'<tr class="{kind}">')


def test_side_by_side_pairs_lines_and_marks_changed_characters() -> None:
    html = render.side_by_side("a = 1\nb = 2\nc = 3\n", "a = 1\nb = 20\nc = 3\nd = 4\n")
    assert rows(html, "nm-same") == 2 and rows(html, "nm-chg") == 1 and rows(html, "nm-add") == 1
    assert (
        'b = 2<span style="background: rgba(46, 160, 67, 0.45); border-radius: 2px;">0</span>'
        in html
    )
    assert html.startswith('<table class="nm-diff nm-side"')
    assert "<style" not in html  # inline styles only: they survive sanitisers and static renders


def test_side_by_side_escapes_html() -> None:
    html = render.side_by_side("x = '<b>'\n", "x = '<b>'\ntotal = compute('<i>', 3)\n")
    assert "<b>" not in html and "<i>" not in html
    assert "&lt;b&gt;" in html and "&lt;i&gt;" in html


def test_unrelated_lines_are_not_marked_character_by_character() -> None:
    html = render.side_by_side("import torch_xla.core.xla_model as xm\n", "class DeviceLoader:\n")
    assert "0.45" not in html


def test_context_folds_unchanged_lines() -> None:
    old = "".join(f"line {i}\n" for i in range(40))
    new = old.replace("line 20\n", "line twenty\n")
    folded = render.side_by_side(old, new, context=2)
    assert folded.count('class="nm-skip"') == 2
    assert "⋯ 18 unchanged lines ⋯" in folded and "⋯ 17 unchanged lines ⋯" in folded
    assert rows(folded, "nm-same") == 4
    assert 'class="nm-skip"' not in render.side_by_side(old, new)


def test_unified_html_and_text() -> None:
    html = render.unified_html("a\n", "b\n")
    assert 'class="nm-diff nm-unified"' in html and "-a" in html and "+b" in html
    assert render.unified_diff("a", "b") == "--- original\n+++ migrated\n@@ -1 +1 @@\n-a\n+b\n"


def test_prose_turns_backticks_into_code() -> None:
    assert render.prose("use `a < b` here") == "use <code>a &lt; b</code> here"
    assert render.prose("one ` alone") == "one ` alone"


def test_diff_object() -> None:
    diff = Diff("a\n", "b\n", "old.py", "new.py")
    assert repr(diff) == "--- old.py\n+++ new.py\n@@ -1 +1 @@\n-a\n+b"
    assert "old.py" in diff._repr_html_() and "nm-side" in diff._repr_html_()
    assert "nm-unified" in Diff("a\n", "b\n", view="unified")._repr_html_()
    assert repr(Diff("a\n", "a\n")) == "before and after are the same"


def test_migrate_cell() -> None:
    migration = migrate_cell(SCRIPT, label="In [7]")
    assert migration.changed and migration.kind == "cell"
    assert migration.headline() == "In [7]: 2 changes"
    assert "xm" not in migration.migrated
    assert {c.code for c in migration.changes} == {"NM001", "NM002"}
    assert migrate_cell(SCRIPT, target="neuron").migrated.count('torch.device("neuron")') == 1
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        migrate_cell(SCRIPT, target="tpu")


def test_migrate_a_script_and_apply_it(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    migration = migrate_path(path)
    assert migration.kind == "script" and migration.changed
    assert path.read_text() == SCRIPT, "migrating must not write"
    assert "@@" in migration.diff_text()
    apply(migration)
    assert path.read_text() == migration.migrated
    assert not migrate_path(path).changed


def test_apply_refuses_a_file_changed_since_it_was_migrated(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    migration = migrate_path(path)
    path.write_text(SCRIPT + "# edited meanwhile\n")
    with pytest.raises(SourceError, match="changed on disk since it was migrated"):
        apply(migration)
    with pytest.raises(ValueError, match="no file"):
        apply(migrate_cell(SCRIPT))


def test_migrate_a_notebook(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
        {
            "cell_type": "code",
            "execution_count": 1,
            "metadata": {},
            "outputs": [],
            "source": [
                "import torch\n",
                "import torch_xla.core.xla_model as xm\n",
                "device = xm.xla_device()",
            ],
        },
        {
            "cell_type": "code",
            "execution_count": 2,
            "metadata": {},
            "outputs": [],
            "source": ["%%time\n", "xm.mark_step()"],
        },
        {
            "cell_type": "code",
            "execution_count": 3,
            "metadata": {},
            "outputs": [],
            "source": "x = 1",
        },
    ]
    path = tmp_path / "nb.ipynb"
    raw = (
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=2)
        + "\n"
    )
    path.write_text(raw)
    migration = migrate_path(path)
    assert migration.kind == "notebook"
    assert [index for index, _, _ in migration.cells] == [1, 2]
    assert migration.headline() == f"{path}: 2 changes in 2 cells"
    assert [title for title, _, _ in migration.pairs()] == ["cell 2", "cell 3"]
    assert "a/cell 2" in migration.diff_text() and "a/cell 3" in migration.diff_text()
    assert notebook_code_cells(raw) == [
        (1, "".join(cells[1]["source"])),
        (2, "%%time\nxm.mark_step()"),
        (3, "x = 1"),
    ]
    apply(migration)
    written = path.read_text()
    assert json.loads(written)["cells"][2]["source"] == ["%%time"]
    assert written.splitlines()[:3] == raw.splitlines()[:3]  # the notebook's own layout


def test_unreadable_and_broken_inputs(tmp_path: Path) -> None:
    missing = migrate_path(tmp_path / "gone.py")
    assert missing.error and "cannot read" in missing.error
    assert "not migrated" in missing.headline()
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{")
    assert "not a valid notebook" in (migrate_path(broken).error or "")
    html = migrate_path(broken)._repr_html_()
    assert "error" in html and "nm-diff" not in html


def test_example_scripts_render(tmp_path: Path) -> None:
    migration = migrate_path(ROOT / "examples" / "xla_single_mpdeviceloader.py")
    html = migration._repr_html_()
    assert re.search(r"⋯ \d+ unchanged lines ⋯", html), "a whole file is folded around its changes"
    assert "<code>MpDeviceLoader(loader, device)</code>" in html
