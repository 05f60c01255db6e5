"""What `check` prints: text (`path:line:col: CODE message`), JSON, SARIF 2.1.0, GitHub annotations,
statistics, and the closing summary.

JSON uses ruff's field names (`code`, `message`, `location`, `end_location`, `fix.applicability`,
`fix.edits`, `noqa_row`, `url`), plus `severity`, `context` (why it was raised there) and
`graph_breaks`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.checks.model import Diagnostic, FileReport
from neuron_migrate.checks.rules import by_code
from neuron_migrate.checks.rules.base import DOCS_URL
from neuron_migrate.core.wording import plural

FORMATS = ("text", "json", "sarif", "github")
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _findings(reports: Sequence[FileReport]) -> list[tuple[str, Diagnostic]]:
    return [(r.path, d) for r in reports for d in r.diagnostics]


def text_line(path: str, d: Diagnostic) -> str:
    mark = "[*] " if d.fix is not None and d.fix.safe else ""
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{path}:{cell}{d.line}:{d.column}: {d.code} {mark}{d.text}"


def as_text(reports: Sequence[FileReport]) -> str:
    return "".join(text_line(path, d) + "\n" for path, d in _findings(reports))


def statistics(reports: Sequence[FileReport]) -> str:
    counts = Counter(d.code for _, d in _findings(reports))
    fixable = {d.code for _, d in _findings(reports) if d.fix is not None and d.fix.safe}
    rules = by_code()
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = []
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        name = rules[code].name if code in rules else ""
        lines.append(f"{count:>{width}}  {code}  {'[*]' if code in fixable else '   '} {name}")
    return "".join(line + "\n" for line in lines)


def _json_record(path: str, d: Diagnostic) -> dict[str, Any]:
    rule = by_code().get(d.code)
    fix = None
    if d.fix is not None:
        fix = {
            "applicability": d.fix.applicability,
            "message": d.fix.message,
            "edits": [
                {
                    "content": e.content,
                    "location": {"row": e.row, "column": e.column},
                    "end_location": {"row": e.end_row, "column": e.end_column},
                }
                for e in d.fix.edits
            ],
        }
    return {
        "code": d.code,
        "name": rule.name if rule else None,
        "message": d.message,
        "context": d.where or None,
        "severity": d.severity.label,
        "filename": path,
        "location": {"row": d.line, "column": d.column},
        "end_location": {"row": d.end_line, "column": d.end_column},
        "fix": fix,
        "noqa_row": d.line,
        "url": DOCS_URL.format(code=d.code.lower()),
        "graph_breaks": list(rule.graph_breaks) if rule else [],
        "cell": d.cell,
    }


def as_json(reports: Sequence[FileReport]) -> str:
    return json.dumps([_json_record(path, d) for path, d in _findings(reports)], indent=2) + "\n"


def _uri(path: str) -> str:
    from pathlib import PurePath

    posix = PurePath(path).as_posix()
    return posix[2:] if posix.startswith("./") else posix


def as_sarif(reports: Sequence[FileReport], enabled: Sequence[str] | None = None) -> str:
    rules = by_code()
    codes = sorted(enabled if enabled is not None else rules)
    index = {code: i for i, code in enumerate(codes)}
    driver = {
        "name": "neuron-migrate",
        "version": __version__,
        "semanticVersion": __version__,
        "rules": [_sarif_rule(code, rules[code]) for code in codes],
    }
    results = [_sarif_result(path, d, index) for path, d in _findings(reports)]
    run = {"tool": {"driver": driver}, "columnKind": "unicodeCodePoints", "results": results}
    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(log, indent=2) + "\n"


def _sarif_rule(code: str, rule: Any) -> dict[str, Any]:
    """A SARIF reportingDescriptor: the rule's documentation and default level."""
    doc = (rule.__doc__ or "").strip()
    return {
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": doc.splitlines()[0] if doc else rule.summary},
        "help": {"text": doc, "markdown": doc},
        "defaultConfiguration": {"level": SARIF_LEVEL[rule.severity.label]},
        "properties": {"tags": [rule.name], "graphBreaks": list(rule.graph_breaks)},
    }


def _sarif_region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def _sarif_result(path: str, d: Diagnostic, index: dict[str, int]) -> dict[str, Any]:
    """One finding, with its fix as SARIF `fixes` when it has one."""
    region = _sarif_region(d.line, d.column, d.end_line, d.end_column)
    location = {"physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": region}}
    result: dict[str, Any] = {
        "ruleId": d.code,
        "level": SARIF_LEVEL[d.severity.label],
        "message": {"text": d.text},
        "locations": [location],
    }
    if d.code in index:
        result["ruleIndex"] = index[d.code]
    if d.cell is not None:
        result["properties"] = {"cell": d.cell}
    if d.fix is not None:
        replacements = [
            {
                "deletedRegion": _sarif_region(e.row, e.column, e.end_row, e.end_column),
                "insertedContent": {"text": e.content},
            }
            for e in d.fix.edits
        ]
        change = {"artifactLocation": {"uri": _uri(path)}, "replacements": replacements}
        result["fixes"] = [{"description": {"text": d.fix.message}, "artifactChanges": [change]}]
    return result


def _escape(value: str, property_value: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def as_github(reports: Sequence[FileReport]) -> str:
    lines = []
    for path, d in _findings(reports):
        level = GITHUB_LEVEL[d.severity.label]
        properties = ",".join(
            f"{key}={_escape(str(value), True)}"
            for key, value in (
                ("title", f"neuron-migrate ({d.code})"),
                ("file", path),
                ("line", d.line),
                ("col", d.column),
                ("endLine", d.end_line),
                ("endColumn", d.end_column),
            )
        )
        lines.append(f"::{level} {properties}::{_escape(text_line(path, d))}")
    return "".join(line + "\n" for line in lines)


def summary(reports: Sequence[FileReport], *, fixing: bool, diff: bool) -> str:
    """The closing line(s) for stderr."""
    remaining = sum(len(r.diagnostics) for r in reports)
    fixed = sum(r.fixes_applied for r in reports)
    safe = sum(1 for r in reports for d in r.diagnostics if d.fix is not None and d.fix.safe)
    unsafe = sum(1 for r in reports for d in r.diagnostics if d.fix is not None and not d.fix.safe)
    errors = sum(1 for r in reports if r.error)
    files = len(reports)
    if diff:
        changed = sum(1 for r in reports if r.changed)
        head = f"Would fix {plural(fixed, 'finding')} in {plural(changed, 'file')} ({files} checked)."
    elif remaining == 0 and fixed == 0:
        head = f"All checks passed ({plural(files, 'file')} checked)."
    else:
        head = f"Found {plural(remaining + fixed, 'finding')} in {plural(files, 'file')}"
        head += f" ({fixed} fixed, {remaining} remaining)." if fixing else "."
    lines = [head]
    if not diff and not fixing and safe:
        lines.append(f"[*] {safe} fixable with `--fix`.")
    if not diff and unsafe and not fixing:
        lines.append(f"{unsafe} more fixable with `--fix --unsafe-fixes`.")
    if errors:
        lines.append(f"{errors} file{'s' if errors != 1 else ''} could not be checked.")
    return "\n".join(lines) + "\n"
