"""Diff rendering, and migrating cells, scripts and notebooks for display (and applying them)."""

from __future__ import annotations

import itertools
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from neuron_migrate.core.files import SourceError
from neuron_migrate.jupyter import Diff, migrate_cell, migrate_path, render
from neuron_migrate.jupyter.migration import apply, notebook_code_cells, write
from neuron_migrate.jupyter.session import Cell

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """\
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
x = torch.ones(2).to(device)
xm.mark_step()
"""


def rows(html: str, kind: str) -> int:
    return html.count(f'<tr class="{kind}">')


class _Marks(HTMLParser):
    """The text of each span of one class (nested spans included)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.depth, self.found = kind, 0, []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if self.depth:
            self.depth += tag == "span"
        elif tag == "span" and dict(attrs).get("class") == self.kind:
            self.depth = 1
            self.found.append("")

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag == "span":
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.found[-1] += data


def marked(html: str, kind: str) -> list[str]:
    """The text of the words marked as added (`nm-w-add`) or removed (`nm-w-del`)."""
    parser = _Marks(kind)
    parser.feed(html)
    return parser.found


def test_side_by_side_pairs_lines_and_marks_the_words_that_changed() -> None:
    html = render.side_by_side(
        "a = 1\nloader = pl.MpDeviceLoader(data, device)\nc = 3\n",
        "a = 1\nloader = DeviceLoader(data, device)\nc = 3\nd = 4\n",
    )
    assert rows(html, "nm-same") == 2 and rows(html, "nm-chg") == 1 and rows(html, "nm-add") == 1
    # Whole words are marked, never fragments of them.
    assert marked(html, "nm-w-del") == ["pl.MpDeviceLoader"]
    assert marked(html, "nm-w-add") == ["DeviceLoader"]
    assert html.startswith('<table class="nm-diff nm-side nm-auto"')


def test_the_changed_words_are_marked_inline_and_the_code_is_coloured_by_class() -> None:
    html = render.side_by_side("x = f(1)  # one\n", "x = g(1)  # one\n")
    # Inline: what a reader needs survives a sanitiser that drops <style>.
    assert re.search(r'class="nm-w-add" style="background: rgba\(46, 160, 67, 0.40\)', html)
    assert (
        "text-align: left; vertical-align: top; white-space: pre-wrap; overflow-wrap: break-word;"
        in html
    )
    assert "break-all" not in html
    # Syntax classes, coloured by the one stylesheet of the output.
    assert '<span class="nm-t-c"># one</span>' in html and '<span class="nm-t-m">1</span>' in html
    output = render.output(html)
    assert output.count("<style>") == 1 and ".nm-out .nm-t-c {" in output
    assert "@container (max-width: 760px)" in output  # one column in a narrow output


def test_lines_are_paired_with_the_lines_they_are_most_alike() -> None:
    old = "import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\nx = torch.ones(2)\n"
    new = "import torch\n\nx = torch.ones(2)\n"
    html = render.side_by_side(old, new)
    assert "nm-w-" not in html.split("x = ")[0]  # unrelated lines: no word marks between them


def test_side_by_side_escapes_html() -> None:
    html = render.side_by_side("x = '<b>'\n", "x = '<b>'\ntotal = compute('<i>', 3)\n")
    assert "<b>" not in html and "<i>" not in html
    assert "&lt;b&gt;" in html and "&lt;i&gt;" in html


def test_a_long_added_definition_is_folded() -> None:
    helper = "class DeviceLoader:\n" + "".join(f"    line_{i} = {i}\n" for i in range(20)) + "\n\n"
    html = render.side_by_side("x = 1\n", helper + "x = 1\n")
    assert rows(html, "nm-fold") == 1 and rows(html, "nm-add") == 0
    assert "<code>class DeviceLoader</code>: 21 added lines (1-21)</summary>" in html
    assert "line_19" in html  # still there, behind the fold
    short = render.side_by_side("x = 1\n", "def f():\n    return 1\n\n\nx = 1\n")
    assert rows(short, "nm-fold") == 0


def test_context_folds_unchanged_lines() -> None:
    old = "".join(f"line {i}\n" for i in range(40))
    new = old.replace("line 20\n", "line twenty\n")
    folded = render.side_by_side(old, new, context=2)
    assert rows(folded, "nm-skip") == 2
    assert "⋯ 18 unchanged lines ⋯" in folded and "⋯ 17 unchanged lines ⋯" in folded
    assert rows(folded, "nm-same") == 4
    assert rows(render.side_by_side(old, new), "nm-skip") == 0


def test_unified_html_and_text() -> None:
    html = render.unified_html("a = 1\nb = 2\n", "a = 1\nb = 3\n")
    assert html.startswith('<table class="nm-diff nm-unified"')
    assert rows(html, "nm-del") == 1 and rows(html, "nm-add") == 1 and rows(html, "nm-same") == 1
    assert html.index('class="nm-del"') < html.index('class="nm-add"')
    assert render.unified_diff("a", "b") == "--- original\n+++ migrated\n@@ -1 +1 @@\n-a\n+b\n"
    assert "nm-auto" not in render.diff_html("a\n", "b\n", "t", "side")
    assert "nm-auto" in render.diff_html("a\n", "b\n", "t", "auto")


def test_prose_turns_backticks_into_code() -> None:
    assert render.prose("use `a < b` here") == "use <code>a &lt; b</code> here"
    assert render.prose("one ` alone") == "one ` alone"


def test_diff_object() -> None:
    diff = Diff("a\n", "b\n", "old.py", "new.py")
    assert repr(diff) == "--- old.py\n+++ new.py\n@@ -1 +1 @@\n-a\n+b"
    assert "old.py" in diff._repr_html_() and "nm-side nm-auto" in diff._repr_html_()
    assert "nm-unified" in Diff("a\n", "b\n", view="unified")._repr_html_()
    assert repr(Diff("a\n", "a\n")) == "before and after are the same"


def test_migrate_cell() -> None:
    migration = migrate_cell(SCRIPT, label="In [7]")
    assert migration.changed and migration.kind == "cell"
    assert migration.headline() == "In [7]: 3 changes"  # one of them the import that went
    assert "xm" not in migration.migrated
    assert {c.code for c in migration.changes} == {"NM001", "NM002", "NM012"}
    assert migrate_cell(SCRIPT, target="neuron").migrated.count('torch.device("neuron")') == 1
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        migrate_cell(SCRIPT, target="tpu")


def test_migrate_a_script_and_apply_it(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    migration = migrate_path(path)
    assert migration.kind == "script" and migration.changed
    assert path.read_text() == SCRIPT, "migrating must not write"
    assert "@@" in migration.diff_text()
    apply(migration)
    assert path.read_text() == migration.migrated
    assert not migrate_path(path).changed


def test_apply_refuses_a_file_changed_since_it_was_migrated(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    migration = migrate_path(path)
    path.write_text(SCRIPT + "# edited meanwhile\n")
    with pytest.raises(SourceError, match="changed on disk since it was migrated"):
        apply(migration)
    with pytest.raises(ValueError, match="no file"):
        apply(migrate_cell(SCRIPT))


def test_migrate_a_notebook(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
        {
            "cell_type": "code",
            "execution_count": 1,
            "metadata": {},
            "outputs": [],
            "source": [
                "import torch\n",
                "import torch_xla.core.xla_model as xm\n",
                "device = xm.xla_device()",
            ],
        },
        {
            "cell_type": "code",
            "execution_count": 2,
            "metadata": {},
            "outputs": [],
            "source": ["%%time\n", "xm.mark_step()"],
        },
        {
            "cell_type": "code",
            "execution_count": 3,
            "metadata": {},
            "outputs": [],
            "source": "x = 1",
        },
    ]
    path = tmp_path / "nb.ipynb"
    raw = (
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=2)
        + "\n"
    )
    path.write_text(raw)
    migration = migrate_path(path)
    assert migration.kind == "notebook"
    assert [index for index, _, _ in migration.cells] == [1, 2]
    assert migration.headline() == f"{path}: 3 changes in 2 cells"  # one of them the import that went
    assert [title for title, _, _ in migration.pairs()] == ["cell 2", "cell 3"]
    assert "a/cell 2" in migration.diff_text() and "a/cell 3" in migration.diff_text()
    assert notebook_code_cells(raw) == [
        (1, "".join(cells[1]["source"])),
        (2, "%%time\nxm.mark_step()"),
        (3, "x = 1"),
    ]
    apply(migration)
    written = path.read_text()
    assert json.loads(written)["cells"][2]["source"] == ["%%time"]
    assert written.splitlines()[:3] == raw.splitlines()[:3]  # the notebook's own layout


def test_unreadable_and_broken_inputs(tmp_path: Path) -> None:
    missing = migrate_path(tmp_path / "gone.py")
    assert missing.error and "cannot read" in missing.error
    assert "not migrated" in missing.headline()
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{")
    assert "not a valid notebook" in (migrate_path(broken).error or "")
    html = migrate_path(broken)._repr_html_()
    assert "error" in html and 'class="nm-diff' not in html


def test_example_scripts_render(tmp_path: Path) -> None:
    migration = migrate_path(ROOT / "examples" / "xla_single_mpdeviceloader.py")
    html = migration._repr_html_()
    assert re.search(r"⋯ \d+ unchanged lines ⋯", html), "a whole file is folded around its changes"
    assert "<code>MpDeviceLoader(loader, device)</code>" in html


# -- a cell in its notebook -----------------------------------------------------------------------

IMPORTS = Cell(
    "In [1]",
    "import torch\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.parallel_loader as pl\n",
)
LOOP = """\
device = xm.xla_device()
loader = pl.MpDeviceLoader(batches, device)
for x in loader:
    loss = model(x).sum()
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.mark_step()
"""


def test_a_cell_is_migrated_with_the_imports_of_the_cells_before_it() -> None:
    alone = migrate_cell(LOOP, label="In [2]")
    assert not alone.changed and alone.verdict() == "not found"
    assert alone.headline().startswith("In [2]: `pl` and `xm` are not imported in this cell")
    assert "`xm` is usually `torch_xla.core.xla_model`" in alone.headline()

    migration = migrate_cell(
        LOOP, label="In [2]", context=[IMPORTS], defined={"torch"}.__contains__
    )
    assert migration.changed and not migration.unresolved
    assert {c.code for c in migration.changes} == {"NM001", "NM002", "NM003", "NM004"}
    # What the migration writes elsewhere for this cell comes with it, unless the kernel has it.
    assert migration.carried == ["dist", "DeviceLoader", "average_gradients"]
    assert migration.migrated.startswith(
        "import torch.distributed as dist\n\n\nclass DeviceLoader:"
    )
    assert "import torch\n" not in migration.migrated
    compile(migration.migrated, "cell", "exec")
    assert "brought into this cell: dist, DeviceLoader and average_gradients" in repr(migration)


def test_the_earlier_cells_changes_are_not_the_cells_own() -> None:
    earlier = Cell("In [1]", IMPORTS.source + "xm.mark_step()\n")
    migration = migrate_cell("device = xm.xla_device()\n", label="In [2]", context=[earlier])
    assert [c.code for c in migration.changes] == ["NM001"]  # not the mark_step of In [1]
    assert migration.context == "In [1]"


def test_a_cell_that_does_not_parse_is_an_error_even_without_old_stack_code() -> None:
    for source in ("x = (\n", "def f(:\n    pass\n"):
        migration = migrate_cell(source, label="In [4]")
        assert migration.error and migration.error.startswith("In [4]:1:")
        assert "SyntaxError" in migration.headline() and migration.tone == "bad"
    assert "a %%bash cell is not Python" in (migrate_cell("%%bash\nls\n").error or "")


def test_applying_one_cell_writes_it_and_what_it_needs(tmp_path: Path) -> None:
    cells = [
        "import torch\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.parallel_loader as pl\n",
        "device = xm.xla_device()\n",
        "loader = pl.MpDeviceLoader(batches, device)\n",
    ]
    raw = json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "metadata": {},
                    "outputs": [],
                    "source": s,
                }
                for s in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )
    path = tmp_path / "nb.ipynb"
    path.write_text(raw)
    migration = migrate_path(path)
    assert [i for i, _, _ in migration.cells] == [0, 1, 2]
    assert migration.needed_by(1) == [1]
    assert migration.needed_by(2) == [0, 2]  # `DeviceLoader` is written into cell 1
    write(migration.edit(migration.needed_by(1)))
    written = json.loads(path.read_text())["cells"]
    assert written[1]["source"] != cells[1] and written[2]["source"] == cells[2]
    assert written[0]["source"] == cells[0]
    # Undo restores it; again, it has nothing left to do.
    assert write(migration.edit([1]).undo()) and path.read_text() == raw
    assert not write(migration.edit([1]).undo()) and path.read_text() == raw
    # It refuses once the cell was edited since it was written.
    assert write(migration.edit([1]))
    edited = json.loads(path.read_text())
    edited["cells"][1]["source"] = "# edited by hand\n"
    path.write_text(json.dumps(edited))
    with pytest.raises(
        SourceError, match="cell 2 was edited since the migration was written, so the cells are"
    ):
        write(migration.edit([1]).undo())


SPAWNING_CELLS = [
    "import torch_xla.core.xla_model as xm\nimport torch_xla.distributed.xla_multiprocessing as xmp",
    'def train(index):\n    xm.master_print("training", index)\n\nxmp.spawn(train, nprocs=2)',
    'def evaluate(index):\n    xm.master_print("evaluating", index)\n\nxmp.spawn(evaluate, nprocs=2)',
]


def _spawning_notebook(path: Path) -> Path:
    cells = [
        {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": source}
        for i, source in enumerate(SPAWNING_CELLS)
    ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook, indent=1) + "\n")
    return path


@pytest.mark.parametrize("order", [(1, 2), (2, 1)])
def test_applying_cell_by_cell_keeps_what_later_cells_need_and_adds_helpers_once(tmp_path: Path, order: tuple[int, int]) -> None:
    """The first cell applied must not take away the imports the other still reads (it could no
    longer be migrated), and the second must reuse the helpers the first brought."""
    path = _spawning_notebook(tmp_path / "train.ipynb")
    for index in order:
        migration = migrate_path(path)
        write(migration.edit(migration.needed_by(index)))
        if index == order[0]:
            untouched = json.loads(path.read_text())["cells"][order[1]]["source"]
            assert "xm." in untouched and "import torch_xla.core.xla_model as xm" in json.loads(path.read_text())["cells"][0]["source"]
    migration = migrate_path(path)  # then what is left (the imports cell), as "Next" offers it
    write(migration.edit([index for index, old, new in migration.cells if old != new]))
    sources = ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]]
    text = "\n".join(sources)
    assert "import torch_xla" not in text and "xmp.spawn(" not in text and "TODO" not in text
    assert "_2" not in text  # no second copy of a helper
    assert text.count("def run_on_each_process(") == 1
    assert not sources[0].startswith("\n")
    for source in sources:
        compile(source, "cell", "exec")


# Notebooks whose cells migrate together: a model wrapped in one cell and moved in another, and
# launched in a third (helpers in the imports cell); a model traced and saved in one cell and
# loaded back in another; a function that creates its process group, spawned beside another.
WRAPPED_MODEL_CELLS = [
    "import torch\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.xla_multiprocessing as xmp\n",
    "model = torch.nn.Linear(2, 2)\nwrapped = xmp.MpModelWrapper(model)\n",
    "def train(rank, flags):\n    device = xm.xla_device()\n    replica = wrapped.to(device)\n    xm.mark_step()\n",
    "xmp.spawn(train, args=({},), nprocs=2)\n",
]
TRACED_MODEL_CELLS = [
    "import torch\nimport torch_neuronx\n\nmodel = torch.nn.Linear(4, 4).eval()\nexample = (torch.ones(1, 4),)\n",
    "model_neuron = torch_neuronx.trace(model, example)\nfilename = 'model.pt'\ntorch.jit.save(model_neuron, filename)\n",
    "model_neuron = torch.jit.load(filename)\noutput = model_neuron(*example)\n",
    "print(model(*example))\n",
]
SELF_INITIALIZING_CELLS = [
    "import torch.distributed as dist\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.xla_multiprocessing as xmp\n",
    "def fit(index):\n    device = xm.xla_device()\n    dist.init_process_group('xla', init_method='xla://')\n    print(index, device)\n\nxmp.spawn(fit, args=())\n",
    "def show(index):\n    print(index, xm.xla_device())\n\nxmp.spawn(show, args=())\n",
]
# Each notebook, and the cells whose orders are tried.
ORDERED_NOTEBOOKS = {
    "wrapped": (WRAPPED_MODEL_CELLS, [1, 2, 3]),
    "traced": (TRACED_MODEL_CELLS, [0, 1, 2]),
    "self-initializing": (SELF_INITIALIZING_CELLS, [0, 1, 2]),
}


def _notebook(path: Path, sources: list[str]) -> Path:
    cells = [
        {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": source}
        for i, source in enumerate(sources)
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n")
    return path


def _sources(path: Path) -> list[str]:
    return ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]]


def _applied_whole(path: Path) -> list[str]:
    apply(migrate_path(path))
    return _sources(path)


def _applied_cell_by_cell(path: Path, order: tuple[int, ...]) -> list[str]:
    """Each cell of `order` as the app's Apply writes it (a cell written already is passed over),
    then what is left, as its "Next" offers it."""
    for index in order:
        migration = migrate_path(path)
        if any(i == index and old != new for i, old, new in migration.cells):
            write(migration.edit(migration.needed_by(index)))
    migration = migrate_path(path)
    left = [index for index, old, new in migration.cells if old != new]
    if left:
        write(migration.edit(left))
    return _sources(path)


@pytest.mark.parametrize(
    ("name", "order"),
    [(name, order) for name, (_, moving) in ORDERED_NOTEBOOKS.items() for order in itertools.permutations(moving)],
)
def test_cell_by_cell_in_any_order_gives_the_whole_notebook_migration(tmp_path: Path, name: str, order: tuple[int, ...]) -> None:
    cells = ORDERED_NOTEBOOKS[name][0]
    whole = _applied_whole(_notebook(tmp_path / "whole.ipynb", cells))
    assert _applied_cell_by_cell(_notebook(tmp_path / "cells.ipynb", cells), order) == whole
    assert not migrate_path(tmp_path / "cells.ipynb").changed  # nothing is migrated twice


def test_an_apply_writes_the_cells_whose_migration_reads_it_as_it_was(tmp_path: Path) -> None:
    """The load of a traced model migrates (to weights) because the trace is there to see: the
    trace's cell and the load's cell are written together, whichever is applied."""
    migration = migrate_path(_notebook(tmp_path / "nb.ipynb", TRACED_MODEL_CELLS))
    assert migration.needed_by(1) == migration.needed_by(2) == [0, 1, 2]
    migration = migrate_path(_notebook(tmp_path / "nb.ipynb", WRAPPED_MODEL_CELLS))
    assert 2 in migration.needed_by(1)  # `wrapped.to(device)` reads `wrapped` as `MpModelWrapper` made it


def test_helpers_written_before_their_users_are_reused_and_not_migrated_again(tmp_path: Path) -> None:
    """The imports cell, written with the helpers (`shared_model_copy`, which calls
    `broadcast_master_param`; `run_on_each_process`, which creates the process group) before
    the cells that use them: migrating those cells adds no second copy and leaves the helpers."""
    whole = _applied_whole(_notebook(tmp_path / "whole.ipynb", WRAPPED_MODEL_CELLS))
    old_imports = "".join(line for line in WRAPPED_MODEL_CELLS[0].splitlines(keepends=True) if "torch_xla" in line)
    path = _notebook(tmp_path / "nb.ipynb", [old_imports + "\n" + whole[0], *WRAPPED_MODEL_CELLS[1:]])
    migration = migrate_path(path)
    new = {index: source for index, _, source in migration.cells}
    assert "_2" not in migration.migrated
    assert new[0] == whole[0] and new[2] == whole[2] and new[3] == whole[3]


def test_a_process_group_created_under_its_guard_already_is_not_guarded_again(tmp_path: Path) -> None:
    """A spawned function's `init_process_group`, migrated under `if not dist.is_initialized():`,
    stays as it is while another cell still spawns with torch_xla."""
    whole = _applied_whole(_notebook(tmp_path / "whole.ipynb", SELF_INITIALIZING_CELLS))
    migration = migrate_path(_notebook(tmp_path / "nb.ipynb", [*SELF_INITIALIZING_CELLS[:1], whole[1], SELF_INITIALIZING_CELLS[2]]))
    assert 1 not in {index for index, old, new in migration.cells if old != new}


def test_a_master_print_helper_written_already_serves_the_prints_left(tmp_path: Path) -> None:
    """Two prints make a `master_print` helper; once one of them is applied, the other uses that
    helper, as it does in the whole notebook's migration, not a guard of its own."""
    whole = _applied_whole(_spawning_notebook(tmp_path / "whole.ipynb"))
    path = _notebook(tmp_path / "nb.ipynb", [SPAWNING_CELLS[0] + "\n" + whole[0], whole[1], SPAWNING_CELLS[2]])
    new = {index: source for index, _, source in migrate_path(path).cells}
    assert new[2] == whole[2] and "master_print(" in new[2]
