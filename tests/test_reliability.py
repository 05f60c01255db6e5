"""Nothing lost, nothing broken: generated programs, hostile inputs, killed runs, dying workers."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuron_migrate.cli import main
from neuron_migrate.rewrite import command as rewrite_command
from neuron_migrate.rewrite.engine import Options, rewrite_source

ROOT = Path(__file__).resolve().parents[1]
XLA_HEADER = "import torch_xla.core.xla_model as xm\n"

OLD = "import torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
NEW = 'import torch\n\ndevice = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")\n'

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(hypothesmith.from_grammar())
def test_code_without_the_old_stack_comes_back_identical(source: str) -> None:
    result = rewrite_source(source, "generated.py", Options())
    if result.error is None:
        assert result.migrated == source


@SETTINGS
@given(hypothesmith.from_grammar(), st.sampled_from(["xm.mark_step()\n", "d = xm.xla_device()\n", "xm.all_gather(x)\n"]))
def test_rewritten_code_parses_and_is_stable(source: str, tail: str) -> None:
    if source and not source.endswith("\n"):
        source += "\n"
    program = XLA_HEADER + source + tail
    try:
        ast.parse(program)
    except SyntaxError:
        return
    result = rewrite_source(program, "generated.py", Options())
    if result.error is not None:
        assert ":" in result.error  # a one-line, located message, never an exception
        assert "internal error" not in result.error  # caught, but a crash all the same
        return
    ast.parse(result.migrated)
    again = rewrite_source(result.migrated, "generated.py", Options())
    assert again.migrated == result.migrated


PATTERNS = st.sampled_from(
    ["True", "None", "1 | 2", '"s"', "[a, *rest]", '{"k": v, **rest}', "Point(x=0, y=py)", "int(n) if n > 0", "_"]
)
BODIES = st.sampled_from(
    ["xm.mark_step()", "y = torch.nonzero(x)", "d = xm.xla_device()", "print(x.item())", "pass"]
)


@st.composite
def match_statements(draw: st.DrawFn) -> str:
    """`match` statements, which hypothesmith's grammar does not produce."""
    cases = draw(st.lists(st.tuples(PATTERNS, BODIES), min_size=1, max_size=4))
    body = "".join(f"        case {pattern}:\n            {stmt}\n" for pattern, stmt in cases)
    return f"import torch\n{XLA_HEADER}\ndef f(x, n):\n    match x:\n{body}"


@SETTINGS
@given(match_statements())
def test_match_statements_are_checked_and_rewritten(program: str) -> None:
    from neuron_migrate.checks.checker import CheckOptions, check_source

    report = check_source(program, "generated.py", CheckOptions(fix=True, unsafe_fixes=True))
    assert report.error is None
    result = rewrite_source(program, "generated.py", Options())
    assert result.error is None
    ast.parse(result.migrated)


@pytest.mark.parametrize(
    ("source", "expected_error"),
    [
        ("", None),
        ("# just a comment about torch_xla\n", None),
        ("import torch_xla\n\tx = 1\n", "IndentationError" if sys.version_info < (3, 12) else "unexpected indent"),
        ("import torch_xla\nif True:\n\txm = 1\n        y = 2\n", "inconsistent use of tabs"),
        ("import torch_xla\nx = (\n", "SyntaxError"),
        ("import torch_xla\nexec 'x'\n", "SyntaxError"),
    ],
)
def test_hostile_sources(source: str, expected_error: str | None) -> None:
    result = rewrite_source(source, "hostile.py", Options())
    if expected_error is None:
        assert result.error is None and result.migrated == source
    else:
        assert result.error is not None and result.error.startswith("hostile.py:")
        assert result.migrated == source


NEWER_SYNTAX = [
    ("type Batch = list[int]\n", (3, 12), "`type` statements"),
    ("def first[T](items: list[T]) -> T:\n    return items[0]\n", (3, 12), "type parameter lists"),
    ('name = f"{config["name"]}"\n', (3, 12), "f-strings with their own quotes"),
    ("class Box[T = int]:\n    pass\n", (3, 13), "type parameter defaults"),
    ('message = t"{x}"\n', (3, 14), "template strings"),
]


@pytest.mark.parametrize(("code", "needed", "construct"), NEWER_SYNTAX)
def test_newer_python_syntax_migrates_or_names_the_python_it_needs(code: str, needed: tuple[int, int], construct: str) -> None:
    source = OLD + code
    result = rewrite_source(source, "new.py", Options())
    if sys.version_info >= needed:
        assert result.error is None and result.migrated == NEW + code
        return
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert result.error is not None and result.error.startswith("new.py:6:")
    assert construct in result.error and f"need Python {needed[0]}.{needed[1]}+" in result.error
    assert result.error.endswith(f"neuron-migrate is running on Python {running})") and "\n" not in result.error
    assert result.migrated == source


def test_only_syntax_newer_than_the_running_python_is_named() -> None:
    from neuron_migrate.core.newer_syntax import needed_python

    generic_alias = "type Pair[T] = tuple[T, T]\n"
    assert needed_python(generic_alias, running=(3, 11)) == ((3, 12), "`type` statements")
    assert needed_python(generic_alias, running=(3, 12)) is None
    assert needed_python("f'{x!r:>{width}}' + f'''{'a'}'''\n", running=(3, 11)) is None  # f-strings 3.11 parses
    assert needed_python("try:\n    pass\nexcept A, B:\n    pass\n", running=(3, 13)) == ((3, 14), "`except A, B:` without parentheses")
    assert needed_python("def f(:\n    pass\n", running=(3, 11)) is None  # broken, not new
    broken = rewrite_source(OLD + "def f(:\n    pass\n", "bad.py", Options())
    assert broken.error is not None and broken.error.endswith("SyntaxError: invalid syntax")


def test_tabs_mixed_newlines_and_form_feeds_survive() -> None:
    source = "import torch_xla.core.xla_model as xm\r\n\x0c\ndef f():\n\tx = 1\r\n\txm.mark_step()\n\treturn x\n"
    result = rewrite_source(source, "odd.py", Options())
    assert result.error is None
    assert result.migrated == "\x0c\ndef f():\n\tx = 1\r\n\treturn x\n"


@pytest.mark.slow
def test_a_50000_line_file() -> None:
    body = "".join(f"value_{i} = {i} * 2  # line {i}\n" for i in range(50_000))
    source = OLD + body
    result = rewrite_source(source, "big.py", Options())
    assert result.error is None
    assert result.migrated == NEW + body


def test_killed_run_leaves_each_file_whole(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(600):
        (folder / f"f{i:03d}.py").write_text(OLD)
    proc = subprocess.Popen(
        [sys.executable, "-m", "neuron_migrate", "rewrite", str(folder), "-q", "-j", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    files = sorted(folder.glob("f*.py"))
    while time.time() < deadline and not any(f.read_text() == NEW for f in files[:50]):
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    contents = [f.read_text() for f in files]
    assert all(text in (OLD, NEW) for text in contents)
    assert NEW in contents and OLD in contents, "the run was not interrupted midway"


def test_a_dying_worker_loses_only_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(10):
        (tmp_path / f"f{i}.py").write_text(OLD)
    real = rewrite_command.process

    def crashing(job: rewrite_command.Job) -> object:
        if job.path.name == "f3.py":
            os._exit(1)
        return real(job)

    crashing.__module__, crashing.__qualname__ = "neuron_migrate.rewrite.command", "process"
    monkeypatch.setattr(rewrite_command, "process", crashing)
    assert main(["rewrite", str(tmp_path), "-j", "2", "-q"]) == 2
    assert "f3.py:1:1: internal error: the worker died" in capsys.readouterr().err
    assert (tmp_path / "f3.py").read_text() == OLD
    for i in (0, 1, 2, 4, 5, 6, 7, 8, 9):
        assert (tmp_path / f"f{i}.py").read_text() == NEW


@SETTINGS
@given(hypothesmith.from_grammar())
def test_check_never_crashes(source: str) -> None:
    from neuron_migrate.checks.checker import CheckOptions, check_source

    for program in (source, XLA_HEADER + "import torch\n" + source):
        report = check_source(program, "generated.py", CheckOptions(fix=True, unsafe_fixes=True))
        assert report.error is None or "internal error" not in report.error
        if report.fixed is not None:
            ast.parse(report.fixed)


MAGICS = st.sampled_from(["%matplotlib inline", "!pip list", "%env PJRT_DEVICE=CPU", "%time x = 1", "!ls -la"])


@SETTINGS
@given(st.lists(st.tuples(hypothesmith.from_grammar(), st.lists(MAGICS, max_size=2)), min_size=1, max_size=3))
def test_notebooks_from_generated_cells(cells: list[tuple[str, list[str]]]) -> None:
    import nbformat

    from neuron_migrate.rewrite.notebook import rewrite_notebook

    nb = nbformat.v4.new_notebook()
    for code, magics in cells:
        nb.cells.append(nbformat.v4.new_code_cell("\n".join([*magics, code])))
    raw = nbformat.writes(nb)
    outcome = rewrite_notebook(raw, "generated.ipynb", Options())
    if outcome.result.error is None:
        assert outcome.result.migrated == raw or "PJRT_DEVICE" in raw  # only the XLA %env line may change
        again = rewrite_notebook(outcome.result.migrated, "generated.ipynb", Options())
        assert again.result.migrated == outcome.result.migrated


def test_unreadable_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked.py"
    locked.write_text(OLD)
    (tmp_path / "fine.py").write_text(OLD)
    real_open = open

    def guarded_open(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", guarded_open)
    assert main(["rewrite", str(tmp_path), "-j", "1"]) == 2
    assert f"{locked}: cannot read: Permission denied" in capsys.readouterr().err
    monkeypatch.undo()
    assert (tmp_path / "fine.py").read_text() == NEW


def test_read_only_file_is_replaced_as_a_whole(tmp_path: Path) -> None:
    """A read-only file is migrated by replacing it (as editors do), keeping its mode."""
    path = tmp_path / "ro.py"
    path.write_text(OLD)
    path.chmod(0o444)
    assert main(["rewrite", str(path), "-q"]) == 0
    assert path.read_text() == NEW
    assert oct(path.stat().st_mode & 0o777) == oct(0o444)


def test_empty_file_and_whitespace_only(tmp_path: Path) -> None:
    for name, text in (("empty.py", ""), ("blank.py", "\n\n   \n")):
        (tmp_path / name).write_text(text)
    assert main(["rewrite", str(tmp_path), "-q"]) == 0
    assert (tmp_path / "empty.py").read_text() == ""
    assert (tmp_path / "blank.py").read_text() == "\n\n   \n"


def test_a_todo_quoting_code_that_spans_lines_is_one_comment() -> None:
    source = (
        "import torch\nimport torch_neuronx\n\nmodel = torch.nn.Linear(2, 2)\nWORK = 'w'\n"
        "traced = torch_neuronx.trace(\n    model,\n    torch.ones(1, 2),\n"
        '    compiler_args=[\n        f"--temp-dir={WORK}",\n        "--auto-cast=none",\n    ],\n)\n'
    )
    result = rewrite_source(source, "multi.py", Options())
    assert result.error is None
    todo = next(line for line in result.migrated.splitlines() if "TODO(neuron-migrate NM023)" in line)
    assert "`compiler_args=`" in todo and todo.count("TODO(") == 1
    assert rewrite_source(result.migrated, "multi.py", Options()).migrated == result.migrated


def test_a_guarded_print_carries_the_todos_of_what_it_prints_once() -> None:
    """`xm.master_print(..., local=True)` becomes `if LOCAL_RANK == 0: print(...)`: what is left inside the print
    is marked on the print, where a second run would look, and nothing moves on that run."""
    source = (
        "import os\nimport torch_xla.core.xla_model as xm\n\n"
        "def report(device):\n"
        "    xm.master_print(f\"seed {xm.get_rng_state(device=device)}\", local=True)\n"
        "    xm.master_print(f\"IR debug: {os.getenv('XLA_IR_DEBUG')}\", local=True)\n"
    )
    first = rewrite_source(source, "guarded.py", Options())
    lines = first.migrated.splitlines()
    for needle, code in (("xm.get_rng_state", "NM013"), ("XLA_IR_DEBUG')", "NM009")):
        at = next(i for i, line in enumerate(lines) if needle in line and "TODO" not in line)
        assert lines[at].lstrip().startswith("print(")
        assert f"TODO(neuron-migrate {code})" in lines[at - 1]
        indent = len(lines[at]) - len(lines[at].lstrip())
        header = next(line for line in reversed(lines[:at]) if line.strip() and len(line) - len(line.lstrip()) < indent)
        assert header.lstrip().startswith("if LOCAL_RANK == 0:")
    # The two guards with the same test are one block.
    assert sum(line.lstrip().startswith("if ") for line in lines) == 1
    assert rewrite_source(first.migrated, "guarded.py", Options()).migrated == first.migrated


def test_migrated_code_that_parses_but_does_not_compile_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyword given twice parses (`ast.parse`) but does not compile: the file stays as it was."""
    from neuron_migrate.rewrite import engine

    real = engine._module_level

    def repeated_keyword(*args: object, **kwargs: object) -> tuple[str, object]:
        code, shared = real(*args, **kwargs)  # type: ignore[arg-type]
        return code.replace("device=device)", "device=device, device=device)"), shared

    monkeypatch.setattr(engine, "_module_level", repeated_keyword)
    text = "import torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nx = torch.ones(2, device=device)\n"
    result = engine.rewrite_source(text, "f.py")
    assert result.error is not None and "keyword argument repeated" in result.error
    assert result.migrated == text
    # A notebook's top-level `await` compiles, as the kernel runs it.
    monkeypatch.undo()
    assert engine.rewrite_source(text + "await x\n", "f.py").error is None
