"""`neuron-migrate rewrite`: every flag, every exit code, every error message, and nothing lost."""

from __future__ import annotations

import codecs
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_migrate import cli
from neuron_migrate.cli import main
from neuron_migrate.rewrite import engine

ROOT = Path(__file__).resolve().parents[1]

OLD = """\
import torch
import torch_xla.core.xla_model as xm

# pick the device
device = xm.xla_device()
x = torch.ones(2, device=device)
xm.mark_step()
"""

NEW = """\
import torch

# pick the device
device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
x = torch.ones(2, device=device)
"""

MANUAL = """\
import torch_xla.core.xla_model as xm

gathered = xm.all_gather(x)
"""

PLAIN = "import torch\n\nprint(torch.ones(2))\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(OLD)
    (tmp_path / "plain.py").write_text(PLAIN)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "loop.py").write_text(OLD)
    return tmp_path


def test_rewrite_in_place(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", str(tree)]) == 0
    assert (tree / "train.py").read_text() == NEW
    assert (tree / "pkg" / "loop.py").read_text() == NEW
    assert (tree / "plain.py").read_text() == PLAIN
    err = capsys.readouterr().err
    assert "Migrated 2 of 3 files" in err


def test_second_run_changes_nothing(tree: Path) -> None:
    main(["rewrite", str(tree), "-q"])
    assert main(["rewrite", str(tree), "--check"]) == 0
    assert (tree / "train.py").read_text() == NEW


def test_diff_changes_nothing_and_exits_1(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", str(tree / "train.py"), "--diff"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"--- a/{tree / 'train.py'}")
    assert "-device = xm.xla_device()" in out and "-xm.mark_step()" in out
    assert (tree / "train.py").read_text() == OLD


def test_diff_of_clean_file_exits_0(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", str(tree / "plain.py"), "--diff"]) == 0
    assert capsys.readouterr().out == ""


def test_check_lists_pending_files(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", str(tree), "--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == sorted([f"Would migrate {tree / 'pkg' / 'loop.py'}", f"Would migrate {tree / 'train.py'}"])
    assert (tree / "train.py").read_text() == OLD


def test_output_dir_keeps_the_tree(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("out")
    assert main(["rewrite", str(tree), "--output-dir", str(out), "-q"]) == 0
    assert (out / "train.py").read_text() == NEW
    assert (out / "pkg" / "loop.py").read_text() == NEW
    assert (out / "plain.py").read_text() == PLAIN
    assert (tree / "train.py").read_text() == OLD


def test_output_dir_for_a_single_file(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("out")
    assert main(["rewrite", str(tree / "pkg" / "loop.py"), "--output-dir", str(out), "-q"]) == 0
    assert (out / "loop.py").read_text() == NEW


def test_output_dir_refuses_inputs_of_the_same_name(
    tree: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / "pkg" / "train.py").write_text(OLD)
    out = tmp_path_factory.mktemp("out")
    args = ["rewrite", str(tree / "train.py"), str(tree / "pkg" / "train.py"), "--output-dir", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{tree / 'train.py'} and {tree / 'pkg' / 'train.py'} would both be written to {out / 'train.py'}" in err
    assert list(out.iterdir()) == []
    assert main(["rewrite", str(tree), "--output-dir", str(out), "-q"]) == 0  # one root: no clash
    assert (out / "pkg" / "train.py").read_text() == NEW


def test_output_dir_refuses_to_write_over_its_inputs(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree.parent / f"{tree.name}-link").symlink_to(tree)
    monkeypatch.chdir(tree)
    same_folder = [
        [".", "--output-dir", "."],
        [str(tree), "--output-dir", str(tree / "pkg" / "..")],
        ["train.py", "--output-dir", f"../{tree.name}-link"],
        ["train.py", "pkg/loop.py", "--output-dir", "pkg"],  # loop.py is in pkg already
    ]
    for args in same_folder:
        assert main(["rewrite", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "leave out --output-dir to migrate in place" in err, err
    assert (tree / "train.py").read_text() == OLD and (tree / "pkg" / "loop.py").read_text() == OLD
    assert main(["rewrite", "train.py", "--output-dir", "pkg", "-q"]) == 0  # beside the inputs, over none
    assert (tree / "pkg" / "train.py").read_text() == NEW


def test_stdin_to_stdout() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_migrate", "rewrite", "-"],
        input=OLD.encode(),
        capture_output=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == NEW


def test_stdin_with_manual_items_exits_1() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "neuron_migrate", "rewrite", "-"], input=MANUAL.encode(), capture_output=True, cwd=ROOT
    )
    assert proc.returncode == 1
    assert b"TODO(neuron-migrate NM006)" in proc.stdout
    assert b"<stdin>:3:1: NM006" in proc.stderr


def test_stdin_cannot_mix_with_paths(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", "-", str(tree)]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_target_neuron(tree: Path) -> None:
    main(["rewrite", str(tree / "train.py"), "--target", "neuron", "-q"])
    assert 'device = torch.device("neuron")' in (tree / "train.py").read_text()


def test_select_and_ignore(tree: Path) -> None:
    main(["rewrite", str(tree / "train.py"), "--select", "NM002", "-q"])
    text = (tree / "train.py").read_text()
    assert "xm.mark_step()" not in text and "xm.xla_device()" in text
    (tree / "train.py").write_text(OLD)
    main(["rewrite", str(tree / "train.py"), "--ignore", "NM002", "-q"])
    text = (tree / "train.py").read_text()
    assert "xm.mark_step()" in text and "xm.xla_device()" not in text


def test_select_all(tree: Path) -> None:
    assert main(["rewrite", str(tree / "train.py"), "--select", "ALL", "--ignore", "NM002", "-q"]) == 0
    text = (tree / "train.py").read_text()
    assert "xm.mark_step()" in text and "xm.xla_device()" not in text


def test_pyproject_select_all_is_every_rule(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "pyproject.toml").write_text('[tool.neuron-migrate]\nselect = ["ALL"]\n')
    assert main(["rewrite", str(tree / "train.py"), "--check"]) == 1
    assert "Would migrate 1 of 1 file" in capsys.readouterr().err
    assert main(["rewrite", str(tree / "train.py"), "-q"]) == 0
    assert (tree / "train.py").read_text() == NEW


def test_unknown_code_is_a_usage_error(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", str(tree), "--select", "XX9"]) == 2
    assert "unknown rule code 'XX9'" in capsys.readouterr().err


def test_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rewrite", str(tmp_path / "nope.py")]) == 2
    assert "nope.py: no such file or directory" in capsys.readouterr().err


def test_manual_items_are_reported_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gather.py"
    path.write_text(MANUAL)
    assert main(["rewrite", str(path)]) == 1
    text = path.read_text()
    assert text.count("# TODO(neuron-migrate NM006)") == 1
    err = capsys.readouterr().err
    assert f"{path}:3:1: NM006 " in err
    # A second run adds nothing, and the item is still reported.
    assert main(["rewrite", str(path)]) == 1
    assert path.read_text() == text


def test_syntax_error_is_reported_and_others_proceed(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tree / "bad.py"
    bad.write_text("import torch_xla\ndef f(:\n    pass\n")
    assert main(["rewrite", str(tree)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:7: SyntaxError: " in err
    assert bad.read_text() == "import torch_xla\ndef f(:\n    pass\n"
    assert (tree / "train.py").read_text() == NEW


def test_python2_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "old.py"
    path.write_text("import torch_xla\nprint 'hello'\n")
    assert main(["rewrite", str(path)]) == 2
    assert "Python 2 code is not supported" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".md", ".json"])
def test_report(tree: Path, tmp_path_factory: pytest.TempPathFactory, suffix: str) -> None:
    (tree / "gather.py").write_text(MANUAL)
    report = tmp_path_factory.mktemp("r") / f"report{suffix}"
    assert main(["rewrite", str(tree), "--report", str(report), "-q"]) == 1
    text = report.read_text()
    if suffix == ".json":
        data = json.loads(text)
        assert data["summary"] == {
            "files": 4,
            "changed": 3,
            "changes": 6,  # two of them the old-stack imports that went
            "manual": 1,
            "errors": 0,
            "status": {
                "fails at start-up: still imports the old stack": 1,
                "nothing to migrate": 1,
                "migrated; imports and calls match the target libraries": 2,
            },
        }
        item = next(f for f in data["files"] if f["path"].endswith("gather.py"))["manual"][0]
        assert item["code"] == "NM006" and item["location"] == {"row": 3, "column": 1}
    else:
        assert text.startswith("# Migration report (portable target)")
        assert "## TODOs by kind" in text and "| [NM006](docs/rules.md#nm006) |" in text


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["rewrite", "--help"])
    out = capsys.readouterr().out
    for flag in ("--diff", "--check", "--output-dir", "--target", "--target-python", "--select", "--ignore", "--report", "--jobs", "--quiet"):
        assert flag in out


def test_rules_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    table = capsys.readouterr().out
    assert "NM003" in table and "xla-optimizer-step" in table
    assert main(["rules", "NM003"]) == 0
    doc = capsys.readouterr().out
    assert "## What it does" in doc and "## Fix safety" in doc
    assert main(["rules", "NM999"]) == 2


@pytest.mark.parametrize("args", [["rules"], ["rules", "NM003"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "neuron_migrate", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read()
    assert proc.wait() == cli.EXIT_BROKEN_PIPE
    assert err == b""


def test_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "neuron_migrate", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.startswith("neuron-migrate ")


def test_jobs_give_the_same_result(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"m{i:02d}.py").write_text(OLD if i % 3 else MANUAL)
    one = tmp_path / "one.json"
    many = tmp_path / "many.json"
    main(["rewrite", str(tmp_path), "--diff", "--report", str(one), "-j", "1"])
    main(["rewrite", str(tmp_path), "--diff", "--report", str(many), "-j", "2"])
    assert one.read_text() == many.read_text()


# -- files: discovery and faithful writing ------------------------------------------------------


def test_gitignore_and_default_excludes(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("generated/\nskip_me.py\n")
    for rel in ("generated/a.py", "skip_me.py", ".venv/lib.py", "build/b.py", "keep.py", "sub/keep2.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(OLD)
    assert main(["rewrite", str(tmp_path), "-q"]) == 0
    assert (tmp_path / "keep.py").read_text() == NEW
    assert (tmp_path / "sub" / "keep2.py").read_text() == NEW
    for rel in ("generated/a.py", "skip_me.py", ".venv/lib.py", "build/b.py"):
        assert (tmp_path / rel).read_text() == OLD, rel


def test_gitignore_above_the_named_folder(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("*_gen.py\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x_gen.py").write_text(OLD)
    main(["rewrite", str(tmp_path / "src"), "-q"])
    assert (tmp_path / "src" / "x_gen.py").read_text() == OLD


def test_an_explicit_file_is_always_taken(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    path = tmp_path / "build" / "x.py"
    path.write_text(OLD)
    main(["rewrite", str(path), "-q"])
    assert path.read_text() == NEW


def test_crlf_bom_and_mode_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "win.py"
    path.write_bytes(codecs.BOM_UTF8 + OLD.replace("\n", "\r\n").encode())
    path.chmod(0o750)
    main(["rewrite", str(path), "-q"])
    data = path.read_bytes()
    assert data == codecs.BOM_UTF8 + NEW.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o750


def test_old_mac_line_endings_are_migrated_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, manual = tmp_path / "mac.py", tmp_path / "mac_manual.py"
    path.write_bytes(OLD.replace("\n", "\r").encode())
    manual.write_bytes(MANUAL.replace("\n", "\r").encode())
    assert main(["rewrite", str(path), str(manual), "-q"]) == 1
    assert path.read_bytes() == NEW.replace("\n", "\r").encode()
    migrated = manual.read_bytes()
    assert b"\n" not in migrated and b"# TODO(neuron-migrate NM006)" in migrated
    assert f"{manual}:3:1: NM006" in capsys.readouterr().err


def test_latin1_with_coding_cookie(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    source = "# -*- coding: latin-1 -*-\n# auteur: Fran\xe7ois\n" + OLD
    path.write_bytes(source.encode("latin-1"))
    main(["rewrite", str(path), "-q"])
    assert path.read_bytes() == ("# -*- coding: latin-1 -*-\n# auteur: Fran\xe7ois\n" + NEW).encode("latin-1")


def test_undecodable_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.py"
    path.write_bytes(b"import torch_xla\nx = '\xff\xfe'\n")
    assert main(["rewrite", str(path)]) == 2
    assert f"{path}:2:1: cannot decode as utf-8" in capsys.readouterr().err
    assert path.read_bytes() == b"import torch_xla\nx = '\xff\xfe'\n"


def test_binary_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "blob.py"
    path.write_bytes(b"\x00\x01torch_xla")
    assert main(["rewrite", str(path)]) == 2
    assert "not a text file" in capsys.readouterr().err


def test_symlink_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_text(OLD)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    main(["rewrite", str(link), "-q"])
    assert link.is_symlink()
    assert real.read_text() == NEW


def test_file_changed_while_migrating_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "racy.py"
    path.write_text(OLD)
    real = engine.rewrite_source

    def edit_meanwhile(text: str, name: str, options: object) -> object:
        result = real(text, name, options)  # type: ignore[arg-type]
        path.write_text(OLD + "# edited by someone else\n")
        return result

    monkeypatch.setattr(engine, "rewrite_source", edit_meanwhile)
    assert main(["rewrite", str(path), "-j", "1"]) == 2
    assert "changed on disk while being migrated; not overwritten" in capsys.readouterr().err
    assert path.read_text() == OLD + "# edited by someone else\n"


def test_unwritable_destination_is_an_error(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tree / "out"
    blocker.write_text("a file where the output folder should go")
    assert main(["rewrite", str(tree / "train.py"), "--output-dir", str(blocker / "sub")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert (tree / "train.py").read_text() == OLD


def test_no_temporary_files_are_left(tree: Path) -> None:
    main(["rewrite", str(tree), "-q"])
    assert not [p for p in tree.rglob("*") if p.name.endswith(".nm-tmp")]


# -- configuration from pyproject.toml ----------------------------------------------------------


def test_pyproject_target_exclude_and_per_file_ignores(tree: Path) -> None:
    (tree / "pyproject.toml").write_text(
        '[tool.neuron-migrate]\ntarget = "neuron"\nexclude = ["pkg/"]\n'
        'per-file-ignores = { "keep_sync.py" = ["NM002"] }\n'
    )
    (tree / "keep_sync.py").write_text(OLD)
    assert main(["rewrite", str(tree), "-q"]) == 0
    assert 'device = torch.device("neuron")' in (tree / "train.py").read_text()
    assert (tree / "pkg" / "loop.py").read_text() == OLD  # excluded
    kept = (tree / "keep_sync.py").read_text()
    assert "xm.mark_step()" in kept and "xm.xla_device()" not in kept


def test_command_line_beats_pyproject(tree: Path) -> None:
    (tree / "pyproject.toml").write_text('[tool.neuron-migrate]\ntarget = "neuron"\n')
    main(["rewrite", str(tree / "train.py"), "--target", "portable", "-q"])
    assert (tree / "train.py").read_text() == NEW


def test_explicit_config_and_its_errors(tree: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path_factory.mktemp("cfg") / "pyproject.toml"
    config.write_text('[tool.neuron-migrate]\ntarget = "tpu"\n')
    assert main(["rewrite", str(tree), "--config", str(config)]) == 2
    assert "'target' must be one of portable, neuron" in capsys.readouterr().err
    assert (tree / "train.py").read_text() == OLD


def test_a_file_given_only_todos_is_reported_as_unchanged_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "flags.py"
    path.write_text('import os\n\nUPCAST = os.environ.get("XLA_DOWNCAST_BF16", "0") == "1"\n')
    assert main(["rewrite", str(path)]) == 1
    assert f"Migrated {path} (1 TODO added, code unchanged)" in capsys.readouterr().err
