"""Output formats: text, JSON (ruff's field names), SARIF 2.1.0 (validated against the OASIS
schema), GitHub annotations and statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_migrate.cli import main

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
SOURCE = """import torch

def forward(x, mask):
    x[x < 0] = 0
    return torch.nonzero(x)


model = torch.compile(forward)
"""


@pytest.fixture
def bad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.py"
    path.write_text(SOURCE)
    return path


def test_text(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "bad.py:4:5: NM103 [*] error: assigning through a boolean mask is a boolean `index_put`, which Neuron's compiler "
        "refuses; use `x.masked_fill_(mask, value)` or `torch.where(mask, value, x)` (in `forward`, passed to torch.compile)",
        "bad.py:5:12: NM101 warning: `torch.nonzero` has a data-dependent output size: a graph break (GB0036), or a dynamic "
        "shape Neuron rejects under fullgraph=True; keep the mask (`torch.where`) or use `torch.nonzero_static` (in `forward`, passed to torch.compile)",
        "bad.py:8:9: NM116 [*] warning: without `dynamic=False`, automatic dynamic shapes make a dimension symbolic on the "
        "second input shape, which Neuron rejects; pass `dynamic=False`",
    ]
    assert "Found 3 findings in 1 file (1 checked)." in err
    assert "[*] 2 fixable with `--fix`." in err


def test_json_uses_ruff_field_names(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--output-format", "json"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [r["code"] for r in records] == ["NM103", "NM101", "NM116"]
    first = records[0]
    assert {
        "code",
        "message",
        "location",
        "end_location",
        "fix",
        "noqa_row",
        "url",
        "filename",
        "severity",
        "context",
    } <= set(first)
    assert first["location"] == {"row": 4, "column": 5}
    assert (
        first["severity"] == "error" and first["context"] == "in `forward`, passed to torch.compile"
    )
    assert first["fix"]["applicability"] == "safe"
    assert first["fix"]["edits"][0]["content"] == "x.masked_fill_(x < 0, 0)"
    assert first["fix"]["edits"][0]["location"] == {"row": 4, "column": 5}
    assert records[1]["graph_breaks"] == ["GB0036"] and records[1]["fix"] is None


def test_sarif_validates_against_the_2_1_0_schema(
    bad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert main(["check", "bad.py", "--output-format", "sarif"]) == 1
    log = json.loads(capsys.readouterr().out)
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker()).validate(log)
    run = log["runs"][0]
    assert log["version"] == "2.1.0"
    assert [r["ruleId"] for r in run["results"]] == ["NM103", "NM101", "NM116"]
    assert run["results"][0]["level"] == "error"
    rules = run["tool"]["driver"]["rules"]
    assert rules[run["results"][1]["ruleIndex"]]["id"] == "NM101"
    replacement = run["results"][0]["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert replacement["deletedRegion"] == {
        "startLine": 4,
        "startColumn": 5,
        "endLine": 4,
        "endColumn": 17,
    }


def test_sarif_without_findings_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert main(["check", "ok.py", "--output-format", "sarif"]) == 0
    log = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)
    assert log["runs"][0]["results"] == []


def test_github_annotations(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--output-format", "github"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        "::error title=neuron-migrate (NM103),file=bad.py,line=4,col=5,endLine=4,endColumn=17::bad.py:4:5: NM103"
    )
    assert lines[1].startswith("::warning title=neuron-migrate (NM101),")


def test_statistics(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--statistics"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "1\tNM103\terror  \t[*] boolean-mask-write",
        "1\tNM101\twarning\t[ ] nonzero",
        "1\tNM116\twarning\t[*] dynamic-shapes",
    ]


def test_full_shows_the_code_frame_where_and_the_fix(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--output-format", "full"]) == 1
    blocks = capsys.readouterr().out.split("\n\n")
    assert blocks[0].splitlines() == [
        "NM103 [*] error: assigning through a boolean mask is a boolean `index_put`, which Neuron's "
        "compiler refuses; use `x.masked_fill_(mask, value)` or `torch.where(mask, value, x)`",
        " --> bad.py:4:5",
        "  |",
        "3 | def forward(x, mask):",
        "4 |     x[x < 0] = 0",
        "  |     ^^^^^^^^^^^^",
        "5 |     return torch.nonzero(x)",
        "  |",
        "help: use `masked_fill_`",
        "  |",
        "  -     x[x < 0] = 0",
        "4 +     x.masked_fill_(x < 0, 0)",
        "  |",
        "  = error here: in `forward`, passed to torch.compile",
    ]
    assert "help:" not in blocks[1]  # NM101 has no fix
    assert "note: This is an unsafe fix" not in blocks[2]


def test_statistics_show_severity_and_honour_json(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--statistics", "--output-format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0] == {
        "code": "NM103",
        "name": "boolean-mask-write",
        "severity": "error",
        "count": 1,
        "fixable": True,
        "fixable_count": 1,
    }
    assert [r["code"] for r in rows] == ["NM103", "NM101", "NM116"]


def test_summary_counts_the_files_with_findings(
    bad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (bad.parent / "clean.py").write_text("import torch\n\nx = torch.zeros(2)\n")
    assert main(["check", "."]) == 1
    assert "Found 3 findings in 1 file (2 checked)." in capsys.readouterr().err


def test_rule_links_come_from_the_published_rules_page(
    bad: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuron_migrate.checks.rules import base

    monkeypatch.setattr(base, "rules_page", lambda: None)
    assert main(["check", "bad.py", "--output-format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)[0]["url"] is None  # no page named: no link
    monkeypatch.setattr(base, "rules_page", lambda: "https://example.org/neuron-migrate/rules")
    assert main(["check", "bad.py", "--output-format", "sarif"]) == 1
    rules = json.loads(capsys.readouterr().out)["runs"][0]["tool"]["driver"]["rules"]
    nm103 = next(r for r in rules if r["id"] == "NM103")
    assert nm103["helpUri"] == "https://example.org/neuron-migrate/rules#nm103"
    assert "## " not in nm103["help"]["text"] and "What it does:" in nm103["help"]["text"]
    assert nm103["help"]["markdown"].startswith("Flags")
    assert nm103["fullDescription"]["text"].startswith("Finds assignments")
