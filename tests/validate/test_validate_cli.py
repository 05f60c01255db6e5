"""`validate` and `env` on the command line: argument handling and every error message."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from neuron_migrate.validate import refenv
from neuron_migrate.validate.command import add_parsers, main

from .conftest import EXAMPLES, PROGRAMS


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_arguments_after_double_dash_go_to_the_programs_wherever_options_stand():
    args = parse(
        "validate",
        "old.py",
        "new.py",
        "--nproc",
        "2",
        "--json",
        "r.json",
        "--",
        "--epochs",
        "1",
        "x.py",
    )
    assert args.programs == ["old.py", "new.py"]
    assert args.script_args == ["--epochs", "1", "x.py"]
    assert (args.nproc, args.json, args.original_nproc) == (2, "r.json", None)
    assert parse("validate", "a.py", "b.py").script_args == []
    assert parse("validate", "a.py", "b.py", "--json").json == "-"  # `--json` alone: stdout


def test_all_flags_parse():
    args = parse(
        "validate",
        "a.py",
        "b.py",
        "--original-python",
        "/p/old",
        "--migrated-python",
        "/p/new",
        "--original-nproc",
        "1",
        "--seed",
        "3",
        "--no-dropout",
        "--forward",
        "MLP",
        "--precision",
        "bf16",
        "--rtol",
        "0.1",
        "--atol",
        "0.2",
        "--plot",
        "x.png",
        "--timeout",
        "5",
        "--work-dir",
        "w",
    )
    assert args.original_python == Path("/p/old") and args.migrated_python == Path("/p/new")
    assert (args.seed, args.no_dropout, args.forward, args.precision) == (3, True, "MLP", "bf16")
    assert (args.rtol, args.atol, args.plot, args.timeout, args.work_dir) == (
        0.1,
        0.2,
        Path("x.png"),
        5.0,
        Path("w"),
    )
    assert parse("validate", "--compile-stats", "a.py").compile_stats
    new = parse(
        "validate", "a.py", "b.py", "--localize", "--native-random", "--noise-floor", "migrated",
        "--report", "r.html",
    )  # fmt: skip
    assert (new.localize, new.native_random, new.noise_floor, new.report) == (
        True,
        True,
        "migrated",
        Path("r.html"),
    )
    default = parse("validate", "a.py", "b.py")
    assert (default.localize, default.native_random, default.noise_floor) == (
        False,
        False,
        "original",
    )


def test_two_programs_are_needed(capsys):
    assert main(["validate", str(PROGRAMS / "fails.py")]) == 2
    assert "give two programs: ORIGINAL MIGRATED [-- ARGS...]" in capsys.readouterr().err


def test_at_most_two_programs(capsys):
    p = str(PROGRAMS / "fails.py")
    assert main(["validate", "--compile-stats", p, p, p]) == 2
    assert "give one or two programs; arguments for them go after `--`" in capsys.readouterr().err


def test_missing_program(capsys):
    assert main(["validate", "nope.py", str(PROGRAMS / "fails.py")]) == 2
    assert "nope.py: no such file" in capsys.readouterr().err


def test_bad_nproc(capsys):
    p = str(PROGRAMS / "fails.py")
    assert main(["validate", p, p, "--nproc", "0"]) == 2
    assert "--nproc and --original-nproc must be at least 1" in capsys.readouterr().err


def test_missing_interpreter(capsys):
    p = str(PROGRAMS / "fails.py")
    assert main(["validate", p, p, "--migrated-python", "/no/python"]) == 2
    assert "/no/python: no such interpreter" in capsys.readouterr().err


def test_missing_reference_env_is_explained(capsys, monkeypatch):
    monkeypatch.setenv(refenv.ENV_VAR, "/no/refenv/bin/python")
    code = main(
        ["validate", str(EXAMPLES / "xla_single_mpdeviceloader.py"), str(PROGRAMS / "fails.py")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert (
        "imports torch_xla, but no reference environment was found (NEURON_MIGRATE_REFERENCE_PYTHON=/no/refenv/bin/python)"
        in err
    )
    assert "`neuron-migrate env reference`" in err


def test_a_failing_program_is_an_error_with_its_output(capsys, tmp_path):
    nothing = str(PROGRAMS / "records_nothing.py")
    code = main(["validate", nothing, str(PROGRAMS / "fails.py"), "--work-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 2
    assert (
        "error: the migrated program" in out
        and "failed with exit status 1; last lines of its output:" in out
    )
    assert "ModuleNotFoundError: No module named 'torch_xla'" in out
    assert (
        "error: the original program" in out
        and "recorded nothing: it never called backward()" in out
    )
    assert out.rstrip().endswith("result: ERROR")
    assert (tmp_path / "migrated.log").exists()  # --work-dir keeps the logs


def test_timeout(capsys):
    sleeps = str(PROGRAMS / "sleeps.py")
    code = main(["validate", sleeps, sleeps, "--timeout", "1", "--original-python", sys.executable])
    assert code == 2
    out = capsys.readouterr().out
    assert "did not finish within 1 s" in out and "TIMED OUT" in out


def test_json_of_an_error(capsys, tmp_path):
    report = tmp_path / "r.json"
    nothing = str(PROGRAMS / "records_nothing.py")
    assert main(["validate", nothing, nothing, "--json", str(report)]) == 2
    document = json.loads(report.read_text())
    assert document["verdict"] == "error" and document["exit_code"] == 2
    assert [r["label"] for r in document["runs"]] == ["original", "migrated"]
    assert "result: ERROR" in capsys.readouterr().out  # the table still goes to stdout


def test_env_needs_a_subcommand(capsys):
    assert main(["env"]) == 2
    assert (
        "say which environment, e.g. `neuron-migrate env reference DIR`" in capsys.readouterr().err
    )


VERSIONS = {"torch": "2.9.0", "torch_xla": "2.9.0"}
NO_XLA = "ModuleNotFoundError: No module named 'torch_xla'"


def _stand_in_env(root: Path, works_once: Path | None = None, stamped: bool = True) -> Path:
    """A virtualenv at `root` whose Python starts and answers the probe with VERSIONS: always, or
    (with `works_once`) once that file exists, failing as a Python without torch_xla before."""
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    answer = f"echo '{json.dumps(VERSIONS)}'"
    if works_once is not None:
        answer = f'if [ -f "{works_once}" ]; then {answer}; else echo "{NO_XLA}" >&2; exit 1; fi'
    python = root / "bin" / "python"
    python.write_text(f'#!/bin/sh\nif [ "$2" = "pass" ]; then exit 0; fi\n{answer}\n')
    python.chmod(0o755)
    if stamped:
        stamp = {"pins": list(refenv.PINS), "versions": VERSIONS}
        (root / refenv.STAMP).write_text(json.dumps(stamp))
    return python


def test_env_reference_finds_a_complete_env(tmp_path, capsys):
    _stand_in_env(tmp_path)
    assert main(["env", "reference", str(tmp_path)]) == 0
    assert (
        f"reference env {tmp_path}: present (torch 2.9.0, torch_xla 2.9.0)"
        in capsys.readouterr().err
    )


def test_env_reference_repairs_a_complete_env_whose_stack_does_not_run(
    tmp_path, capsys, monkeypatch
):
    root, installed = tmp_path / "refenv", tmp_path / "installed"
    _stand_in_env(root, works_once=installed)
    commands = []
    monkeypatch.setattr(refenv, "_run", lambda cmd: (commands.append(cmd), installed.touch()))
    assert main(["env", "reference", str(root)]) == 0
    said = capsys.readouterr().err
    assert f"reference env {root}: present, but it does not work ({NO_XLA}); repairing it" in said
    assert f"reference env {root}: ready (torch 2.9.0, torch_xla 2.9.0)" in said
    [install] = commands
    assert install[:4] == [str(root / "bin" / "python"), "-m", "pip", "install"]
    assert "torch-xla==2.9.0" in install


def test_check_names_the_reference_python_that_runs_the_old_stack(tmp_path, monkeypatch):
    python = _stand_in_env(tmp_path / "refenv")
    assert refenv.check(python) == (
        python,
        f"reference environment: {python} (torch 2.9.0, torch_xla 2.9.0)",
    )
    monkeypatch.setenv(refenv.ENV_VAR, str(python))  # the default, when none is given
    assert refenv.check()[0] == python


def test_check_says_in_one_line_why_there_is_no_reference_python_and_what_to_do(
    tmp_path, monkeypatch
):
    broken = _stand_in_env(tmp_path / "refenv", works_once=tmp_path / "never")
    found, said = refenv.check(broken)
    assert found is None and "\n" not in said
    assert said == (
        f"the reference environment {broken} does not work ({NO_XLA}): "
        f"`neuron-migrate env reference {tmp_path / 'refenv'}` repairs it"
    )
    found, said = refenv.check(sys.executable)  # a Python that is no virtualenv of the tool's
    assert found is None and f"({NO_XLA})" in said and "\n" not in said
    assert f"set ${refenv.ENV_VAR} to the Python of a working one" in said
    monkeypatch.setenv(refenv.ENV_VAR, str(tmp_path / "gone" / "bin" / "python"))
    found, said = refenv.check()
    assert found is None and said.startswith(f"the reference Python {tmp_path}/gone/bin/python")
    assert "does not exist: build one with `neuron-migrate env reference`" in said


def test_env_reference_reports_a_broken_stack():
    with pytest.raises(refenv.RefEnvError, match="the old stack does not import or run"):
        refenv.probe(Path(sys.executable))  # this Python has no torch_xla


@pytest.mark.slow
def test_the_reference_env_works(reference_python):
    versions = refenv.probe(reference_python)
    assert versions["torch"].startswith("2.9.0") and versions["torch_xla"].startswith("2.9.0")
