"""A probe that hangs or dies is a classified result, not a crashed sweep; finished probes are
kept and reused."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from neuron_migrate.sweep import causes, runner
from neuron_migrate.sweep.tiny import Architecture

VERSIONS = {"torch": "2.13.0", "transformers": "5.23.0", "trl": "1.16.0"}


def test_an_overrun_and_a_crash_are_recorded_in_the_stage_they_stopped(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    seen: list[runner.Progress] = []
    hang, crash = Architecture("llama", "LlamaForCausalLM"), Architecture("nothing", "NoSuchForCausalLM")
    records = runner.run_probes(
        [hang, crash], tmp_path, jobs=2, cpu_seconds=1, reuse=True, versions=runner.versions(), report=seen.append
    )
    assert [r["architecture"] for r in records] == ["llama", "nothing"]
    stopped = next(records[0][s] for s in runner.STAGES if not records[0].get(s, {}).get("ok", False))
    assert stopped == {"ok": False, "cause": causes.TIMEOUT, "reason": "more than 1 s of CPU time: stopped"}
    assert records[1]["build"]["cause"] == causes.CRASH
    assert "AttributeError" in records[1]["build"]["reason"] and "NoSuchForCausalLM" in records[1]["build"]["reason"]
    assert sorted(p.done for p in seen) == [1, 2] and not any(p.reused for p in seen)
    assert json.loads(runner.result_path(tmp_path, crash).read_text()) == records[1]


def test_a_record_of_the_same_libraries_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "llama.json"
    path.write_text(json.dumps({"architecture": "llama", "versions": VERSIONS}))
    assert runner.load_record(path, VERSIONS) == {"architecture": "llama", "versions": VERSIONS}
    assert runner.load_record(path, {**VERSIONS, "transformers": "5.24.0"}) is None
    path.write_text("{not json")
    assert runner.load_record(path, VERSIONS) is None


def test_a_probe_that_died_after_generating_keeps_its_generation(tmp_path: Path) -> None:
    architecture = Architecture("llama", "LlamaForCausalLM")
    generated = {"ok": True, "graphs": 3, "buckets": 3}
    partial = {"architecture": "llama", "versions": VERSIONS, "build": {"ok": True}, "generate": generated}
    runner.result_path(tmp_path, architecture).write_text(json.dumps(partial))
    sweep = runner._Sweep(tmp_path, 1, 300, VERSIONS, lambda progress: None, 1)
    killed = runner._Running(architecture, SimpleNamespace(exitcode=-9), 0.0)
    record = sweep._record_of(killed, 12.0, stalled=False)
    assert record["generate"] == generated
    assert record["train"] == {"ok": False, "cause": causes.CRASH, "reason": "the probe process died: exit status -9"}
    assert json.loads(runner.result_path(tmp_path, architecture).read_text()) == record


def test_only_a_finished_record_counts(tmp_path: Path) -> None:
    """A probe stopped with the sweep leaves a record without its last stages: it is probed
    again, and until then listed as not run."""
    done, stopped, absent = (Architecture(n, f"{n.title()}ForCausalLM") for n in ("done", "stopped", "absent"))
    finished = {"architecture": "done", "versions": VERSIONS, "build": {"ok": True}, "generate": {"ok": True}, "train": {"ok": True}}
    runner.result_path(tmp_path, done).write_text(json.dumps(finished))
    partial = {"architecture": "stopped", "versions": VERSIONS, "build": {"ok": True}, "generate": {"ok": True}}
    runner.result_path(tmp_path, stopped).write_text(json.dumps(partial))
    assert runner.finished(finished) and not runner.finished(partial)
    assert runner.finished({"build": {"ok": False, "cause": causes.CANNOT_BUILD}})
    records = runner.recorded([done, stopped, absent], tmp_path, VERSIONS)
    assert records[0] == finished
    assert records[1:] == [
        {"architecture": "stopped", "class": "StoppedForCausalLM", "versions": VERSIONS},
        {"architecture": "absent", "class": "AbsentForCausalLM", "versions": VERSIONS},
    ]
