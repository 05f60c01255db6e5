"""`neuron-migrate sweep`: its flags, its errors, and re-measuring an earlier sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_migrate.cli import main
from neuron_migrate.sweep import command


def test_unknown_architectures_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    assert main(["sweep", "llama", "no_such_model", "--results", "unused"]) == 2
    assert capsys.readouterr().err.strip() == (
        "neuron-migrate sweep: error: not a causal-LM architecture of transformers: no_such_model"
    )


def test_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "-j", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_the_subset_is_ten_architectures_of_the_mapping() -> None:
    pytest.importorskip("transformers")
    from neuron_migrate.sweep.tiny import causal_lm_architectures

    assert len(command.SUBSET) == len(set(command.SUBSET)) == 10
    assert set(command.SUBSET) <= {a.model_type for a in causal_lm_architectures()}


def test_an_unreadable_json_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "records.json"
    broken.write_text("[{")
    assert main(["sweep", "--from", str(broken)]) == 2
    assert capsys.readouterr().err.startswith(f"neuron-migrate sweep: error: {broken}: ")


def test_from_json_writes_every_output_without_running_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [
        {
            "architecture": "good",
            "class": "GoodForCausalLM",
            "versions": {},
            "build": {"ok": True},
            "generate": {"ok": True, "graphs": 2, "buckets": 2},
            "train": {"ok": True, "graphs": 1, "buckets": 1},
        },
        {"architecture": "huge", "class": "HugeForCausalLM", "versions": {}, "build": {"ok": False, "cause": "cannot build", "reason": "too big"}},
    ]
    source = tmp_path / "in.json"
    source.write_text(json.dumps(records))
    out = tmp_path / "out"
    out.mkdir()
    status = main(["sweep", "--from", str(source), "--json", str(out / "a.json"), "--markdown", str(out / "a.md"), "--plot", str(out / "a.png")])
    assert status == 1  # one architecture fails
    assert capsys.readouterr().out.startswith("2 architectures: 1 build, 1 generate with static shapes (50.0%)")
    written = json.loads((out / "a.json").read_text())
    assert [r["lint"] for r in written] == [{"failures": [], "compiled_code_findings": []}] * 2
    assert "![outcomes per stage](a.png)" in (out / "a.md").read_text()
    assert (out / "a.png").stat().st_size > 0


def test_recorded_writes_the_table_of_a_stopped_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "records.json"
    status = main(["sweep", "llama", "gpt2", "--recorded", "--results", str(tmp_path / "none"), "--json", str(out)])
    assert status == 1
    assert capsys.readouterr().out.startswith("2 architectures (2 not run): 0 build")
    assert [r["architecture"] for r in json.loads(out.read_text())] == ["llama", "gpt2"]
