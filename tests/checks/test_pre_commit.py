"""The hooks in `.pre-commit-hooks.yaml`, run by the real `pre-commit try-repo` in a temporary git
repository holding a bad and a good file.

pre-commit builds the hook environment by `pip install`ing this project (a `language: python`
hook), so it needs the build backend and the dependencies: from PyPI, or offline from a local
wheelhouse named by NEURON_MIGRATE_WHEELHOUSE (setuptools, wheel, libcst, pyyaml, pathspec). When
neither is reachable the tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("pre_commit")

ROOT = Path(__file__).resolve().parents[2]
BAD = "import torch\n\ndef forward(x):\n    return torch.nonzero(x)\n"
GOOD = "import torch\n\ndef forward(x):\n    return torch.where(x > 0, x, 0)\n"
OLD_STACK = "import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed copy of the project, as pre-commit would clone it."""
    repo = tmp_path_factory.mktemp("hook-repo")
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, repo / name)
    shutil.copytree(
        ROOT / "neuron_migrate",
        repo / "neuron_migrate",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "hooks")
    return repo


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRE_COMMIT", "GIT_"))}
    env["PRE_COMMIT_HOME"] = str(tmp_path_factory.mktemp("pre-commit-home"))  # shared: one install
    wheelhouse = os.environ.get("NEURON_MIGRATE_WHEELHOUSE")
    if wheelhouse:
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=wheelhouse)
    return env


def _try_repo(
    hook_repo: Path, project: Path, env: dict[str, str], hook: str
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), hook, "--all-files"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if (
        "Installing environment" in result.stdout
        and "An unexpected error has occurred" in result.stdout
    ):
        log = Path(env["PRE_COMMIT_HOME"]) / "pre-commit.log"
        text = log.read_text() if log.exists() else result.stdout
        if "No matching distribution" in text or "Could not find a version" in text:
            pytest.skip(
                "pre-commit could not install the hook environment: no package index and no "
                "NEURON_MIGRATE_WHEELHOUSE"
            )
    return result


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    for name, text in files.items():
        (project / name).write_text(text)
    _git(project, "add", "-A")
    return project


def test_check_hook_fails_on_the_bad_file_only(
    hook_repo: Path, environment: dict[str, str], tmp_path: Path
) -> None:
    project = _project(tmp_path, {"bad.py": BAD, "good.py": GOOD})
    result = _try_repo(hook_repo, project, environment, "neuron-migrate-check")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "neuron-migrate check" in result.stdout and "Failed" in result.stdout
    assert "bad.py:4:12: NM101" in result.stdout
    assert "good.py" not in result.stdout.split("Failed", 1)[1]


def test_check_hook_passes_on_good_code(
    hook_repo: Path, environment: dict[str, str], tmp_path: Path
) -> None:
    project = _project(tmp_path, {"good.py": GOOD})
    result = _try_repo(hook_repo, project, environment, "neuron-migrate-check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


def test_rewrite_hook_migrates_in_place(
    hook_repo: Path, environment: dict[str, str], tmp_path: Path
) -> None:
    project = _project(tmp_path, {"old.py": OLD_STACK, "good.py": GOOD})
    result = _try_repo(hook_repo, project, environment, "neuron-migrate-rewrite")
    assert result.returncode == 1, (
        result.stdout + result.stderr
    )  # pre-commit fails when a hook edits files
    assert "files were modified by this hook" in result.stdout
    migrated = (project / "old.py").read_text()
    assert "torch_xla" not in migrated and (project / "good.py").read_text() == GOOD
