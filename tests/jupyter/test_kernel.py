"""The extension in a real kernel (nbclient), for the notebook layouts users write: imports in one
cell and the training loop in the next, a cell that does not parse, a check run before saving,
a notebook renamed after the kernel started, a validation left running, widgets in a notebook
saved without their state."""

from __future__ import annotations

import json
import queue
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.jupyter.conftest import DATA, text_of
from tests.jupyter.test_widgets import WAITING

pytestmark = pytest.mark.slow

TIMEOUT = 300


def run(tmp_path: Path, *sources: str, name: str = "nb.ipynb") -> nbformat.NotebookNode:
    """Run the cells in a fresh kernel (errors do not stop it), in `tmp_path`; the notebook."""
    from nbclient import NotebookClient

    notebook = new_notebook(
        cells=[new_code_cell(source) for source in sources],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=TIMEOUT,
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    return notebook


def outputs(cell: nbformat.NotebookNode, kind: str = "text/plain") -> str:
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
        elif kind in output.get("data", {}):
            parts.append(output.data[kind])
    return "\n".join(parts)


def errors(cell: nbformat.NotebookNode) -> list[str]:
    return [o.ename for o in cell.outputs if o.output_type == "error"]


def test_the_magic_sees_the_imports_of_an_earlier_cell_and_says_what_it_cannot_do(
    tmp_path: Path,
) -> None:
    notebook = run(
        tmp_path,
        "%load_ext neuron_migrate",
        # The imports cell fails here (no torch_xla), as it would on any machine without the old stack.
        "import torch\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.parallel_loader as pl",
        "%%neuron_migrate --run\n"
        "device = xm.xla_device()\n"
        "loader = pl.MpDeviceLoader([torch.ones(2)], device)\n"
        "for batch in loader:\n"
        "    total = batch.sum()\n"
        "    xm.mark_step()\n"
        "print('ran on', device, float(total))",
        "%%neuron_migrate\nloader = xmp.spawn(main)\n",
        "%%neuron_migrate\ndef train(:\n    pass\n",
        "%%neuron_migrate --help\nx = 1\n",
    )
    load, imports, loop, unresolved, broken, usage = notebook.cells
    assert outputs(load).startswith("neuron-migrate: %%neuron_migrate migrates a cell")
    assert errors(imports) == ["ModuleNotFoundError"]
    shown = outputs(loop)
    assert "-device = xm.xla_device()" in shown and "+loader = DeviceLoader(" in shown
    assert "brought into this cell: DeviceLoader" in shown
    assert "ran on cpu 2.0" in shown and not errors(loop)
    assert "`xmp` is not imported in this cell or the cells before it" in outputs(unresolved)
    assert "nothing to migrate" not in outputs(unresolved)
    assert "not migrated: 1:11: SyntaxError" in outputs(broken)
    assert "nm-bad" in outputs(broken, "text/html")
    assert outputs(usage).startswith("usage: %%neuron_migrate [-h]") and not errors(usage)


HAZARD = "for x in loader:\n    loss = model(x).sum()\n    loss.backward()\n    losses.append(loss.item())"
SETUP = (
    "import torch\nfrom torch.utils.data import DataLoader\n"
    "model, losses = torch.nn.Linear(4, 2), []\n"
    "loader = DataLoader(torch.randn(10, 4), batch_size=5, drop_last=True)\n"
    "print(torch.ones(2).sum().item())"
)


def test_the_check_sees_cells_run_but_not_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = tmp_path / "nb.ipynb"
    saved_cells = [new_code_cell("%load_ext neuron_migrate"), new_code_cell(SETUP)]
    nbformat.write(new_notebook(cells=saved_cells), saved)  # the loop is not saved yet
    monkeypatch.setenv("JPY_SESSION_NAME", str(saved))  # what the server tells the kernel
    notebook = run(
        tmp_path, "%load_ext neuron_migrate", SETUP, "x = 1\n\n" + HAZARD, "%neuron_migrate_check"
    )
    report = outputs(notebook.cells[-1])
    # The loop's `.item()` is found in the cell as it ran, at its line in that cell.
    assert "In [3]:6:24: NM110" in report
    assert "(in the training loop at line 3, which calls `.backward()`" in report
    assert f"{saved} has unsaved changes (In [3] ran code the saved file does not hold)" in report
    assert "1 info finding not shown: --min-severity info shows them" in report


def test_a_notebook_the_kernel_cannot_find_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # JupyterLab renames Untitled.ipynb on its first save; the kernel's session keeps the old name.
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "Untitled.ipynb"))
    notebook = run(tmp_path, "%load_ext neuron_migrate", SETUP, HAZARD, "%neuron_migrate_check")
    report = outputs(notebook.cells[-1])
    assert "In [3]:4:24: NM110" in report
    assert (
        "the frontend does not say which notebook this is, so the cells this kernel ran are checked"
        in report
    )


def test_a_validation_leaves_the_kernel_free_and_cancel_stops_it(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(WAITING)
    (tmp_path / "b.py").write_text(WAITING)
    notebook = run(
        tmp_path,
        "from neuron_migrate.jupyter import ValidationDashboard\n"
        "dashboard = ValidationDashboard()\n"
        "started = dashboard.start('a.py', 'b.py', 'finish', 'pid')",
        "print('running while the next cell runs:', started, dashboard.validation.running)",
        "dashboard.cancel()\nprint(dashboard.wait()['verdict'])",
    )
    assert "running while the next cell runs: True True" in outputs(notebook.cells[1])
    assert outputs(notebook.cells[2]).strip() == "cancelled"


# A notebook saved on the old stack: the outputs its author saw. Its migration prints the device
# the same way (a device name compares equal to another), waits in its second cell for a file named
# `finish` (which the original never did: no saved output), computes another loss in its third and
# fails in its fourth.
SAVED = [
    (
        "import os\nimport pathlib\nimport time\nimport torch_xla.core.xla_model as xm\n"
        "print('on', xm.xla_device())",
        "on xla:0\n",
    ),
    (
        "pathlib.Path('pid').write_text(str(os.getpid()))\n"
        "while not pathlib.Path('finish').exists():\n"
        "    time.sleep(0.05)\n"
        "print('waited')",
        None,
    ),
    ("lr = 0.5\nprint('loss', lr * 3)\nxm.mark_step()", "loss 1.2\n"),
    ("print(1 / 0)", "inf\n"),
]


def saved_notebook(path: Path) -> Path:
    from nbformat.v4 import new_output

    cells = []
    for source, stdout in SAVED:
        cell = new_code_cell(source, execution_count=None if stdout is None else len(cells) + 1)
        if stdout is not None:
            cell.outputs = [new_output("stream", name="stdout", text=stdout)]
        cells.append(cell)
    nbformat.write(new_notebook(cells=cells), path)
    return path


def test_re_run_and_compare_leaves_the_kernel_free_shows_each_cell_and_cancels(
    tmp_path: Path,
) -> None:
    saved_notebook(tmp_path / "saved.ipynb")
    notebook = run(
        tmp_path,
        "import time\n"
        "from neuron_migrate.jupyter import MigrationApp\n"
        "app = MigrationApp(['saved.ipynb'])\n"
        "app.rerun_button.click()",
        # The migrated notebook waits in its second cell: this kernel runs the next cells meanwhile.
        "deadline = time.monotonic() + 240\n"
        "while '1 of 4' not in app.rerun.status.value and time.monotonic() < deadline:\n"
        "    time.sleep(0.1)\n"
        "print('running:', app.rerun.validation.running, app.rerun.validation.cells_run())\n"
        "print(app.rerun.status.value)",
        "app.rerun.cancel_button.click()\nprint(app.rerun.wait()['verdict'])",
        "open('finish', 'w').close()\n"
        "app.rerun_button.click()\n"
        "print(app.rerun.wait()['verdict'])\n"
        "print(app.rerun.summary())",
        "app",
    )
    running = outputs(notebook.cells[1])
    assert "running: True ['cell 1/4 import os: same']" in running, running
    assert "1 of 4 code cells run; cell 1/4 import os: same" in text_of(running)
    assert outputs(notebook.cells[2]).strip() == "cancelled"
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and "State:\tZ" not in _status(pid):
        assert time.monotonic() < deadline, "Cancel must stop the migrated notebook's kernel"
        time.sleep(0.1)
    assert outputs(notebook.cells[3]).splitlines() == [
        "diverge",
        "DIFFERS: first cell that differs: 3 (lr = 0.5): differs "
        "(1 same, 1 no saved output, 1 differs, 1 new error)",
    ]
    # What the notebook keeps of the app: the table, read without a kernel.
    [view] = [o for o in notebook.cells[4].outputs if "data" in o]
    rows = text_of(view.data["text/html"].replace("</tr>", "\n"))
    assert "3lr = 0.5differs1.2 saved, 1.5 now, after 'loss ' (first cell that differs)" in rows
    assert re.search(r"^2pathlib\.Path\('pid'\)\S*…no saved output$", rows, re.M), rows
    assert "4print(1 / 0)new errorZeroDivisionError: division by zero" in rows


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def test_widgets_leave_their_view_in_a_notebook_saved_without_widget_state(tmp_path: Path) -> None:
    from nbconvert import HTMLExporter

    (tmp_path / "train.py").write_text(
        "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n"
    )
    notebook = run(
        tmp_path,
        "from neuron_migrate.jupyter import MigrationApp, ValidationDashboard\n"
        f"ValidationDashboard.from_json({str(DATA / 'validate_match.json')!r})",
        "MigrationApp(['train.py'])",
    )
    notebook.metadata.pop("widgets", None)  # what a notebook carries without saved widget state
    for cell in notebook.cells:
        [view] = [o for o in cell.outputs if "data" in o]
        assert "application/vnd.jupyter.widget-view+json" in view.data
        assert 'class="nm-static"' in view.data["text/html"]
    page, _ = HTMLExporter().from_notebook_node(notebook)
    shown = text_of(page)
    assert "MATCH: the migrated program computes what the original did" in shown
    assert "data:image/png;base64," in page  # the loss curves
    assert "train.py: 2 changes" in shown and "torch.accelerator.current_accelerator" in shown
    assert json.dumps(notebook.metadata).count("widget-state") == 0


def test_a_validation_result_reaches_the_tab_when_the_run_ends_with_no_other_message(
    tmp_path: Path,
) -> None:
    """In a real kernel, with this test as the JupyterLab tab: the validation ends in the
    dashboard's thread, and its static view is sent at once (no request of the tab's wakes the
    kernel), marked to go into the notebook now, before the widget shows the verdict. Starting
    the run first took the last verdict away."""
    from jupyter_client.manager import start_new_kernel

    from tests.jupyter.test_widgets import PROGRAM

    (tmp_path / "a.py").write_text(PROGRAM)
    (tmp_path / "b.py").write_text(PROGRAM.replace("float(sys.argv[1])", "2 * float(sys.argv[1])"))
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        client.execute("%load_ext neuron_migrate", reply=True, timeout=TIMEOUT)
        opened = _iopub_until(client, lambda m: m["msg_type"] == "comm_open", 30)[-1]
        assert opened["content"]["target_name"] == "neuron_migrate"
        hello = {"event": "hello", "root": str(tmp_path), "path": "nb.ipynb", "dirty": False}
        client.shell_channel.send(
            client.session.msg("comm_msg", {"comm_id": opened["content"]["comm_id"], "data": hello})
        )
        client.execute(
            "from neuron_migrate.jupyter import ValidationDashboard, bridge\n"
            f"dashboard = ValidationDashboard.from_json({str(DATA / 'validate_match.json')!r})\n"
            "assert bridge.current() is not None\n"
            "dashboard.start('a.py', 'b.py', '0.1', '3')",
            reply=True,
            timeout=TIMEOUT,
        )
        # From here on the test sends the kernel nothing: it only listens, until the page would
        # show the verdict.
        messages = _iopub_until(client, _shows_the_verdict, TIMEOUT)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    views = [_static(m) for m in messages]
    sent = [view for view in views if view is not None]
    cleared = next(view for view in sent if "Validating" in view["data"]["text/html"])
    assert cleared["now"] and "MATCH" not in cleared["data"]["text/html"]
    # The notebook gets the verdict before the page shows it.
    [verdict] = [view for view in sent if "DIVERGE" in view["data"]["text/html"]]
    assert verdict["now"] and views.index(verdict) < len(messages) - 1


def _shows_the_verdict(message: dict) -> bool:
    """Whether a kernel message sets a widget to show the DIVERGE verdict."""
    state = (message["content"].get("data") or {}).get("state") or {}
    value = str(state.get("value", "")) if message["msg_type"] == "comm_msg" else ""
    return "nm-verdict" in value and "DIVERGE" in value


def _static(message: dict) -> dict | None:
    """The static view a kernel message sends to the tab, if it is one."""
    if message["msg_type"] != "comm_msg":
        return None
    data = message["content"].get("data") or {}
    return data if data.get("op") == "static" else None


def _iopub_until(client: Any, done: Callable[[dict], bool], timeout: float) -> list[dict]:
    """The kernel's IOPub messages, up to the first for which `done` is true."""
    messages, deadline = [], time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"not seen in {timeout:g} s; last: {messages[-3:]}"
        try:
            message = client.get_iopub_msg(timeout=min(remaining, 1))
        except queue.Empty:
            continue
        messages.append(message)
        if done(message):
            return messages
