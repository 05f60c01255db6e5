"""`# noqa: NMxxx`, `# neuron-migrate: ignore[...]`, unused suppressions (NM900), and the rule
that a suppressed line is never fixed."""

from __future__ import annotations

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Severity

ALL = CheckOptions(min_severity=Severity.INFO)
FIX = CheckOptions(min_severity=Severity.INFO, fix=True, unsafe_fixes=True)


def codes(text: str, options: CheckOptions = ALL) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in check_source(text, "t.py", options).diagnostics]


def test_noqa_and_ignore_forms() -> None:
    base = "import torch\n\ndef forward(x):\n    return torch.nonzero(x){}\n"
    assert codes(base.format("")) == [(4, "NM101")]
    for comment in (
        "  # noqa: NM101",
        "  # noqa:NM101",
        "  # NOQA: NM101",
        "  # noqa",
        "  # neuron-migrate: ignore[NM101]",
        "  # neuron-migrate: ignore",
    ):
        assert codes(base.format(comment)) == [], comment
    assert codes(base.format("  # noqa: NM102")) == [(4, "NM101"), (4, "NM900")]


def test_multi_line_statement_can_be_suppressed_on_its_last_line() -> None:
    text = "import torch\n\nm = torch.compile(\n    model,\n    dynamic=True,\n)  # noqa: NM116\n"
    assert codes(text) == []
    text = "import torch\n\nm = torch.compile(\n    model,\n    dynamic=True,  # noqa: NM116\n)\n"
    assert codes(text) == []


def test_a_suppressed_line_is_never_fixed() -> None:
    text = "def forward(x):\n    x[x < 0] = 0  # noqa: NM103\n    return x\n"
    report = check_source(text, "t.py", FIX)
    assert report.fixed is None and report.diagnostics == []


def test_a_fix_that_would_edit_a_suppressed_line_is_dropped() -> None:
    # NM116 is reported on line 3 and suppressed only on line 4, where its fix would insert text.
    text = "import torch\n\nm = torch.compile(model,\n    backend='neuron')  # neuron-migrate: ignore[NM116]\n"
    report = check_source(text, "t.py", CheckOptions(codes=frozenset({"NM116"}), fix=True))
    assert report.fixed is None


def test_unused_suppressions_are_fixed_by_removing_the_codes() -> None:
    text = "import torch\n\ny = torch.where(m, a, b)  # noqa: E501, NM106  # keep for flake8\n"
    report = check_source(text, "t.py", FIX)
    assert (
        report.fixed
        == "import torch\n\ny = torch.where(m, a, b)  # noqa: E501  # keep for flake8\n"
    )
    text = "y = 1  # neuron-migrate: ignore[NM101] because of reasons\n"
    assert check_source(text, "t.py", FIX).fixed == "y = 1  # because of reasons\n"


def test_unused_check_respects_selection_and_strings() -> None:
    # NM106 not selected: its suppression may be meant for a run that selects it.
    text = "y = 1  # noqa: NM106\n"
    assert codes(text, CheckOptions(codes=frozenset({"NM900", "NM101"}))) == []
    # The directive inside a string is not a comment.
    assert codes('NOTE = "# noqa: NM101"\n') == []


def test_blanket_noqa_is_never_reported_unused() -> None:
    assert codes("import os  # noqa\n") == []
