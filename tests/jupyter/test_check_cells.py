"""Checking notebook cells as `neuron-migrate check` checks a notebook, and scripts for the app."""

from __future__ import annotations

import json
from pathlib import Path

from neuron_migrate.jupyter.check import Cell, check_cells, check_script, notebook_cells

SETUP = """\
import torch
from torch.utils.data import DataLoader
model = torch.nn.Linear(4, 2)
loader = DataLoader(torch.randn(10, 4), batch_size=3, drop_last=True)
"""
LOOP = """\
total = 0.0
for x in loader:
    loss = model(x).sum()
    loss.backward()
    total += loss.item()
"""
DYNAMIC = "compiled = torch.compile(model, dynamic=True)\n"


def test_cells_are_checked_together_and_findings_point_into_cells() -> None:
    report = check_cells([Cell("In [1]", SETUP), Cell("In [4]", "%%time\n" + LOOP)])
    [finding] = report.findings
    assert (finding.label, finding.line, finding.column, finding.code) == ("In [4]", 6, 19, "NM110")
    assert repr(report).startswith("In [4]:6:19: NM110 `.item()`")
    assert report.headline() == "the cells run in this session: 1 finding (2 code cells)"


def test_scripts_written_by_writefile_and_trainium_cells_are_checked() -> None:
    cells = [
        Cell("cell 1", SETUP),
        Cell("cell 2", "%%writefile {work_dir}/train.py\nimport torch\n" + DYNAMIC),
        Cell("cell 3", "%%trainium {device_type}\n" + DYNAMIC),
        Cell("cell 4", "%%writefile notes.txt\n" + DYNAMIC),
        Cell("cell 5", "%%bash\necho " + DYNAMIC),
    ]
    found = [(f.label, f.line, f.code) for f in check_cells(cells).findings]
    assert found == [("cell 2", 3, "NM116"), ("cell 3", 2, "NM116")]


def test_a_syntax_error_names_its_cell() -> None:
    report = check_cells([Cell("In [1]", SETUP), Cell("In [2]", "x = (\n")], "")
    assert report.errors == ["In [2]:1:5: SyntaxError: '(' was never closed"]
    assert report.headline().endswith("not checked (In [2]:1:5: SyntaxError: '(' was never closed)")
    assert "error" in report._repr_html_()


def test_selection_and_severity() -> None:
    cells = [Cell("In [1]", SETUP + DYNAMIC), Cell("In [2]", LOOP)]
    assert {f.code for f in check_cells(cells).findings} == {"NM110", "NM116"}
    assert {f.code for f in check_cells(cells, select=("NM116",)).findings} == {"NM116"}
    assert {f.code for f in check_cells(cells, ignore=("NM11",)).findings} == set()


def test_notebook_cells_are_numbered_as_jupyter_shows_them() -> None:
    raw = json.dumps(
        {
            "cells": [
                {"cell_type": "markdown", "metadata": {}, "source": "# hi"},
                {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "y = 2"]},
                {
                    "cell_type": "code",
                    "metadata": {"vscode": {"languageId": "sql"}},
                    "source": "select 1",
                },
                {"cell_type": "code", "metadata": {}, "source": "z = 3"},
            ]
        }
    )
    assert notebook_cells(raw) == [Cell("cell 2", "x = 1\ny = 2"), Cell("cell 4", "z = 3")]


def test_a_script_is_checked_as_a_file_with_its_fixes() -> None:
    report = check_script(SETUP + DYNAMIC, "train.py")
    [finding] = report.findings
    assert finding.fixable and finding.label == ""
    assert repr(report) == (
        "train.py:5:33: NM116 [*] `dynamic=True` is rejected by the Neuron backend; use `dynamic=False`\n"
        "train.py: 1 finding (1 with a safe fix ([*]))"
    )
    assert "(safe fix)" in report._repr_html_()


def test_pyproject_settings_apply_and_their_errors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.neuron-migrate]\nignore = ["NM116"]\n')
    cells = [Cell("cell 1", SETUP + DYNAMIC)]
    assert check_cells(cells, str(tmp_path / "nb.ipynb")).findings == []
    assert check_script(SETUP + DYNAMIC, str(tmp_path / "train.py")).findings == []
    (tmp_path / "pyproject.toml").write_text('[tool.neuron-migrate]\ncolour = "red"\n')
    report = check_cells(cells, str(tmp_path / "nb.ipynb"))
    assert report.errors and "unknown key 'colour'" in report.errors[0]
    assert "unknown key 'colour'" in check_script("x = 1\n", str(tmp_path / "train.py")).errors[0]
