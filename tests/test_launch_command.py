"""The launch command a migrated script is given names what torchrun can start."""

from __future__ import annotations

from pathlib import Path

from neuron_migrate.rewrite.engine import rewrite_source

SPAWNS = """\
import torch_xla.distributed.xla_multiprocessing as xmp
{imports}

def _run(index):
    print(index)


if __name__ == "__main__":
    xmp.spawn(_run, nprocs=2)
"""


def test_a_script_is_launched_by_its_file_name(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    migrated = rewrite_source(SPAWNS.format(imports=""), str(path)).migrated
    assert "# Launch with: torchrun --nproc_per_node=2 train.py" in migrated


def test_a_module_of_a_package_is_launched_as_a_module(tmp_path: Path) -> None:
    """`from ..utils import x` works only when the file runs as `pkg.sub.mod`."""
    folder = tmp_path / "pkg" / "multi"
    folder.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    migrated = rewrite_source(SPAWNS.format(imports="from ..utils import load"), str(folder / "infer.py")).migrated
    assert "# Launch with: torchrun --nproc_per_node=2 -m pkg.multi.infer" in migrated
    elsewhere = rewrite_source(SPAWNS.format(imports="from . import load"), str(tmp_path / "infer.py")).migrated
    assert "-m <package>.infer" in elsewhere
