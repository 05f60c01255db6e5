"""A step boundary that fenced a timer becomes a guarded synchronize, and the migrated code runs
on a machine without an accelerator; an emptied `if` keeps a test that does something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from neuron_migrate.rewrite.engine import Options, rewrite_source

FIXTURES = Path(__file__).parent / "fixtures" / "rewrite" / "xla_sync"


@pytest.mark.skipif(
    torch.accelerator.is_available(), reason="needs a machine without an accelerator"
)
def test_synchronize_without_an_accelerator_raises() -> None:
    """Why the portable spelling is guarded with `torch.accelerator.is_available()`."""
    with pytest.raises(RuntimeError):
        torch.accelerator.synchronize()


def test_migrated_benchmark_runs_on_the_cpu() -> None:
    script = FIXTURES / "timed_steps.out.py"
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


def _migrate(source: str) -> str:
    result = rewrite_source(source, "train.py", Options())
    assert result.error is None
    return result.migrated


def test_timer_read_after_a_step_boundary_waits_for_the_device() -> None:
    migrated = _migrate(
        "import time\nimport torch_xla.core.xla_model as xm\n\n"
        "def timed(model, x):\n    start = time.time()\n    model(x)\n    xm.mark_step()\n    return time.time() - start\n"
    )
    assert (
        "    if torch.accelerator.is_available():\n        torch.accelerator.synchronize()\n    return time.time()"
        in migrated
    )


def test_step_boundary_without_a_timer_goes() -> None:
    migrated = _migrate(
        "import torch_xla.core.xla_model as xm\n\ndef step(model, x):\n    model(x)\n    xm.mark_step()\n"
    )
    assert "synchronize" not in migrated and "mark_step" not in migrated


def test_emptied_if_still_runs_a_test_that_does_something() -> None:
    migrated = _migrate(
        "import torch_xla.core.xla_model as xm\n\ncalls = []\n\n"
        "def save(step):\n    calls.append(step)\n    return True\n\n"
        "for step in range(3):\n    if save(step):\n        xm.mark_step()\n    if step % 2 == 0:\n        xm.mark_step()\n"
    )
    namespace: dict[str, object] = {}
    exec(compile(migrated, "train.py", "exec"), namespace)
    assert namespace["calls"] == [0, 1, 2]
    assert "if step % 2" not in migrated
