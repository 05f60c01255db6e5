"""The sweep of the test run: ten architectures through the real command, each in its own
process, with what each must give (the whole sweep is `neuron-migrate sweep`, see
docs/architectures.md; it is deterministic, so the subset must agree with the committed JSON)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neuron_migrate.sweep import causes, report
from neuron_migrate.sweep.command import SUBSET

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("sweep")
    done = subprocess.run(
        [sys.executable, "-m", "neuron_migrate", "sweep", "--subset", "-j", "2", "-q",
         "--results", str(folder / "results"), "--json", str(folder / "records.json")],
        capture_output=True, text=True, timeout=3600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith("10 architectures: "), done.stdout
    return {r["architecture"]: r for r in json.loads((folder / "records.json").read_text())}


def test_every_architecture_has_a_full_record(records: dict[str, dict[str, Any]]) -> None:
    assert list(records) == list(SUBSET)
    for record in records.values():
        assert record["versions"]["transformers"].startswith("5.23")
        assert record["modeling_file"].startswith("transformers/models/")
        if record["build"]["ok"]:
            assert {"generate", "train", "compiled_code", "lint"} <= set(record)
            assert record["cpu_seconds"] > 0 and record["peak_rss_mb"] > 0


def test_a_dense_model_holds_in_one_graph_per_bucket(records: dict[str, dict[str, Any]]) -> None:
    llama = records["llama"]
    assert llama["generate"]["ok"] and llama["train"]["ok"]
    assert llama["generate"]["graphs"] == llama["generate"]["buckets"] == 2  # the prefill chunk, one token
    assert llama["train"]["graphs"] == llama["train"]["buckets"] == 1
    assert not llama["train"]["graph_breaks"]
    assert "transformers/models/llama/modeling_llama.py" in llama["compiled_code"]


def test_a_sliding_window_cache_recompiles_every_token(records: dict[str, dict[str, Any]]) -> None:
    generate = records["mistral"]["generate"]
    assert generate["cause"] == causes.RECOMPILE_VALUE
    assert generate["where"].startswith("transformers/cache_utils.py:")
    assert "cumulative_length_int" in generate["reason"]
    [failure] = records["mistral"]["lint"]["failures"]
    assert failure["where"] == generate["where"] and failure["flagged"] is not None


def test_the_subset_agrees_with_the_committed_sweep(records: dict[str, dict[str, Any]]) -> None:
    committed = {r["architecture"]: r for r in json.loads((DOCS / "architectures.json").read_text())}
    for name, record in records.items():
        for stage in ("build", "generate", "train"):
            assert report.outcome(record, stage) == report.outcome(committed[name], stage), (name, stage)
