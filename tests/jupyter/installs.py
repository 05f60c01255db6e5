"""neuron-migrate installed the ways users install it, each into a fresh virtual environment
that sees this environment's packages through a `.pth` file (JupyterLab, pip, setuptools): the
wheel (`pip install neuron-migrate`) and an editable install of a checkout. Made with
`--no-deps` and `--no-build-isolation`: nothing is downloaded.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.jupyter.conftest import ROOT


def checkout_copy(folder: Path) -> Path:
    """What a checkout holds for building the package, copied (a build writes next to it)."""
    folder.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, folder / name)
    shutil.copytree(
        ROOT / "neuron_migrate",
        folder / "neuron_migrate",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return folder


def environment(folder: Path) -> Path:
    """A new virtual environment (its Python), which imports what this one has installed."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A plain path line: this environment's packages, not its editable install of this project.
    (Path(purelib) / "outer.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # And the JupyterLab extensions those packages installed as data files (ipywidgets' manager),
    # as installing them there would: all but this project's own.
    ours = Path(sys.prefix) / "share" / "jupyter" / "labextensions"
    theirs = folder / "share" / "jupyter" / "labextensions"
    for extension in [*ours.glob("[!@]*"), *ours.glob("@*/*")] if ours.is_dir() else []:
        if extension.name != "neuron-migrate":
            link = theirs / extension.relative_to(ours)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(extension)
    return python


def run(*command: str | Path) -> str:
    """Run a command outside any checkout (a checkout's folder would be imported first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    result = subprocess.run(
        [str(part) for part in command],
        cwd=Path(str(command[0])).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)


def listed(python: Path, prefix: Path) -> str:
    """The line `jupyter labextension list` shows for the extension in the environment's own
    folder of extensions (`python -m jupyterlab.labextensions` is that command)."""
    shown = run(python, "-m", "jupyterlab.labextensions", "list")
    section = str(prefix / "share" / "jupyter" / "labextensions")
    assert section in shown, shown
    after = shown.split(section, 1)[1]
    line = next((line.strip() for line in after.splitlines() if "neuron-migrate" in line), "")
    assert line, shown
    return line


def wheel_environment(folder: Path) -> Path:
    """A fresh virtual environment (its Python) with the wheel built from this checkout installed."""
    checkout = checkout_copy(folder / "checkout")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", folder / "dist", checkout)
    [wheel] = (folder / "dist").glob("neuron_migrate-*.whl")
    python = environment(folder / "venv")
    run(python, "-m", "pip", "install", "--no-deps", wheel)
    return python
