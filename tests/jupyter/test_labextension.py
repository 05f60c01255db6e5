"""The JupyterLab extension's JavaScript, run in Node.js against a stand-in for the JupyterLab
objects it uses (a notebook panel, its model's cells and outputs, its kernel's comms): what it
does to the notebook's model when the kernel sends a widget's static view. The browser tests
(test_browser.py) show the same in JupyterLab itself."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.jupyter.conftest import ROOT

EXTENSION = ROOT / "neuron_migrate" / "jupyter" / "labextension" / "static" / "remoteEntry.js"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# Loads the extension as JupyterLab's loader does (window._JUPYTERLAB[name].get("./extension")),
# activates its plugin on one notebook panel whose kernel then opens the `neuron_migrate` comm,
# and plays the messages given on stdin: {"kernel": data} is a comm message from the kernel,
# {"save": true} a save of the notebook. Prints, after each, the outputs and sources of the
# notebook's model, how often it was saved, and the tab's last answer to the kernel.
HARNESS = r"""
const fs = require("fs");
const vm = require("vm");
const [extension, notebook] = process.argv.slice(2);
const steps = JSON.parse(fs.readFileSync(0, "utf8"));

function signal() {
  const slots = [];
  return { connect: (slot) => slots.push(slot), emit: (...args) => slots.forEach((s) => s(...args)) };
}
function output(json) {
  return { data: json.data || {}, trusted: true, toJSON: () => JSON.parse(JSON.stringify(json)) };
}
const model = { dirty: false, stateChanged: signal() };
const cells = JSON.parse(fs.readFileSync(notebook, "utf8")).cells.map((cell) => {
  const items = (cell.outputs || []).map(output);
  let source = cell.source;
  return {
    sharedModel: { getSource: () => source, setSource: (text) => { source = text; } },
    outputs: {
      get length() { return items.length; },
      get: (i) => items[i],
      set: (i, json) => { items[i] = output(json); model.dirty = true; },
      toJSON: () => items.map((item) => item.toJSON()),
    },
  };
});
model.cells = { get length() { return cells.length; }, get: (i) => cells[i] };
let target = null;
const kernel = {
  id: "kernel-1",
  registerCommTarget: (name, callback) => { target = callback; },
  requestCommInfo: () => Promise.resolve({ content: { comms: {} } }),
  hasComm: () => false,
};
let saves = 0;
const context = {
  path: "nb.ipynb", model, pathChanged: signal(), saveState: signal(), ready: Promise.resolve(),
  save: () => { saves += 1; return Promise.resolve(); },
};
const panel = {
  context,
  content: { model },
  sessionContext: { session: { kernel }, kernelChanged: signal(), ready: Promise.resolve() },
  node: {},
};
let extensionFactory = null;
const app = {
  shell: { widgets: () => [panel] },
  docRegistry: { addWidgetExtension: (name, factory) => { extensionFactory = factory; } },
  restored: new Promise(() => {}),
};
const window = {};
const document = {
  getElementById: () => ({ textContent: JSON.stringify({ serverRoot: "/root" }) }),
  createElement: () => ({}),
  head: { appendChild: () => {} },
  addEventListener: () => {},
};
vm.runInNewContext(fs.readFileSync(extension, "utf8"), { window, document, console });

(async () => {
  const loaded = await window._JUPYTERLAB["neuron-migrate"].get("./extension");
  loaded().default[0].activate(app);
  extensionFactory.createNew(panel);
  const sent = [];
  const comm = { send: (data) => sent.push(data) };
  target(comm);
  const seen = [];
  for (const step of steps) {
    if (step.kernel) {
      comm.onMsg({ content: { data: step.kernel } });
    } else if (step.save) {
      context.saveState.emit(context, "started");
    }
    await new Promise((resolve) => setTimeout(resolve, 0)); // an edit answers once saved
    seen.push({
      outputs: cells.map((cell) => cell.outputs.toJSON()),
      sources: cells.map((cell) => cell.sharedModel.getSource()),
      dirty: model.dirty,
      saves,
      answer: sent.length > 1 ? sent[sent.length - 1] : null,
    });
  }
  console.log(JSON.stringify({ hello: sent[0], seen }));
})();
"""


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node") or shutil.which("nodejs")
    if found is None:
        pytest.skip("no Node.js to run the extension's JavaScript")
    return found


def _notebook(tmp_path: Path) -> Path:
    """A notebook whose second cell shows widget `m1` (the dashboard) as it was when it ran."""
    widget = {
        "output_type": "display_data",
        "metadata": {},
        "data": {
            WIDGET_VIEW: {"model_id": "m1", "version_major": 2, "version_minor": 0},
            "text/html": '<div class="nm-static">Name the programs, then press Validate.</div>',
            "text/plain": "ValidationDashboard: Nothing validated yet.",
        },
    }
    notebook = {
        "cells": [
            {"cell_type": "code", "source": "x = 1", "outputs": []},
            {"cell_type": "code", "source": "dashboard", "outputs": [widget]},
        ]
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def _play(node: str, tmp_path: Path, steps: list[dict[str, Any]]) -> dict[str, Any]:
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)
    result = subprocess.run(
        [node, str(harness), str(EXTENSION), str(_notebook(tmp_path))],
        input=json.dumps(steps),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def _shown(seen: dict[str, Any]) -> str:
    [view] = seen["outputs"][1]
    return str(view["data"]["text/html"])


def _static(html: str, now: bool) -> dict[str, Any]:
    message: dict[str, Any] = {
        "op": "static",
        "model_id": "m1",
        "data": {"text/html": html, "text/plain": "ValidationDashboard"},
    }
    if now:
        message["now"] = True
    return message


def test_a_result_goes_into_the_notebook_model_at_once(node: str, tmp_path: Path) -> None:
    played = _play(
        node,
        tmp_path,
        [
            {"kernel": _static('<div class="nm-static">Validating...</div>', now=True)},
            {"kernel": _static('<div class="nm-static">MATCH: same</div>', now=True)},
        ],
    )
    assert played["hello"]["event"] == "hello" and played["hello"]["path"] == "nb.ipynb"
    running, done = played["seen"]
    # A new run clears the last verdict in the notebook; its result replaces it, no save needed.
    assert "Validating" in _shown(running) and running["dirty"]
    assert "MATCH: same" in _shown(done)
    [view] = done["outputs"][1]
    assert view["data"][WIDGET_VIEW]["model_id"] == "m1"  # still the widget, for a live page
    assert done["outputs"][0] == []


def test_other_static_views_reach_the_notebook_when_it_is_saved(node: str, tmp_path: Path) -> None:
    played = _play(
        node,
        tmp_path,
        [
            {"kernel": _static('<div class="nm-static">cell 3 selected</div>', now=False)},
            {"save": True},
        ],
    )
    before, saved = played["seen"]
    assert "press Validate" in _shown(before) and not before["dirty"]
    assert "cell 3 selected" in _shown(saved)


def _edit(request: int, index: int, old: str, new: str, undo: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {
        "op": "edit",
        "request": request,
        "path": "nb.ipynb",
        "cells": [{"index": index, "old": old, "new": new}],
    }
    if undo:
        message["undo"] = True
    return message


def test_an_edit_changes_the_open_notebook_and_an_undo_refused_says_so_as_an_undo(
    node: str, tmp_path: Path
) -> None:
    played = _play(
        node,
        tmp_path,
        [
            {"kernel": _edit(1, 0, "x = 1", "x = 2")},
            {"kernel": _edit(2, 0, "x = 2", "x = 1", undo=True)},
            {"kernel": _edit(3, 0, "x = 1", "x = 2")},
            # Edited in the tab since: neither the undo nor a new apply goes through.
            {"kernel": _edit(4, 0, "x = 3", "x = 1", undo=True)},
            {"kernel": _edit(5, 0, "x = 3", "x = 4")},
        ],
    )
    applied, undone, again, undo_refused, apply_refused = played["seen"]
    assert applied["sources"][0] == "x = 2" and applied["saves"] == 1
    assert applied["answer"] == {"done": True, "open": True, "already": False, "reply": 1}
    assert undone["sources"][0] == "x = 1" and undone["answer"]["done"]
    assert again["sources"][0] == "x = 2"
    assert undo_refused["sources"][0] == "x = 2" and undo_refused["saves"] == 3
    assert undo_refused["answer"]["error"] == (
        "cell 1 in the open tab was edited since the migration was written, so the cells are "
        "not restored (the tab's own undo, Ctrl+Z, still can)"
    )
    assert "save the notebook, then migrate it again" in apply_refused["answer"]["error"]


def test_an_undo_where_the_tab_holds_the_original_already_is_done(
    node: str, tmp_path: Path
) -> None:
    # Applied on disk while the tab showed the old code, and the tab saved over it since.
    played = _play(node, tmp_path, [{"kernel": _edit(1, 0, "x = 2", "x = 1", undo=True)}])
    [undone] = played["seen"]
    assert undone["sources"][0] == "x = 1" and undone["saves"] == 1
    assert undone["answer"] == {"done": True, "open": True, "already": True, "reply": 1}
