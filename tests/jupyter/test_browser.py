"""Walkthrough 1 in a real browser: JupyterLab, served on 127.0.0.1, driven headless in Debian's
Chromium through Playwright.

The notebook is run from the UI (Run ▸ Run All Cells), as a user would. The test then checks
that the `%%neuron_migrate` diff and the migration app rendered, that every code cell ran, and
that none failed, both on the page and in the notebook JupyterLab saved. Screenshots are kept
under the artifacts folder (`build/test-artifacts/jupyter`, or $NEURON_MIGRATE_TEST_ARTIFACTS).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.jupyter.conftest import NOTEBOOKS, ROOT, artifacts_dir

pytestmark = pytest.mark.slow

WALKTHROUGH = "01_xla_training_loop.ipynb"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# JupyterLab settings for the test profile: no news or update checks (nothing leaves the machine),
# and every cell attached to the page, so that the whole notebook can be inspected.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _chromium() -> str | None:
    given = os.environ.get("NEURON_MIGRATE_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _chromium()
    if path is None:
        pytest.skip(
            "no Chromium: install Debian's `chromium` package (or set NEURON_MIGRATE_CHROMIUM)"
        )
    pytest.importorskip(
        "playwright.sync_api", reason="the `playwright` Python package is not installed"
    )
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """JupyterLab on 127.0.0.1 over a copy of the walkthrough (a run never touches the repository)."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed")
    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    # Without the outputs it is committed with, so that what the page shows is this run's.
    notebook = nbformat.read(NOTEBOOKS / WALKTHROUGH, as_version=nbformat.NO_CONVERT)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, root / "notebooks" / WALKTHROUGH)
    shutil.copytree(ROOT / "examples", root / "examples")
    settings = root / "settings"
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(root / "workspaces"),
    }
    log = (root / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.allow_remote_access=False",
            "--ServerApp.terminals_enabled=False",
            "--LabApp.extension_manager=readonly",  # no PyPI queries
            *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not start:\n{(root / 'jupyterlab.log').read_text()[-3000:]}"
                    )
                time.sleep(0.3)
        yield f"{url}/lab/tree/notebooks/{WALKTHROUGH}?token={token}", root
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=15)
        if server.poll() is None:
            server.kill()
        log.close()
        shutil.copy(root / "jupyterlab.log", artifacts_dir() / "jupyterlab.log")


def _run_all(page: Any, timeout: float = 240) -> None:
    """Run ▸ Run All Cells, once the kernel is up; then wait until every code cell shows an
    execution count (`[n]:`, none queued as `[*]:`) and the kernel is idle again.

    When the kernel list reaches the page late (a loaded machine), JupyterLab starts no kernel
    and asks which one to start instead: take the one it proposes."""
    deadline = time.monotonic() + timeout

    def kernel_dialog() -> bool:
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
            return True
        return False

    while not page.locator(".jp-StatusBar-Item", has_text=re.compile(r"\| Idle")).count():
        kernel_dialog()
        assert time.monotonic() < deadline, "the kernel did not start"
        time.sleep(0.5)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    while True:
        if kernel_dialog():  # the kernel went away: run again on the new one
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        prompts = page.evaluate(PROMPTS)
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count() > 0
        if prompts and idle and all(re.search(r"\[\d+\]", p) for p in prompts):
            return
        assert time.monotonic() < deadline, f"the notebook did not finish running: {prompts}"
        time.sleep(0.5)


def _all_ran(path: Path) -> bool:
    try:
        cells = json.loads(path.read_text())["cells"]
    except ValueError:  # being written
        return False
    return all(cell["execution_count"] for cell in cells if cell["cell_type"] == "code")


PROMPTS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))
    .map(e => e.textContent.trim())"""


def test_walkthrough_1_runs_from_the_jupyterlab_ui(
    chromium: str, lab: tuple[str, Path], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    url, root = lab
    shots = artifacts_dir()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # an empty profile
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 1400},
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            page.goto(url)
            page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=120_000)
            _run_all(page)
            page.screenshot(path=str(shots / "walkthrough-01-viewport.png"))

            diff = page.locator(".jp-OutputArea-output table.nm-diff").first
            diff.scroll_into_view_if_needed()
            assert diff.is_visible(), "the %%neuron_migrate diff did not render"
            assert diff.locator("tr.nm-chg, tr.nm-add, tr.nm-del").count() > 0
            assert "xm.xla_device()" in diff.inner_text()
            diff.locator("xpath=ancestor::div[contains(@class, 'jp-Cell')][1]").screenshot(
                path=str(shots / "walkthrough-01-cell-magic.png")
            )

            # Widget views appear once the page has fetched their models from the kernel.
            app = page.locator(".nm-migration-app").first
            app.wait_for(state="attached", timeout=120_000)
            app.scroll_into_view_if_needed()
            assert app.is_visible(), "the migration app (ipywidgets) did not render"
            assert app.locator("table.nm-diff").count() == 1
            app.screenshot(path=str(shots / "walkthrough-01-migration-app.png"))

            errors = page.locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                has_text="Error",
            )
            assert errors.count() == 0, errors.first.inner_text()

            # Save from the menu, then wait for the file on disk to hold every cell's run.
            page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()
            page.locator(
                ".lm-Menu-itemLabel", has_text=re.compile(r"^Save Notebook$")
            ).first.click()
            saved_path = root / "notebooks" / WALKTHROUGH
            deadline = time.monotonic() + 60
            while not _all_ran(saved_path):
                assert time.monotonic() < deadline, "JupyterLab did not save the executed notebook"
                time.sleep(0.5)
        except Exception:
            page.screenshot(path=str(shots / "walkthrough-01-failure.png"))
            raise
        finally:
            browser.close()

    saved = json.loads((root / "notebooks" / WALKTHROUGH).read_text())
    code = [cell for cell in saved["cells"] if cell["cell_type"] == "code"]
    failed = [o for cell in code for o in cell["outputs"] if o["output_type"] == "error"]
    assert not failed, failed[0]["ename"] + ": " + failed[0]["evalue"]
    shutil.copy(root / "notebooks" / WALKTHROUGH, shots / "walkthrough-01-from-jupyterlab.ipynb")
