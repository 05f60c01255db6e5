"""Shared pieces of the Jupyter tests: paths, the artifacts folder, an in-process IPython shell."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
DATA = Path(__file__).parent / "data"


def artifacts_dir() -> Path:
    """Where executed notebooks and screenshots are kept for CI to upload."""
    folder = Path(
        os.environ.get(
            "NEURON_MIGRATE_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts" / "jupyter"
        )
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def shell() -> Any:
    """One in-process IPython shell for the session, with the extension loaded."""
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.display_formatter.active_types = [
        "text/plain",
        "text/html",
    ]  # as in a notebook, not a terminal
    ip.run_line_magic("load_ext", "neuron_migrate")
    return ip


@pytest.fixture
def ip(shell: Any) -> Iterator[Any]:
    """The shell, with the names a test defines removed afterwards."""
    before = set(shell.user_ns)
    yield shell
    for name in set(shell.user_ns) - before:
        del shell.user_ns[name]
