"""The IPython extension, in an in-process shell: `%load_ext neuron_migrate`, `%%neuron_migrate`
(every option), `%neuron_migrate_check` and `%%trainium`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from neuron_migrate.jupyter import magics, session
from tests.jupyter.conftest import text_of

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
        result = ip.run_cell(f"%%{line}\n{cell}", store_history=True)  # as a kernel runs cells
    return result, [output.data for output in captured.outputs], captured.stdout


def test_load_ext_registers_the_magics_says_so_and_unload_removes_them(shell: Any) -> None:
    registered = shell.magics_manager.magics
    assert "neuron_migrate" in registered["cell"]
    assert "trainium" in registered["cell"]
    assert "neuron_migrate_check" in registered["line"]
    shell.run_line_magic("unload_ext", "neuron_migrate")
    try:
        assert "neuron_migrate" not in registered["cell"]
        assert "neuron_migrate_check" not in registered["line"]
    finally:
        with capture_output() as captured:
            shell.run_line_magic("load_ext", "neuron_migrate")
    assert "neuron_migrate" in registered["cell"]
    assert captured.stdout == magics.LOADED + "\n"
    assert "%%neuron_migrate" in captured.stdout and "--help" in captured.stdout


def _labextensions(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """JupyterLab's extension folders, as the kernel sees them: only `folder`."""
    import jupyter_core.paths

    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [str(folder)])


def _reload(shell: Any) -> str:
    shell.run_line_magic("unload_ext", "neuron_migrate")
    with capture_output() as captured:
        shell.run_line_magic("load_ext", "neuron_migrate")
    return captured.stdout


def test_load_ext_in_a_kernel_says_in_one_line_when_the_jupyterlab_extension_is_missing(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shell, "kernel", object(), raising=False)  # as in a Jupyter kernel
    _labextensions(monkeypatch, tmp_path)
    said = _reload(shell).splitlines()
    assert said[0] == magics.LOADED and len(said) == 2
    assert said[1].startswith("neuron-migrate: the JupyterLab extension is not installed")
    assert "pip install -e ." in said[1] and "keeps the old code" in said[1]
    assert "Replace cell / Insert below buttons are hidden" in said[1]

    # Installed where JupyterLab looks: nothing more is said.
    (tmp_path / "neuron-migrate").mkdir()
    (tmp_path / "neuron-migrate" / "package.json").write_text("{}")
    assert _reload(shell) == magics.LOADED + "\n"


def test_load_ext_outside_a_kernel_says_nothing_of_the_jupyterlab_extension(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _labextensions(monkeypatch, tmp_path)  # none installed, but no tab could use it anyway
    assert getattr(shell, "kernel", None) is None
    assert _reload(shell) == magics.LOADED + "\n"


@pytest.mark.parametrize(
    ("cell", "usage"),
    [
        ("%%neuron_migrate --help\nimport torch_xla\n", "usage: %%neuron_migrate [-h]"),
        ("%%neuron_migrate -h\nx = 1\n", "usage: %%neuron_migrate [-h]"),
        ("%neuron_migrate_check --help", "usage: %neuron_migrate_check [-h]"),
        ("%%trainium --help\nx = 1\n", "usage: %%trainium [-h]"),
    ],
)
def test_help_on_every_magic(ip: Any, cell: str, usage: str) -> None:
    with capture_output() as captured:
        result = ip.run_cell(cell)
    assert result.success
    assert captured.stdout.startswith(usage)
    assert "--target" in captured.stdout or "DEVICE" in captured.stdout.upper()
    assert "x" not in ip.user_ns


def test_the_usage_line_of_question_mark_help_names_the_magic_as_written(shell: Any) -> None:
    doc = shell.magics_manager.magics["cell"]["neuron_migrate"].__doc__
    assert doc.startswith("::\n\n  %%neuron_migrate [-h] [--target {neuron,portable}]")
    line_doc = shell.magics_manager.magics["line"]["neuron_migrate_check"].__doc__
    assert line_doc.startswith("::\n\n  %neuron_migrate_check [-h]")


def test_cell_magic_shows_the_migration_side_by_side_and_runs_nothing(ip: Any) -> None:
    result, outputs, _ = run_magic(ip, "neuron_migrate", OLD_CELL)
    assert result.success
    [shown] = outputs
    html, text = shown["text/html"], shown["text/plain"]
    assert 'class="nm-diff nm-side nm-auto"' in html
    shown_text = text_of(html)
    assert "xm.xla_device()" in shown_text and "torch.accelerator.current_accelerator" in shown_text
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


def test_views(ip: Any) -> None:
    _, [shown], _ = run_magic(ip, "neuron_migrate --view unified", OLD_CELL)
    assert 'class="nm-diff nm-unified"' in shown["text/html"]
    assert "nm-side" not in shown["text/html"]
    _, [side], _ = run_magic(ip, "neuron_migrate --view side", OLD_CELL)
    assert 'class="nm-diff nm-side"' in side["text/html"]


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
    assert 'class="nm-diff' not in shown["text/html"]


def test_run_fails_the_cell_when_the_migrated_code_raises(ip: Any) -> None:
    cell = "import torch_xla.core.xla_model as xm\nraise ValueError('boom')\n"
    result, _, _ = run_magic(ip, "neuron_migrate --run", cell)
    assert not result.success
    assert isinstance(result.error_in_exec, magics.CellFailed)
    assert "ValueError: boom" in str(result.error_in_exec)


@pytest.mark.parametrize("cell", ["import torch_xla.core.xla_model as xm\nx = (\n", "x = (\n"])
def test_a_cell_that_cannot_be_migrated_says_why_and_is_not_run(ip: Any, cell: str) -> None:
    result, [shown], _ = run_magic(ip, "neuron_migrate --run", cell)
    assert shown["text/plain"].startswith("In [")
    assert "not migrated: 2:5: SyntaxError: '(' was never closed" in shown["text/plain"] or (
        "not migrated: 1:5: SyntaxError: '(' was never closed" in shown["text/plain"]
    )
    assert ":cell 1:" not in shown["text/plain"]  # a cell is not a notebook
    assert "nm-bad" in shown["text/html"] and "nothing to migrate" not in shown["text/plain"]
    assert not result.success
    assert "could not be migrated" in str(result.error_in_exec)


def test_imports_in_an_earlier_cell_are_seen(ip: Any) -> None:
    ip.run_cell("import torch\nimport torch_xla.core.xla_model as xm\n", store_history=True)
    _, [shown], _ = run_magic(
        ip, "neuron_migrate --run", "device = xm.xla_device()\nxm.mark_step()\n"
    )
    text = shown["text/plain"]
    assert "-device = xm.xla_device()" in text and "+device = torch.accelerator" in text
    assert str(ip.user_ns["device"]) == "cpu"


def test_old_stack_names_imported_nowhere_are_named(ip: Any) -> None:
    _, [shown], _ = run_magic(ip, "neuron_migrate", "loader = pl.MpDeviceLoader(batches, device)\n")
    assert "`pl` is not imported in this cell or the cells before it" in shown["text/plain"]
    assert "nothing to migrate" not in shown["text/plain"]
    assert "nm-warn" in shown["text/html"]


@pytest.mark.parametrize(("flag", "replace"), [("--replace", True), ("--insert", False)])
def test_replace_and_insert_put_the_migrated_code_into_the_notebook(
    ip: Any, monkeypatch: pytest.MonkeyPatch, flag: str, replace: bool
) -> None:
    given = []
    monkeypatch.setattr(
        ip, "set_next_input", lambda text, replace=False: given.append((text, replace))
    )
    run_magic(ip, f"neuron_migrate {flag}", OLD_CELL)
    [(text, replaced)] = given
    assert replaced is replace and "xm" not in text and "torch.accelerator" in text
    with capture_output():
        both = ip.run_cell("%%neuron_migrate --replace --insert\nx = 1\n")
    assert "choose one" in str(both.error_in_exec)


def test_the_output_has_the_buttons_the_jupyterlab_piece_makes_work(ip: Any) -> None:
    _, [shown], _ = run_magic(ip, "neuron_migrate", OLD_CELL)
    html = shown["text/html"]
    assert 'class="nm-actions" style="display: none;"' in html  # hidden without the piece
    assert "nm-replace-cell" in html and "nm-insert-below" in html
    assert 'class="nm-pre nm-migrated-source"' in html


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


def test_check_finds_the_notebook_the_frontend_names(fresh: Any, tmp_path: Path) -> None:
    ip = fresh
    path = _notebook(tmp_path, HAZARDS)
    ip.user_ns["__session__"] = str(path)  # as JupyterLab sets it
    report = ip.run_line_magic("neuron_migrate_check", "")
    assert report.source == str(path) and not report.notice
    assert any(f.code == "NM302" for f in report.findings)


def test_check_warns_of_unsaved_changes_and_checks_the_cells_as_they_ran(
    fresh: Any, tmp_path: Path
) -> None:
    ip = fresh
    path = _notebook(tmp_path, "import torch\n")  # as last saved
    ip.user_ns["__session__"] = str(path)
    number = ip.execution_count
    ip.run_cell(HAZARDS, store_history=True)  # run, not saved
    report = ip.run_cell("%neuron_migrate_check", store_history=True).result
    assert f"In [{number}]:10:24: NM110" in repr(report)
    assert report.notice.startswith(
        f"{path} has unsaved changes (In [{number}] ran code the saved file"
    )
    assert "nm-notice" in report._repr_html_()


def test_check_without_a_notebook_checks_the_cells_run_in_this_session_and_says_so(
    ip: Any,
) -> None:
    number = ip.execution_count
    ip.run_cell(HAZARDS, store_history=True)
    report = ip.run_cell("%neuron_migrate_check", store_history=True).result
    assert report.source == ""
    assert f"In [{number}]:10:24: NM110" in repr(report)
    assert "the cells run in this session" in repr(report)
    assert "does not say which notebook this is" in report.notice


def test_check_says_how_many_findings_the_severity_filter_hides(ip: Any, tmp_path: Path) -> None:
    outside = "import torch\nvalues = torch.arange(4)\nprint(values.sum().item())\n"
    report = ip.run_line_magic("neuron_migrate_check", str(_notebook(tmp_path, outside)))
    assert report.findings == []
    assert report.hidden == {"info": 1}
    assert repr(report).endswith(
        "no findings (1 code cell; 1 info finding not shown: --min-severity info shows them)"
    )
    everything = ip.run_line_magic(
        "neuron_migrate_check", f"{_notebook(tmp_path, outside)} --min-severity info"
    )
    assert [f.code for f in everything.findings] == ["NM110"] and not everything.hidden


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
    assert repr(report).endswith("no findings (1 code cell)") and not report.hidden
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


def test_the_notebook_is_found_through_the_tab_the_server_vs_code_and_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _notebook(tmp_path, "x = 1\n")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setattr(session, "path_from_server", lambda: None)
    assert session.notebook_path({}) is None
    assert session.notebook_path({"__vsc_ipynb_file__": str(path)}) == session.Located(
        path, "VS Code"
    )
    assert session.notebook_path({"__session__": str(tmp_path / "gone.ipynb")}) is None
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    assert session.notebook_path({}).path == path
    # The server knows the name after a rename, which `__session__` does not.
    renamed = tmp_path / "renamed.ipynb"
    path.rename(renamed)
    monkeypatch.setattr(session, "path_from_server", lambda: renamed)
    assert session.notebook_path({"__session__": str(path)}) == session.Located(
        renamed, "the Jupyter server"
    )
