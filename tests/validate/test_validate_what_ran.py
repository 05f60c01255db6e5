"""A MATCH says what each side ran on, and is refused when the migrated side still computed
through torch_xla: that compares the old stack with itself, not the migration."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_migrate.validate.report import ran_line
from neuron_migrate.validate.runner import Capture, Program, Run

from .conftest import PROGRAMS, validate_json


def _run(*ran_on: dict) -> Run:
    captures = [
        Capture(Path(f"rank{i}"), {"rank": i, "world_size": len(ran_on), "ran_on": r}, {})
        for i, r in enumerate(ran_on)
    ]
    return Run(Program("migrated", Path("t.py"), Path("py")), [], 0, 1.0, Path("log"), captures)


def test_what_ran_gathers_every_rank_and_names_xla_use():
    native = _run(
        {"devices": ["cpu"], "process_group_backends": ["gloo"], "collectives": {"a": 1}},
        {"devices": ["cpu"], "process_group_backends": ["gloo"], "collectives": {"a": 2}},
    )
    ran = native.what_ran()
    assert (ran["devices"], ran["processes"], ran["collectives"]) == (["cpu"], 2, {"a": 3})
    assert native.xla_use() is None
    assert "ran on cpu; process group gloo; torch.compile none; 2 processes recorded" in ran_line(
        ran
    )
    assert _run({"devices": ["xla:0"]}).xla_use() == "tensors on xla:0"
    assert _run({"devices": ["cpu"], "compile_backends": ["openxla"]}).xla_use()
    assert _run({"devices": ["cpu"], "collectives": {"xm.all_reduce": 2}}).xla_use()


@pytest.mark.slow
def test_a_migration_that_still_trains_on_xla_gets_no_match(
    reference_python, capsys, tmp_path, monkeypatch
):
    script = str(PROGRAMS / "picks_xla_when_importable.py")
    both = [f"--original-python={reference_python}", f"--migrated-python={reference_python}"]
    code, document = validate_json(capsys, script, script, *both, f"--work-dir={tmp_path / 'a'}")
    assert (code, document["verdict"]) == (2, "error")
    assert [r["what_ran"]["devices"] for r in document["runs"]] == [["xla:0"], ["xla:0"]]
    (error,) = document["errors"]
    assert error.startswith("no MATCH: the migrated program ran on XLA (tensors on xla:0)")
    assert "USE_TORCH_XLA=0" in error
    # What it says to do works: run natively, the same program matches and says where it ran.
    monkeypatch.setenv("USE_TORCH_XLA", "0")
    code, document = validate_json(capsys, script, script, *both, f"--work-dir={tmp_path / 'b'}")
    assert (code, document["verdict"]) == (0, "match"), document["errors"]
    assert [r["what_ran"]["devices"] for r in document["runs"]] == [["cpu"], ["cpu"]]
