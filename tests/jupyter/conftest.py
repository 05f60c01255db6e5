"""Shared pieces of the Jupyter tests: paths, the artifacts folder, an in-process IPython shell."""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
DATA = Path(__file__).parent / "data"


def text_of(markup: str) -> str:
    """What HTML reads as: tags (syntax colours, word marks) dropped, entities decoded."""
    return html.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", "", markup, flags=re.DOTALL))


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


@pytest.fixture
def fresh(ip: Any) -> Any:
    """The shell with its history cleared, as a kernel that has just started."""
    ip.history_manager.reset(new_session=True)
    ip.execution_count = 1
    return ip


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test item, for fixtures that act on failures."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
