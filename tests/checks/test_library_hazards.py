"""The table of library hazards against the installed libraries, and what `check` says of them there."""

from __future__ import annotations

import ast
import importlib.util
import sys
import sysconfig
from pathlib import Path

import pytest

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.library_hazards import DYNAMIC_ROPE, HAZARDS, LibraryHazard
from neuron_migrate.checks.library_hazards_measured import MEASURED
from neuron_migrate.checks.model import Severity

SITE = Path(sysconfig.get_paths()["purelib"])


def _installed(hazard: LibraryHazard) -> tuple[Path, int]:
    path, _, line = hazard.where.rpartition(":")
    source = SITE / path
    if not source.exists():
        pytest.skip(f"{path} is not installed")
    return source, int(line)


@pytest.mark.parametrize("hazard", HAZARDS, ids=lambda h: h.key)
def test_line_is_in_its_function_in_the_installed_library(hazard: LibraryHazard) -> None:
    source, line = _installed(hazard)
    text = source.read_text(encoding="utf-8")
    assert text.splitlines()[line - 1].strip().startswith(hazard.line_text)
    names = hazard.symbol.split(".")
    holders = [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef) and node.name == names[-1]
    ]
    assert any(f.lineno <= line <= (f.end_lineno or f.lineno) for f in holders), hazard.symbol


def test_dynamic_rope_findings_name_the_rope_type() -> None:
    """The branches of `dynamic_frequency_update` run only with `rope_type="dynamic"`: information
    that says so, and nothing at the default severity."""
    source, line = _installed(DYNAMIC_ROPE)
    text = source.read_text(encoding="utf-8")
    everything = check_source(text, str(source), CheckOptions(min_severity=Severity.INFO)).diagnostics
    at_line = [d for d in everything if d.line == line]
    assert at_line and all(d.severity is Severity.INFO for d in at_line)
    assert all('traced only with `rope_type="dynamic"`' in d.where for d in at_line)
    assert check_source(text, str(source), CheckOptions()).diagnostics == []


def test_table_agrees_with_the_architecture_sweep_and_the_installed_sources() -> None:
    """What `benchmarks/check/library_hazards.py --check` compares without measuring: the model
    classes the sweep records breaking at the `loss_type` line, and each line's text."""
    script = Path(__file__).parents[2] / "benchmarks" / "check" / "library_hazards.py"
    spec = importlib.util.spec_from_file_location("library_hazards_benchmark", script)
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = benchmark  # its dataclasses look their module up
    spec.loader.exec_module(benchmark)
    _installed(HAZARDS[0])
    for hazard in HAZARDS:
        assert sorted(hazard.classes) == benchmark._swept_classes(hazard.where)
        assert benchmark._text_at(hazard.where).startswith(hazard.line_text)


def test_the_measured_half_of_the_table_is_written_as_the_package_reads_it(tmp_path: Path) -> None:
    """`--write` regenerates `library_hazards_measured.py`: written back from what it holds, the
    file comes out as it is."""
    script = Path(__file__).parents[2] / "benchmarks" / "check" / "library_hazards.py"
    spec = importlib.util.spec_from_file_location("library_hazards_benchmark", script)
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = benchmark
    spec.loader.exec_module(benchmark)
    table = Path(benchmark.MEASURED_TABLE)
    copy = tmp_path / table.name
    copy.write_text(table.read_text(encoding="utf-8"), encoding="utf-8")
    benchmark.write_table(MEASURED, copy)
    assert copy.read_text(encoding="utf-8") == table.read_text(encoding="utf-8")
