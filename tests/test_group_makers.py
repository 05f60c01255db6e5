"""A training loop in a module of its own, launched by a script of the same run that creates the
process group once migrated, is not told that no process group exists."""

from __future__ import annotations

from pathlib import Path

from neuron_migrate.cli import main
from neuron_migrate.rewrite.group_makers import group_made_for

LAUNCHER = """\
import torch_xla.distributed.xla_multiprocessing as xmp

from trainer import train


if __name__ == "__main__":
    xmp.spawn(train, args=())
"""
TRAINER = """\
import torch
import torch_xla.core.xla_model as xm

from steps import log


def train(index):
    model = torch.nn.Linear(4, 4).to(xm.xla_device())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(2, 4, device=xm.xla_device())).sum().backward()
        xm.optimizer_step(optimizer)
    log(xm.xrt_world_size())
"""
STEPS = """\
import torch_xla.core.xla_model as xm


def log(value):
    if xm.get_ordinal() == 0:
        print(value)
"""
NO_GROUP = ("no process group is created here", "several processes but no process group")


def _program(folder: Path) -> Path:
    folder.mkdir()
    for name, text in (("main.py", LAUNCHER), ("trainer.py", TRAINER), ("steps.py", STEPS)):
        (folder / name).write_text(text)
    return folder


def test_modules_a_launching_script_imports_directly_or_not_learn_its_name(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    (folder / "unrelated.py").write_text(STEPS)
    found = group_made_for(sorted(folder.iterdir()))
    assert found == {(folder / "trainer.py").resolve(): "main.py", (folder / "steps.py").resolve(): "main.py"}
    assert group_made_for([folder / "trainer.py", folder / "steps.py"]) == {}  # the launcher is not in the run


def test_a_worker_module_migrated_with_its_launcher_gets_no_stale_process_group_todo(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    assert main(["rewrite", str(folder), "-q"]) == 0
    for name in ("trainer.py", "steps.py"):
        migrated = (folder / name).read_text()
        assert "torch_xla" not in migrated and "TODO" not in migrated
    assert "dist.init_process_group()" in (folder / "main.py").read_text()


def test_the_worker_module_alone_is_still_told(tmp_path: Path) -> None:
    folder = _program(tmp_path / "program")
    assert main(["rewrite", str(folder / "trainer.py"), str(folder / "steps.py"), "-q"]) == 1
    trainer, steps = (folder / "trainer.py").read_text(), (folder / "steps.py").read_text()
    assert all(warning in trainer for warning in NO_GROUP)
    assert NO_GROUP[0] in steps
