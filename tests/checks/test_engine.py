"""The checker's machinery: where a finding is (and so how severe), alias resolution, positions,
the file gate, and the fix loop (conflicts, passes, reverting a fix that breaks the code)."""

from __future__ import annotations

import ast

import pytest

from neuron_migrate.checks import checker
from neuron_migrate.checks.checker import CheckOptions, apply_fixes, check_source
from neuron_migrate.checks.model import Diagnostic, Edit, Fix, Severity

ALL = CheckOptions(min_severity=Severity.INFO)


def found(text: str, code: str = "NM101") -> list[Diagnostic]:
    # "torch" in a comment: these snippets must pass the file gate like real files do.
    return [d for d in check_source(text + "# torch\n", "t.py", ALL).diagnostics if d.code == code]


@pytest.mark.parametrize(
    ("source", "severity", "where"),
    [
        (
            "class Net(nn.Module):\n    def forward(self, x):\n        return x.nonzero()\n",
            "warning",
            "in `forward` of `Net`",
        ),
        (
            "class Net:\n    def forward(self, x):\n        return self.pick(x)\n\n    def pick(self, x):\n        return x.nonzero()\n",
            "warning",
            "in `pick`, called from `forward` of `Net`",
        ),
        (
            "def pick(x):\n    return x.nonzero()\n\nclass Net:\n    def forward(self, x):\n        return pick(x)\n",
            "warning",
            "in `pick`, called from `forward` of `Net`",
        ),
        (
            "import torch\n\n@torch.compile\ndef step(x):\n    return x.nonzero()\n",
            "warning",
            "in `step`, compiled with torch.compile",
        ),
        (
            "import torch\n\ndef f(x):\n    return x.nonzero()\n\ng = torch.compile(f)\n",
            "warning",
            "in `f`, passed to torch.compile",
        ),
        (
            "def training_step(self, batch):\n    return batch.nonzero()\n",
            "info",  # eager: a data-dependent size costs no graph there
            "in `training_step`: eager code run every step",
        ),
        (
            "def train(model, loader, optimizer):\n    for b in loader:\n        model(b).backward()\n        b.nonzero()\n",
            "info",
            "in the training loop at line 2, which calls `.backward()`",
        ),
        (
            "def train(model, loader, optimizer):\n    for b in loader:\n        optimizer.step()\n        b.nonzero()\n",
            "info",
            "in the training loop at line 2, which calls `optimizer.step()`",
        ),
        (
            "def evaluate(loader, scheduler):\n    for b in loader:\n        scheduler.step()\n        b.nonzero()\n",
            "info",
            "outside",
        ),
        (
            "def collate_fn(batch):\n    return batch.nonzero()\n",
            "info",
            "in data preparation (`collate_fn`)",
        ),
        (
            "class Pairs(Dataset):\n    def build(self, x):\n        return x.nonzero()\n",
            "info",
            "in `build` of data class `Pairs`, which runs on the host",
        ),
        ("x = y.nonzero()\n", "info", "outside forward, compiled functions and training steps"),

        (
            "class Net:\n    def forward(self, x):\n        def inner(v):\n            return v.nonzero()\n        return inner(x)\n",
            "warning",
            "in `forward` of `Net`",
        ),
    ],
)
def test_where_decides_severity(source: str, severity: str, where: str) -> None:
    (finding,) = found(source)
    assert finding.severity.label == severity
    assert finding.where.startswith(where)


@pytest.mark.parametrize(
    ("source", "severity", "where"),
    [
        (
            "def training_step(self, batch):\n    return batch.mean().item()\n",
            "warning",
            "in `training_step`: eager code run every step",
        ),
        (
            "class Net:\n    def forward(self, x):\n        return x.sum().item()\n",
            "error",
            "in `forward` of `Net`, traced when the model is compiled",
        ),
    ],
)
def test_host_syncs_weigh_less_in_eager_steps(source: str, severity: str, where: str) -> None:
    (finding,) = found(source, "NM110")
    assert finding.severity.label == severity
    assert finding.where.startswith(where)


def test_aliases_resolve_every_import_form() -> None:
    for source in (
        "import torch\ny = torch.nonzero(x)\n",
        "import torch as t\ny = t.nonzero(x)\n",
        "from torch import nonzero\ny = nonzero(x)\n",
        "from torch import nonzero as nz\ny = nz(x)\n",
        "if is_torch_available():\n    import torch\ny = torch.nonzero(x)\n",
        "def f(x):\n    import torch as T\n    return T.argwhere(x)\n",
    ):
        assert found(source), source
    assert not found("import numpy as torch\ny = torch.nonzero(x)\n")
    assert not found("from mylib import nonzero\ny = nonzero(x)\n")


def test_columns_count_characters_not_bytes() -> None:
    (finding,) = found("s = 'λλλ'; y = x.nonzero()\n")
    assert (finding.line, finding.column) == (1, 18)


def test_fixes_keep_crlf_and_non_ascii() -> None:
    text = "def forward(x):  # é\r\n    x[x < 0] = 0\r\n    return x\r\n"
    report = check_source(text, "t.py", CheckOptions(fix=True))
    assert (
        report.fixed == "def forward(x):  # é\r\n    x.masked_fill_(x < 0, 0)\r\n    return x\r\n"
    )


def test_files_outside_the_gate_are_not_parsed() -> None:
    report = check_source("def f(:\n", "t.py", ALL)
    assert report.skipped and report.error is None
    assert (
        check_source("import torch\ndef f(:\n", "t.py", ALL).error
        == "t.py:2:7: SyntaxError: invalid syntax"
    )


def test_rules_skipped_for_lack_of_triggers_would_find_nothing() -> None:
    """Each rule's own examples: running every rule gives what running the applicable ones does."""
    from neuron_migrate.checks.checker import applicable_rules
    from neuron_migrate.checks.rules import all_rules

    for rule in all_rules():
        for case in (*rule.VALID, *(c.code for c in rule.INVALID)):
            for options in (CheckOptions(), ALL):
                found = {d.code for d in check_source(case, "t.py", options).diagnostics}
                chosen = {r.code for r in applicable_rules(case, options)}
                assert found - {"NM900"} <= chosen, (rule.code, case)


def test_overlapping_fixes_wait_for_the_next_pass() -> None:
    first = Diagnostic("NM1", "a", 1, 1, 1, 2, fix=Fix((Edit(0, 3, "AAA"),), "safe", "a"))
    second = Diagnostic("NM2", "b", 1, 2, 1, 3, fix=Fix((Edit(1, 2, "B"),), "safe", "b"))
    third = Diagnostic("NM3", "c", 1, 5, 1, 6, fix=Fix((Edit(4, 5, "C"),), "unsafe", "c"))
    assert apply_fixes("xyz-w\n", [first, second, third], unsafe=False) == ("AAA-w\n", ["NM1"])
    assert apply_fixes("xyz-w\n", [first, second, third], unsafe=True) == ("AAA-C\n", ["NM1", "NM3"])


def test_fixes_run_in_passes_until_stable() -> None:
    # Two fixes on one call: NM401 removes the backend, NM116 adds dynamic=False.
    text = "import torch\n\nm = torch.compile(m, backend='inductor')\n"
    report = check_source(text, "t.py", CheckOptions(fix=True))
    assert report.fixed == "import torch\n\nm = torch.compile(m, dynamic=False)\n"
    assert report.fixes_applied == 2 and report.diagnostics == []
    assert report.fixed_codes == {"NM401": 1, "NM116": 1}


def test_a_fix_that_breaks_the_code_is_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    real = checker.apply_fixes
    monkeypatch.setattr(
        checker,
        "apply_fixes",
        lambda text, diagnostics, unsafe: (real(text, diagnostics, unsafe)[0] + "def (:\n", ["NM103"]),
    )
    text = "def forward(x):\n    x[x < 0] = 0\n    return x\n"
    report = check_source(text, "t.py", CheckOptions(fix=True))
    assert report.fixed is None and not report.changed
    assert report.error is not None and "a fix produced code that does not parse" in report.error
    assert [d.code for d in report.diagnostics] == ["NM103"]


@pytest.mark.parametrize(
    "expression", ["(" * 300 + "1" + ")" * 300, " + ".join(["x.nonzero()"] * 20_000)]
)
def test_deep_nesting_is_reported_not_a_crash(expression: str) -> None:
    report = check_source(f"import torch\ny = {expression}\n", "t.py", ALL)
    assert report.error is None or report.error.startswith("t.py:")


def test_a_crashing_rule_is_an_error_for_that_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuron_migrate.checks.rules.nm101_nonzero import Nonzero

    def boom(self: Nonzero, node: ast.Call, name: str) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(Nonzero, "visit_call", boom)
    report = check_source("import torch\ny = torch.nonzero(x)\n", "t.py", ALL)
    assert (
        report.error
        == "t.py:1:1: internal error while checking (ValueError('boom')); please report it"
    )


def test_every_fix_in_the_fixtures_parses() -> None:
    from pathlib import Path

    for case in (Path(__file__).parent / "fixtures").glob("*.py"):
        report = check_source(
            case.read_text(),
            case.name,
            CheckOptions(min_severity=Severity.INFO, fix=True, unsafe_fixes=True),
        )
        assert report.error is None, report.error
        if report.fixed is not None:
            ast.parse(report.fixed)
