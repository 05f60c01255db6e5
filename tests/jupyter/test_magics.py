"""The IPython extension, in an in-process shell: `%load_ext neuron_migrate`, `%%neuron_migrate`
(every option), `%neuron_migrate_check` and `%%trainium`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from neuron_migrate.jupyter import magics

OLD_CELL = """\
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
total = (torch.ones(3, device=device) * 2).sum().item()
xm.mark_step()
"""


def run_magic(ip: Any, line: str, cell: str) -> tuple[Any, list[dict[str, Any]], str]:
    """Run a cell magic as a cell; return the run's result, the displayed outputs, and stdout."""
    with capture_output() as captured:
        result = ip.run_cell(f"%%{line}\n{cell}")
    return result, [output.data for output in captured.outputs], captured.stdout


def test_load_ext_registers_the_magics_and_unload_removes_them(shell: Any) -> None:
    registered = shell.magics_manager.magics
    assert "neuron_migrate" in registered["cell"]
    assert "trainium" in registered["cell"]
    assert "neuron_migrate_check" in registered["line"]
    shell.run_line_magic("unload_ext", "neuron_migrate")
    try:
        assert "neuron_migrate" not in registered["cell"]
        assert "neuron_migrate_check" not in registered["line"]
    finally:
        shell.run_line_magic("load_ext", "neuron_migrate")
    assert "neuron_migrate" in registered["cell"]


def test_cell_magic_shows_the_migration_side_by_side_and_runs_nothing(ip: Any) -> None:
    result, outputs, _ = run_magic(ip, "neuron_migrate", OLD_CELL)
    assert result.success
    [shown] = outputs
    html, text = shown["text/html"], shown["text/plain"]
    assert 'class="nm-diff nm-side"' in html
    assert "xm.xla_device()" in html and "torch.accelerator.current_accelerator" in html
    assert "NM001" in html and "NM002" in html
    assert "Migrated cell (to copy)" in html
    # The text form is a unified diff, labelled with the cell's number.
    assert "-device = xm.xla_device()" in text
    assert (
        '+device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
        in text
    )
    assert "-xm.mark_step()" in text
    assert text.startswith("In [")
    assert "total" not in ip.user_ns, "without --run the cell must not run"


def test_run_executes_the_migrated_cell_in_the_kernel(ip: Any) -> None:
    result, outputs, _ = run_magic(ip, "neuron_migrate --run", OLD_CELL)
    assert result.success
    assert len(outputs) == 1  # the diff; the migrated code itself displays nothing
    assert ip.user_ns["total"] == 6.0
    assert str(ip.user_ns["device"]) == "cpu"


def test_view_unified(ip: Any) -> None:
    _, [shown], _ = run_magic(ip, "neuron_migrate --view unified", OLD_CELL)
    assert 'class="nm-diff nm-unified"' in shown["text/html"]
    assert "nm-side" not in shown["text/html"]


def test_target_neuron_spells_the_device(ip: Any) -> None:
    _, [shown], _ = run_magic(ip, "neuron_migrate --target neuron", OLD_CELL)
    assert '+device = torch.device("neuron")' in shown["text/plain"]


def test_magics_and_shell_lines_in_the_cell_are_kept(ip: Any) -> None:
    cell = "%matplotlib   inline\n!PJRT_DEVICE=NEURON echo hi\n" + OLD_CELL
    _, [shown], _ = run_magic(ip, "neuron_migrate", cell)
    text = shown["text/plain"]
    assert " %matplotlib   inline" in text  # unchanged, spacing and all
    assert "+!echo hi" in text  # the XLA runtime variable is gone


def test_manual_items_are_listed(ip: Any) -> None:
    cell = "import torch\nimport torch_xla.core.xla_model as xm\n\nx = torch.ones(2)\ny = xm.all_gather(x)\n"
    _, [shown], _ = run_magic(ip, "neuron_migrate", cell)
    assert "TODO(neuron-migrate NM006)" in shown["text/plain"]
    assert "Left for you" in shown["text/html"]
    assert "manual item" in shown["text/plain"].splitlines()[0]


def test_a_cell_without_old_stack_code_is_left_alone(ip: Any) -> None:
    _, [shown], _ = run_magic(ip, "neuron_migrate", "x = 1\n")
    assert shown["text/plain"].endswith("nothing to migrate")
    assert "nm-diff" not in shown["text/html"]


def test_run_fails_the_cell_when_the_migrated_code_raises(ip: Any) -> None:
    cell = "import torch_xla.core.xla_model as xm\nraise ValueError('boom')\n"
    result, _, _ = run_magic(ip, "neuron_migrate --run", cell)
    assert not result.success
    assert isinstance(result.error_in_exec, magics.CellFailed)
    assert "ValueError: boom" in str(result.error_in_exec)


def test_a_cell_that_cannot_be_migrated_says_why_and_is_not_run(ip: Any) -> None:
    cell = "import torch_xla.core.xla_model as xm\nx = (\n"
    result, [shown], _ = run_magic(ip, "neuron_migrate --run", cell)
    assert "not migrated" in shown["text/plain"]
    assert "SyntaxError" in shown["text/plain"]
    assert ":cell 1:" not in shown["text/plain"]  # a cell is not a notebook
    assert not result.success
    assert "not run" in str(result.error_in_exec)


def test_unknown_option_is_a_usage_error(ip: Any) -> None:
    with capture_output() as captured:
        result = ip.run_cell("%%neuron_migrate --view sideways\nx = 1\n")
    assert not result.success
    assert "sideways" in captured.stderr + captured.stdout + str(result.error_in_exec)


# -- %neuron_migrate_check ------------------------------------------------------------------------

HAZARDS = """\
import torch
from torch.utils.data import DataLoader

model = torch.nn.Linear(4, 2)
optimizer, losses = torch.optim.SGD(model.parameters(), lr=0.1), []
for x in DataLoader(torch.randn(10, 4), batch_size=3):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
"""


def _notebook(tmp_path: Path, *sources: str) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# title"}]
    cells += [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": source,
        }
        for source in sources
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    return path


def test_check_a_notebook_file(ip: Any, tmp_path: Path) -> None:
    path = _notebook(tmp_path, "%matplotlib inline\n" + HAZARDS)
    report = ip.run_line_magic("neuron_migrate_check", str(path))
    text = repr(report)
    # Cell 2 (the markdown cell is cell 1); the %matplotlib line counts as line 1.
    assert f"{path}:cell 2:7:10: NM302" in text
    assert f"{path}:cell 2:11:" in text and "NM110" in text
    assert text.endswith(f"{path}: 2 findings (1 code cell)")
    html = report._repr_html_()
    assert 'class="nm-findings"' in html and "NM302" in html


def test_check_finds_the_notebook_the_frontend_names(ip: Any, tmp_path: Path) -> None:
    path = _notebook(tmp_path, HAZARDS)
    ip.user_ns["__session__"] = str(path)  # as JupyterLab sets it
    report = ip.run_line_magic("neuron_migrate_check", "")
    assert report.source == str(path)
    assert any(f.code == "NM302" for f in report.findings)


def test_check_without_a_notebook_checks_the_cells_run_in_this_session(ip: Any) -> None:
    number = ip.execution_count
    ip.run_cell(HAZARDS, store_history=True)
    report = ip.run_cell("%neuron_migrate_check", store_history=True).result
    assert report.source == ""
    assert f"In [{number}]:10:24: NM110" in repr(report)
    assert "the cells run in this session" in repr(report)


def test_check_select_ignore_and_severity(ip: Any, tmp_path: Path) -> None:
    path = _notebook(tmp_path, HAZARDS)
    only = ip.run_line_magic("neuron_migrate_check", f"{path} --select NM302")
    assert {f.code for f in only.findings} == {"NM302"}
    without = ip.run_line_magic("neuron_migrate_check", f"{path} --ignore NM3")
    assert "NM302" not in {f.code for f in without.findings}
    info = ip.run_line_magic("neuron_migrate_check", f"{path} --min-severity info --target neuron")
    assert len(info.findings) >= len(without.findings)


def test_check_clean_notebook(ip: Any, tmp_path: Path) -> None:
    report = ip.run_line_magic("neuron_migrate_check", str(_notebook(tmp_path, "x = 1\n")))
    assert repr(report).endswith("no findings (1 code cell)")
    assert "clean" in report._repr_html_()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--select NM999", "unknown rule code 'NM999'"),
        ("missing.ipynb", "missing.ipynb: no such notebook"),
    ],
)
def test_check_usage_errors(ip: Any, line: str, message: str) -> None:
    with capture_output() as captured:
        result = ip.run_cell(f"%neuron_migrate_check {line}")
    assert not result.success
    assert message in captured.stderr + captured.stdout + str(result.error_in_exec)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_check_a_file_that_is_not_a_notebook(ip: Any, tmp_path: Path, content: str) -> None:
    path = tmp_path / "broken.ipynb"
    path.write_text(content)
    with capture_output():
        result = ip.run_cell(f"%neuron_migrate_check {path}")
    assert f"{path}: not a notebook" in str(result.error_in_exec)


# -- %%trainium -----------------------------------------------------------------------------------


def test_trainium_cell_is_skipped_without_a_neuron_device(ip: Any) -> None:
    with capture_output() as captured:
        result = ip.run_cell("%%trainium\nran_on_trainium = True\n")
    assert result.success
    assert "ran_on_trainium" not in ip.user_ns
    assert isinstance(result.result, magics.SkippedCell)
    assert "Skipped: this cell needs a Trainium (Neuron) device" in repr(result.result)
    assert captured.outputs == [] or "skipped" in str(captured.outputs)


def test_trainium_cell_is_skipped_when_the_notebook_runs_on_cpu(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(magics, "neuron_device", lambda: "neuron:0")
    ip.user_ns["device_type"] = "cpu"
    result = ip.run_cell("%%trainium {device_type}\nran_on_trainium = True\n")
    assert "ran_on_trainium" not in ip.user_ns
    assert "this run is on 'cpu'" in repr(result.result)


def test_trainium_cell_runs_where_there_is_a_neuron_device(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(magics, "neuron_device", lambda: "neuron:0")
    result = ip.run_cell("%%trainium auto\nran_on_trainium = True\n")
    assert result.success
    assert ip.user_ns["ran_on_trainium"] is True
    failed = ip.run_cell("%%trainium\nraise RuntimeError('no cores')\n")
    assert isinstance(failed.error_in_exec, magics.CellFailed)


def test_current_notebook_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _notebook(tmp_path, "x = 1\n")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert magics.current_notebook({}) is None
    assert magics.current_notebook({"__vsc_ipynb_file__": str(path)}) == path
    assert magics.current_notebook({"__session__": str(tmp_path / "gone.ipynb")}) is None
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    assert magics.current_notebook({}) == path
