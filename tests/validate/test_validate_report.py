"""The report drawn from a validate document: Markdown and HTML with the plots inline, and a run
started in the background from Python, as a notebook does."""

from __future__ import annotations

import base64
import json

import pytest

from neuron_migrate.validate import background, report

from .conftest import PROGRAMS

DOCUMENT = {
    "verdict": "diverge",
    "exit_code": 1,
    "errors": [],
    "runs": [
        {
            "label": "original",
            "script": "a.py",
            "seconds": 1.0,
            "ranks": [{"versions": {"torch": "2.9.0"}}],
        },
        {
            "label": "migrated",
            "script": "b.py",
            "seconds": 1.0,
            "ranks": [{"versions": {"torch": "2.13.0"}}],
        },
    ],
    "passes": ["capture: the original and the migrated program, side by side"],
    "precision": {"name": "bf16"},
    "noise_floor": {
        "program": "a.py",
        "changed": {"XLA_USE_BF16": 1},
        "run_threshold": 2.0,
        "module_threshold": 1.2,
    },
    "items": [
        {
            "key": "losses",
            "title": "losses (3 steps)",
            "verdict": "diverge",
            "detail": "first diverging step 1",
            "rule": "noise floor (R ≤ 2)",
            "ratio": {"r": 3.5},
            "rank": None,
            "stats": {"max_abs": 0.1, "norm_rel": 0.05, "cosine": 0.99},
            "tolerance": {"rtol": 0.02, "atol": 0.001},
            "series": {
                "original": [1.0, 0.9, 0.8],
                "migrated": [1.0, 0.95, 0.9],
                "floor": [1.0, 0.9, 0.8],
                "rel_diff": [0.0, 0.05, 0.1],
                "r_prefix": [0.5, 3.0, 3.5],
            },
        }
    ],
    "ranks": [],
    "first_diverging_rank": None,
    "notes": ["a side computes in bfloat16/float16"],
    "localization": [
        {
            "rank": 0,
            "step": 1,
            "finding": "forward",
            "where": "fc2",
            "headline": "the forward of step 1: the first module whose output differs is fc2 (Linear)",
            "rule": "noise floor (R ≤ 1.2, per module)",
            "modules": [
                {
                    "name": "fc1",
                    "kind": "Linear",
                    "verdict": "match",
                    "stats": {"norm_rel": 1e-3},
                    "ratio": {"r": 1.0},
                },
                {
                    "name": "fc2",
                    "kind": "Linear",
                    "verdict": "diverge",
                    "stats": {"norm_rel": 1e-1},
                    "ratio": {"r": 9.0},
                },
            ],
            "phases": {},
            "notes": [],
        }
    ],
}


def test_markdown_report_has_the_table_the_localization_and_the_plots():
    pytest.importorskip("matplotlib")
    text = report.markdown(DOCUMENT)
    assert text.startswith("# validate: DIVERGE\n")
    assert "| losses (3 steps) | DIVERGE | noise floor (R ≤ 2) | 3.5 |" in text
    assert "## Localized: rank 0, step 1" in text and "**the forward of step 1" in text
    assert "| fc2 | Linear | DIVERGE | 9 |" in text
    images = [line for line in text.splitlines() if line.startswith("![")]
    assert [line.split("]")[0] for line in images] == [
        "![Losses",
        "![Module outputs at step 1 (rank 0)",
    ]
    png = base64.b64decode(images[0].split("base64,")[1].rstrip(")"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_html_report_is_self_contained_and_shows_in_a_notebook(tmp_path):
    pytest.importorskip("matplotlib")
    shown = report.Report(DOCUMENT)._repr_html_()
    assert shown.startswith('<div class="nm-validate-report">')
    assert "<h2>validate: DIVERGE</h2>" in shown and 'src="data:image/png;base64,' in shown
    assert "<code>a.py</code> again in float32 (XLA_USE_BF16 turned off)" in shown
    path = tmp_path / "result.json"
    path.write_text(json.dumps(DOCUMENT))
    page = tmp_path / "report.html"
    report.write(report.Report.from_json(path).document, page)
    assert page.read_text().startswith("<!DOCTYPE html>")
    report.write(DOCUMENT, tmp_path / "report.md")
    assert (tmp_path / "report.md").read_text().startswith("# validate: DIVERGE")


@pytest.mark.slow
def test_a_background_run_reports_its_passes_and_its_document(tmp_path):
    train = PROGRAMS / "tiny_blocks_train.py"
    run = background.start(train, train, "--steps", "2", options=["--localize"], work_dir=tmp_path)
    document = run.wait(timeout=600)
    assert run.done and document["verdict"] == "match" and document["exit_code"] == 0
    assert run.progress() == ["capture: the original and the migrated program, side by side"]
    assert (tmp_path / "captures" / "original.log").exists()
    assert "--localize: " not in json.dumps(document)  # nothing diverged: no step to rerun
