"""The walkthrough notebooks: well formed, parameterised, and run top to bottom with papermill (on
nbclient) in a fresh kernel, with assertions on what their cells print, not only that they ran.

The executed notebooks are kept under the artifacts folder (`build/test-artifacts/jupyter`, or
$NEURON_MIGRATE_TEST_ARTIFACTS).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.helpers import torchrun as torchrun_helper
from tests.jupyter.conftest import NOTEBOOKS, artifacts_dir

WALKTHROUGHS = sorted(path.name for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
BUDGET_SECONDS = 180  # each walkthrough runs in under three minutes on a CPU machine


def test_the_walkthroughs_are_there() -> None:
    assert WALKTHROUGHS == [
        "01_xla_training_loop.ipynb",
        "02_sft_tensor_parallel.ipynb",
        "03_causal_lm_static_cache.ipynb",
        "04_static_shape_lint.ipynb",
        "05_validate_side_by_side.ipynb",
        "06_localize_a_difference.ipynb",
        "07_architecture_sweep.ipynb",
    ]


@pytest.mark.parametrize("name", WALKTHROUGHS)
def test_walkthrough_is_well_formed(name: str) -> None:
    papermill = pytest.importorskip("papermill")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    ids = [cell.id for cell in notebook.cells]
    assert len(set(ids)) == len(ids), "cell ids must be unique (and stay stable)"
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# ")

    parameters = papermill.inspect_notebook(str(NOTEBOOKS / name))
    assert {"device_type", "hidden_size", "work_dir"} <= set(parameters)
    assert {"steps", "max_new_tokens"} & set(parameters)
    assert parameters["device_type"]["default"] == '"auto"'

    tagged = [cell for cell in notebook.cells if "trainium" in cell.metadata.get("tags", [])]
    guarded = [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code" and cell.source.startswith("%%trainium")
    ]
    assert tagged and tagged == guarded, (
        "Trainium cells are tagged `trainium` and start with %%trainium"
    )
    assert all(cell.source.startswith("%%trainium {device_type}") for cell in tagged)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not any(o.get("output_type") == "error" for o in cell.get("outputs", [])), (
                "committed with an error"
            )


def _cli_has(command: str) -> bool:
    from neuron_migrate.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return command in commands.choices


def execute(name: str, work: Path, **parameters: Any) -> nbformat.NotebookNode:
    """Run the notebook; again, in a fresh work folder, while a torchrun it launched loses a
    worker to torch's gloo abort at interpreter exit (`tests/helpers/torchrun.py`)."""
    papermill = pytest.importorskip("papermill")
    output = artifacts_dir() / name.replace(".ipynb", ".executed.ipynb")

    def run(folder: Path) -> nbformat.NotebookNode:
        return papermill.execute_notebook(
            str(NOTEBOOKS / name),
            str(output),
            parameters={"work_dir": str(folder), **parameters},
            kernel_name="python3",
            cwd=str(NOTEBOOKS),
            progress_bar=False,
            execution_timeout=BUDGET_SECONDS,
        )

    for attempt in range(1, torchrun_helper.LAUNCHES):
        try:
            return run(work.with_name(f"{work.name}-{attempt}") if attempt > 1 else work)
        except papermill.PapermillExecutionError as error:
            if "torchrun" not in str(error) or not torchrun_helper.aborted_at_exit(str(error)):
                raise
    return run(work.with_name(f"{work.name}-{torchrun_helper.LAUNCHES}"))


def cell(notebook: nbformat.NotebookNode, start: str) -> nbformat.NotebookNode:
    """The first code cell whose source starts with `start`."""
    return next(c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(start))


def text(cell: nbformat.NotebookNode) -> str:
    """What a cell printed and displayed, as text."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
    return "\n".join(parts)


def html(cell: nbformat.NotebookNode) -> str:
    return "\n".join(o.data.get("text/html", "") for o in cell.outputs if "data" in o)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def widget_html(notebook: nbformat.NotebookNode) -> str:
    """The static views of every widget the notebook displayed (what a reader without the
    widgets sees: a saved notebook reopened, papermill's output, GitHub)."""
    return "\n".join(
        output.data.get("text/html", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if WIDGET_VIEW in output.get("data", {})
    )


@pytest.mark.parametrize("name", WALKTHROUGHS)
def test_walkthrough_is_committed_with_static_views_and_no_widget_state(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=nbformat.NO_CONVERT)
    assert "widgets" not in notebook.metadata, (
        "dead widget state: execute with store_widget_state=False"
    )
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if WIDGET_VIEW in output.get("data", {}):
                assert 'class="nm-static"' in output.data.get("text/html", ""), cell.source


def assert_skipped_on_cpu(notebook: nbformat.NotebookNode) -> None:
    for trainium in [c for c in notebook.cells if "trainium" in c.metadata.get("tags", [])]:
        assert "Skipped: this cell needs a Trainium (Neuron) device" in text(trainium)


@pytest.mark.slow
def test_01_xla_training_loop(tmp_path: Path) -> None:
    notebook = execute("01_xla_training_loop.ipynb", tmp_path / "work")

    imports = cell(notebook, "%%neuron_migrate\nimport torch_xla")
    assert "-import torch_xla.core.xla_model as xm" in text(imports)
    migrated = cell(notebook, "%%neuron_migrate --run")
    assert 'class="nm-diff nm-side nm-auto"' in html(migrated)
    shown = text(migrated)
    assert "-device = xm.xla_device()" in shown and "+    optimizer.step()" in shown
    assert "brought into this cell: dist, DeviceLoader and average_gradients" in shown
    assert 'class="nm-fold"' in html(migrated)  # the helper, folded in the diff
    assert re.search(r"trained 8 steps on cpu: losses 1\.3856 1\.4342", shown)

    neuron = cell(notebook, "%%neuron_migrate --target neuron --view unified")
    assert 'class="nm-diff nm-unified"' in html(neuron)
    assert '+device = torch.device("neuron")' in text(neuron) and 'backend="neuron"' in text(neuron)

    assert "MigrationApp: " in text(
        cell(notebook, "from neuron_migrate.jupyter import MigrationApp")
    )
    assert "train_xla.py: 5 changes" in widget_html(notebook)
    assert 'class="nm-diff nm-side nm-auto"' in widget_html(notebook)

    assert "Would migrate 1 of 1 file (5 changes)." in text(
        cell(notebook, "!neuron-migrate rewrite {script} --diff")
    )
    compared = text(cell(notebook, "torch_xla_losses = "))
    assert "The migrated script reproduces the torch_xla losses." in compared
    assert_skipped_on_cpu(notebook)


@pytest.mark.slow
def test_02_sft_tensor_parallel(tmp_path: Path) -> None:
    notebook = execute("02_sft_tensor_parallel.ipynb", tmp_path / "work")
    shown = text(cell(notebook, "from neuron_migrate.jupyter import migrate_path"))
    assert "+from trl import SFTConfig, SFTTrainer" in shown and "distributed_config=" in shown
    trained = text(cell(notebook, "from transformers import AutoModelForCausalLM"))
    assert re.search(r"train_loss \d+\.\d+; \d+ of \d+ weight tensors changed", trained)
    sharded = text(cell(notebook, 'printed = run(\n    "torchrun"'))
    for rank in (0, 1):
        assert f"rank {rank}: q_proj is (32, 32); this rank holds (16, 32) of it" in sharded
        assert f"rank {rank}: largest difference to the unsharded logits" in sharded
    assert_skipped_on_cpu(notebook)


@pytest.mark.slow
def test_03_causal_lm_static_cache(tmp_path: Path) -> None:
    notebook = execute("03_causal_lm_static_cache.ipynb", tmp_path / "work")
    assert 'cache_implementation="static"' in text(
        cell(notebook, "from neuron_migrate.jupyter import migrate_path")
    )
    assert "The migrated script generates the reference tokens." in text(
        cell(notebook, "prompts = ")
    )
    dynamic = int(
        re.search(r"dynamic cache: (\d+) graphs", text(cell(notebook, "def count_graphs"))).group(1)
    )  # type: ignore[union-attr]
    assert dynamic > 2
    assert "static cache: 2 graphs, token shapes [(1, 16), (1, 1)]" in text(
        cell(notebook, "static_model = ")
    )
    assert_skipped_on_cpu(notebook)


@pytest.mark.slow
def test_04_static_shape_lint(tmp_path: Path) -> None:
    if not _cli_has("validate"):
        pytest.skip(
            "`neuron-migrate validate` is not a command of this build's CLI yet (the walkthrough runs --compile-stats)"
        )
    notebook = execute("04_static_shape_lint.ipynb", tmp_path / "work", steps=12)
    found = text(cell(notebook, "script = work"))
    for code in ("NM102", "NM110", "NM116", "NM302"):
        assert code in found
    assert "Found 4 findings in 1 file" in found
    in_notebook = cell(notebook, "%neuron_migrate_check")
    assert "NM116" in text(in_notebook) and 'class="nm-findings"' in html(in_notebook)
    stats = [
        text(c) for c in notebook.cells if c.cell_type == "code" and "--compile-stats" in c.source
    ]
    assert "rejects dynamic=True" in stats[0]
    in_a_notebook = text(cell(notebook, "import nbformat"))
    assert "--- a/" in in_a_notebook and "tutorial.ipynb:cell 2" in in_a_notebook
    assert "tutorial.ipynb:cell 3" in in_a_notebook  # the script of the %%writefile cell
    assert "2 fixed, 0 remaining)" in in_a_notebook
    assert re.search(
        r"\d+ neuron \(stand-in\) graphs for 12 steps, [1-9]\d* recompiles, [1-9]\d* graph breaks",
        stats[1],
    )
    assert "All checks passed" in stats[-1]
    assert "1 neuron (stand-in) graph for 12 steps, 0 recompiles, 0 graph breaks" in stats[-1]
    assert_skipped_on_cpu(notebook)


@pytest.mark.slow
def test_05_validate_side_by_side(tmp_path: Path) -> None:
    from neuron_migrate.validate import refenv

    notebook = execute("05_validate_side_by_side.ipynb", tmp_path / "work")
    verdict = text(cell(notebook, "if reference_python:\n    print(dashboard.summary())"))
    reference, said = refenv.check()
    assert text(cell(notebook, "found, said = refenv.check(")).startswith(
        said if reference else "The validation below is skipped: "
    )
    if reference is not None:
        assert "MATCH: the migrated program computes what the original did" in verdict
        assert "ValidationDashboard: MATCH" in text(
            cell(notebook, "dashboard = ValidationDashboard()")
        )
    else:
        assert "skipped: no working reference environment" in verdict
    hand_port = text(cell(notebook, "print(hand_port.summary())"))
    assert "DIVERGE" in hand_port and "losses" in hand_port and "final parameters" in hand_port
    assert "the losses agree until step 2, where they part" in hand_port
    assert 'class="nm-comparison"' in widget_html(notebook)
    assert "DIVERGE" in widget_html(notebook) and "data:image/png;base64," in widget_html(notebook)
    assert_skipped_on_cpu(notebook)


@pytest.mark.slow
def test_05_with_a_reference_environment_that_does_not_work_says_what_to_do(
    tmp_path: Path,
) -> None:
    from neuron_migrate.validate import refenv

    # An environment `neuron-migrate env reference` built, whose old stack no longer imports.
    root = tmp_path / "refenv"
    (root / "bin").mkdir(parents=True)
    (root / refenv.STAMP).write_text("{}")
    broken = root / "bin" / "python"
    broken.write_text(
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    notebook = execute(
        "05_validate_side_by_side.ipynb", tmp_path / "work", reference_python=str(broken)
    )
    said = text(cell(notebook, "found, said = refenv.check(")).strip()
    assert said == (
        f"The validation below is skipped: the reference environment {broken} does not work "
        f"(ModuleNotFoundError: No module named 'torch'): `neuron-migrate env reference {root}` "
        "repairs it"
    )
    verdict = text(cell(notebook, "if reference_python:\n    print(dashboard.summary())"))
    assert "skipped: no working reference environment (see above)" in verdict
    # The rest of the walkthrough ran: the hand port is found out.
    assert "DIVERGE" in text(cell(notebook, "print(hand_port.summary())"))


@pytest.mark.slow
def test_07_architecture_sweep(tmp_path: Path) -> None:
    notebook = execute("07_architecture_sweep.ipynb", tmp_path / "work")
    standin = text(cell(notebook, "def positives(x):"))
    assert (
        "refused: Dynamic shapes detected in the model, but torch-neuronx requires static shapes"
        in standin
    )
    assert "2 graphs for inputs of [[(4,)], [(8,)]]" in standin
    generated = text(cell(notebook, "from transformers import CompileConfig"))
    assert "same tokens as plain generation: True" in generated
    assert "23 tokens, padded to 32: graphs so far 3" in generated
    assert "stride mismatch" in generated  # the second prefill bucket: same shapes, other strides
    table = "\n".join(
        o.data.get("text/markdown", "")
        for o in cell(notebook, "from neuron_migrate.sweep import report").outputs
        if "data" in o
    )
    assert "| `opt` | `OPTForCausalLM` | yes | yes | 2 / 2 | yes | 1 (0) |  |" in table
    assert (
        "| `mistral` |" in table
        and "**recompile per Python value** at `transformers/cache_utils.py:" in table
    )
    causes = text(cell(notebook, "for record in records:\n    for stage"))
    assert "bamba build: cannot build" in causes
    lint = text(cell(notebook, "from neuron_migrate.sweep.lint import"))
    assert (
        "mistral: transformers/cache_utils.py:550: is_full = current_length >= self.max_cache_len"
        in lint
    )
    assert "check: flagged NM117" in lint  # the sliding-window cache's Python counter
    assert re.search(
        r"\d+ architectures( \(\d+ not run\))?: \d+ build, \d+ generate with static shapes",
        text(cell(notebook, "everything = ")),
    )
    committed = nbformat.read(
        NOTEBOOKS / "07_architecture_sweep.ipynb", as_version=nbformat.NO_CONVERT
    )
    assert "widgets" not in committed.metadata  # it displays no widget: no state to keep
    assert_skipped_on_cpu(notebook)
