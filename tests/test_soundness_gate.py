"""The soundness gate's comparison logic on small hand-written pairs, and the gate on the corpus."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("pyflakes")

import soundness_gate as gate  # noqa: E402

ORIGINAL = """\
import torch
import torch_xla.core.xla_model as xm


def rank():
    return xm.get_ordinal()


device = xm.xla_device()
x = torch.ones(2, device=device)
"""

# `dist` is used but never imported: an error the rewrite introduced.
BROKEN = """\
import torch


def rank():
    return dist.get_rank()


device = torch.accelerator.current_accelerator()
x = torch.ones(2, device=device)
"""

# Same program, other spellings and lines: nothing gained.
RENAMED = """\
import torch
import torch.distributed as dist


def rank():
    return dist.get_rank()


device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
x = torch.ones(2, device=device)
"""


def notebook(*cells: str) -> str:
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [
                {"cell_type": "code", "metadata": {}, "outputs": [], "source": cell}
                for cell in cells
            ],
        }
    )


def test_undefined_name_is_gained() -> None:
    before, after = gate.pyflakes_errors(ORIGINAL), gate.pyflakes_errors(BROKEN)
    assert gate.gained(before, after) == Counter({("UndefinedName", "dist"): 1})


def test_renamed_but_equivalent_gains_nothing() -> None:
    assert not gate.gained(gate.pyflakes_errors(ORIGINAL), gate.pyflakes_errors(RENAMED))


def test_errors_the_original_had_are_not_gained() -> None:
    original = "def f():\n    return undefined_thing\n"
    migrated = "import os\n\n\ndef f():\n    return undefined_thing\n"
    assert not gate.gained(gate.pyflakes_errors(original), gate.pyflakes_errors(migrated))


def test_more_occurrences_are_gained() -> None:
    before = gate.pyflakes_errors("print(a)\n")
    after = gate.pyflakes_errors("print(a)\nprint(a)\n")
    assert gate.gained(before, after) == Counter({("UndefinedName", "a"): 1})


def test_unused_imports_do_not_count() -> None:
    assert not gate.pyflakes_errors("import os\nimport sys\n")


def test_use_before_assignment_and_redefinition_count() -> None:
    local = gate.pyflakes_errors("x = 1\n\n\ndef f():\n    print(x)\n    x = 2\n")
    assert ("UndefinedLocal", "x") in local
    redefined = gate.pyflakes_errors("import os\nimport os\n")
    assert ("RedefinedWhileUnused", "os") in redefined


def test_output_that_does_not_parse_is_gained() -> None:
    assert gate.gained(gate.pyflakes_errors("x = 1\n"), gate.pyflakes_errors("x = (\n"))


def test_magics_and_shell_lines_are_no_false_positive() -> None:
    raw = notebook(
        "!pip install x\n%matplotlib inline\nimport os",
        "files = !ls\nos.path?",
        "%%bash\nls -l\n",
        "%%time\nprint(os.sep, files)",
        "display(os.getcwd())",
    )
    assert not gate.file_findings("nb.ipynb", raw)
    python = gate.notebook_python(raw)
    assert "get_ipython()" in python and "ls -l" not in python


def test_notebook_cell_the_rewrite_broke_is_gained() -> None:
    before = gate.file_findings("nb.ipynb", notebook("import os", "print(os.sep)"))
    after = gate.file_findings("nb.ipynb", notebook("import os", "print(os.sep"))
    found = gate.gained(Counter(f.key for f in before), Counter(f.key for f in after))
    assert found == Counter({("SyntaxError", "cell"): 1})


def test_writefile_scripts_are_checked_on_their_own() -> None:
    raw = notebook("import os", "%%writefile train.py\nprint(os.sep)\n")
    [finding] = gate.file_findings("nb.ipynb", raw)
    assert finding.key == ("UndefinedName", "os") and "train.py" in finding.where


def test_old_stack_in_comments_and_strings_is_not_code() -> None:
    assert not gate.mentions_old_stack('# import torch_xla\nx = "torch_neuronx"\n')
    assert gate.mentions_old_stack("from optimum.neuron import NeuronTrainer\n")
    assert gate.mentions_old_stack("import neuronx_distributed as nxd\n")


def test_valid_input() -> None:
    assert gate.is_valid_input("a.py", ORIGINAL)
    assert not gate.is_valid_input("a.py", "def f(:\n")
    assert gate.is_valid_input("a.ipynb", notebook("x = (", "!ls"))
    assert not gate.is_valid_input("a.ipynb", "{}")


def test_untouched_lines() -> None:
    original = (
        "import torch_xla.runtime as xr\n\nrank = xr.global_ordinal()\n\nsize = 4\n\nprint(rank)\n"
    )
    edited_near_old_stack = original.replace("xr.global_ordinal()", "dist.get_rank()")
    assert not gate.untouched_violations(original, edited_near_old_stack)
    assert gate.untouched_violations(original, original.replace("size = 4", "size = 5")) == [
        "size = 4"
    ]


def test_output_lines_are_sorted_per_file() -> None:
    names = frozenset({"a.py", "b.ipynb", "c.py"})
    stderr = "\n".join(
        [
            "Migrated corpus/a.py (2 changes)",
            "corpus/a.py:3:1: NM023 something to do by hand",
            "corpus/b.ipynb:cell 2:1:1: SyntaxError: invalid syntax",
            "note: corpus/a.py: NM005 launch with torchrun",
            "corpus/c.py:1:1: internal error: the migrated code did not parse ('x = [",
            "    1,",
            "]')",
            "Migrated 1 of 3 files (2 changes); 1 error.",
        ]
    )
    log = gate.parse_output(
        "--- a/corpus/a.py\n+++ b/corpus/a.py\n-x\n+y\n", stderr, names, "corpus"
    )
    assert log.manual == Counter({"a.py": 2})
    assert log.errors["b.ipynb"] == ["cell 2:1:1: SyntaxError: invalid syntax"]
    assert "internal error" in log.errors["c.py"][0] and "1," in log.errors["c.py"][0]
    assert log.diffs["a.py"][-2:] == ["-x", "+y"]


# --- the type checker (pyrefly) on small pairs, one run each ------------------------------------

PYREFLY = gate.type_checker_command()
needs_pyrefly = pytest.mark.skipif(PYREFLY is None, reason="pyrefly is not installed")


def type_gained(original: str, migrated: str) -> list[gate.TypeFinding]:
    assert PYREFLY is not None
    return gate.type_check_pairs({"a.py": (original, migrated)}, PYREFLY, jobs=1)["a.py"]


@needs_pyrefly
def test_added_call_with_a_keyword_the_callee_does_not_take_is_gained() -> None:
    original = (
        "import torch\nimport torch_xla.core.xla_model as xm\n\nlayer = torch.nn.Linear(4, 4)\n"
    )
    migrated = "import torch\n\nlayer = torch.nn.Linear(4, 4, bogus=1)\n"
    [finding] = type_gained(original, migrated)
    assert finding.name == "unexpected-keyword" and "bogus" in finding.description
    assert finding.line == 3


@needs_pyrefly
def test_an_error_on_an_unchanged_line_is_not_gained() -> None:
    original = "import torch\nimport torch_xla\n\nlayer = torch.nn.Linear(4, 4, bogus=1)\nn = 1\n"
    migrated = "import torch\n\nlayer = torch.nn.Linear(4, 4, bogus=1)\nn = 2\n"
    assert not type_gained(original, migrated)


@needs_pyrefly
def test_an_error_the_original_had_that_moved_is_not_gained() -> None:
    original = "import torch\nimport torch_xla\n\nn = 1\nlayer = torch.nn.Linear(4, 4, bogus=1)\n"
    migrated = "import torch\n\nlayer = torch.nn.Linear(4, 4, bogus=1)\nn = 1\n"
    assert 3 in gate.changed_lines(original, migrated)  # on a changed line, yet matched
    assert not type_gained(original, migrated)


@needs_pyrefly
def test_missing_import_counts_only_for_an_installed_package() -> None:
    original = "import torch\n"
    migrated = (
        original + "import my_sibling_module\nfrom . import helpers\nimport torch.no_such_module\n"
    )
    [finding] = type_gained(original, migrated)
    assert finding.key == ("missing-import", "Cannot find module `torch.no_such_module`")


@needs_pyrefly
def test_notebook_errors_are_located_in_their_cell_and_magics_are_no_error() -> None:
    assert PYREFLY is not None
    original = notebook("import torch", "x = torch.ones(2)\ndisplay(x)")
    migrated = notebook(
        "!pip install torch\nimport torch", "x = torch.nn.Linear(4, 4, bogus=1)\ndisplay(x)"
    )
    gains = gate.type_gains(
        {"nb.ipynb": original.encode()}, {"nb.ipynb": migrated.encode()}, PYREFLY
    )
    [line] = gains["nb.ipynb"]
    assert line.startswith("unexpected-keyword at cell 2:1: ")


def test_report_says_when_types_were_not_measured() -> None:
    counts = {c: 0 for c in gate.GATING + gate.INFORMATIONAL} | {"gained_type": None}
    runs = {"portable": {"rewrite_s": 1.0, "second_run_s": 1.0}}
    report = gate.Report("corpus", 1, 2.0, {"portable": counts}, runs, [])
    assert "gained_type     not measured (pyrefly is not installed)" in gate.format_report(report)


def test_positions_are_not_part_of_the_key() -> None:
    assert gate.strip_positions("`x` is defined at line 12, column 3") == "`x` is defined at ,"
    assert gate.strip_positions("see /tmp/t/a.py:3:4 here", "/tmp/t") == "see <file> here"


def test_changed_lines_are_the_replaced_and_inserted_ones() -> None:
    assert gate.changed_lines("a\nb\nc\n", "a\nB\nc\nd\n") == {2, 4}


def test_missing_corpus_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gate.main([str(tmp_path / "nowhere")]) == 0
    assert "extract.py" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("NEURON_MIGRATE_SOUNDNESS") != "1",
    reason="runs rewrite over the whole corpus (minutes); set NEURON_MIGRATE_SOUNDNESS=1",
)
def test_corpus_is_migrated_soundly(tmp_path: Path) -> None:
    corpus = gate.corpus_path(None)
    if not corpus.is_dir():
        pytest.skip(f"no corpus at {corpus}: {gate.EXTRACT_HINT}")
    report = gate.run_gate(corpus)
    failing = {
        t: {c: n for c, n in counts.items() if c in gate.GATING and n}
        for t, counts in report.counts.items()
    }
    assert not any(failing.values()), gate.format_report(report)


def test_the_checkers_blind_spots_on_native_code_do_not_count() -> None:
    wrapped_to = "Argument `device` is not assignable to parameter `self` with type `BertModel` in function `functools._Wrapped.__call__`"
    compiled = "Object of class `FunctionType` has no attribute `_orig_mod`"
    assert gate.checker_blind_spot({"name": "bad-argument-type", "concise_description": wrapped_to})
    assert gate.checker_blind_spot({"name": "missing-attribute", "concise_description": compiled})
    assert not gate.checker_blind_spot({"name": "missing-attribute", "concise_description": "Object of class `BertModel` has no attribute `to_neuron`"})
