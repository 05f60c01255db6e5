"""Whole files: each `fixtures/<case>.py` against `<case>.txt` (every finding at
`--min-severity info`, as `check` prints it) and `<case>.fixed.py` (after `--fix`; absent when
nothing is fixable). Set NEURON_MIGRATE_REGEN=1 to rewrite the expectations (then review them).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.output import text_line

FIXTURES = Path(__file__).parent / "fixtures"
REGENERATE = os.environ.get("NEURON_MIGRATE_REGEN") == "1"
CASES = sorted(p for p in FIXTURES.glob("*.py") if not p.name.endswith(".fixed.py"))


def _expect(path: Path, actual: str | None) -> None:
    if REGENERATE:
        if actual is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(actual, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8") if path.exists() else None
    assert actual == expected, f"{path.name} differs (NEURON_MIGRATE_REGEN=1 rewrites it)"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_fixture(case: Path) -> None:
    text = case.read_text(encoding="utf-8")
    options = CheckOptions(min_severity=Severity.INFO)
    report = check_source(text, case.name, options)
    assert report.error is None
    _expect(
        case.with_suffix(".txt"),
        "".join(text_line(case.name, d) + "\n" for d in report.diagnostics),
    )

    fixed = check_source(text, case.name, CheckOptions(min_severity=Severity.INFO, fix=True))
    assert fixed.error is None
    _expect(case.with_suffix(".fixed.py"), fixed.fixed)
    if fixed.fixed is not None:
        ast.parse(fixed.fixed)
        again = check_source(
            fixed.fixed, case.name, CheckOptions(min_severity=Severity.INFO, fix=True)
        )
        assert again.fixed is None, "fixing the fixed file changed it again"
