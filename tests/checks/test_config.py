"""`[tool.neuron-migrate]`: discovery from the checked path upward, each key, and the errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_migrate.checks.checker import check_source
from neuron_migrate.checks.command import options_for
from neuron_migrate.cli import build_parser
from neuron_migrate.core import config


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_nearest_pyproject_with_the_table_wins(tmp_path: Path) -> None:
    outer = _write(tmp_path / "pyproject.toml", '[tool.neuron-migrate]\ntarget = "neuron"\n')
    _write(tmp_path / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n')  # no table: skipped
    inner = _write(
        tmp_path / "pkg" / "sub" / "pyproject.toml", '[tool.neuron-migrate]\nignore = ["NM1"]\n'
    )
    assert config.find(tmp_path / "pkg" / "mod.py") == outer
    assert config.find(tmp_path / "pkg" / "sub" / "deep" / "x.py") == inner
    assert config.find(tmp_path / "pkg" / "sub") == inner


def test_every_key(tmp_path: Path) -> None:
    pyproject = _write(
        tmp_path / "pyproject.toml",
        """
[tool.neuron-migrate]
select = ["nm1", "NM3"]
ignore = ["NM110"]
per-file-ignores = { "data/*.py" = ["NM102"], "tests/**" = ["NM1"] }
exclude = ["third_party/", "*_pb2.py"]
target = "neuron"
min-severity = "info"
""",
    )
    loaded = config.load(pyproject)
    assert loaded.select == ("NM1", "NM3") and loaded.ignore == ("NM110",)
    assert loaded.target == "neuron" and loaded.min_severity == "info"
    assert loaded.excluded(tmp_path / "third_party" / "lib" / "x.py")
    assert loaded.excluded(tmp_path / "pkg" / "msg_pb2.py")
    assert not loaded.excluded(tmp_path / "pkg" / "model.py")
    assert not loaded.excluded(Path("/elsewhere/third_party/x.py"))
    assert loaded.ignores_for(tmp_path / "data" / "prep.py") == ("NM110", "NM102")
    assert loaded.ignores_for(tmp_path / "tests" / "a" / "test_x.py") == ("NM110", "NM1")
    assert loaded.ignores_for(tmp_path / "model.py") == ("NM110",)

    args = build_parser().parse_args(["check", "x.py"])
    options = options_for(args, loaded, tmp_path / "data" / "prep.py")
    assert options.target == "neuron" and options.min_severity.label == "info"
    assert (
        "NM101" in options.enabled()
        and "NM102" not in options.enabled()
        and "NM110" not in options.enabled()
    )
    assert "NM301" in options.enabled() and "NM701" not in options.enabled()


def test_command_line_goes_over_the_configuration(tmp_path: Path) -> None:
    loaded = config.load(
        _write(
            tmp_path / "pyproject.toml",
            '[tool.neuron-migrate]\nselect = ["NM1"]\nignore = ["NM101"]\ntarget = "neuron"\n',
        )
    )
    args = build_parser().parse_args(["check", "x.py", "--ignore", "NM102", "--target", "portable"])
    options = options_for(args, loaded, tmp_path / "x.py")
    assert options.target == "portable"
    assert (
        "NM101" not in options.enabled()
        and "NM102" not in options.enabled()
        and "NM103" in options.enabled()
    )
    args = build_parser().parse_args(["check", "x.py", "--select", "NM7"])
    assert options_for(args, loaded, tmp_path / "x.py").enabled() == {
        c for c in options.enabled() | {"NM701"} if c.startswith("NM7")
    } | {c for c in ("NM702", "NM703", "NM704", "NM705", "NM706")}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[tool.neuron-migrate]\nselct = ["NM1"]\n', "unknown key 'selct'"),
        ('[tool.neuron-migrate]\nselect = "NM1,NM3"\n', "'NM1,NM3' is not a rule code or prefix"),
        ("[tool.neuron-migrate]\nignore = [1]\n", "'ignore' must be a list of strings"),
        (
            '[tool.neuron-migrate]\ntarget = "gpu"\n',
            "'target' must be one of portable, neuron (got 'gpu')",
        ),
        (
            '[tool.neuron-migrate]\nmin-severity = "low"\n',
            "'min-severity' must be one of info, warning, error",
        ),
        ('[tool.neuron-migrate]\nper-file-ignores = ["x"]\n', "'per-file-ignores' must be a table"),
        ("[tool.neuron-migrate\n", "not valid TOML"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    pyproject = _write(tmp_path / "pyproject.toml", text)
    with pytest.raises(config.ConfigError) as caught:
        config.load(pyproject)
    assert str(pyproject) in str(caught.value) and message in str(caught.value)


def test_configs_are_found_once_per_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "pyproject.toml", '[tool.neuron-migrate]\nignore = ["NM1"]\n')
    calls = []
    real = config.load
    monkeypatch.setattr(config, "load", lambda p: calls.append(p) or real(p))
    configs = config.Configs()
    for name in ("a.py", "b.py", "sub/c.py"):
        assert configs.for_path(_write(tmp_path / name, "")).ignore == ("NM1",)
    assert len(calls) == 1
    assert config.Configs(config.Config()).for_path(tmp_path / "a.py").ignore == ()


def test_select_applies_to_the_tool_whose_codes_it_names(tmp_path: Path) -> None:
    loaded = config.load(
        _write(tmp_path / "pyproject.toml", '[tool.neuron-migrate]\nselect = ["NM0", "NM11"]\n')
    )
    assert loaded.select_for(["NM001", "NM090"]) == ("NM0",)
    assert loaded.select_for(["NM101", "NM110"]) == ("NM11",)
    rewrite_only = config.load(
        _write(tmp_path / "pyproject.toml", '[tool.neuron-migrate]\nselect = ["NM00"]\n')
    )
    assert rewrite_only.select_for(["NM101"]) is None  # check keeps all its rules
    args = build_parser().parse_args(["check", "x.py"])
    assert "NM101" in options_for(args, rewrite_only, tmp_path / "x.py").enabled()


def test_rewrite_can_use_the_same_table(tmp_path: Path) -> None:
    # What `rewrite` needs: select/ignore/target/exclude for a path, without any check machinery.
    loaded = config.load(
        _write(
            tmp_path / "pyproject.toml",
            '[tool.neuron-migrate]\nselect = ["NM0"]\ntarget = "neuron"\nexclude = ["gen/"]\n',
        )
    )
    assert loaded.select == ("NM0",) and loaded.target == "neuron"
    assert loaded.excluded(tmp_path / "gen" / "x.py")
    assert check_source("x = 1\n").diagnostics == []
