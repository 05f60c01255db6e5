"""Nothing lost, nothing broken: generated programs, hostile inputs, killed runs, dying workers."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuron_migrate import cli
from neuron_migrate.cli import main
from neuron_migrate.engine import Options, rewrite_source

ROOT = Path(__file__).resolve().parents[1]
XLA_HEADER = "import torch_xla.core.xla_model as xm\n"

OLD = "import torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
NEW = 'import torch\n\ndevice = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(hypothesmith.from_grammar())
def test_code_without_the_old_stack_comes_back_identical(source: str) -> None:
    result = rewrite_source(source, "generated.py", Options())
    if result.error is None:
        assert result.migrated == source


@SETTINGS
@given(hypothesmith.from_grammar(), st.sampled_from(["xm.mark_step()\n", "d = xm.xla_device()\n", "xm.all_gather(x)\n"]))
def test_rewritten_code_parses_and_is_stable(source: str, tail: str) -> None:
    if source and not source.endswith("\n"):
        source += "\n"
    program = XLA_HEADER + source + tail
    try:
        ast.parse(program)
    except SyntaxError:
        return
    result = rewrite_source(program, "generated.py", Options())
    if result.error is not None:
        assert ":" in result.error  # a one-line, located message, never an exception
        return
    ast.parse(result.migrated)
    again = rewrite_source(result.migrated, "generated.py", Options())
    assert again.migrated == result.migrated


@pytest.mark.parametrize(
    ("source", "expected_error"),
    [
        ("", None),
        ("# just a comment about torch_xla\n", None),
        ("import torch_xla\n\tx = 1\n", "IndentationError" if sys.version_info < (3, 12) else "unexpected indent"),
        ("import torch_xla\nif True:\n\txm = 1\n        y = 2\n", "inconsistent use of tabs"),
        ("import torch_xla\nx = (\n", "SyntaxError"),
        ("import torch_xla\nexec 'x'\n", "SyntaxError"),
    ],
)
def test_hostile_sources(source: str, expected_error: str | None) -> None:
    result = rewrite_source(source, "hostile.py", Options())
    if expected_error is None:
        assert result.error is None and result.migrated == source
    else:
        assert result.error is not None and result.error.startswith("hostile.py:")
        assert result.migrated == source


def test_tabs_mixed_newlines_and_form_feeds_survive() -> None:
    source = "import torch_xla.core.xla_model as xm\r\n\x0c\ndef f():\n\tx = 1\r\n\txm.mark_step()\n\treturn x\n"
    result = rewrite_source(source, "odd.py", Options())
    assert result.error is None
    assert result.migrated == "\x0c\ndef f():\n\tx = 1\r\n\treturn x\n"


@pytest.mark.slow
def test_a_50000_line_file() -> None:
    body = "".join(f"value_{i} = {i} * 2  # line {i}\n" for i in range(50_000))
    source = OLD + body
    start = time.perf_counter()
    result = rewrite_source(source, "big.py", Options())
    elapsed = time.perf_counter() - start
    assert result.error is None
    assert result.migrated == NEW + body
    assert elapsed < 120


def test_killed_run_leaves_each_file_whole(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(600):
        (folder / f"f{i:03d}.py").write_text(OLD)
    proc = subprocess.Popen(
        [sys.executable, "-m", "neuron_migrate", "rewrite", str(folder), "-q", "-j", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    files = sorted(folder.glob("f*.py"))
    while time.time() < deadline and not any(f.read_text() == NEW for f in files[:50]):
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    contents = [f.read_text() for f in files]
    assert all(text in (OLD, NEW) for text in contents)
    assert NEW in contents and OLD in contents, "the run was not interrupted midway"


def test_a_dying_worker_loses_only_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(10):
        (tmp_path / f"f{i}.py").write_text(OLD)
    real = cli.process

    def crashing(job: cli.Job) -> object:
        if job.path.name == "f3.py":
            os._exit(1)
        return real(job)

    crashing.__module__, crashing.__qualname__ = "neuron_migrate.cli", "process"
    monkeypatch.setattr(cli, "process", crashing)
    assert main(["rewrite", str(tmp_path), "-j", "2", "-q"]) == 2
    assert "f3.py:1:1: internal error: the worker died" in capsys.readouterr().err
    assert (tmp_path / "f3.py").read_text() == OLD
    for i in (0, 1, 2, 4, 5, 6, 7, 8, 9):
        assert (tmp_path / f"f{i}.py").read_text() == NEW
