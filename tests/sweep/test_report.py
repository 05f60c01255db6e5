"""The sweep's records become a summary, the Markdown table, a plot, and the lint figures; the
committed `docs/architectures.md` is what the committed JSON gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neuron_migrate.sweep import causes, lint, report

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _record(name: str, generate: dict[str, Any] | None, train: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "architecture": name,
        "class": f"{name.title()}ForCausalLM",
        "versions": {"torch": "2.13.0", "transformers": "5.23.0", "trl": "1.16.0"},
        "build": {"ok": True, "parameters": 1000},
        **extra,
    }
    if generate is not None:
        record["generate"] = generate
    if train is not None:
        record["train"] = train
    return record


PASS_GENERATE = {"ok": True, "graphs": 3, "buckets": 3, "graph_breaks": []}
PASS_TRAIN = {"ok": True, "graphs": 1, "buckets": 1, "graph_breaks": []}
RECORDS = [
    _record("good", PASS_GENERATE, PASS_TRAIN),
    _record(
        "windowed",
        {"ok": False, "cause": causes.RECOMPILE, "reason": "cumulative_length_int == 17", "where": "transformers/cache_utils.py:550", "graphs": 4, "buckets": 3},
        {**PASS_TRAIN, "graphs": 3, "graph_breaks": ["transformers/x.py:1: a", "transformers/x.py:2: b"]},
    ),
    {**_record("huge", None, None), "build": {"ok": False, "cause": causes.CANNOT_BUILD, "reason": "1 parameters"}},
]


def test_outcomes_and_summary() -> None:
    assert report.outcome(RECORDS[0], "generate") == report.PASSED
    assert report.outcome(RECORDS[1], "generate") == causes.RECOMPILE
    assert report.outcome(RECORDS[2], "train") == causes.CANNOT_BUILD  # not built: no stage runs
    summary = report.summarise(RECORDS)
    assert (summary.total, summary.build, summary.generate, summary.train, summary.both) == (3, 2, 1, 2, 1)
    assert summary.one_graph_training == 1
    assert summary.generate_causes == {causes.RECOMPILE: 1, causes.CANNOT_BUILD: 1}
    assert summary.headline() == (
        "3 architectures: 2 build, 1 generate with static shapes (33.3%), 2 train (66.7%), 1 both (33.3%)"
    )


def test_an_architecture_the_sweep_did_not_reach_is_listed_as_not_run() -> None:
    unreached = {"architecture": "later", "class": "LaterForCausalLM", "versions": {}}
    assert [report.outcome(unreached, stage) for stage in ("build", "generate", "train")] == [causes.NOT_RUN] * 3
    summary = report.summarise([*RECORDS, unreached])
    assert summary.not_run == 1 and summary.generate_causes[causes.NOT_RUN] == 1
    assert summary.headline().startswith(
        "4 architectures (1 not run): 2 build, 1 generate with static shapes (33.3% of those run)"
    )
    page = report.markdown([*RECORDS, unreached])
    assert "| not run (the sweep was stopped before them) | 1 | |\n| run | 3 | |" in page
    assert "| **generate with static shapes** | **1** | **33.3%** |" in page
    assert "| `later` | `LaterForCausalLM` |  |  |  |  |  | not run |" in page
    assert "| not run |" not in page.split("## Failures by cause")[1].split("##")[0]


def test_markdown_table() -> None:
    page = report.markdown(RECORDS, "architectures.png")
    assert page.startswith("# Architecture coverage")
    assert "![outcomes per stage](architectures.png)" in page
    assert "| **generate with static shapes** | **1** | **33.3%** |" in page
    assert "| recompile per shape | 1 | 0 |" in page
    assert "| `good` | `GoodForCausalLM` | yes | yes | 3 / 3 | yes | 1 (0) |  |" in page
    assert (
        "| `windowed` | `WindowedForCausalLM` | yes | no | 4 / 3 | yes | 3 (2) | generate: **recompile per shape** "
        "at `transformers/cache_utils.py:550`: cumulative_length_int == 17 |"
    ) in page
    assert "| `huge` | `HugeForCausalLM` | no | no |  | no |  | build: **cannot build**: 1 parameters |" in page


def test_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "outcomes.png"
    report.plot(RECORDS, path)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_lint_measures_the_line_dynamo_names() -> None:
    pytest.importorskip("transformers")
    # modeling_t5.py: `torch.unique_consecutive` in the classification forward, which check flags (NM105).
    name = "transformers/models/t5/modeling_t5.py"
    source = (lint.transformers_root() / "models/t5/modeling_t5.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "unique_consecutive(" in text)
    records = [
        _record(
            "t5",
            {"ok": False, "cause": causes.DATA_DEPENDENT, "reason": "unique_consecutive", "where": f"{name}:{line}"},
            {**PASS_TRAIN},
            compiled_code={name: [[1, len(source)]]},
        ),
        _record("good", PASS_GENERATE, PASS_TRAIN, compiled_code={"transformers/activations.py": [[1, 2]]}),
    ]
    lint.measure(records)
    [failure] = records[0]["lint"]["failures"]
    assert failure["flagged"] is True and {"code": "NM105", "severity": "warning"} in failure["findings"]
    assert any(f["code"] == "NM105" for f in records[0]["lint"]["compiled_code_findings"])
    assert records[1]["lint"] == {"failures": [], "compiled_code_findings": []}
    summary = report.summarise(records)
    assert (summary.compile_failures_with_line, summary.compile_flagged) == (1, 1)


def test_lint_shows_an_expert_loop_that_runs_only_when_asked_for_as_info() -> None:
    pytest.importorskip("transformers")
    # modeling_mixtral.py: the per-expert loop's `.nonzero()`, run only with experts_implementation="eager".
    name = "transformers/models/mixtral/modeling_mixtral.py"
    source = (lint.transformers_root() / "models/mixtral/modeling_mixtral.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if ".nonzero()" in text)
    records = [
        _record(
            "mixtral",
            {"ok": False, "cause": causes.DATA_DEPENDENT, "reason": "nonzero", "where": f"{name}:{line}"},
            {**PASS_TRAIN},
            compiled_code={name: [[1, len(source)]]},
        )
    ]
    lint.measure(records)
    [failure] = records[0]["lint"]["failures"]
    assert failure["flagged"] is True and {"code": "NM101", "severity": "info"} in failure["findings"]


def test_the_committed_page_is_what_the_committed_json_gives() -> None:
    records = json.loads((DOCS / "architectures.json").read_text(encoding="utf-8"))
    expected = report.markdown(records, "architectures.png")
    assert (DOCS / "architectures.md").read_text(encoding="utf-8") == expected, (
        f"docs/architectures.md is out of date: run `{report.RELINT}`"
    )
