"""The capture attaches however a program orders its imports, and a program it could not attach
to is an error that says so, never a comparison of nothing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from neuron_migrate.validate.runner import Program, Run

from .conftest import PROGRAMS, validate_json


def test_a_program_that_looks_torch_up_before_importing_it_is_captured(capsys, tmp_path):
    script = str(PROGRAMS / "looks_torch_up_first_train.py")
    code, document = validate_json(capsys, script, script, f"--work-dir={tmp_path}")
    assert (code, document["verdict"]) == (0, "match"), document["errors"]
    assert [r["ranks"][0]["backward_calls"] for r in document["runs"]] == [2, 2]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="no transformers")
def test_a_program_importing_transformers_first_is_captured(capsys, tmp_path):
    script = str(PROGRAMS / "transformers_first_train.py")
    code, document = validate_json(capsys, script, script, f"--work-dir={tmp_path}")
    assert (code, document["verdict"]) == (0, "match"), document["errors"]
    assert [r["ranks"][0]["backward_calls"] for r in document["runs"]] == [1, 1]


def test_a_program_the_capture_missed_is_an_error_that_says_why(capsys, tmp_path):
    hides = str(PROGRAMS / "hides_torch_import.py")
    code, document = validate_json(capsys, hides, hides, f"--work-dir={tmp_path}")
    assert (code, document["verdict"]) == (2, "error")
    assert "items" not in document
    assert len(document["errors"]) == 2
    for error in document["errors"]:
        assert "the capture did not attach in 1 of its 1 process(es)" in error
        assert "nothing was compared" in error


def test_a_program_the_capture_never_started_in_is_told_apart(tmp_path):
    program = Program("migrated", Path("train.py"), Path("python"))
    run = Run(program, [], 0, 0.1, tmp_path / "log", captures=[], processes=[])
    assert "the capture never started in it" in (run.capture_problem() or "")
    run.processes = [{"torch_imported": True, "attached": True}]
    assert run.capture_problem() is None
