"""`docs/before-after.md` shows what `rewrite` makes of three example scripts: the diffs in it are
the ones the current code writes (set NEURON_MIGRATE_REGEN=1 to write them again)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from neuron_migrate.rewrite.engine import rewrite_source
from neuron_migrate.rewrite.report import unified_diff

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "before-after.md"
# A marker line names the example; the fenced diff right after it is generated.
BLOCK = re.compile(r"(<!-- diff of (?P<path>\S+) -->\n```diff\n)(?P<diff>.*?)(```)", re.DOTALL)


def _diff(path: str) -> str:
    result = rewrite_source((ROOT / path).read_text(encoding="utf-8"), path)
    assert result.changes and not result.error
    return unified_diff(result)


def test_diffs_are_what_rewrite_writes() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = list(BLOCK.finditer(text))
    assert len(blocks) == 3
    fresh = BLOCK.sub(lambda m: m.group(1) + _diff(m.group("path")) + m.group(4), text)
    if os.environ.get("NEURON_MIGRATE_REGEN"):
        DOC.write_text(fresh, encoding="utf-8")
    assert fresh == text, "docs/before-after.md is stale: run this test with NEURON_MIGRATE_REGEN=1"
