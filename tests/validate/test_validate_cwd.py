"""--original-cwd / --migrated-cwd: each program runs in its own folder, so relative data paths
and outputs resolve there and the two programs, which run at the same time, do not share them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neuron_migrate.validate.command import main

from .conftest import PROGRAMS, validate_json


def _folder(root: Path, name: str, lr: str) -> Path:
    folder = root / name
    folder.mkdir()
    shutil.copy(PROGRAMS / "reads_cwd.py", folder / "train.py")
    (folder / "lr.txt").write_text(lr)
    return folder


@pytest.mark.slow
def test_each_program_reads_and_writes_in_its_own_folder(tmp_path, monkeypatch, capsys):
    old, new = _folder(tmp_path, "old", "0.1"), _folder(tmp_path, "new", "0.1")
    monkeypatch.chdir(tmp_path)  # scripts and the work dir named relative to here
    code, document = validate_json(
        capsys,
        "old/train.py",
        "new/train.py",
        "--original-cwd=old",
        "--migrated-cwd=new",
        "--work-dir=work",
    )
    assert (code, document["verdict"]) == (0, "match"), document["errors"]
    assert (old / "trained.txt").is_file() and (new / "trained.txt").is_file()
    assert not (tmp_path / "trained.txt").exists()


@pytest.mark.slow
def test_a_difference_in_one_folder_shows(tmp_path, capsys):
    old, new = _folder(tmp_path, "old", "0.1"), _folder(tmp_path, "new", "0.2")
    code, document = validate_json(
        capsys,
        str(old / "train.py"),
        str(new / "train.py"),
        f"--original-cwd={old}",
        f"--migrated-cwd={new}",
    )
    assert (code, document["verdict"]) == (1, "diverge")


def test_a_missing_folder_is_an_error(tmp_path, capsys):
    old = _folder(tmp_path, "old", "0.1")
    script = str(old / "train.py")
    assert main(["validate", script, script, f"--migrated-cwd={tmp_path / 'absent'}"]) == 2
    assert f"{tmp_path / 'absent'}: no such directory" in capsys.readouterr().err
