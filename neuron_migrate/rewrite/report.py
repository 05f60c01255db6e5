"""What a rewrite run tells its user: a terminal summary, and Markdown or JSON migration reports."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.core.source import file_diff
from neuron_migrate.rewrite.results import FileResult

RULES_HINT = "neuron-migrate rules {code}"


def unified_diff(result: FileResult) -> str:
    """The change as a unified diff; for a notebook, one diff per changed cell (`nb.ipynb:cell 4`)."""
    if result.cells:
        return "".join(file_diff(f"{result.path}:cell {index + 1}", old, new) for index, old, new in result.cells)
    return file_diff(result.path, result.original, result.migrated)


def location(result: FileResult, line: int, column: int, cell: int | None) -> str:
    where = f"{result.path}:cell {cell}" if cell is not None else result.path
    return f"{where}:{line}:{column}"


def manual_lines(result: FileResult) -> list[str]:
    return [f"{location(result, m.line, m.column, m.cell)}: {m.code} {m.message}" for m in result.manual]


def summary(results: Sequence[FileResult], *, applied: bool) -> str:
    """The closing lines of a run, for stderr."""
    changed = [r for r in results if r.changed]
    errors = [r for r in results if r.error]
    manual = sum(len(r.manual) for r in results)
    edits = sum(len(r.changes) for r in results)
    verb = "Migrated" if applied else "Would migrate"
    parts = [f"{verb} {len(changed)} of {len(results)} file{'s' if len(results) != 1 else ''} ({edits} change{'s' if edits != 1 else ''})"]
    if manual:
        parts.append(f"{manual} manual item{'s' if manual != 1 else ''} to review (TODO(neuron-migrate ...) comments)")
    if errors:
        parts.append(f"{len(errors)} error{'s' if len(errors) != 1 else ''}")
    return "; ".join(parts) + "."


def _codes(result: FileResult) -> str:
    counts = Counter(change.code for change in result.changes)
    return ", ".join(f"{code} x{n}" if n > 1 else code for code, n in sorted(counts.items()))


def as_json(results: Sequence[FileResult], target: str) -> str:
    files: list[dict[str, Any]] = []
    for r in results:
        files.append(
            {
                "path": r.path,
                "changed": r.changed,
                "error": r.error,
                "changes": [{"code": c.code, "message": c.message} for c in r.changes],
                "manual": [
                    {
                        "code": m.code,
                        "message": m.message,
                        "location": {"row": m.line, "column": m.column},
                        **({"cell": m.cell} if m.cell is not None else {}),
                    }
                    for m in r.manual
                ],
                "notes": [{"code": n.code, "message": n.message} for n in r.notes],
            }
        )
    payload = {
        "tool": "neuron-migrate",
        "version": __version__,
        "target": target,
        "summary": {
            "files": len(results),
            "changed": sum(r.changed for r in results),
            "changes": sum(len(r.changes) for r in results),
            "manual": sum(len(r.manual) for r in results),
            "errors": sum(bool(r.error) for r in results),
        },
        "files": files,
    }
    return json.dumps(payload, indent=2) + "\n"


def as_markdown(results: Sequence[FileResult], target: str) -> str:
    out = [f"# Migration report ({target} target)", ""]
    out.append(summary(results, applied=True))
    out.append("")
    manual = [(r, m) for r in results for m in r.manual]
    if manual:
        out += ["## Needs attention", "", "| where | code | what |", "|---|---|---|"]
        for r, m in manual:
            message = m.message.replace("|", "\\|")
            where = location(r, m.line, m.column, m.cell).rsplit(":", 1)[0]
            out.append(f"| `{where}` | {m.code} | {message} |")
        out.append("")
    notes = [(r, n) for r in results for n in r.notes]
    if notes:
        out += ["## Behaviour that changed", ""]
        for r, n in notes:
            out.append(f"- `{r.path}` ({n.code}): {n.message}")
        out.append("")
    errors = [r for r in results if r.error]
    if errors:
        out += ["## Errors (files left unchanged)", ""]
        out += [f"- `{r.error}`" for r in errors]
        out.append("")
    changed = [r for r in results if r.changes]
    if changed:
        out += ["## Changes", ""]
        for r in changed:
            out.append(f"### `{r.path}` ({_codes(r)})")
            out.append("")
            for change in r.changes:
                out.append(f"- {change.code}: {change.message}")
            out.append("")
    return "\n".join(out)
