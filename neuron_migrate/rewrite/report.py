"""What a rewrite run tells its user: a terminal summary, and Markdown or JSON migration reports."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.core import oldstack
from neuron_migrate.core.source import file_diff
from neuron_migrate.core.wording import plural
from neuron_migrate.rewrite.results import FileResult, ManualItem

RULES_URL = "docs/rules.md#{code}"  # in the neuron-migrate repository

# A file that still imports the old stack fails at start-up on TorchNeuron (ImportError).
_PACKAGES = "|".join(re.escape(p) for p in (*oldstack.PACKAGES, oldstack.OPTIMUM_NEURON))
_OLD_IMPORT = re.compile(
    rf"^[ \t]*(?:import|from)[ \t]+(?:{_PACKAGES})\b|^[ \t]*from[ \t]+optimum[ \t]+import[ \t]+neuron\b",
    re.MULTILINE,
)

# No static tool knows that a program runs: a status says only what was checked.
CHECKED = "migrated; imports and calls match the target libraries"
UNCHECKED = "migrated; not checked against the target libraries"
AFTER_TODOS = "needs review: TODOs left"
START_UP = "fails at start-up: still imports the old stack"
REFUSED = "refused, left unchanged"
UNTOUCHED = "nothing to migrate"

# What a person on TorchNeuron needs to know whatever the files held (see the rule docs).
PLATFORM_FACTS = (
    "TorchNeuron runs on Trn2 and Trn3 instances; Trn1 and Inf2 are not supported by it, so their "
    "users stay on the old stack for now.",
    "On Trainium, compile with `torch.compile(model, backend=\"neuron\", fullgraph=True)`: "
    "`fullgraph=True` raises on a graph break instead of silently splitting the model.",
    "Shapes must be static there: `dynamic=True` is rejected at compile time, and every new input "
    "shape compiles anew (pad to a few fixed sizes); a `mode=` other than `\"default\"` is ignored "
    "with a warning.",
)


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
    parts = [f"{verb} {len(changed)} of {plural(len(results), 'file')} ({plural(edits, 'change')})"]
    if manual:
        parts.append(f"{plural(manual, 'manual item')} to review (TODO(neuron-migrate ...) comments)")
    if errors:
        parts.append(plural(len(errors), "error"))
    return "; ".join(parts) + "."


def _codes(result: FileResult) -> str:
    counts = Counter(change.code for change in result.changes)
    return ", ".join(f"{code} x{n}" if n > 1 else code for code, n in sorted(counts.items()))


def file_status(result: FileResult) -> str:
    """Where a file stands after the rewrite, from what the rewrite produced."""
    if result.error:
        return REFUSED
    if _OLD_IMPORT.search(result.migrated):
        return START_UP
    if result.manual:
        return AFTER_TODOS
    if not result.changed:
        return UNTOUCHED
    checked = result.verification
    return CHECKED if checked is not None and checked.complete else UNCHECKED


def _why_unchecked(result: FileResult) -> str:
    checked = result.verification
    if checked is None:
        return "the check did not run (NM091 ignored)"
    if checked.unknown:
        return checked.unknown
    return "not installed where it was checked: " + ", ".join(checked.not_installed)


def _checked_against(result: FileResult) -> str:
    checked = result.verification
    return ", ".join(f"{name} {version}" for name, version in checked.versions.items()) if checked else ""


def as_json(results: Sequence[FileResult], target: str) -> str:
    files: list[dict[str, Any]] = []
    for r in results:
        files.append(
            {
                "path": r.path,
                "status": file_status(r),
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
                "checked_against": dict(r.verification.versions) if r.verification else None,
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
            "status": dict(Counter(file_status(r) for r in results)),
        },
        "files": files,
    }
    return json.dumps(payload, indent=2) + "\n"


def as_markdown(results: Sequence[FileResult], target: str) -> str:
    """The migration report: where each file stands, what to do first, the TODOs by kind."""
    out = [f"# Migration report ({target} target)", "", summary(results, applied=True), ""]
    out += _status_table(results)
    out += _do_first(results)
    out += _todos_by_kind(results)
    out += ["## Running on TorchNeuron", "", *(f"- {fact}" for fact in PLATFORM_FACTS), ""]
    changed = [r for r in results if r.changes]
    if changed:
        out += ["## Changes made", ""]
        for r in changed:
            out += [f"### `{r.path}` ({_codes(r)})", "", *(f"- {c.code}: {c.message}" for c in r.changes), ""]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _status_table(results: Sequence[FileResult]) -> list[str]:
    order = (START_UP, REFUSED, AFTER_TODOS, UNCHECKED, CHECKED, UNTOUCHED)
    rows = sorted(results, key=lambda r: (order.index(file_status(r)), r.path))
    out = ["## Where each file stands", "", "| file | status | TODOs | why |", "|---|---|---|---|"]
    for r in rows:
        status = file_status(r)
        if status == UNTOUCHED:
            continue
        why = r.error or ""
        if status == START_UP:
            why = "old-stack imports stay until the TODOs that use them are done"
        elif status == UNCHECKED:
            why = _why_unchecked(r)
        elif status == CHECKED:
            why = f"checked against {_checked_against(r)}" if r.verification and r.verification.versions else ""
        out.append(f"| `{r.path}` | {status} | {len(r.manual)} | {_cell(why)} |")
    untouched = sum(file_status(r) == UNTOUCHED for r in results)
    if untouched:
        out.append(f"| ({untouched} more) | {UNTOUCHED} | 0 | |")
    out += [
        "",
        "Checked means that every import of a target library resolves and every call to one fits "
        "its installed signature; whether a program computes what the original did is for "
        "`neuron-migrate validate OLD NEW` to show.",
    ]
    return [*out, ""]


def _do_first(results: Sequence[FileResult]) -> list[str]:
    """Ranked by impact: what stops a program from starting, then what changes its numbers."""
    out: list[str] = []
    blocked = [r for r in results if file_status(r) == START_UP]
    if blocked:
        out += ["1. **What breaks at start-up.** These files still import the old stack; do their "
                "TODOs on old-stack calls first, then delete the imports:"]
        out += [f"   - `{r.path}` ({len(r.manual)} TODOs)" for r in blocked]
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        for n in r.notes:
            notes[(n.code, n.message)].append(r.path)
    if notes:
        number = 2 if out else 1
        out.append(f"{number}. **What changes numbers, precision or launch.** The rewrite "
                   "changed behaviour here on purpose; check each against the original:")
        for (code, message), paths in notes.items():
            where = ", ".join(f"`{p}`" for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            out.append(f"   - {code}: {message} ({where})")
    if not out:
        return []
    return ["## Do first", "", *out, ""]


def _todos_by_kind(results: Sequence[FileResult]) -> list[str]:
    kinds: dict[tuple[str, str], list[tuple[FileResult, ManualItem]]] = defaultdict(list)
    for r in results:
        for m in r.manual:
            kinds[(m.code, m.message)].append((r, m))
    if not kinds:
        return []
    out = ["## TODOs by kind", "", "| code | what | count | where |", "|---|---|---|---|"]
    for (code, message), items in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        link = f"[{code}]({RULES_URL.format(code=code.lower())})"
        places = [location(r, m.line, m.column, m.cell).rsplit(":", 1)[0] for r, m in items]
        where = ", ".join(f"`{p}`" for p in places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
        out.append(f"| {link} | {_cell(message)} | {len(items)} | {where} |")
    return [*out, ""]
