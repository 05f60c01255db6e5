"""Each rule's own examples (Fixit style): VALID snippets give no finding of the rule, INVALID ones
give one where stated, with the stated severity, and their fixes give the stated code, which
parses and is stable under a second `--fix`."""

from __future__ import annotations

import ast

import pytest

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules import all_rules
from neuron_migrate.checks.rules.base import Invalid, Rule


def _options(rule: type[Rule], target: str = "portable", **kwargs: bool) -> CheckOptions:
    # The rule alone, plus NM900 when it is the rule (suppressions need something to suppress).
    codes = None if rule.code == "NM900" else frozenset({rule.code})
    return CheckOptions(codes=codes, target=target, min_severity=Severity.INFO, **kwargs)


def _valid() -> list[pytest.param]:
    return [
        pytest.param(r, i, id=f"{r.code}-valid-{i}")
        for r in all_rules()
        for i in range(len(r.VALID))
    ]


def _invalid() -> list[pytest.param]:
    return [
        pytest.param(r, i, id=f"{r.code}-invalid-{i}")
        for r in all_rules()
        for i in range(len(r.INVALID))
    ]


@pytest.mark.parametrize(("rule", "index"), _valid())
def test_valid_example_is_clean(rule: type[Rule], index: int) -> None:
    report = check_source(rule.VALID[index], "example.py", _options(rule))
    assert report.error is None
    assert [d for d in report.diagnostics if d.code == rule.code] == []


@pytest.mark.parametrize(("rule", "index"), _invalid())
def test_invalid_example_is_flagged(rule: type[Rule], index: int) -> None:
    case: Invalid = rule.INVALID[index]
    report = check_source(case.code, "example.py", _options(rule, case.target))
    assert report.error is None
    found = [d for d in report.diagnostics if d.code == rule.code]
    assert found, f"{rule.code} did not flag:\n{case.code}"
    first = found[0]
    if case.line is not None:
        assert first.line == case.line, first
    if case.severity is not None:
        assert first.severity.label == case.severity, first
    if case.message is not None:
        assert case.message in first.text, first.text


@pytest.mark.parametrize(("rule", "index"), _invalid())
def test_invalid_example_fixes(rule: type[Rule], index: int) -> None:
    case: Invalid = rule.INVALID[index]
    for unsafe, expected in ((False, case.fixed), (True, case.unsafe_fixed)):
        if unsafe and expected is None:
            continue
        report = check_source(
            case.code, "example.py", _options(rule, case.target, fix=True, unsafe_fixes=unsafe)
        )
        assert report.error is None, report.error
        result = report.fixed if report.fixed is not None else case.code
        if expected is None:
            assert result == case.code, f"unexpected safe fix:\n{result}"
            continue
        assert result == expected
        ast.parse(result)
        again = check_source(
            result, "example.py", _options(rule, case.target, fix=True, unsafe_fixes=unsafe)
        )
        assert again.fixed is None, "a second --fix changed the code again"


def test_every_rule_has_examples() -> None:
    for rule in all_rules():
        assert rule.INVALID, rule.code
        assert rule.VALID or rule.code in ("NM113",), rule.code
