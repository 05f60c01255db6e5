"""The migration report says only what the rewrite did: each statement is checked against the output."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import nbformat

from neuron_migrate.cli import main
from neuron_migrate.core import oldstack
from neuron_migrate.rewrite import report

ROOT = Path(__file__).resolve().parents[1]
TODO = re.compile(r"# TODO\(neuron-migrate (NM\d{3})\): (.*)$", re.MULTILINE)

NATIVE = "import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
LEFTOVER = 'import torch_xla.core.xla_model as xm\n\ndevs = xm.xla_replication_devices(["a"])\n'
PLAIN = "import torch\n\nx = torch.ones(2)\n"
BROKEN = "import torch_xla\ndef f(:\n"


def _imports_old_stack(text: str) -> bool:
    roots = (*oldstack.PACKAGES, oldstack.OPTIMUM_NEURON)
    for node in ast.walk(ast.parse(text)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n == r or n.startswith(r + ".") for n in names for r in roots):
            return True
    return False


def _expected_status(original: str, written: Path | None, error: bool) -> str:
    if error:
        return report.REFUSED
    text = written.read_text() if written else original
    if _imports_old_stack(text):
        return report.START_UP
    if TODO.search(text):
        return report.AFTER_TODOS
    return report.CHECKED if text != original else report.UNTOUCHED


def _run(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    src = tmp_path / "src"
    src.mkdir()
    files = {"native.py": NATIVE, "leftover.py": LEFTOVER, "plain.py": PLAIN, "broken.py": BROKEN}
    for name, text in files.items():
        (src / name).write_text(text)
    shutil.copy(ROOT / "examples" / "xla_bf16_env.py", src / "bf16.py")
    files["bf16.py"] = (src / "bf16.py").read_text()
    out = tmp_path / "out"
    main(["rewrite", str(src), "--output-dir", str(out), "-q", "--report", str(tmp_path / "r.json")])
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out2"), "-q", "--report", str(tmp_path / "r.md")])
    return src, out, files


def test_every_status_matches_the_written_files(tmp_path: Path) -> None:
    _, out, files = _run(tmp_path)
    data = json.loads((tmp_path / "r.json").read_text())
    seen = set()
    for entry in data["files"]:
        name = Path(entry["path"]).name
        written = out / name if (out / name).exists() else None
        expected = _expected_status(files[name], written, entry["error"] is not None)
        assert entry["status"] == expected, name
        seen.add(expected)
    assert {report.REFUSED, report.START_UP, report.CHECKED, report.UNTOUCHED} <= seen
    assert data["summary"]["status"][report.START_UP] == 1


def test_todos_by_kind_count_the_todo_comments_written(tmp_path: Path) -> None:
    _, out, _ = _run(tmp_path)
    written = [m.group(1, 2) for f in sorted(out.glob("*.py")) for m in TODO.finditer(f.read_text())]
    text = (tmp_path / "r.md").read_text()
    rows = re.findall(r"^\| \[(NM\d{3})\]\(docs/rules\.md#nm\d{3}\) \| (.*?) \| (\d+) \|", text, re.MULTILINE)
    assert sum(int(n) for _, _, n in rows) == len(written)
    for code, message, count in rows:
        assert sum(1 for c, m in written if c == code and m.replace("|", "\\|") == message) == int(count)


def test_markdown_sections_follow_the_files(tmp_path: Path) -> None:
    src, _, _ = _run(tmp_path)
    text = (tmp_path / "r.md").read_text()
    assert text.startswith("# Migration report (portable target)")
    table = text.split("## Where each file stands")[1].split("\n## ")[0]
    # Files that still import the old stack come first, and "Do first" names exactly them.
    first_row = next(line for line in table.splitlines() if line.startswith("| `"))
    assert "leftover.py" in first_row and report.START_UP in first_row
    do_first = text.split("## Do first")[1].split("\n## ")[0]
    assert re.findall(r"- `([^`]+)` \(\d+ TODOs\)", do_first) == [str(src / "leftover.py")]
    assert "broken.py:2:7: SyntaxError" in table
    for fact in report.PLATFORM_FACTS:
        assert fact in text


def test_a_removed_import_is_a_change_the_report_counts(tmp_path: Path) -> None:
    """A file whose only edit is an old-stack import going away reports that edit, not "0 changes"."""
    src = tmp_path / "only_import.py"
    src.write_text("import torch\nimport torch_xla  # registers the XLA device\n\nprint(torch.ones(1))\n")
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out"), "-q", "--report", str(tmp_path / "r.json")])
    [entry] = json.loads((tmp_path / "r.json").read_text())["files"]
    assert "import torch_xla" not in (tmp_path / "out" / "only_import.py").read_text()
    assert [c["code"] for c in entry["changes"]] == ["NM012"]
    assert "`torch_xla`" in entry["changes"][0]["message"]


def test_a_script_importing_a_sibling_that_still_imports_the_old_stack_fails_at_start_up(tmp_path: Path) -> None:
    """The report follows the run's own modules: `run.py` starts by importing `helpers.py`, which
    keeps a torch_xla import; an old-stack import inside a function fails only when it is called."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "helpers.py").write_text(LEFTOVER)
    (src / "run.py").write_text("import torch_xla.core.xla_model as xm\nimport helpers\n\nxm.mark_step()\nprint(helpers.devs)\n")
    (src / "lazy.py").write_text(
        "import torch\n\n\ndef on_tpu():\n    import torch_xla.core.xla_model as xm\n\n"
        '    return xm.xla_replication_devices(["a"])\n'
    )
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out"), "-q", "--report", str(tmp_path / "r.json")])
    status = {Path(f["path"]).name: f["status"] for f in json.loads((tmp_path / "r.json").read_text())["files"]}
    assert status["helpers.py"] == report.START_UP
    assert status["run.py"] == report.START_UP
    assert "import torch_xla" in (tmp_path / "out" / "lazy.py").read_text()
    assert status["lazy.py"] == report.AFTER_TODOS
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "md"), "-q", "--report", str(tmp_path / "r.md")])
    assert "imports `helpers`, which still imports the old stack" in (tmp_path / "r.md").read_text()


def test_an_old_stack_import_its_try_falls_back_from_does_not_fail_start_up(tmp_path: Path) -> None:
    """`try: import torch_xla... except ImportError: xm = None` runs natively (the fallback); an
    `except` that catches something else does not save it."""
    src = tmp_path / "src"
    src.mkdir()
    guarded = "try:\n    import torch_xla.core.xla_model as xm\nexcept {caught}:\n    xm = None\n\n\ndef devices():\n    return xm.xla_replication_devices(['a'])\n"
    (src / "guarded.py").write_text(guarded.format(caught="ImportError"))
    (src / "unguarded.py").write_text(guarded.format(caught="AttributeError"))
    (src / "user.py").write_text("import guarded\n\nprint(guarded.devices)\n")
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out"), "-q", "--report", str(tmp_path / "r.json")])
    status = {Path(f["path"]).name: f["status"] for f in json.loads((tmp_path / "r.json").read_text())["files"]}
    assert status["guarded.py"] == report.AFTER_TODOS
    assert status["unguarded.py"] == report.START_UP
    assert "user.py" not in status or status["user.py"] != report.START_UP


def test_the_report_claims_a_warm_up_only_where_one_was_written() -> None:
    from neuron_migrate.rewrite.engine import rewrite_source

    returned = "import torch\nimport torch_neuronx\n\n\ndef compile_for(model, x):\n    return torch_neuronx.trace(model, x)\n"
    kept = "import torch\nimport torch_neuronx\n\nmodel = torch.nn.Linear(4, 2)\ntraced = torch_neuronx.trace(model, torch.ones(1, 4))\n"
    said = [" ".join(change.message for change in rewrite_source(text, "infer.py").changes) for text in (returned, kept)]
    assert "warm-up" not in said[0]  # a TODO asks for it there
    assert "warm-up call" in said[1]


def test_a_notebook_cell_with_shell_lines_is_read_as_the_python_the_kernel_runs(tmp_path: Path) -> None:
    """A program held in a string is not an import of the cell that holds it, shell lines or not."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "!ls\nscript = '''\nfrom neuronx_distributed_inference.models.config import NeuronConfig\n'''\n"
            "open('step.py', 'w').write(script)"
        ),
        nbformat.v4.new_code_cell("%%bash\nimport torch_xla is bash's business"),
        nbformat.v4.new_code_cell("%%time\n!nproc\nimport torch_xla.core.xla_model as xm\nxm.xla_device()"),
    ]
    src = tmp_path / "nb.ipynb"
    nbformat.write(notebook, src)
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out"), "-q", "--report", str(tmp_path / "r.json")])
    [entry] = json.loads((tmp_path / "r.json").read_text())["files"]
    assert entry["status"] == report.AFTER_TODOS  # the string's TODO; the `%%time` cell migrated
    notebook.cells = [notebook.cells[0], nbformat.v4.new_code_cell("%%time\n!nproc\nimport torch_xla\nx = torch_xla.runtime.foo()")]
    nbformat.write(notebook, src)
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out2"), "-q", "--report", str(tmp_path / "r2.json")])
    [entry] = json.loads((tmp_path / "r2.json").read_text())["files"]
    assert entry["status"] == report.START_UP


def test_a_module_importing_a_failing_one_by_package_or_relative_path_fails_at_start_up_too(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "helper.py").write_text(LEFTOVER)
    (src / "pkg" / "model.py").write_text("from .helper import devs\n\nDEVICES = devs\n")
    (src / "pkg" / "train.py").write_text(NATIVE.replace("xm.mark_step()\n", "xm.mark_step()\nfrom pkg.model import DEVICES\n"))
    (src / "run.py").write_text("import torch_xla.core.xla_model as xm\nfrom pkg import train\n\nxm.mark_step()\n")
    main(["rewrite", str(src), "--output-dir", str(tmp_path / "out"), "-q", "--report", str(tmp_path / "r.json")])
    status = {f["path"].split("src/")[1]: f["status"] for f in json.loads((tmp_path / "r.json").read_text())["files"]}
    assert status["pkg/helper.py"] == report.START_UP
    assert status["pkg/model.py"] == report.START_UP  # `from .helper import ...`
    assert status["pkg/train.py"] == report.START_UP  # `from pkg.model import ...`, one step further
    assert status["run.py"] == report.START_UP  # `from pkg import train`
