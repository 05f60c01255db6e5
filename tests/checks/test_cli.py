"""Every `check` flag, the exit codes, and each error message."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from neuron_migrate.checks import command
from neuron_migrate.cli import main
from neuron_migrate.core.jobs import SERIAL_BELOW

BAD = "import torch\n\ndef forward(x):\n    x[x < 0] = 0\n    return torch.nonzero(x)\n"
FIXED = (
    "import torch\n\ndef forward(x):\n    x.masked_fill_(x < 0, 0)\n    return torch.nonzero(x)\n"
)
INFO_ONLY = "import torch\n\ndef collate_fn(b):\n    return torch.nonzero(b)\n"
UNSAFE = "def forward(x, mask):\n    x[mask] = 0\n    return x\n"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "good.py").write_text(
        "import torch\n\ndef forward(x):\n    return torch.where(x > 0, x, 0)\n"
    )
    return tmp_path


def test_exit_codes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "good.py"]) == 0
    assert "All checks passed (1 file checked)." in capsys.readouterr().err
    assert main(["check", "bad.py"]) == 1
    assert main(["check", "bad.py", "--exit-zero"]) == 0
    (tree / "broken.py").write_text("import torch\n\ndef f(:\n    return x[0]\n")
    assert main(["check", "broken.py", "bad.py"]) == 2
    out, err = capsys.readouterr()
    assert "broken.py:3:7: SyntaxError" in err and "bad.py:4:5: NM103" in out
    assert main(["check", "broken.py", "--exit-zero"]) == 2


def test_default_path_is_the_current_folder(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "bad.py:4:5: NM103" in out and "good.py" not in out


def test_fix_writes_safe_fixes_and_reports_the_rest(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "bad.py", "--fix"]) == 1  # the nonzero finding has no fix
    assert (tree / "bad.py").read_text() == FIXED
    out, err = capsys.readouterr()
    assert "NM101" in out and "NM103" not in out
    assert "Found 2 findings in 1 file (1 checked; 1 fixed, 1 remaining)." in err
    assert main(["check", "bad.py", "--fix", "--select", "NM103"]) == 0


def test_unsafe_fixes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "unsafe.py").write_text(UNSAFE)
    assert main(["check", "unsafe.py", "--fix"]) == 1
    assert (tree / "unsafe.py").read_text() == UNSAFE
    assert (
        "1 more fixable with `--fix --unsafe-fixes`." not in capsys.readouterr().err
    )  # not while fixing
    assert main(["check", "unsafe.py"]) == 1
    assert "1 more fixable with `--fix --unsafe-fixes`." in capsys.readouterr().err
    assert main(["check", "unsafe.py", "--fix", "--unsafe-fixes"]) == 0
    assert (
        tree / "unsafe.py"
    ).read_text() == "def forward(x, mask):\n    x.masked_fill_(mask, 0)\n    return x\n"


def test_diff_changes_nothing(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--diff"]) == 1
    out, err = capsys.readouterr()
    assert (tree / "bad.py").read_text() == BAD
    assert out.startswith("--- a/bad.py\n+++ b/bad.py\n")
    assert "-    x[x < 0] = 0\n+    x.masked_fill_(x < 0, 0)\n" in out
    assert "Would fix 1 finding in 1 file (1 checked)." in err
    assert main(["check", "good.py", "--diff"]) == 0
    assert capsys.readouterr().out == ""


def test_select_and_ignore(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--select", "NM101"]) == 1
    assert "NM103" not in capsys.readouterr().out
    assert main(["check", "bad.py", "--ignore", "NM1"]) == 0
    assert main(["check", "bad.py", "--select", "nm10", "--ignore", "NM101,NM103"]) == 0


def test_unknown_code_is_a_usage_error(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--select", "NM999"]) == 2
    assert "unknown rule code 'NM999' (see `neuron-migrate rules`)" in capsys.readouterr().err


def test_missing_path(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "nothere.py", "bad.py"]) == 2
    assert "neuron-migrate: nothere.py: no such file or directory" in capsys.readouterr().err


def test_min_severity(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "prep.py").write_text(INFO_ONLY)
    assert main(["check", "prep.py"]) == 0
    assert main(["check", "prep.py", "--min-severity", "info"]) == 1
    assert "(in data preparation (`collate_fn`), which runs on the host)" in capsys.readouterr().out
    assert main(["check", "bad.py", "--min-severity", "error"]) == 1
    out = capsys.readouterr().out
    assert "NM103" in out and "NM101" not in out


def test_target(tree: Path) -> None:
    (tree / "cuda.py").write_text("x = x.cuda()\n")
    assert main(["check", "cuda.py", "--fix"]) == 1
    assert (tree / "cuda.py").read_text() == "x = x.cuda()\n"
    assert main(["check", "cuda.py", "--fix", "--target", "neuron"]) == 0
    assert (tree / "cuda.py").read_text() == 'x = x.to("neuron")\n'


def test_config_isolated_and_force_exclude(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "pyproject.toml").write_text(
        '[tool.neuron-migrate]\nignore = ["NM103"]\nexclude = ["bad.py"]\n'
    )
    assert main(["check", "."]) == 0  # the folder walk honours `exclude`
    assert main(["check", "bad.py"]) == 1  # a file named explicitly is checked...
    assert "NM103" not in capsys.readouterr().out  # ...with the configuration's ignore
    assert main(["check", "bad.py", "--force-exclude"]) == 0
    assert main(["check", "bad.py", "--isolated"]) == 1
    assert "NM103" in capsys.readouterr().out
    other = tree / "other.toml"
    other.write_text('[tool.neuron-migrate]\nselect = ["NM101"]\n')
    assert main(["check", "bad.py", "--config", str(other)]) == 1
    out = capsys.readouterr().out
    assert "NM101" in out and "NM103" not in out


def test_bad_config_is_an_error(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "pyproject.toml").write_text('[tool.neuron-migrate]\nselct = ["NM1"]\n')
    assert main(["check", "bad.py"]) == 2
    assert "pyproject.toml: [tool.neuron-migrate]: unknown key 'selct'" in capsys.readouterr().err
    (tree / "pyproject.toml").write_text('[tool.neuron-migrate]\nselect = ["NM998"]\n')
    assert main(["check", "bad.py"]) == 2
    assert "unknown rule code 'NM998'" in capsys.readouterr().err


def test_stdin(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BAD.encode())))
    assert main(["check", "-", "--stdin-filename", "model.py"]) == 1
    assert capsys.readouterr().out.startswith("model.py:4:5: NM103")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BAD.encode())))
    assert main(["check", "-", "--fix"]) == 1
    out, err = capsys.readouterr()
    assert out == FIXED and "-:5:12: NM101" in err
    assert main(["check", "-", "bad.py"]) == 2
    assert "'-' (stdin) cannot be combined with other paths" in capsys.readouterr().err


def test_a_notebook_on_stdin_is_checked_as_a_notebook(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": BAD}
    raw = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
    for name in ([], ["--stdin-filename", "model.ipynb"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw.encode())))
        assert main(["check", "-", *name]) == 1
        assert capsys.readouterr().out.startswith(f"{name[-1] if name else '-'}:cell 1:4:5: NM103")


def test_a_dying_worker_loses_only_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(SERIAL_BELOW + 4):
        (tmp_path / f"f{i}.py").write_text(BAD)
    real = command.process

    def crashing(job: command.Job) -> object:
        if job.path.name == "f3.py":
            os._exit(1)
        return real(job)

    crashing.__module__, crashing.__qualname__ = "neuron_migrate.checks.command", "process"
    monkeypatch.setattr(command, "process", crashing)
    assert main(["check", str(tmp_path), "-j", "2", "-q"]) == 2
    out, err = capsys.readouterr()
    assert "f3.py:1:1: internal error: the worker died" in err
    assert {Path(line.split(":")[0]).name for line in out.splitlines()} == {
        f"f{i}.py" for i in range(SERIAL_BELOW + 4) if i != 3
    }


def test_jobs_and_quiet(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(SERIAL_BELOW + 12):
        (tree / f"m{i}.py").write_text(BAD)
    assert main(["check", ".", "-j", "2", "-q"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert len(out.splitlines()) == 2 * (SERIAL_BELOW + 13)
    assert out.splitlines() == sorted(
        out.splitlines(), key=lambda line: (line.split(":")[0], int(line.split(":")[1]))
    )


def test_fix_never_touches_a_file_changed_meanwhile(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    original = command.check_source

    def racing(text: str, path: str, options: command.CheckOptions):
        Path(path).write_text(text + "# edited\n")
        return original(text, path, options)

    monkeypatch.setattr(command, "check_source", racing)
    assert main(["check", "bad.py", "--fix"]) == 2
    assert "changed on disk" in capsys.readouterr().err
    assert (tree / "bad.py").read_text().endswith("# edited\n")


def test_unreadable_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "latin.py").write_bytes(b"x = '\xff'\n")
    assert main(["check", "latin.py"]) == 2
    assert "latin.py:1:1: invalid or missing encoding declaration" in capsys.readouterr().err


def test_show_fixes_lists_what_was_fixed(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--fix", "--show-fixes"]) == 1
    err = capsys.readouterr().err
    assert "Fixed 1 finding:\n- bad.py:\n    1 × NM103 (boolean-mask-write)\n" in err


def test_add_noqa_silences_every_finding_once(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "more.py").write_text(
        "import torch\n\ndef forward(x):\n    doc = '''\n    text\n    ''' + str(x.sum().item())  # noqa: E501\n"
        "    return torch.nonzero(x)  # keep\n"
    )
    assert main(["check", "bad.py", "more.py", "--add-noqa"]) == 0
    assert "Added 4 noqa directives" in capsys.readouterr().err
    assert (tree / "bad.py").read_text().splitlines()[3] == "    x[x < 0] = 0  # noqa: NM103"
    more = (tree / "more.py").read_text().splitlines()
    assert more[3] == "    doc = '''"  # inside the string nothing is added
    assert more[5] == "    ''' + str(x.sum().item())  # noqa: E501, NM110"
    assert more[6] == "    return torch.nonzero(x)  # keep  # noqa: NM101"
    assert main(["check", "bad.py", "more.py"]) == 0
    assert main(["check", "bad.py", "--add-noqa"]) == 0  # nothing more to add
    assert "Added 0 noqa directives" in capsys.readouterr().err


def test_add_noqa_refuses_fix(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--add-noqa", "--fix"]) == 2
    assert "--add-noqa cannot be combined" in capsys.readouterr().err


def test_extend_select_adds_to_the_selection(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "bad.py", "--select", "NM101", "--output-format", "json"]) == 1
    assert {r["code"] for r in __import__("json").loads(capsys.readouterr().out)} == {"NM101"}
    assert main(["check", "bad.py", "--select", "NM101", "--extend-select", "NM103", "--output-format", "json"]) == 1
    assert {r["code"] for r in __import__("json").loads(capsys.readouterr().out)} == {"NM101", "NM103"}
