"""Walkthrough 6 run top to bottom (as tests/jupyter runs the others): a bf16 migration judged on
its noise floor where the old stack is installed, and a hand port's wrong LayerNorm localized."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jupyter.test_walkthroughs import assert_skipped_on_cpu, cell, execute, html, text

pytestmark = pytest.mark.slow


def test_06_localize_a_difference(tmp_path: Path) -> None:
    from neuron_migrate.validate import refenv

    notebook = execute("06_localize_a_difference.ipynb", tmp_path / "work")
    migrated = cell(notebook, "original = work")
    assert "torch.bfloat16 if USE_BF16 else None" in text(migrated) + html(migrated)

    verdict = text(cell(notebook, "if bf16_document:"))
    if refenv.check()[0] is not None:
        assert "verdict: match; floor: {'XLA_USE_BF16': 1}" in verdict
        assert "parameters before the first step (" in verdict and "match (R = " in verdict
        shown = html(cell(notebook, "bf16_document = None"))
        assert '<div class="nm-validate-report">' in shown and "noise floor" in shown
    else:
        assert "skipped: no working reference environment" in verdict

    report = html(cell(notebook, "by_hand = work"))
    assert (
        "Localized: rank 0, step 0" in report
        and 'alt="Module outputs at step 0 (rank 0)"' in report
    )
    headline = text(cell(notebook, "(found,) = hand_document"))
    assert "the first module whose output differs is norm (LayerNorm)" in headline
    assert_skipped_on_cpu(notebook)
