"""The extension in a real browser: JupyterLab, served on 127.0.0.1 from a fresh environment
where the wheel is installed (as `pip install neuron-migrate[jupyter]` installs it), driven
headless in Debian's Chromium through Playwright.

Walkthrough 1 is run from the UI (Run ▸ Run All Cells), as a user would: its loop cell, whose
imports sit in the cell above, shows the migration; every code cell ran and none failed, on the
page and in the notebook JupyterLab saved. Then the buttons under a diff replace the cell in the
open notebook (and undo it), the migration app applies one cell of a notebook open in another tab
(which shows it, saved, with no conflict dialog on its next save), a notebook saved with the
validation dashboard, reopened without the dashboard's kernel, still shows its verdict and curves,
a validation's verdict is in the notebook's next save as soon as the page shows it (and a new run
takes the last one away first), and the buttons of outputs a notebook brought with it (not
trusted) change nothing.

Screenshots are kept under the artifacts folder (`build/test-artifacts/jupyter`, or
$NEURON_MIGRATE_TEST_ARTIFACTS); with NEURON_MIGRATE_DOCS_SCREENSHOTS=1, those of the magic, the
app and the dashboard are written to `docs/` as well.
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
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.jupyter.conftest import DATA, NOTEBOOKS, ROOT, artifacts_dir
from tests.jupyter.installs import wheel_environment
from tests.jupyter.test_widgets import PROGRAM

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
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


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


def screenshot(element: Any, name: str) -> None:
    """Keep a screenshot in the artifacts folder, and in docs/ when asked to."""
    path = artifacts_dir() / name
    element.screenshot(path=str(path))
    if os.environ.get("NEURON_MIGRATE_DOCS_SCREENSHOTS") == "1":
        shutil.copy(path, ROOT / "docs" / name)


@dataclass
class Lab:
    url: str
    token: str
    root: Path

    def link(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}"


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


def _scratch_notebooks(root: Path) -> None:
    """The notebooks of the tests after the walkthrough."""
    shutil.copy(DATA / "validate_match.json", root / "validate_match.json")
    # The walkthrough with the outputs it is committed with: a notebook this server did not sign.
    shutil.copy(NOTEBOOKS / WALKTHROUGH, root / "as_committed.ipynb")
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell("%load_ext neuron_migrate"),
                new_code_cell(
                    "from neuron_migrate.jupyter import ValidationDashboard\n\ndashboard = ValidationDashboard()\ndashboard"
                ),
                # Changed after it was shown: the notebook saved must hold the new view.
                new_code_cell(
                    "import json\n\ndashboard.result = json.load(open('validate_match.json'))"
                ),
                new_code_cell("%neuron_migrate_check"),
            ],
            metadata={"kernelspec": KERNELSPEC},
        ),
        root / "dashboard.ipynb",
    )
    # Two programs whose losses part (the second's learning rate is doubled), validated from a
    # dashboard that shows an earlier MATCH.
    (root / "a.py").write_text(PROGRAM)
    (root / "b.py").write_text(PROGRAM.replace("float(sys.argv[1])", "2 * float(sys.argv[1])"))
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell("%load_ext neuron_migrate"),
                new_code_cell(
                    "from neuron_migrate.jupyter import ValidationDashboard\n\n"
                    "dashboard = ValidationDashboard.from_json('validate_match.json')\ndashboard"
                ),
                new_code_cell("dashboard.start('a.py', 'b.py', '0.1', '3')"),
            ],
            metadata={"kernelspec": KERNELSPEC},
        ),
        root / "validate.ipynb",
    )


# Three cells whose migrations depend on each other: the imports the other two read, a `%time`
# line whose Python migrates, and a loop that brings a helper. Applied one cell at a time, in
# either order, they must give what applying the whole notebook gives.
ORDER_CELLS = [
    "import torch\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.parallel_loader as pl",
    "%time device = xm.xla_device()",
    "loader = pl.MpDeviceLoader([torch.ones(2)], device)\nfor batch in loader:\n    print(batch.sum())\n    xm.mark_step()",
]
ORDERS = {"forward.ipynb": (1, 2, 3), "backward.ipynb": (3, 2, 1), "whole.ipynb": ()}


def _order_notebooks(root: Path) -> None:
    """Three copies of a notebook to apply in different orders, and the app that applies them."""
    (root / "orders").mkdir()
    for name in ORDERS:
        cells = [new_code_cell(source) for source in ORDER_CELLS]
        nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC}), root / "orders" / name)
    app = "from neuron_migrate.jupyter import MigrationApp\n\napp = MigrationApp(['orders'])\napp"
    nbformat.write(new_notebook(cells=[new_code_cell(app)], metadata={"kernelspec": KERNELSPEC}), root / "apply.ipynb")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab on 127.0.0.1, run from a fresh environment with the wheel of this checkout
    installed, over a copy of the walkthrough (a run never touches the repository)."""
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
    _scratch_notebooks(root)
    _order_notebooks(root)
    settings = root / "settings"
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    # Installed as users install it: the wheel, in an environment of its own, whose JupyterLab
    # finds the extension where the wheel put it, and whose kernels import the installed package.
    python = wheel_environment(tmp_path_factory.mktemp("install"))
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
    env.update(
        JUPYTER_CONFIG_DIR=str(root / "config"),
        JUPYTER_DATA_DIR=str(root / "data"),
        JUPYTER_RUNTIME_DIR=str(root / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"),
    )
    log = (root / "jupyterlab.log").open("w")
    server = subprocess.Popen(
        [
            str(python),
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
        yield Lab(url, token, root)
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=15)
        if server.poll() is None:
            server.kill()
        log.close()
        shutil.copy(root / "jupyterlab.log", artifacts_dir() / "jupyterlab.log")


@pytest.fixture(scope="module")
def page(chromium: str, lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One page of one browser for the module's tests, which follow on each other."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")),  # an empty profile
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1300},
        )
        page = browser.pages[0] if browser.pages else browser.new_page()
        try:
            yield page
        finally:
            browser.close()


@pytest.fixture(autouse=True)
def screenshot_on_failure(request: pytest.FixtureRequest, page: Any) -> Iterator[None]:
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        page.screenshot(path=str(artifacts_dir() / f"failure-{request.node.name}.png"))


# -- driving JupyterLab ---------------------------------------------------------------------------

PROMPTS = """() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell .jp-InputPrompt'))
    .map(e => e.textContent.trim())"""


def _until(condition: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _dialog(page: Any) -> bool:
    """Accept the dialog JupyterLab shows (which kernel to start), if any."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    if accept.count():
        accept.first.click()
        return True
    return False


def _menu(page: Any, menu: str, item: str | re.Pattern[str]) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def _save_until_clean(page: Any, timeout: float = 60) -> None:
    """Save the shown notebook until its tab has no unsaved changes: JupyterLab may mark it
    changed again after a save (the kernel's language_info arrives late), and a key press
    sent while the focus is elsewhere saves nothing, so save from the menu, as often as it takes."""
    dirty = page.locator(".lm-TabBar-tab.lm-mod-current.jp-mod-dirty")

    def clean() -> bool:
        if not dirty.count():
            return True
        _menu(page, "File", re.compile(r"^Save Notebook$"))
        time.sleep(1)
        return not dirty.count()

    _until(clean, "the notebook could not be saved", timeout)


def _idle(page: Any) -> bool:
    """Whether the kernel of the shown notebook is up and idle."""
    return bool(
        page.locator(
            ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status='idle']"
        ).count()
    )


def _run_all(page: Any, timeout: float = 300) -> None:
    """Run ▸ Run All Cells in the shown notebook, once its kernel is up; then wait until every
    code cell has an execution count (`[n]:`, none queued as `[*]:`) and the kernel is idle.

    When the kernel list reaches the page late (a loaded machine), JupyterLab starts no kernel
    and asks which one to start instead: take the one it proposes. A Run All that came before
    the kernel was ready (nothing runs, nothing is queued) is given again."""
    deadline = time.monotonic() + timeout
    while not _idle(page):
        _dialog(page)
        assert time.monotonic() < deadline, "the kernel did not start"
        time.sleep(0.5)
    _cells(page).first.locator(".jp-InputPrompt").click()  # the menu acts on this notebook
    _menu(page, "Run", "Run All Cells")
    asked = time.monotonic()
    while True:
        if _dialog(page):  # the kernel went away: run again on the new one
            _menu(page, "Run", "Run All Cells")
        prompts = page.evaluate(PROMPTS)
        if prompts and _idle(page) and all(re.search(r"\[\d+\]", p) for p in prompts):
            return
        if _idle(page) and all(p == "[ ]:" for p in prompts) and time.monotonic() - asked > 15:
            _menu(page, "Run", "Run All Cells")
            asked = time.monotonic()
        assert time.monotonic() < deadline, f"the notebook did not finish running: {prompts}"
        time.sleep(0.5)


def _open(page: Any, path: str) -> None:
    """File ▸ Open from Path…, in this window (a tab of its own)."""
    _menu(page, "File", "Open from Path")
    page.locator(".jp-Dialog input").fill(path)
    page.keyboard.press("Enter")
    _until(
        lambda: page.locator(".lm-TabBar-tab.lm-mod-current", has_text=Path(path).name).count(),
        f"{path} did not open",
    )


def _tab(page: Any, name: str) -> None:
    page.locator(
        ".jp-MainAreaWidget .lm-TabBar-tab, .lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name
    ).first.click()
    _until(
        lambda: page.locator(".lm-TabBar-tab.lm-mod-current", has_text=name).count(),
        f"no tab {name}",
    )


def _option(select: Any, text: str) -> str:
    """The label of the first option of a <select> that contains `text` (once there is one);
    ipywidgets writes the spaces of labels as no-break spaces."""

    def found() -> str | None:
        labels = select.evaluate("s => Array.from(s.options).map(o => o.label)")
        return next((label for label in labels if text in label.replace("\xa0", " ")), None)

    return str(_until(found, f"no option {text!r}"))


def _choose(select: Any, text: str) -> None:
    """Select the option of a <select> that contains `text`, again if the widget renamed its
    options meanwhile (the app relabels its files after each Apply)."""
    from playwright.sync_api import Error as PlaywrightError

    def chosen() -> bool:
        try:
            select.select_option(label=_option(select, text), timeout=3_000)
        except PlaywrightError:
            return False
        return True

    _until(chosen, f"could not select {text!r}")


def _cells(page: Any) -> Any:
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")


def _source(cell: Any) -> str:
    return str(cell.locator(".jp-InputArea-editor .cm-content").inner_text()).replace("\u00a0", " ")


def _saved(path: Path, condition: Callable[[dict], bool]) -> dict:
    def read() -> dict | None:
        try:
            notebook = json.loads(path.read_text())
        except ValueError:  # being written
            return None
        return notebook if condition(notebook) else None

    return dict(_until(read, f"{path} was not saved as expected", 60))


# -- the tests, in order --------------------------------------------------------------------------


def test_walkthrough_1_runs_from_the_jupyterlab_ui(page: Any, lab: Lab) -> None:
    page.goto(lab.link(f"notebooks/{WALKTHROUGH}"))
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=120_000)
    assert page.evaluate("() => !!(window._JUPYTERLAB && window._JUPYTERLAB['neuron-migrate'])"), (
        "neuron-migrate's JupyterLab piece did not load"
    )
    _run_all(page)
    page.screenshot(path=str(artifacts_dir() / "walkthrough-01-viewport.png"))

    # The loop's imports sit in the cell above: the loop is migrated all the same.
    loop = _cells(page).filter(has_text="%%neuron_migrate --run").first
    diff = loop.locator(".jp-OutputArea-output table.nm-diff").first
    diff.scroll_into_view_if_needed()
    assert diff.is_visible(), "the %%neuron_migrate diff did not render"
    assert diff.locator("tr.nm-chg, tr.nm-add, tr.nm-del").count() > 0
    assert "xm.xla_device()" in diff.inner_text()
    assert diff.locator("tr.nm-fold details").count() == 2  # DeviceLoader, average_gradients
    assert loop.locator(".nm-actions").first.is_visible(), "the piece shows the buttons"
    screenshot(loop, "jupyter-magic.png")

    # Widget views appear once the page has fetched their models from the kernel.
    app = page.locator(".nm-migration-app").first
    app.wait_for(state="attached", timeout=120_000)
    app.scroll_into_view_if_needed()
    assert app.is_visible(), "the migration app (ipywidgets) did not render"
    assert app.locator("table.nm-diff").count() == 1

    errors = page.locator(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
        has_text="Error",
    )
    assert errors.count() == 0, errors.first.inner_text()

    # Save from the menu, then wait for the file on disk to hold every cell's run.
    _menu(page, "File", re.compile(r"^Save Notebook$"))
    saved = _saved(
        lab.root / "notebooks" / WALKTHROUGH,
        lambda nb: all(c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"),
    )
    code = [cell for cell in saved["cells"] if cell["cell_type"] == "code"]
    failed = [o for cell in code for o in cell["outputs"] if o["output_type"] == "error"]
    assert not failed, failed[0]["ename"] + ": " + failed[0]["evalue"]
    shutil.copy(
        lab.root / "notebooks" / WALKTHROUGH,
        artifacts_dir() / "walkthrough-01-from-jupyterlab.ipynb",
    )


def _index(page: Any, start: str) -> int:
    """The position of the first cell whose source starts with `start`."""
    cells = _cells(page)
    return next(i for i in range(cells.count()) if _source(cells.nth(i)).startswith(start))


def test_replace_cell_and_insert_below_change_the_open_notebook(page: Any) -> None:
    index = _index(page, "%%neuron_migrate --target neuron")
    cell = _cells(page).nth(index)  # the same cell, whatever its source becomes
    before = _source(cell)
    count = _cells(page).count()
    replace = cell.locator("button.nm-replace-cell")
    replace.scroll_into_view_if_needed()
    replace.click()
    _until(lambda: not _source(cell).startswith("%%neuron_migrate"), "Replace cell did nothing")
    replaced = _source(cell)
    assert 'torch.device("neuron")' in replaced and "xm." not in replaced
    assert "run the cell to use the migrated code" in cell.locator(".nm-action-status").inner_text()
    cell.locator("button.nm-replace-cell", has_text="Undo replace").click()
    _until(lambda: _source(cell) == before, "Undo replace did not restore the cell")
    cell.locator("button.nm-insert-below").click()
    _until(lambda: _cells(page).count() == count + 1, "Insert below did not add a cell")
    assert _source(cell) == before
    assert 'torch.device("neuron")' in _source(_cells(page).nth(index + 1))


def test_apply_one_cell_changes_only_that_cell_in_its_open_tab(page: Any, lab: Lab) -> None:
    tutorial = "notebooks/work/01-xla-training-loop/tutorial_xla.ipynb"
    on_disk = lab.root / tutorial
    before = json.loads(on_disk.read_text())
    _open(page, tutorial)
    # Its kernel up first: JupyterLab writes the kernel's language_info into the notebook it
    # starts one for, which leaves the tab with unsaved changes of its own.
    _until(lambda: _dialog(page) or _idle(page), "the tutorial's kernel did not start")
    _until(lambda: _idle(page), "the tutorial's kernel did not start")
    _save_until_clean(page)
    dirty = page.locator(".lm-TabBar-tab.lm-mod-current.jp-mod-dirty")
    _tab(page, WALKTHROUGH)
    app = page.locator(".nm-migration-app").first
    app.scroll_into_view_if_needed()
    files = app.locator("select").first
    files.select_option(label=_option(files, "tutorial_xla.ipynb"))
    _until(lambda: "tutorial_xla.ipynb" in app.inner_text(), "the app did not show the notebook")
    cells = app.locator("select").nth(1)
    cells.select_option(label=_option(cells, "cell 3"))
    apply = app.locator("button", has_text=re.compile(r"^Apply cell 3"))
    _until(lambda: apply.count(), "no Apply button for cell 3")
    screenshot(app, "jupyter-app.png")
    apply.click()
    _until(
        lambda: "written through its open tab" in app.inner_text(), "the open tab did not write it"
    )
    app.locator("details.nm-review summary").click()
    assert app.locator("details.nm-review table.nm-diff").is_visible()  # what was written
    screenshot(app, "jupyter-app-written.png")

    # The tab shows the change, saved; the file holds it, in that cell only.
    _tab(page, "tutorial_xla.ipynb")
    third = _cells(page).nth(2)
    assert "xm.mark_step" not in _source(third) and "%%time" in _source(third)
    _until(lambda: dirty.count() == 0, "the open tab kept the write unsaved", timeout=30)
    after = json.loads(on_disk.read_text())
    assert after["cells"][2]["source"] != before["cells"][2]["source"]
    assert [c["source"] for i, c in enumerate(after["cells"]) if i != 2] == [
        c["source"] for i, c in enumerate(before["cells"]) if i != 2
    ]
    # Its next save raises no "File Changed" dialog, and keeps the migration.
    _cells(page).nth(1).click()
    page.keyboard.press("Control+s")
    time.sleep(2)
    assert page.locator(".jp-Dialog", has_text="File Changed").count() == 0
    assert json.loads(on_disk.read_text())["cells"][2]["source"] == after["cells"][2]["source"]

    # Undo in the app restores the cell, in the open tab too.
    _tab(page, WALKTHROUGH)
    app.locator("button", has_text="Undo").click()
    _until(lambda: "undone" in app.inner_text(), "Undo did not finish")
    assert json.loads(on_disk.read_text())["cells"][2]["source"] == before["cells"][2]["source"]


def test_a_saved_notebook_reopened_without_its_kernel_shows_the_dashboard(
    page: Any, lab: Lab
) -> None:
    _open(page, "dashboard.ipynb")
    _run_all(page)
    _run_all(page)  # the second time the tab has said hello: the dashboard reports to it
    dashboard = page.locator(".nm-validation-dashboard").first
    _until(lambda: "MATCH" in dashboard.inner_text(), "the dashboard did not show the result")
    dashboard.scroll_into_view_if_needed()
    screenshot(dashboard, "jupyter-dashboard.png")

    # Renamed after its kernel started: the check still finds the notebook, by its new name.
    _menu(page, "File", "Rename Notebook")
    page.locator(".jp-Dialog input").fill("renamed.ipynb")
    page.keyboard.press("Enter")
    _until(
        lambda: page.locator(".lm-TabBar-tab.lm-mod-current", has_text="renamed.ipynb").count(),
        "not renamed",
    )
    check = _cells(page).nth(3)
    check.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    _until(
        lambda: "renamed.ipynb" in check.locator(".jp-OutputArea").inner_text(),
        "the check did not find the renamed notebook",
    )

    _menu(page, "File", re.compile(r"^Save Notebook$"))
    saved = _saved(
        lab.root / "renamed.ipynb",
        lambda nb: "MATCH" in json.dumps(nb["cells"][1]["outputs"]),
    )
    [view] = [o for o in saved["cells"][1]["outputs"] if "data" in o]
    assert "data:image/png;base64," in "".join(view["data"]["text/html"])
    _menu(page, "Kernel", "Shut Down Kernel")
    _menu(page, "File", re.compile(r"^Close Tab$"))
    _open(page, "renamed.ipynb")
    _dialog(page)
    # A new kernel, or none: the dashboard's model is gone; its static view shows instead.
    output = _cells(page).nth(1).locator(".jp-OutputArea-output").first
    _until(
        lambda: "MATCH: the migrated program computes what the original did" in output.inner_text(),
        "no verdict after reopening",
    )
    assert "Error displaying widget" not in output.inner_text()
    # The static view replaces the widget's once the page finds no model for it: wait for it.
    curves = output.locator("img.nm-curves")
    _until(lambda: curves.count() == 1, "no curves after reopening", timeout=30)
    assert curves.evaluate("img => img.naturalWidth") > 0
    assert output.locator("table.nm-comparison").count() == 1
    screenshot(output, "jupyter-dashboard-reopened.png")


def test_a_validation_result_is_in_the_first_save_after_the_page_shows_it(
    page: Any, lab: Lab
) -> None:
    path = lab.root / "validate.ipynb"

    def saved_view() -> str:
        """What the notebook on disk holds as the dashboard's output, once saved from the menu
        (the kernel is sent nothing)."""
        _save_until_clean(page)
        return json.dumps(json.loads(path.read_text())["cells"][1]["outputs"])

    _open(page, "validate.ipynb")
    _run_all(page)  # the run starts; its tab says hello to the kernel meanwhile
    dashboard = page.locator(".nm-validation-dashboard").first
    _until(lambda: "DIVERGE" in dashboard.inner_text(), "no verdict", timeout=240)
    assert "DIVERGE" in saved_view()

    # Validate again: the last verdict goes, on the page and in the notebook, while it runs.
    start = _cells(page).nth(2)
    start.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    _until(lambda: "Validating" in dashboard.inner_text(), "the new run did not show")
    assert "DIVERGE" not in dashboard.inner_text() and "MATCH" not in dashboard.inner_text()
    running = saved_view()
    assert "DIVERGE" in running or ("Validating" in running and "MATCH" not in running)

    # The run ends: one save, as soon as the page shows the verdict, holds it.
    _until(lambda: "DIVERGE" in dashboard.inner_text(), "no verdict", timeout=240)
    assert "DIVERGE" in saved_view()
    _menu(page, "Kernel", "Shut Down Kernel")
    _menu(page, "File", re.compile(r"^Close Tab$"))


def test_the_buttons_of_an_untrusted_output_change_nothing(page: Any) -> None:
    _open(page, "as_committed.ipynb")
    _dialog(page)
    start = "%%neuron_migrate --target neuron"
    _until(lambda: _cells(page).filter(has_text=start).count(), "the notebook did not render")
    index = _index(page, start)
    cell = _cells(page).nth(index)
    before, count = _source(cell), _cells(page).count()
    replace = cell.locator("button.nm-replace-cell")
    replace.scroll_into_view_if_needed()
    replace.click()
    status = cell.locator(".nm-action-status")
    _until(lambda: "not trusted" in status.inner_text(), "an untrusted output's button acted")
    cell.locator("button.nm-insert-below").click()
    assert _source(cell) == before and _cells(page).count() == count


def test_applying_cell_by_cell_in_either_order_gives_what_applying_the_whole_notebook_gives(
    page: Any, lab: Lab
) -> None:
    _open(page, "apply.ipynb")
    _run_all(page)
    app = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .nm-migration-app").first
    app.wait_for(state="attached", timeout=120_000)
    files, cells = app.locator("select").first, app.locator("select").nth(1)

    def apply(name: str, cell: int | None) -> None:
        """Select the cell (or the whole notebook) in the app and apply it, unless an earlier
        apply wrote it already (its Apply button is then disabled)."""
        path = lab.root / "orders" / name
        before = path.read_text()
        headline = app.locator(".nm-headline").first
        _choose(files, name)
        # A newly chosen file is shown whole first: choose the cell once the app shows the file.
        _until(lambda: f"orders/{name}" in headline.inner_text(), f"the app did not show {name}")
        _choose(cells, "whole notebook" if cell is None else f"cell {cell}")
        shown = f"orders/{name}:" if cell is None else f"orders/{name}, cell {cell}:"
        _until(lambda: shown in headline.inner_text(), f"the app did not show {shown}")
        where = "" if cell is None else f"cell {cell} to "
        button = app.locator("button", has_text=re.compile(rf"^\s*Apply {where}{re.escape(name)}\s*$"))
        _until(lambda: button.count(), f"the app does not offer to apply {where}{name}")
        if button.first.is_disabled():
            return
        button.first.click()
        _until(lambda: path.read_text() != before, f"{where}{name} was not written")
        # Done once the app has read the file again and says so ("writing ..." until then).
        _until(lambda: "writing " not in app.inner_text(), f"the app did not finish writing {where}{name}")

    for name, order in ORDERS.items():
        for cell in order:
            apply(name, cell)
        apply(name, None)  # what is left (the imports the last cell no longer needs), as Next offers it
    sources = {
        name: ["".join(c["source"]) for c in json.loads((lab.root / "orders" / name).read_text())["cells"]]
        for name in ORDERS
    }
    whole = sources["whole.ipynb"]
    assert sources["forward.ipynb"] == whole and sources["backward.ipynb"] == whole, sources
    assert whole[1].startswith("%time device = ") and "xm." not in "".join(whole), whole
    assert "import torch_xla" not in "".join(whole)
    _menu(page, "Kernel", "Shut Down Kernel")
    _menu(page, "File", re.compile(r"^Close Tab$"))
