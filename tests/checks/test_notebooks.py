"""`check` on notebooks: code cells as one module, `%%writefile` scripts on their own, magics
masked, findings and fixes by cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_migrate.checks.checker import CheckOptions
from neuron_migrate.checks.notebooks import check_notebook
from neuron_migrate.cli import main


def notebook(*cells: tuple[str, str]) -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
                for kind, source in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


RAW = notebook(
    ("markdown", "# Training"),
    ("code", "%pip install torch\nimport torch\n!nvidia-smi\n"),
    ("code", "def forward(x):\n    if True:\n        %time y = 1\n    return torch.nonzero(x)\n"),
    ("code", "%%bash\necho torch.nonzero(x)\n"),
    ("code", "x = torch.ones(2).cuda()  # noqa: NM701\ntorch.nonzero?\n"),
)


def test_findings_carry_the_cell_and_the_line_in_it() -> None:
    report = check_notebook(RAW, "nb.ipynb", CheckOptions())
    assert report.error is None
    assert [(d.code, d.cell, d.line, d.column) for d in report.diagnostics] == [("NM101", 3, 4, 12)]


def test_text_and_json_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(RAW)
    assert main(["check", "."]) == 1
    assert capsys.readouterr().out.startswith("nb.ipynb:cell 3:4:12: NM101 ")
    assert main(["check", "nb.ipynb", "--output-format", "json"]) == 1
    (record,) = json.loads(capsys.readouterr().out)
    assert record["cell"] == 3 and record["location"] == {"row": 4, "column": 12}


FIXABLE = notebook(
    ("markdown", "# Training"),
    ("code", "%matplotlib inline\nimport torch\nmodel = torch.nn.Linear(4, 2)\n"),
    ("code", "x = 1\n"),
    ("code", "compiled = torch.compile(model, dynamic=True)  # the model of cell 2\n!ls\n"),
)


def test_fix_edits_the_sources_of_the_fixed_cells_and_no_other_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(FIXABLE)
    assert main(["check", "nb.ipynb", "--fix"]) == 0
    assert "1 fixed, 0 remaining" in capsys.readouterr().err
    fixed = (tmp_path / "nb.ipynb").read_text()
    assert fixed == FIXABLE.replace("dynamic=True", "dynamic=False")
    assert main(["check", "nb.ipynb"]) == 0


def test_diff_shows_the_fixes_cell_by_cell_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(FIXABLE)
    assert main(["check", "nb.ipynb", "--diff"]) == 1
    assert capsys.readouterr().out == (
        "--- a/nb.ipynb:cell 4\n"
        "+++ b/nb.ipynb:cell 4\n"
        "@@ -1,2 +1,2 @@\n"
        "-compiled = torch.compile(model, dynamic=True)  # the model of cell 2\n"
        "+compiled = torch.compile(model, dynamic=False)  # the model of cell 2\n"
        " !ls\n"
    )
    assert (tmp_path / "nb.ipynb").read_text() == FIXABLE


WRITEFILE = notebook(
    ("code", "import torch\n"),
    (
        "code",
        "%%writefile {work_dir}/train.py\n"
        "import torch\n"
        "\n"
        "model = torch.compile(torch.nn.Linear(2, 2), dynamic=True)\n",
    ),
    ("code", "%%writefile notes.txt\ntorch.nonzero(x)\n"),
)


def test_a_script_written_by_writefile_is_checked_and_fixed_as_a_file_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = check_notebook(WRITEFILE, "nb.ipynb", CheckOptions())
    # The `%%writefile` line is line 1 of the cell; a `%%writefile notes.txt` cell is not Python.
    assert [(d.code, d.cell, d.line, d.column) for d in report.diagnostics] == [("NM116", 2, 4, 46)]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(WRITEFILE)
    assert main(["check", "nb.ipynb", "--fix"]) == 0
    assert json.loads((tmp_path / "nb.ipynb").read_text())["cells"][1]["source"] == [
        "%%writefile {work_dir}/train.py\n",
        "import torch\n",
        "\n",
        "model = torch.compile(torch.nn.Linear(2, 2), dynamic=False)\n",
    ]


def test_lines_named_in_messages_count_in_the_cells() -> None:
    loop = (
        "for x in loader:\n    loss = model(x).sum()\n    loss.backward()\n    losses.append(loss.item())\n"
    )
    raw = notebook(
        ("code", "import torch\nmodel = torch.nn.Linear(4, 2)\nloader = [torch.ones(1, 4)]\n"),
        ("code", "x = 1\n\n" + loop),
    )
    [finding] = check_notebook(raw, "nb.ipynb", CheckOptions()).diagnostics
    assert (finding.cell, finding.line) == (2, 6)
    assert "in the training loop at line 3, which calls `.backward()`" in finding.text


def test_errors_point_into_the_cell() -> None:
    report = check_notebook(
        notebook(("code", "import torch\n"), ("code", "def f(:\n")), "nb.ipynb", CheckOptions()
    )
    assert report.error is not None and report.error.startswith("nb.ipynb:cell 2:1:")
    assert check_notebook("{not json", "nb.ipynb", CheckOptions()).error.startswith(
        "nb.ipynb:1:1: not a readable notebook"
    )


def test_a_line_that_continues_an_expression_with_percent_is_python() -> None:
    source = "import torch\n\ndef forward(a):\n    x = (a\n    % 2)\n    return torch.nonzero(x)\n"
    report = check_notebook(notebook(("code", source)), "nb.ipynb", CheckOptions())
    assert report.error is None
    assert [(d.code, d.cell, d.line) for d in report.diagnostics] == [("NM101", 1, 6)]


def test_continued_shell_commands_and_question_marks_in_strings() -> None:
    source = (
        "import torch\n"
        "!pip install \\\n    torch\n"
        "def forward(x):\n"
        '    label = "why?"  # or why not?\n'
        "    return torch.nonzero(x)\n"
        "torch.nonzero?\n"
    )
    report = check_notebook(notebook(("code", source)), "nb.ipynb", CheckOptions())
    assert report.error is None
    assert [(d.code, d.line, d.column) for d in report.diagnostics] == [("NM101", 6, 12)]
