"""`rewrite --helpers-module NAME`: the helpers of a folder's scripts live once in NAME.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from neuron_migrate.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = ("xla_single_mpdeviceloader.py", "xla_spawn_multiprocess.py", "xla_legacy_ordinals.py")


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    (folder / "eval").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy(EXAMPLES / name, folder / name)
    shutil.copy(EXAMPLES / "xla_torchrun_pg.py", folder / "eval" / "xla_torchrun_pg.py")
    return folder


def _defines(path: Path, name: str) -> bool:
    return any(line.startswith((f"class {name}", f"def {name}(")) for line in path.read_text().splitlines())


def test_each_helper_is_written_once_per_folder_and_imported(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert main(["rewrite", str(folder), "--helpers-module", "shared_nm", "-q"]) == 0
    module = folder / "shared_nm.py"
    for helper in ("DeviceLoader", "average_gradients", "master_print", "to_cpu"):
        assert _defines(module, helper)
        assert not any(_defines(folder / name, helper) for name in SCRIPTS)
    assert "from shared_nm import DeviceLoader, average_gradients, master_print, to_cpu\n" in (folder / "xla_spawn_multiprocess.py").read_text()
    # The subfolder gets a module of its own, with only what its script uses.
    assert _defines(folder / "eval" / "shared_nm.py", "average_gradients")
    assert not _defines(folder / "eval" / "shared_nm.py", "DeviceLoader")
    # A second run changes nothing, the modules included.
    before = {p: p.read_bytes() for p in folder.rglob("*.py")}
    assert main(["rewrite", str(folder), "--helpers-module", "shared_nm", "-q"]) == 0
    assert {p: p.read_bytes() for p in folder.rglob("*.py")} == before


def test_the_scripts_compute_what_they_compute_with_their_own_copies(tmp_path: Path) -> None:
    shared, alone = tmp_path / "shared", tmp_path / "alone"
    for folder, extra in ((shared, ["--helpers-module", "shared_nm"]), (alone, [])):
        folder.mkdir()
        shutil.copy(EXAMPLES / "xla_single_mpdeviceloader.py", folder)
        assert main(["rewrite", str(folder), "-q", *extra]) == 0
    outputs = [
        subprocess.run(
            [sys.executable, "xla_single_mpdeviceloader.py", "--steps", "3"],
            cwd=folder, capture_output=True, text=True, check=True, timeout=300,
        ).stdout
        for folder in (shared, alone)
    ]
    assert outputs[0] == outputs[1] and "step 2 loss" in outputs[0]


def test_a_file_whose_helper_differs_keeps_its_own_copy(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    # This script spells torch.distributed differently: its `average_gradients` is other code.
    script = folder / "xla_single_mpdeviceloader.py"
    script.write_text("import torch.distributed as td\n" + script.read_text())
    assert main(["rewrite", str(folder), "--helpers-module", "shared_nm", "-q"]) == 0
    assert _defines(folder / "shared_nm.py", "average_gradients")
    assert _defines(script, "average_gradients") and _defines(script, "DeviceLoader")
    assert "shared_nm" not in script.read_text()


def test_a_module_of_that_name_written_by_someone_else_is_left_alone(tmp_path: Path, capsys) -> None:
    folder = _folder(tmp_path)
    (folder / "shared_nm.py").write_text("VALUE = 1\n")
    assert main(["rewrite", str(folder), "--helpers-module", "shared_nm", "-q"]) == 2
    assert (folder / "shared_nm.py").read_text() == "VALUE = 1\n"
    assert "exists and was not written by --helpers-module" in capsys.readouterr().err
    assert _defines(folder / "xla_spawn_multiprocess.py", "DeviceLoader")  # migrated, with its own copy


def test_diff_mode_shows_the_module_and_writes_nothing(tmp_path: Path, capsys) -> None:
    folder = _folder(tmp_path)
    before = {p: p.read_bytes() for p in folder.rglob("*.py")}
    assert main(["rewrite", str(folder), "--helpers-module", "shared_nm", "--diff"]) == 1
    out = capsys.readouterr().out
    assert f"+++ b/{folder / 'shared_nm.py'}" in out and "+class DeviceLoader:" in out
    assert {p: p.read_bytes() for p in folder.rglob("*.py")} == before


def test_a_module_name_must_be_an_identifier(capsys) -> None:
    assert main(["rewrite", ".", "--helpers-module", "my-helpers"]) == 2
    assert "is not a Python module name" in capsys.readouterr().err
