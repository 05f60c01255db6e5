"""Every run after the first (the noise floor, reruns) starts in a fresh copy of its program's
working folder as it was before validate ran anything: not among the outputs of its first run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neuron_migrate.validate.runner import Program
from neuron_migrate.validate.workdir import copy_of, isolated, listing

from .conftest import PROGRAMS, validate_json


def test_a_later_run_sees_the_folder_as_it_was_before_the_first(tmp_path):
    folder = tmp_path / "job"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "x.txt").write_text("input")
    (folder / "train.py").write_text("print()")
    before = listing(folder, skip=tmp_path / "work")
    (folder / "out").mkdir()
    (folder / "out" / "loss.txt").write_text("written by the first run")
    (folder / "data" / "cache.bin").write_text("also")
    program = Program("floor", folder / "train.py", Path("python"), cwd=folder)
    fresh, shared = isolated(program, {folder.resolve(): before}, tmp_path / "work" / "floor")
    assert shared is None and fresh.cwd == tmp_path / "work" / "floor" / "job"
    assert fresh.script == fresh.cwd / "train.py"  # outputs beside __file__ land in the copy too
    assert (fresh.cwd / "data" / "x.txt").read_text() == "input"
    assert not (fresh.cwd / "out").exists() and not (fresh.cwd / "data" / "cache.bin").exists()
    assert fresh.python == Path("python")  # a name found on PATH stays a name


def test_what_lies_beside_the_folder_is_found_through_dot_dot_from_the_copy(tmp_path):
    # A script that runs in its own folder and imports from a sibling (`sys.path.append('..')`).
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "utils.py").write_text("X = 1")
    folder = tmp_path / "resnet"
    folder.mkdir()
    (folder / "train.py").write_text("print()")
    work = tmp_path / "work"
    program = Program("floor", folder / "train.py", Path("python"), cwd=folder)
    fresh, _ = isolated(program, {folder.resolve(): listing(folder, work)}, work / "floor")
    assert fresh.cwd is not None
    assert (fresh.cwd / ".." / "common" / "utils.py").read_text() == "X = 1"
    assert not (fresh.cwd / ".." / "work").exists()  # validate's own folder: no loop
    assert (folder / "train.py").resolve() != fresh.script.resolve()


def test_validates_own_work_folder_is_not_copied_and_a_huge_folder_is_shared(tmp_path, monkeypatch):
    (tmp_path / "work" / "original").mkdir(parents=True)
    (tmp_path / "a.txt").write_text("a")
    found = listing(tmp_path, skip=tmp_path / "work")
    assert found.files == {"a.txt"} and found.folders == set()
    copy_of(found, tmp_path / "copy")
    assert (tmp_path / "copy" / "a.txt").read_text() == "a"
    monkeypatch.setattr("neuron_migrate.validate.workdir.MAX_ENTRIES", 1)
    (tmp_path / "b.txt").write_text("b")
    huge = listing(tmp_path, skip=tmp_path / "work")
    program = Program("floor", Path("t.py"), Path("python"), cwd=tmp_path)
    same, shared = isolated(program, {tmp_path.resolve(): huge}, tmp_path / "floor")
    assert same is program and "shares the working folder" in (shared or "")


@pytest.mark.slow
def test_the_float64_floor_run_passes_for_a_program_that_guards_its_outputs(tmp_path, capsys):
    # The migrated side adds the loss up in reverse: float32 rounding past the tolerances, so the
    # original runs a second time, in float64, after its first run wrote out/loss.txt.
    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        shutil.copy(PROGRAMS / "cancelling_loss_train.py", folder)
    text = (PROGRAMS / "guards_its_outputs.py").read_text()
    (old / "train.py").write_text(text)
    (new / "train.py").write_text(text.replace('"--flipped" in sys.argv', "True"))
    code, document = validate_json(
        capsys,
        str(old / "train.py"),
        str(new / "train.py"),
        f"--original-cwd={old}",
        f"--migrated-cwd={new}",
        f"--work-dir={tmp_path / 'work'}",
    )
    floor = document["floor_run"]
    assert floor["returncode"] == 0, Path(floor["log"]).read_text()[-500:]
    assert (code, document["verdict"]) == (0, "match"), document["items"]
    assert document["noise_floor"]["width"] == "float64"
    assert document["noise_floor"]["program"] == str(old / "train.py")
    assert (old / "out" / "loss.txt").is_file()  # the first run's output, where it wrote it
    assert not any("shares the working folder" in note for note in document["notes"])
