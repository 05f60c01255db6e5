"""Old-stack programs compute the same values once migrated.

Each program in `fixtures/runs/<family>/` is old-stack code that prints what it computes: torch_xla's
utilities (`xla_utils`, NM013), and what torch_xla's seeding, precision switches and import guards
meant (`xla_semantics`). Its `.out` file is what it printed on torch_xla 2.9 (`PJRT_DEVICE=CPU`).
Migrated, the program runs here on torch 2.13 (CPU) and must print the same. Where the reference
interpreter exists, the original runs too and must still print its recording. Device names, clock
times and torch_xla's deprecation notices are masked: they differ by design (`xla:0` becomes the
native device).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.validate import refenv

PROGRAMS = Path(__file__).parent / "fixtures" / "runs"
NAMES = sorted(str(path.relative_to(PROGRAMS).with_suffix("")) for path in PROGRAMS.glob("*/*.py"))

pytestmark = pytest.mark.slow


def _masked(output: str) -> str:
    output = re.sub(r"(?m)^XLA_\w+ will be deprecated .*\n", "", output)
    output = re.sub(r"Device=[^ /]+/", "Device=<device>/", output)
    return re.sub(r"Time=\d{2}:\d{2}:\d{2}", "Time=<time>", output)


def _run(python: Path | str, script: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(python), str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return _masked(done.stdout)


def _expected(name: str) -> str:
    return (PROGRAMS / f"{name}.out").read_text()


@pytest.mark.parametrize("name", NAMES)
def test_migrated_program_prints_what_the_original_printed(name: str, tmp_path: Path) -> None:
    result = rewrite_source((PROGRAMS / f"{name}.py").read_text(), f"{Path(name).name}.py", Options())
    assert result.error is None, result.error
    assert "import torch_xla" not in result.migrated
    script = tmp_path / f"{Path(name).name}.py"
    script.write_text(result.migrated)
    env = {key: value for key, value in os.environ.items() if key != "PJRT_DEVICE"}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    assert _run(sys.executable, script, env) == _expected(name)


@pytest.mark.parametrize("name", NAMES)
def test_original_program_still_prints_its_recording(name: str) -> None:
    python = refenv.default_python()
    if python is None or not python.exists():
        pytest.skip(
            f"no reference environment (torch_xla 2.9): build it with `neuron-migrate env reference` ({refenv.DEFAULT_DIR})"
        )
    env = dict(os.environ, PJRT_DEVICE="CPU")
    assert _run(python, PROGRAMS / f"{name}.py", env) == _expected(name)
