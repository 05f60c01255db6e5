"""`validate ORIGINAL.ipynb MIGRATED.ipynb` end to end: the migrated notebook re-run in a fresh
kernel against outputs the original saved (made here by running it once, as its author did, with
its tensors printed the way the old stack prints them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from neuron_migrate.validate.command import EXIT_DIVERGE, EXIT_ERROR, EXIT_MATCH, main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

ORIGINAL = [
    "import torch\nimport torch_xla.core.xla_model as xm\ndevice = xm.xla_device()",
    "# training",
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(3, 1).to(device)\n"
    "x, y = torch.randn(16, 3).to(device), torch.randn(16, 1).to(device)\n"
    "scale = float(open('scale.txt').read())\n"
    "lr = 0.05",
    "optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
    "for step in range(4):\n"
    "    loss = ((model(x) * scale - y) ** 2).mean()\n"
    "    optimizer.zero_grad()\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "    xm.mark_step()\n"
    "    print(f'step {step} loss {loss.item():.6f}')",
    "model.weight.detach()",
    "print('trained on', device, 'with', sum(p.numel() for p in model.parameters()), 'parameters')",
]
# What the old stack runs first (no torch_xla here): an XLA device that is the CPU.
OLD_STACK = "import sys, types, torch\n" + "\n".join(
    [
        "xm = types.SimpleNamespace(xla_device=lambda: torch.device('cpu'), mark_step=lambda: None)",
        "sys.modules['torch_xla'] = types.ModuleType('torch_xla')",
        "sys.modules['torch_xla.core'] = types.ModuleType('torch_xla.core')",
        "sys.modules['torch_xla.core.xla_model'] = xm",
    ]
)


def migrated_sources() -> list[str]:
    sources = list(ORIGINAL)
    sources[0] = "import torch\ndevice = torch.device('cpu')"
    sources[3] = sources[3].replace("    xm.mark_step()\n", "")
    return sources


def write(path: Path, sources: list[str]) -> Path:
    cells = [new_markdown_cell(s) if s.startswith("#") else new_code_cell(s) for s in sources]
    nbformat.write(new_notebook(cells=cells), path)
    return path


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The original notebook with its saved outputs: run once, as on XLA."""
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("original")
    (folder / "scale.txt").write_text("1.5\n")
    notebook = new_notebook(
        cells=[new_code_cell(OLD_STACK)]
        + [new_markdown_cell(s) if s.startswith("#") else new_code_cell(s) for s in ORIGINAL]
    )
    NotebookClient(
        notebook, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    notebook.cells = notebook.cells[1:]
    for cell in notebook.cells:  # as the old stack printed them
        for output in cell.get("outputs", []):
            if "data" in output:
                text = output.data["text/plain"]
                output.data["text/plain"] = re.sub(r"\)$", ", device='xla:0')", text)
            elif "text" in output:
                output.text = output.text.replace(" cpu ", " xla:0 ")
    saved = [o for c in notebook.cells for o in c.get("outputs", [])]
    assert any("device='xla:0'" in str(o) for o in saved) and any("xla:0" in str(o) for o in saved)
    path = folder / "original.ipynb"
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def migrated_dir(tmp_path: Path) -> Path:
    (tmp_path / "scale.txt").write_text("1.5\n")  # read from the notebook's own folder
    return tmp_path


def test_a_faithful_migration_gives_the_same_outputs_in_every_cell(original, migrated_dir, capsys):
    migrated = write(migrated_dir / "migrated.ipynb", migrated_sources())
    code = main(["validate", str(original), str(migrated)])
    captured = capsys.readouterr()
    assert code == EXIT_MATCH, captured.out + captured.err
    rows = [line for line in captured.out.splitlines() if re.match(r"\s*\d+ ", line)]
    assert len(rows) == 5 and all(" same" in row for row in rows), captured.out
    assert "every code cell gives the outputs saved in the original (5 same)" in captured.out
    progress = [line for line in captured.err.splitlines() if line.startswith("validate: cell ")]
    assert progress[0] == "validate: cell 1/5 import torch: same" and len(progress) == 5


def test_cells_pair_by_source_where_the_migration_added_one(original, migrated_dir, capsys):
    sources = migrated_sources()
    sources.insert(2, "print('on', device)")
    migrated = write(migrated_dir / "migrated.ipynb", sources)
    code = main(["validate", str(original), str(migrated)])
    out = capsys.readouterr().out
    assert code == EXIT_MATCH, out
    assert re.search(r"^\s*2 +print\('on', device\) +added +not in the original$", out, re.M)
    assert "5 code cells in" in out and "6 in" in out and "cells paired by their sources" in out
    assert "every code cell gives the outputs saved in the original (5 same)" in out


def test_a_learning_rate_ten_times_larger_is_found_at_the_cell_it_changes(
    original, migrated_dir, capsys
):
    sources = migrated_sources()
    sources[2] = sources[2].replace("lr = 0.05", "lr = 0.5")
    migrated = write(migrated_dir / "migrated.ipynb", sources)
    code = main(["validate", str(original), str(migrated)])
    out = capsys.readouterr().out
    assert code == EXIT_DIVERGE, out
    # The cell that sets lr prints nothing: the first to differ is the one that trains with it.
    assert "first cell that differs: 3 (optimizer = torch.optim.SGD(" in out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("3 "))
    assert "differs" in row and "saved," in row and "now, after '" in row
    assert re.search(r"^\s*2 .* same", out, re.M)


def test_the_torch_build_and_the_launchers_banner_are_the_same_after_a_spawn_is_migrated(
    tmp_path, capsys
):
    """A notebook saved on torch_xla (its spawn printing each process's device), and its cells as
    the migration writes them: `notebook_launcher` prints a banner, torch is another build."""
    pytest.importorskip("accelerate")
    spawn = "def print_device(i):\n    print('process', i, DEVICE)\n\n"
    version = new_output("execute_result", {"text/plain": "'2.9.0+cu128'"}, execution_count=1)
    devices = new_output("stream", name="stdout", text="process 0 xla:0\n")
    original = new_notebook(
        cells=[
            new_code_cell("import torch\ntorch.__version__", execution_count=1, outputs=[version]),
            new_code_cell(
                spawn + "xmp.spawn(print_device, start_method='fork')",
                execution_count=2,
                outputs=[devices],
            ),
        ]
    )
    nbformat.write(original, tmp_path / "original.ipynb")
    migrated = write(
        tmp_path / "migrated.ipynb",
        [
            "import torch\ntorch.__version__",
            "from accelerate import notebook_launcher\nDEVICE = torch.device('cpu')\n"
            + spawn
            + "notebook_launcher(print_device, args=(0,), num_processes=1)",
        ],
    )
    code = main(["validate", str(tmp_path / "original.ipynb"), str(migrated)])
    out = capsys.readouterr().out
    assert code == EXIT_MATCH, out
    assert "every code cell gives the outputs saved in the original (2 same)" in out


def test_a_cell_that_raises_in_the_migrated_notebook_is_a_new_error(original, migrated_dir, capsys):
    sources = migrated_sources()
    sources[4] = "model.weight.detach().to('xla')"  # left on the old stack's device
    migrated = write(migrated_dir / "migrated.ipynb", sources)
    code = main(["validate", str(original), str(migrated), "--migrated-cwd", str(migrated_dir)])
    out = capsys.readouterr().out
    assert code == EXIT_DIVERGE, out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("4 "))
    assert "new error" in row and "RuntimeError" in row
    assert "first cell that differs: 4 (model.weight.detach().to('xla')): new error" in out


def test_a_cell_past_the_timeout_is_an_error_naming_it(original, migrated_dir, capsys):
    sources = migrated_sources()
    sources[2] += "\nimport time\ntime.sleep(120)"
    migrated = write(migrated_dir / "migrated.ipynb", sources)
    code = main(["validate", str(original), str(migrated), "--timeout", "3"])
    captured = capsys.readouterr()
    assert code == EXIT_ERROR and captured.out == ""
    assert captured.err.strip().splitlines()[-1] == (
        f"neuron-migrate validate: {migrated}: code cell 2 ran past the timeout "
        "(3 s per cell, --timeout)"
    )


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "terminate"])
def test_ctrl_c_or_terminate_shuts_the_kernel_down_and_exits_2(original, migrated_dir, stop):
    sources = migrated_sources()
    sources[0] += "\nimport os, time\nopen('kernel.pid', 'w').write(str(os.getpid()))"
    sources[2] += "\ntime.sleep(120)"
    migrated = write(migrated_dir / "migrated.ipynb", sources)
    process = subprocess.Popen(
        [sys.executable, "-m", "neuron_migrate", "validate", str(original), str(migrated)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # the progress line of the cell that wrote the pid
            if line.startswith("validate: cell 1/5"):
                break
        process.send_signal(stop)
        out, err = process.communicate(timeout=120)
        assert out == ""  # no table for a run cut short
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == EXIT_ERROR
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "neuron-migrate validate: interrupted; the kernel was shut down"
    )
    kernel = int((migrated_dir / "kernel.pid").read_text())
    deadline = time.monotonic() + 30
    while psutil.pid_exists(kernel) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(kernel) or psutil.Process(kernel).status() == psutil.STATUS_ZOMBIE


XLA_CELLS = [
    "import torch\nimport torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n"
    "print('device', device)",
    "torch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)\nx, y = torch.randn(32, 4), torch.randn(32, 2)\n"
    "model = model.to(device)\nx, y = x.to(device), y.to(device)\nlr = 0.05",
    "optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
    "for step in range(5):\n"
    "    loss = ((model(x) - y) ** 2).mean()\n"
    "    optimizer.zero_grad()\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "    xm.mark_step()\n"
    "    print('step', step, 'loss', loss)",
    "print(model.weight.detach())\nprint(model.bias.detach().cpu())",
]


def test_a_notebook_saved_from_torch_xla_and_migrated_by_rewrite(
    reference_python, tmp_path, capsys
):
    """Saved outputs made by torch_xla 2.9 on the CPU (the cells run as one program in the reference
    environment, which has no Jupyter kernel); the migration is the rewrite command's."""
    from neuron_migrate.cli import main as cli

    mark = "@@cell@@"
    script = "\n".join(f"print({mark!r})\n{source}" for source in XLA_CELLS)
    run = subprocess.run(
        [str(reference_python), "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PJRT_DEVICE": "CPU"},
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    printed = run.stdout.split(mark + "\n")[1:]
    assert "device='xla:0'" in printed[2]
    cells = [
        new_code_cell(
            source, execution_count=n, outputs=[new_output("stream", text=text)] if text else []
        )
        for n, (source, text) in enumerate(zip(XLA_CELLS, printed, strict=True), 1)
    ]
    original = tmp_path / "xla.ipynb"
    nbformat.write(new_notebook(cells=cells), original)
    assert cli(["rewrite", "-q", "--output-dir", str(tmp_path / "out"), str(original)]) == 0
    migrated = tmp_path / "out" / "xla.ipynb"
    notebook = nbformat.read(migrated, as_version=4)
    assert not any("torch_xla" in cell.source for cell in notebook.cells)
    capsys.readouterr()

    assert main(["validate", str(original), str(migrated)]) == EXIT_MATCH, capsys.readouterr().out
    assert "(4 same)" in capsys.readouterr().out

    notebook.cells[1].source = notebook.cells[1].source.replace("lr = 0.05", "lr = 0.5")
    nbformat.write(notebook, migrated)
    assert main(["validate", str(original), str(migrated)]) == EXIT_DIVERGE
    out = capsys.readouterr().out
    assert "first cell that differs: 3 (optimizer = torch.optim.SGD(" in out
    assert "1.3010 saved" not in out  # step 0's loss comes before the first update: the same


def test_a_background_run_of_two_notebooks_reports_each_cell_and_cancel_stops_its_kernel(
    original, migrated_dir
):
    from neuron_migrate.validate import background

    migrated = write(migrated_dir / "migrated.ipynb", migrated_sources())
    run = background.start(original, migrated, options=["--migrated-cwd", str(migrated_dir)])
    document = run.wait(timeout=240)
    assert document["verdict"] == "match" and len(document["cells"]) == 5, document
    assert run.progress()[0] == "cell 1/5 import torch: same" and len(run.progress()) == 5

    sources = migrated_sources()
    sources[0] += "\nimport os, time\nopen('kernel.pid', 'w').write(str(os.getpid()))"
    sources[2] += "\ntime.sleep(120)"
    waiting = write(migrated_dir / "waiting.ipynb", sources)
    run = background.start(original, waiting, options=["--migrated-cwd", str(migrated_dir)])
    deadline = time.monotonic() + 240
    while not run.progress() and time.monotonic() < deadline:
        time.sleep(0.1)
    kernel = int((migrated_dir / "kernel.pid").read_text())
    run.cancel()
    assert run.document()["verdict"] == "error"
    deadline = time.monotonic() + 30
    while psutil.pid_exists(kernel) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(kernel) or psutil.Process(kernel).status() == psutil.STATUS_ZOMBIE
