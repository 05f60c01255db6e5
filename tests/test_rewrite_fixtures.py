"""Whole-file migrations: each `fixtures/rewrite/<family>/<case>.in.py` against its `.out.py`.

`<case>.out.py` is the expected result for the default (portable) target and
`<case>.neuron.out.py`, where present, the one for `--target neuron`. A `<case>.xfail` file
holds the reason a case is known to fail; regeneration leaves such a case's outputs alone.
Set NEURON_MIGRATE_REGEN=1 to rewrite the expected outputs from the tool (then review them).
"""

from __future__ import annotations

import ast
import difflib
import os
from pathlib import Path

import libcst as cst
import pytest

from neuron_migrate.rewrite.codemods.base import NEURON, PORTABLE, Target
from neuron_migrate.rewrite.engine import Options, rewrite_source

FIXTURES = Path(__file__).parent / "fixtures" / "rewrite"
REGENERATE = os.environ.get("NEURON_MIGRATE_REGEN") == "1"
TODO_MARKER = "# TODO(neuron-migrate NM"


def _read(path: Path) -> str:
    # Bytes, not read_text: the newline style of a fixture is part of what is tested.
    return path.read_bytes().decode("utf-8")


def _expected_path(source: Path, target: Target) -> Path:
    stem = source.name.removesuffix(".in.py")
    suffix = ".neuron.out.py" if target.neuron else ".out.py"
    return source.with_name(stem + suffix)


def _sidecar(source: Path) -> Path:
    return source.with_name(source.name.removesuffix(".in.py") + ".xfail")


def _cases(honour_xfail: bool) -> list:
    params = []
    for source in sorted(FIXTURES.glob("*/*.in.py")):
        case = f"{source.parent.name}/{source.name.removesuffix('.in.py')}"
        marks = []
        if honour_xfail and _sidecar(source).exists():
            marks.append(pytest.mark.xfail(reason=_read(_sidecar(source)).strip(), strict=True))
        for target in (PORTABLE, NEURON):
            if target.neuron and not _expected_path(source, target).exists():
                continue
            params.append(pytest.param(source, target, id=f"{case}[{target.name}]", marks=marks))
    return params


# A known bug (`.xfail`) makes the tool's output differ from the expected file; the expected
# file itself, written by hand in that case, must still be valid and stable.
CASES = _cases(honour_xfail=True)
EXPECTED = _cases(honour_xfail=False)


def _script_path(source: Path) -> Path:
    """The name the user's script would have: it shows in launch commands the tool writes."""
    return source.with_name(source.name.removesuffix(".in.py") + ".py")


def _migrate(text: str, source: Path, target: Target) -> str:
    result = rewrite_source(text, str(_script_path(source)), Options(target=target))
    assert result.error is None, result.error
    return result.migrated


def _show(text: str) -> list[str]:
    """Lines for a diff, with carriage returns made visible."""
    return [line.replace("\r", "\\r") + "\n" for line in text.split("\n")]


def _diff(expected: str, actual: str, expected_name: str, actual_name: str) -> str:
    lines = difflib.unified_diff(_show(expected), _show(actual), expected_name, actual_name)
    return "".join(lines)


def _relative(path: Path) -> str:
    return str(path.relative_to(FIXTURES.parent.parent.parent))


def test_fixtures_exist() -> None:
    assert CASES, f"no fixtures found under {FIXTURES}"


@pytest.mark.parametrize(("source", "target"), CASES)
def test_rewrite_matches_expected(source: Path, target: Target) -> None:
    expected_path = _expected_path(source, target)
    actual = _migrate(_read(source), source, target)
    if REGENERATE and not _sidecar(source).exists():
        expected_path.write_bytes(actual.encode("utf-8"))
        return
    if not expected_path.exists():
        pytest.fail(f"missing {_relative(expected_path)}; create it with NEURON_MIGRATE_REGEN=1", pytrace=False)
    expected = _read(expected_path)
    if actual != expected:
        diff = _diff(expected, actual, _relative(expected_path), f"rewrite({_relative(source)})")
        pytest.fail(f"migrated output differs from the expected file:\n{diff}", pytrace=False)


@pytest.mark.parametrize(("source", "target"), EXPECTED)
def test_expected_output_is_valid_and_stable(source: Path, target: Target) -> None:
    """The expected output parses, carries no TODO twice, and migrating it again changes nothing."""
    expected_path = _expected_path(source, target)
    if not expected_path.exists():
        pytest.skip("no expected output yet")
    expected = _read(expected_path)
    ast.parse(expected)
    cst.parse_module(expected)
    _assert_no_repeated_todos(expected, expected_path)
    again = _migrate(expected, source, target)
    if again != expected:
        diff = _diff(expected, again, _relative(expected_path), "rewrite(expected)")
        pytest.fail(f"migrating the migrated file changed it again:\n{diff}", pytrace=False)


def _assert_no_repeated_todos(text: str, path: Path) -> None:
    """The same TODO twice in one comment block means a rerun duplicated it."""
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped.startswith("#"):
            seen = set()
            continue
        if stripped.startswith(TODO_MARKER):
            assert stripped not in seen, f"{_relative(path)}:{number}: TODO repeated: {stripped}"
            seen.add(stripped)
