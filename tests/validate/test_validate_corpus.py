"""benchmarks/validate_corpus.py: its parts on small inputs, and the whole run over the public
scripts that run on XLA:CPU, where the fetched repositories and the reference env exist."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_corpus as corpus  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_export_takes_the_folder_at_the_commit_without_its_subfolders(tmp_path):
    repo = tmp_path / "repo"
    (repo / "app" / "deep").mkdir(parents=True)
    (repo / "app" / "train.py").write_text("old\n")
    (repo / "app" / "model.py").write_text("model\n")
    (repo / "app" / "deep" / "other.py").write_text("other\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / "app" / "train.py").write_text("new\n")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")

    corpus.export_folder(repo / ".git", commit, "app", tmp_path / "out")
    exported = sorted(
        p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.py")
    )
    assert exported == ["app/model.py", "app/train.py"]
    assert (tmp_path / "out" / "app" / "train.py").read_text() == "old\n"


def test_fake_mnist_has_the_idx_headers_torchvision_reads(tmp_path):
    corpus.write_fake_mnist(tmp_path, n_train=4, n_test=2)
    raw = tmp_path / "MNIST" / "raw"
    images = (raw / "train-images-idx3-ubyte").read_bytes()
    assert struct.unpack(">IIII", images[:16]) == (2051, 4, 28, 28)
    assert len(images) == 16 + 4 * 28 * 28
    labels = (raw / "t10k-labels-idx1-ubyte").read_bytes()
    assert struct.unpack(">II", labels[:8]) == (2049, 2) and max(labels[8:]) < 10


def test_the_error_of_a_torchrun_worker_is_named_not_the_launchers(tmp_path):
    log = tmp_path / "migrated.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        "[rank0]: ValueError: Default process group has not been initialized\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    assert corpus._last_error(log) == "ValueError: Default process group has not been initialized"


def test_only_a_case_that_must_match_fails_the_run():
    must, known = corpus.CASES[0], next(c for c in corpus.CASES if c.known)
    assert corpus.Outcome(must, "diverge").regressed
    assert not corpus.Outcome(must, "match").regressed
    assert not corpus.Outcome(known, "error").regressed
    table = corpus.format_table([corpus.Outcome(must, "diverge", ["losses: step 3"])])
    assert "DIVERGE (must match)" in table and "losses: step 3" in table


@pytest.mark.slow
def test_the_runnable_corpus_scripts_migrate_and_agree(tmp_path):
    if os.environ.get("NEURON_MIGRATE_VALIDATE_CORPUS") != "1":
        pytest.skip("about 10 CPU-minutes per script; set NEURON_MIGRATE_VALIDATE_CORPUS=1 to run it")
    missing = corpus.missing_inputs()
    if missing:
        pytest.skip(missing)
    report = tmp_path / "outcomes.json"
    code = corpus.main(["--json", str(report)])
    outcomes = json.loads(report.read_text())
    regressed = [o for o in outcomes if not o["known"] and o["verdict"] not in ("match", "skipped")]
    assert code == 0 and not regressed, json.dumps(regressed, indent=1)


def test_each_case_says_what_each_side_ran_on():
    ran = {
        "devices": ["xla:0"],
        "process_group_backends": [],
        "compile_backends": [],
        "processes": 1,
        "collectives": {"xm.all_reduce": 3},
    }
    document = {
        "runs": [{"label": "migrated", "timed_out": False, "returncode": 0, "what_ran": ran}],
        "errors": [],
    }
    assert corpus._explain(document) == ["migrated ran on xla:0 (1 process, xm.all_reduce x3)"]
