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
# {"save": true} a save of the notebook. Prints the outputs of the notebook's model after each.
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
  return {
    outputs: {
      get length() { return items.length; },
      get: (i) => items[i],
      set: (i, json) => { items[i] = output(json); model.dirty = true; },
      toJSON: () => items.map((item) => item.toJSON()),
    },
  };
});
let target = null;
const kernel = {
  id: "kernel-1",
  registerCommTarget: (name, callback) => { target = callback; },
  requestCommInfo: () => Promise.resolve({ content: { comms: {} } }),
  hasComm: () => false,
};
const context = {
  path: "nb.ipynb", model, pathChanged: signal(), saveState: signal(), ready: Promise.resolve(),
};
const panel = {
  context,
  content: { model: { cells: { get length() { return cells.length; }, get: (i) => cells[i] } } },
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
    seen.push({ outputs: cells.map((cell) => cell.outputs.toJSON()), dirty: model.dirty });
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
