"""`check` on notebooks: code cells as one module, magics masked, findings by cell, no fixes."""

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


def test_notebooks_are_never_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    raw = notebook(("code", "import torch\n\ndef forward(x):\n    x[x < 0] = 0\n    return x\n"))
    (tmp_path / "nb.ipynb").write_text(raw)
    assert main(["check", "nb.ipynb", "--fix"]) == 1
    assert (tmp_path / "nb.ipynb").read_text() == raw


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
