"""The widget apps, driven headless through their traitlets state: setting a widget's value or
clicking a button does what the browser would do, and `get_state()` is what the browser gets."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from neuron_migrate.jupyter import MigrationApp, ValidationDashboard, bridge
from neuron_migrate.jupyter import dashboard as dashboard_module
from neuron_migrate.jupyter.apps import WHOLE_FILE
from neuron_migrate.jupyter.dashboard import summary
from neuron_migrate.validate.notebook_rerun import (
    DIFFERS,
    NEW_ERROR,
    NO_SAVED_OUTPUT,
    SAME,
    CellResult,
    RerunResult,
    as_json,
)
from tests.jupyter.conftest import DATA, text_of

ROOT = Path(__file__).resolve().parents[2]
OLD = """\
import torch
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader

device = xm.xla_device()
loader = DataLoader(list(range(10)), batch_size=3)
xm.mark_step()
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(OLD)
    (tmp_path / "done.py").write_text("import torch\nprint(torch.ones(1))\n")
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# Notebook"},
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "import torch\nimport torch_xla.core.xla_model as xm\n",
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "x = 1\n",
        },
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "%%time\ndevice = xm.xla_device()\n",
        },
    ]
    (tmp_path / "tutorial.ipynb").write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
    )
    return tmp_path


def labels(app: MigrationApp) -> dict[str, str]:
    return {Path(value).name: label for label, value in app.file_picker.options}


# -- the migration app ----------------------------------------------------------------------------


def test_app_lists_files_with_their_state_and_opens_the_first_to_migrate(project: Path) -> None:
    app = MigrationApp([project])
    assert labels(app) == {
        "done.py": f"{project / 'done.py'}  (nothing to do)",
        "train.py": f"{project / 'train.py'}  (to migrate)",
        "tutorial.ipynb": f"{project / 'tutorial.ipynb'}  (to migrate)",
    }
    assert Path(app.file_picker.value).name == "train.py"
    state = app.file_picker.get_state()
    assert state["_model_name"] == "DropdownModel" and state["index"] == 1
    assert "train.py: 3 changes" in app.headline.value
    assert 'class="nm-diff nm-side nm-auto"' in app.diff.value
    assert "NM001" in app.findings.value and "NM002" in app.findings.value
    # What `check` says about the migrated code: the loader drops no last batch.
    assert "NM302" in app.checks.value
    assert app.apply_button.description == "Apply train.py" and not app.apply_button.disabled
    assert app.undo_button.disabled and app.next_button.description == "Next: tutorial.ipynb"
    assert app.cell_picker.layout.display == "none"
    assert repr(app) == f"MigrationApp: {project / 'train.py'}: 3 changes"


def test_app_views_and_targets(project: Path) -> None:
    app = MigrationApp([project / "train.py"])
    app.view_picker.value = "unified"
    assert 'class="nm-diff nm-unified"' in app.diff.value
    assert app.target_picker.value == "portable"
    assert "current_accelerator" in text_of(app.diff.value)
    app.target_picker.value = "neuron"
    assert 'torch.device("neuron")' in text_of(app.diff.value)
    assert app.view_picker.value == "unified"
    app.view_picker.value = "side"
    assert 'class="nm-diff nm-side"' in app.diff.value


def test_app_picks_cells_of_a_notebook(project: Path) -> None:
    app = MigrationApp([project])
    app.file_picker.value = str(project / "tutorial.ipynb")
    assert app.cell_picker.layout.display is None
    assert app.cell_picker.options == (
        ("whole notebook", -1),
        ("cell 2  (changes)", 1),
        ("cell 3", 2),
        ("cell 4  (changes)", 3),
    )
    assert "2 changes in 2 cells" in app.headline.value  # one of them the import it no longer needs
    assert app.diff.value.count('class="nm-diff') == 2  # one diff per changed cell
    assert app.apply_button.description == "Apply tutorial.ipynb"
    app.cell_picker.value = 3
    assert "tutorial.ipynb, cell 4: changed" in app.headline.value
    assert app.diff.value.count('class="nm-diff') == 1
    assert "%%time" in app.diff.value
    assert app.apply_button.description == "Apply cell 4 to tutorial.ipynb"
    app.cell_picker.value = 2
    assert "cell 3: unchanged" in app.headline.value and app.diff.value == ""
    assert app.apply_button.disabled


def test_apply_writes_the_file_shows_what_it_wrote_and_refreshes(project: Path) -> None:
    app = MigrationApp([project])
    app.apply_button.click()
    assert "xla" not in (project / "train.py").read_text()
    assert "written" in app.status.value
    assert f"{project / 'train.py'} written on disk: 3 changes" in text_of(app.status.value)
    assert "What was written" in app.review.value and "nm-diff" in app.review.value
    assert labels(app)["train.py"].endswith("(nothing to do)")
    # After the write the app still shows train.py, now with nothing to do.
    assert Path(app.file_picker.value).name == "train.py"
    assert "nothing to migrate" in app.headline.value and app.apply_button.disabled
    assert not app.undo_button.disabled


def test_after_a_whole_notebook_apply_the_headline_says_what_is_left(tmp_path: Path) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    path = tmp_path / "ranks.ipynb"
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell("import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()"),
                new_code_cell("xm.rendezvous('ready')"),  # becomes a barrier with a TODO
            ]
        ),
        path,
    )
    app = MigrationApp([path])
    assert "to migrate" in app.headline.value
    app.apply_button.click()
    assert "TODO(neuron-migrate" in path.read_text()
    headline = text_of(app.headline.value)
    assert headline == f"to review {path}: nothing left to change, 1 manual item to review"
    assert labels(app)["ranks.ipynb"].endswith("(to review)") and app.apply_button.disabled


def test_undo_restores_what_apply_wrote(project: Path) -> None:
    app = MigrationApp([project / "train.py"])
    app.apply_button.click()
    app.undo_button.click()
    assert (project / "train.py").read_text() == OLD
    assert "undone" in app.status.value and app.review.value == ""
    assert "train.py: 3 changes" in app.headline.value and app.undo_button.disabled


def test_undo_refuses_when_the_file_was_edited_since(project: Path) -> None:
    app = MigrationApp([project / "train.py"])
    app.apply_button.click()
    edited = (project / "train.py").read_text() + "# edited by hand\n"
    (project / "train.py").write_text(edited)
    app.undo_button.click()
    assert text_of(app.status.value) == (
        f"not undone {project / 'train.py'}: edited since the migration was written, so it is "
        "not restored"
    )
    assert (project / "train.py").read_text() == edited


def test_undo_after_a_stale_tab_saved_over_the_migration_is_done_already(project: Path) -> None:
    path = project / "tutorial.ipynb"
    before = path.read_text()
    app = MigrationApp([path])
    app.apply_button.click()
    assert "written on disk" in app.status.value
    path.write_text(before)  # "File Changed" ▸ Overwrite, in a tab that kept the old code
    app.undo_button.click()
    assert text_of(app.status.value) == (f"undone {path}: restored (the file held it already)")
    assert path.read_text() == before and app.undo_button.disabled


def test_undo_after_a_multi_cell_apply_restores_every_cell_or_says_why_not(
    project: Path, tab: tuple[bridge.Bridge, FakeTab]
) -> None:
    connected, channel = tab
    path = project / "tutorial.ipynb"
    before = path.read_text()
    app = MigrationApp([path])
    app.cell_picker.value = WHOLE_FILE
    app.apply_button.click()  # through the open tab: cells 2 and 4
    apply = channel.sent[-1]
    assert [c["index"] for c in apply["cells"]] == [1, 3] and "undo" not in apply
    connected.receive({"reply": apply["request"], "done": False, "open": False})  # not open
    assert "written on disk" in app.status.value
    assert "xla" not in json.dumps([c["source"] for c in json.loads(path.read_text())["cells"]])
    app.undo_button.click()
    undo = channel.sent[-1]
    assert undo["undo"] is True and [c["index"] for c in undo["cells"]] == [1, 3]
    assert [(c["old"], c["new"]) for c in undo["cells"]] == [
        (c["new"], c["old"]) for c in apply["cells"]
    ]
    connected.receive({"reply": undo["request"], "done": False, "open": False})
    assert [c["source"] for c in json.loads(path.read_text())["cells"]] == [
        c["source"] for c in json.loads(before)["cells"]
    ]
    assert "undone" in app.status.value and app.undo_button.disabled

    # Edited since it was written: the undo names the cell, and restores none of them.
    app.apply_button.click()
    connected.receive({"reply": channel.sent[-1]["request"], "done": False, "open": False})
    notebook = json.loads(path.read_text())
    notebook["cells"][3]["source"] = "# edited by hand\n"
    path.write_text(json.dumps(notebook))
    app.undo_button.click()
    connected.receive({"reply": channel.sent[-1]["request"], "done": False, "open": False})
    assert text_of(app.status.value) == (
        f"not undone {path}: cell 4 was edited since the migration was written, so the cells "
        "are not restored"
    )
    assert json.loads(path.read_text()) == notebook


def test_apply_writes_only_the_selected_cell(project: Path) -> None:
    before = json.loads((project / "tutorial.ipynb").read_text())
    app = MigrationApp([project / "tutorial.ipynb"])
    app.cell_picker.value = 3
    app.apply_button.click()
    written = json.loads((project / "tutorial.ipynb").read_text())
    assert (
        written["cells"][3]["source"]
        == '%%time\ndevice = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'
    )
    assert written["cells"][:3] == before["cells"][:3]  # cell 2 keeps its xla import
    assert "tutorial.ipynb, cell 4 written on disk" in text_of(app.status.value)
    assert app.cell_picker.value == 3 and "cell 4: unchanged" in app.headline.value
    assert app.next_button.description == "Next: cell 2"  # what is left, from the top
    app.next_button.click()
    assert app.cell_picker.value == 1


def test_next_goes_to_the_next_cell_then_the_next_file(project: Path) -> None:
    app = MigrationApp([project])
    app.file_picker.value = str(project / "tutorial.ipynb")
    app.cell_picker.value = 1
    assert app.next_button.description == "Next: cell 4"
    app.next_button.click()
    assert app.cell_picker.value == 3
    assert app.next_button.description == "Next: train.py"
    app.next_button.click()
    assert Path(app.file_picker.value).name == "train.py"


def test_apply_refuses_when_the_file_changed_meanwhile(project: Path) -> None:
    app = MigrationApp([project / "train.py"])
    (project / "train.py").write_text(OLD + "# edited in another tab\n")
    app.apply_button.click()
    assert "not written" in app.status.value and "changed on disk" in app.status.value
    assert (project / "train.py").read_text().endswith("# edited in another tab\n")


class FakeTab:
    """The comm to a JupyterLab tab with the neuron-migrate piece: what the kernel sends."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, data: dict) -> None:
        self.sent.append(data)


@pytest.fixture
def tab(project: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bridge.Bridge, FakeTab]:
    connected, channel = bridge.Bridge(), FakeTab()
    connected.comms.append(channel)
    connected.receive(
        {"event": "hello", "root": str(project), "path": "tutorial.ipynb", "dirty": False}
    )
    monkeypatch.setattr(bridge, "_BRIDGE", connected)
    return connected, channel


def test_apply_asks_the_open_tab_to_make_the_change(
    project: Path, tab: tuple[bridge.Bridge, FakeTab]
) -> None:
    connected, channel = tab
    raw = (project / "tutorial.ipynb").read_text()
    app = MigrationApp([project / "tutorial.ipynb"])
    app.cell_picker.value = 3
    app.apply_button.click()
    [request] = channel.sent[-1:]
    assert request["op"] == "edit" and request["path"] == "tutorial.ipynb"
    assert [c["index"] for c in request["cells"]] == [3]
    assert request["cells"][0]["old"] == "%%time\ndevice = xm.xla_device()\n"
    assert "writing" in app.status.value and app.apply_button.disabled
    assert (project / "tutorial.ipynb").read_text() == raw  # the tab writes, not the kernel
    connected.receive({"reply": request["request"], "done": True, "open": True})
    assert "through its open tab" in text_of(app.status.value)
    assert not app.undo_button.disabled


def test_apply_writes_on_disk_when_no_tab_has_the_file_open(
    project: Path, tab: tuple[bridge.Bridge, FakeTab]
) -> None:
    connected, channel = tab
    app = MigrationApp([project / "train.py"])
    app.apply_button.click()
    [request] = channel.sent[-1:]
    assert request["path"] == "train.py" and request["text"]["old"] == OLD
    connected.receive({"reply": request["request"], "done": False, "open": False})
    assert "xla" not in (project / "train.py").read_text()
    assert "written on disk" in text_of(app.status.value)


def test_a_tab_that_refuses_leaves_the_file_alone(
    project: Path, tab: tuple[bridge.Bridge, FakeTab]
) -> None:
    connected, channel = tab
    app = MigrationApp([project / "tutorial.ipynb"])
    app.apply_button.click()
    request = channel.sent[-1]
    connected.receive(
        {
            "reply": request["request"],
            "done": False,
            "open": True,
            "error": "cell 4 in the open tab is not the cell that was migrated",
        }
    )
    assert "not written" in app.status.value and "cell 4 in the open tab" in app.status.value
    assert not app.apply_button.disabled and app.undo_button.disabled


def test_the_app_output_carries_a_static_view(
    project: Path, tab: tuple[bridge.Bridge, FakeTab]
) -> None:
    _, channel = tab
    app = MigrationApp([project / "train.py"])
    bundle = app._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    html = bundle["text/html"]
    assert 'class="nm-static"' in html and "train.py: 3 changes" in html and "nm-diff" in html
    assert bundle["text/plain"] == repr(app)
    # As it changes, the open tab gets the new static view, for the notebook it saves.
    app.view_picker.value = "unified"
    sent = [m for m in channel.sent if m.get("op") == "static"]
    assert (
        sent
        and sent[-1]["model_id"] == app.model_id
        and "nm-unified" in sent[-1]["data"]["text/html"]
    )


def test_the_app_says_in_one_line_when_the_jupyterlab_extension_is_missing(
    project: Path, shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jupyter_core.paths

    folder = project / "labextensions"
    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [str(folder)])
    monkeypatch.setattr(shell, "kernel", object(), raising=False)  # the app's shell, in a kernel
    notice = text_of(MigrationApp([project / "train.py"]).notice.value)
    assert notice.startswith("note The JupyterLab extension is not installed")
    assert "keeps the old code" in notice and "\n" not in notice
    (folder / "neuron-migrate").mkdir(parents=True)
    (folder / "neuron-migrate" / "package.json").write_text("{}")
    assert MigrationApp([project / "train.py"]).notice.value == ""


def test_app_with_nothing_to_show(tmp_path: Path) -> None:
    app = MigrationApp([tmp_path])
    assert app.file_picker.options == ()
    assert "No Python scripts or notebooks found" in app.headline.value
    assert app.apply_button.disabled
    with pytest.raises(ValueError, match="unknown target"):
        MigrationApp([tmp_path], target="tpu")


def test_app_shows_files_it_cannot_migrate(project: Path) -> None:
    (project / "broken.py").write_text("import torch_xla\nx = (\n")
    app = MigrationApp([project / "broken.py"])
    assert labels(app)["broken.py"].endswith("(error)")
    assert "not migrated" in app.headline.value and "SyntaxError" in app.headline.value
    assert app.apply_button.disabled


# -- the validation dashboard ---------------------------------------------------------------------


def load(name: str) -> dict:
    return json.loads((DATA / f"validate_{name}.json").read_text())


def test_dashboard_shows_a_match() -> None:
    dashboard = ValidationDashboard(load("match"))
    assert dashboard.verdict == "match"
    assert (
        dashboard.summary()
        == "MATCH: the migrated program computes what the original did (5 items match; fp32 tolerances)"
    )
    assert "MATCH" in dashboard.headline.value and "nm-ok" in dashboard.headline.value
    assert dashboard.curves.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert dashboard.curves.get_state()["_model_name"] == "ImageModel"
    assert dashboard.tabs.selected_index == 0  # the loss curves first
    assert dashboard.tabs.get_state()["titles"] == ("Loss curves", "Comparison", "Details")
    table = dashboard.table.value
    assert table.count('class="nm-item nm-match"') == 5
    assert "losses (6 steps)" in table and "atol 1e-06, rtol 1e-05" in table
    assert "torch_xla 2.9.0" in dashboard.runs.value
    assert "Tolerances (fp32)" in dashboard.details.value
    assert dashboard.original.value == "train_xla.py" and dashboard.migrated.value == "train.py"


def test_dashboard_shows_where_a_run_diverges() -> None:
    dashboard = ValidationDashboard(load("diverge"))
    assert dashboard.verdict == "diverge"
    assert "2 diverge: losses (6 steps), final parameters (4 tensors)" in dashboard.summary()
    assert "nm-bad" in dashboard.headline.value
    assert dashboard.table.value.count('class="nm-item nm-diverge"') == 2
    assert "4 tensors" in dashboard.table.value  # the tensors of an item, listed under it


def test_dashboard_from_json_and_an_empty_one(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    shutil.copy(DATA / "validate_match.json", path)
    assert ValidationDashboard.from_json(path).verdict == "match"
    empty = ValidationDashboard()
    assert empty.verdict == "" and empty.summary() == "Nothing validated yet."
    assert "press Validate" in empty.headline.value and empty.curves.value == b""
    empty.run_button.click()
    assert "name both programs" in empty.status.value


def test_dashboard_shows_errors() -> None:
    document = {
        "verdict": "error",
        "exit_code": 2,
        "errors": ["the original program (a.py) failed with exit status 1"],
    }
    dashboard = ValidationDashboard(document)
    assert (
        dashboard.summary()
        == "ERROR: the comparison could not be made (the original program (a.py) failed with exit status 1)"
    )
    assert (
        dashboard.tabs.selected_index == 2
        and "failed with exit status 1" in dashboard.details.value
    )
    assert dashboard.curves.layout.display == "none"
    assert summary({"verdict": "skipped", "items": []}).startswith("NOTHING COMPARED")


def test_dashboard_without_losses_or_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    document = load("match")
    document["items"] = [item for item in document["items"] if item["key"] != "losses"]
    dashboard = ValidationDashboard(document)
    assert "No losses were recorded" in dashboard.curves_note.value
    assert dashboard.tabs.selected_index == 1  # the table, then

    def no_matplotlib(document: dict) -> bytes:
        raise ImportError("matplotlib")

    monkeypatch.setattr("neuron_migrate.jupyter.dashboard.loss_curves_png", no_matplotlib)
    dashboard.result = load("match")
    assert "need matplotlib: pip install matplotlib" in dashboard.curves_note.value


PROGRAM = """\
import sys
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=float(sys.argv[1]))
x = torch.randn(16, 4)
for _ in range(int(sys.argv[2])):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.slow
def test_dashboard_runs_validate(tmp_path: Path) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(PROGRAM)
    second.write_text(PROGRAM.replace("float(sys.argv[1])", "2 * float(sys.argv[1])"))
    dashboard = ValidationDashboard()
    result = dashboard.run(first, second, "0.1", "3")
    assert result["verdict"] == "diverge" == dashboard.verdict
    assert dashboard.arguments.value == "0.1 3"
    assert [run["script"] for run in result["runs"]] == [str(first), str(second)]
    assert not dashboard.run_button.disabled and dashboard.status.value == ""
    # A program that cannot start: validate stops before comparing, and says why.
    failed = dashboard.run(first, tmp_path / "missing.py")
    assert failed["verdict"] == "error" and "no such file" in failed["errors"][0]
    assert "no such file" in dashboard.details.value
    assert sys.executable  # validate ran with this interpreter


def test_dashboard_options_fill_their_fields_and_reach_validate() -> None:
    dashboard = ValidationDashboard(
        options=[
            "--original-python",
            "/old/bin/python",
            "--precision",
            "bf16",
            "--nproc=2",
            "--no-dropout",
        ]
    )
    assert dashboard.original_python.value == "/old/bin/python"
    assert dashboard.precision.value == "bf16" and dashboard.processes.value == 2
    assert dashboard.validate_options() == [
        "--original-python",
        "/old/bin/python",
        "--precision",
        "bf16",
        "--nproc",
        "2",
        "--no-dropout",
    ]
    dashboard.precision.value, dashboard.processes.value = "auto", 0
    dashboard.original_python.value = ""
    assert dashboard.validate_options() == ["--no-dropout"]


def test_the_dashboard_output_carries_the_verdict_the_table_and_the_curves() -> None:
    dashboard = ValidationDashboard(load("match"))
    bundle = dashboard._repr_mimebundle_()
    html = bundle["text/html"]
    assert 'class="nm-static"' in html and "MATCH" in html
    assert 'class="nm-comparison"' in html and 'src="data:image/png;base64,' in html
    assert bundle["text/plain"].startswith("ValidationDashboard: MATCH")
    empty = ValidationDashboard()._repr_mimebundle_()["text/html"]
    assert "press Validate" in empty


class HeldValidation:
    """A validation that ends when the test says so, with the document it is given."""

    notebooks, cells = False, 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.document: dict | None = None
        self.seconds, self.end = 0.0, threading.Event()

    @property
    def running(self) -> bool:
        return self.document is None

    def progress(self) -> dict:
        return {side: {"lines": 0, "step": None, "last": ""} for side in ("original", "migrated")}

    def log(self, label: str) -> str:
        return ""

    def wait(self, on_tick: object = None) -> dict:
        assert self.end.wait(30)
        self.document = load("diverge")
        return self.document


def test_a_verdict_is_in_the_notebook_before_the_page_shows_it_and_a_new_run_clears_it(
    tab: tuple[bridge.Bridge, FakeTab], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, channel = tab
    dashboard = ValidationDashboard()
    sent: list[tuple[dict, str]] = []  # each static view sent, and the verdict the page had then
    monkeypatch.setattr(
        channel, "send", lambda data: sent.append((data, text_of(dashboard.headline.value)))
    )

    def views() -> list[tuple[str, bool, str]]:
        return [
            (text_of(m["data"]["text/html"]), m.get("now", False), page)
            for m, page in sent
            if m.get("op") == "static" and m["model_id"] == dashboard.model_id
        ]

    dashboard.result = load("match")
    [(notebook, now, page)] = views()
    # The tab puts it into the notebook at once, before the page shows the verdict.
    assert now and "MATCH: the migrated program computes" in notebook and "MATCH" not in page
    assert "MATCH" in dashboard.headline.value

    monkeypatch.setattr(dashboard_module, "Validation", HeldValidation)
    sent.clear()
    assert dashboard.start("a.py", "b.py")
    # The last verdict leaves the page and the notebook before the new run ends.
    [(notebook, now, page)] = views()
    assert now and "MATCH" not in notebook and "Validating" in notebook
    assert "MATCH" not in text_of(dashboard.headline.value)
    assert "Validating" in dashboard._repr_mimebundle_()["text/html"]
    dashboard.validation.end.set()
    assert dashboard.wait()["verdict"] == "diverge"
    (notebook, now, page) = views()[-1]
    assert now and "DIVERGE" in notebook and "DIVERGE" not in page


WAITING = """\
import os
import pathlib
import sys
import time

import torch

flag, pid_file = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2] + "." + pathlib.Path(sys.argv[0]).stem)
pid_file.write_text(str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
for step in range(3):
    loss = model(torch.ones(1, 2)).sum()
    loss.backward()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
deadline = time.monotonic() + 300
while not flag.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\\nState:\\tZ" not in state


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 240
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.slow
def test_validate_runs_in_the_background_with_its_log_and_progress_and_cancel(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text(WAITING)
    second.write_text(WAITING)
    flag, pids = tmp_path / "finish", tmp_path / "pid"
    dashboard = ValidationDashboard()
    assert dashboard.start(first, second, str(flag), str(pids))
    # start() came back while both programs run: the kernel is free.
    assert dashboard.validation is not None and dashboard.validation.running
    assert dashboard.run_button.disabled and not dashboard.cancel_button.disabled
    _until(lambda: dashboard.status.value.count("step 2") == 2, "no progress shown for both")
    assert "step 2 loss" in dashboard.log_view.value and dashboard.log_box.layout.display is None
    running = [int((tmp_path / f"pid.{name}").read_text()) for name in ("a", "b")]
    assert all(_alive(pid) for pid in running)
    dashboard.cancel_button.click()
    result = dashboard.wait()
    assert result["verdict"] == "cancelled" == dashboard.verdict
    assert dashboard.summary().startswith(
        "CANCELLED: the validation was stopped before it finished"
    )
    _until(lambda: not any(_alive(pid) for pid in running), "Cancel must stop the programs too")
    assert not dashboard.run_button.disabled and dashboard.cancel_button.disabled

    # Again, to the end this time.
    assert dashboard.start()
    _until(
        lambda: (
            (tmp_path / "pid.b").exists()
            and dashboard.validation.progress()["migrated"]["step"] == 2
        ),
        "b did not start",
    )
    flag.write_text("")
    assert dashboard.wait()["verdict"] == "match"
    assert "MATCH" in dashboard._repr_mimebundle_()["text/html"]


# -- re-run and compare: a migrated notebook against the outputs its original saved --------------


def rerun_document(*cells: CellResult) -> dict:
    """The document `validate ORIGINAL.ipynb MIGRATED.ipynb --json` writes for these cells."""
    return as_json(RerunResult(list(cells)), Path("a.ipynb"), Path("b.ipynb"))


FOUR_CELLS = (
    CellResult(1, "import torch", SAME),
    CellResult(2, "print(x)", NO_SAVED_OUTPUT),
    CellResult(3, "train(lr=0.5)", DIFFERS, "0.81 saved, 0.91 now, after 'loss '"),
    CellResult(4, "1 / 0", NEW_ERROR, "ZeroDivisionError: division by zero"),
)


def test_the_dashboard_shows_a_notebook_re_run_cell_by_cell() -> None:
    dashboard = ValidationDashboard(rerun_document(*FOUR_CELLS))
    assert dashboard.verdict == "diverge"
    assert dashboard.summary() == (
        "DIFFERS: first cell that differs: 3 (train(lr=0.5)): differs "
        "(1 same, 1 no saved output, 1 differs, 1 new error)"
    )
    assert (dashboard.original.value, dashboard.migrated.value) == ("a.ipynb", "b.ipynb")
    # A program comparison's fields mean nothing for two notebooks.
    assert dashboard.arguments.layout.display == "none" == dashboard.precision.layout.display
    assert dashboard.migrated_python.layout.display is None
    assert dashboard.tabs.selected_index == 1  # the table of cells
    rows = text_of(dashboard.table.value.replace("</tr>", "\n")).splitlines()[1:]
    assert rows == [
        "1import torchsame",
        "2print(x)no saved output",
        "3train(lr=0.5)differs0.81 saved, 0.91 now, after 'loss ' (first cell that differs)",
        "41 / 0new errorZeroDivisionError: division by zero",
    ]
    assert dashboard.table.value.count("nm-first-difference") == 1
    # Reopened without a kernel: the verdict and the table, and no word of loss curves.
    static = dashboard._repr_mimebundle_()["text/html"]
    assert 'class="nm-notebook-cells"' in static and "DIFFERS: first cell that differs" in static
    assert "loss curves" not in static.lower()
    same = ValidationDashboard(rerun_document(FOUR_CELLS[0], FOUR_CELLS[1]))
    assert same.verdict == "match"
    assert same.summary() == (
        "SAME: every code cell gives the outputs saved in the original "
        "(1 same, 1 without saved output)"
    )
    assert "nm-ok" in same.headline.value


class HeldRerun(HeldValidation):
    """The re-run of two notebooks, ended when the test says so, after one cell."""

    notebooks, cells = True, 4
    started: ClassVar[list[tuple[Path, Path, list[str]]]] = []

    def __init__(
        self, original: str, migrated: str, arguments: object, options: list, *_: object
    ) -> None:
        super().__init__()
        self.started.append((Path(original), Path(migrated), list(options)))

    def cells_run(self) -> list[str]:
        return ["cell 1/4 import torch: same"]

    def wait(self, on_tick: Callable | None = None) -> dict:
        if on_tick is not None:
            on_tick(self)
        assert self.end.wait(30)
        self.document = rerun_document(*FOUR_CELLS)
        return self.document


def test_re_run_and_compare_runs_the_selected_notebooks_migration_from_the_app(
    project: Path, tab: tuple[bridge.Bridge, FakeTab], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, channel = tab
    monkeypatch.setattr(dashboard_module, "Validation", HeldRerun)
    monkeypatch.setattr(HeldRerun, "started", [])
    app = MigrationApp([project])
    app.file_picker.value = str(project / "train.py")
    assert app.rerun_button.layout.display == "none"  # a script has no saved outputs
    app.file_picker.value = str(project / "tutorial.ipynb")
    assert app.rerun_button.layout.display is None
    channel.sent.clear()
    app.rerun_button.click()
    [(original, copy, options)] = HeldRerun.started
    # The migration runs from a copy, in the notebook's folder; the notebook is left as it is.
    assert original == project / "tutorial.ipynb" and copy.parent != project
    assert copy.read_text() == app.migration.migrated != original.read_text()
    assert options == ["--migrated-cwd", str(project.resolve())]
    assert app.rerun is not None and app.rerun_box.children == (app.rerun,)
    assert "1 of 4 code cells run; cell 1/4 import torch: same" in text_of(app.rerun.status.value)
    assert app.rerun.progress_bar.max == 4 and app.rerun.progress_bar.value == 1
    assert not app.rerun_and_compare()  # one at a time
    # What the app's output carries: the run under way, then the table, put in the notebook at once.
    statics = [m for m in channel.sent if m.get("op") == "static"]
    assert all(m["model_id"] == app.model_id for m in statics)
    running = [m for m in statics if "runs in a fresh kernel" in m["data"]["text/html"]]
    assert running and running[0]["now"]
    app.rerun.validation.end.set()
    assert app.rerun.wait()["verdict"] == "diverge"
    last = [m for m in channel.sent if m.get("op") == "static"][-1]
    assert last["now"] and last["model_id"] == app.model_id
    assert "first cell that differs: 3 (train(lr=0.5))" in text_of(last["data"]["text/html"])
    assert "nm-notebook-cells" in app._repr_mimebundle_()["text/html"]
    # Again: from a new copy; the last one goes.
    assert app.rerun_and_compare()
    assert not copy.parent.exists() and HeldRerun.started[-1][1].exists()
    app.rerun.validation.end.set()
    app.rerun.wait()


@pytest.mark.slow
def test_a_notebook_without_saved_outputs_is_an_error_that_says_so(tmp_path: Path) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    original, migrated = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("print(1)")]), original)
    nbformat.write(new_notebook(cells=[new_code_cell("print(1)")]), migrated)
    dashboard = ValidationDashboard()
    result = dashboard.run(original, migrated)
    assert result["verdict"] == "error" == dashboard.verdict
    [error] = result["errors"]
    assert error == (
        f"neuron-migrate validate: {original}: no saved outputs to compare with "
        "(run it and save it with its outputs)"
    )
    assert "ERROR: the comparison could not be made" in text_of(dashboard.headline.value)
