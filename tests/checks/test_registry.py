"""The rule registry: stable codes, complete documentation, real graph-break ids, docs in sync."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from neuron_migrate.catalog import rule_codes, rules_markdown
from neuron_migrate.checks.checker import passes_gate
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules import (
    REDIRECTS,
    all_rules,
    by_code,
    resolve_selection,
    unknown_prefixes,
)

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("## What it does", "## Why", "## Example", "## Use instead", "## Fix safety")


def test_codes_are_unique_and_well_formed() -> None:
    codes = [r.code for r in all_rules()]
    assert len(codes) == len(set(codes))
    for rule in all_rules():
        assert re.fullmatch(r"NM[1-9]\d\d", rule.code), rule.code
        assert re.fullmatch(r"[a-z0-9-]+", rule.name), rule.name
        assert rule.module_code_matches if hasattr(rule, "module_code_matches") else True
        assert rule.__module__.rsplit(".", 1)[-1].startswith(rule.code.lower() + "_")
    names = [r.name for r in all_rules()]
    assert len(names) == len(set(names))


def test_check_codes_do_not_collide_with_rewrite_codes() -> None:
    assert len(rule_codes()) == len(set(rule_codes()))


def test_redirects_point_to_existing_codes_and_are_never_reused() -> None:
    for old, new in REDIRECTS.items():
        assert new in by_code()
        assert old not in by_code()


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_docstring_has_every_section(rule) -> None:
    doc = inspect.cleandoc(rule.__doc__ or "")
    positions = [doc.find(section) for section in SECTIONS]
    assert all(p >= 0 for p in positions), (
        f"{rule.code} lacks {[s for s, p in zip(SECTIONS, positions, strict=True) if p < 0]}"
    )
    assert positions == sorted(positions), f"{rule.code}: sections out of order"
    assert rule.summary and not rule.summary.endswith(".")


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_examples_pass_the_file_gate(rule) -> None:
    # A file that fails the gate is never parsed: a rule whose examples fail it could never fire.
    for case in rule.INVALID:
        assert passes_gate(case.code), case.code
    assert isinstance(rule.severity, Severity)


def test_graph_break_ids_exist_in_torch() -> None:
    torch = pytest.importorskip("torch")
    registry = json.loads(
        (Path(torch._dynamo.__file__).parent / "graph_break_registry.json").read_text()
    )
    for rule in all_rules():
        for gb in rule.graph_breaks:
            assert gb in registry, f"{rule.code}: {gb} is not in torch's graph-break registry"


def test_selection_by_prefix() -> None:
    assert resolve_selection(("NM10",), ()) == {c for c in by_code() if c.startswith("NM10")}
    assert "NM101" not in resolve_selection(("ALL",), ("NM101",))
    assert unknown_prefixes(("NM8", "NM1", "ALL")) == ["NM8"]


def test_docs_page_is_in_sync() -> None:
    page = ROOT / "docs" / "rules.md"
    assert page.read_text(encoding="utf-8") == rules_markdown(), (
        "regenerate: python -m neuron_migrate.catalog > docs/rules.md"
    )


def test_rules_command_prints_a_check_rule(capsys: pytest.CaptureFixture[str]) -> None:
    from neuron_migrate.cli import main

    assert main(["rules", "NM101"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# NM101 nonzero")
    assert "GB0036" in out and "## Fix safety" in out
    assert main(["rules", "boolean-mask-write"]) == 0
    assert main(["rules"]) == 0
    assert "NM116  dynamic-shapes" in capsys.readouterr().out
