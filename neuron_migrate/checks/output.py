"""What `check` prints: text (`path:line:col: CODE [*] severity: message`), full (the same with
the code frame and a preview of the fix, as ruff's `full`), JSON, SARIF 2.1.0, GitHub
annotations, statistics (text or JSON), the list of applied fixes, and the closing summary.

JSON uses ruff's field names (`code`, `message`, `location`, `end_location`, `fix.applicability`,
`fix.edits`, `noqa_row`, `url`), plus `severity`, `context` (why it was raised there) and
`graph_breaks`; JSON statistics use ruff's (`code`, `name`, `count`, `fixable`,
`fixable_count`) plus `severity`.
"""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.checks.model import Diagnostic, FileReport
from neuron_migrate.checks.rules import by_code
from neuron_migrate.checks.rules.base import rule_url
from neuron_migrate.core.wording import plural

FORMATS = ("text", "concise", "full", "json", "sarif", "github")
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _findings(reports: Sequence[FileReport]) -> list[tuple[str, Diagnostic]]:
    return [(r.path, d) for r in reports for d in r.diagnostics]


def _place(path: str, d: Diagnostic) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{path}:{cell}{d.line}:{d.column}"


def _safe_fix(d: Diagnostic) -> bool:
    return d.fix is not None and d.fix.safe


def text_line(path: str, d: Diagnostic) -> str:
    mark = "[*] " if _safe_fix(d) else ""
    return f"{_place(path, d)}: {d.code} {mark}{d.severity.label}: {d.text}"


def as_text(reports: Sequence[FileReport]) -> str:
    return "".join(text_line(path, d) + "\n" for path, d in _findings(reports))


def as_full(reports: Sequence[FileReport]) -> str:
    """ruff's `full` format: a header, the code frame, where it was found, the fix as a diff."""
    blocks = []
    for path, d in _findings(reports):
        mark = "[*] " if _safe_fix(d) else ""
        lines = [f"{d.code} {mark}{d.severity.label}: {d.message}", f" --> {_place(path, d)}"]
        if d.frame:
            lines.append(d.frame.rstrip("\n"))
        if d.where:
            lines.append(f"  = {d.severity.label} here: {d.where}")
        url = rule_url(d.code)
        if url:
            lines.append(f"  = docs: {url}")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def code_frame(text: str, d: Diagnostic) -> str:
    """The lines of `d` with a line either side and carets under it, then its fix as a diff."""
    source = text.splitlines()
    first, last = d.line, max(d.end_line, d.line)
    shown = range(max(1, first - 1), min(len(source), last + 1) + 1)
    width = len(str(shown.stop - 1)) if shown else 1
    out = [f"{'':{width}} |"]
    for number in shown:
        line = source[number - 1]
        out.append(f"{number:>{width}} | {line}".rstrip())
        if first <= number <= last:
            start = d.column - 1 if number == first else len(line) - len(line.lstrip())
            end = d.end_column - 1 if number == last else len(line)
            if end > start:
                out.append(f"{'':{width}} | {' ' * start}{'^' * (end - start)}")
    out.append(f"{'':{width}} |")
    if d.fix is not None:
        out.append(f"help: {d.fix.message}")
        out.extend(_fix_preview(text, d, width))
        if not d.fix.safe:
            out.append("note: This is an unsafe fix and may change runtime behavior")
    return "\n".join(out) + "\n"


def _fix_preview(text: str, d: Diagnostic, width: int) -> list[str]:
    """The lines the fix touches, before (`-`) and after (`+`), ruff style."""
    assert d.fix is not None
    edits = sorted(d.fix.edits, key=lambda e: e.start)
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    first_line = max(1, min(e.row for e in edits))
    last_line = max(e.end_row for e in edits)
    begin = starts[first_line - 1]
    end = starts[last_line] if last_line < len(starts) else len(text)
    if edits[-1].end > end:  # an edit that ends at the start of the next line
        end = starts[min(len(starts) - 1, last_line + 1)] if last_line + 1 < len(starts) else len(text)
    before = text[begin:end]
    after = before
    for edit in reversed(edits):
        after = after[: edit.start - begin] + edit.content + after[edit.end - begin :]
    width = max(width, len(str(last_line + 1)))
    out = [f"{'':{width}} |"]
    for line in before.splitlines():
        out.append(f"{'':{width}} - {line}".rstrip())
    for offset, line in enumerate(after.splitlines()):
        out.append(f"{first_line + offset:>{width}} + {line}".rstrip())
    out.append(f"{'':{width}} |")
    return out


def _statistics_rows(reports: Sequence[FileReport]) -> list[dict[str, Any]]:
    """One row per rule and severity (a contextual rule weighs differently by place)."""
    counts = Counter((d.code, d.severity) for _, d in _findings(reports))
    fixable = Counter((d.code, d.severity) for _, d in _findings(reports) if _safe_fix(d))
    rules = by_code()
    rows = []
    for (code, severity), count in sorted(
        counts.items(), key=lambda item: (-item[1], -item[0][1], item[0][0])
    ):
        rows.append(
            {
                "code": code,
                "name": rules[code].name if code in rules else "",
                "severity": severity.label,
                "count": count,
                "fixable": fixable[(code, severity)] > 0,
                "fixable_count": fixable[(code, severity)],
            }
        )
    return rows


def statistics(reports: Sequence[FileReport], output_format: str = "text") -> str:
    rows = _statistics_rows(reports)
    if output_format == "json":
        return json.dumps(rows, indent=2) + "\n"
    width = max((len(str(r["count"])) for r in rows), default=1)
    severity = max((len(r["severity"]) for r in rows), default=1)
    return "".join(
        f"{r['count']:>{width}}\t{r['code']}\t{r['severity']:<{severity}}\t"
        f"{'[*]' if r['fixable'] else '[ ]'} {r['name']}\n"
        for r in rows
    )


def fixes_applied(reports: Sequence[FileReport]) -> str:
    """ruff's `--show-fixes`: what `--fix` changed, per file and rule."""
    fixed = [r for r in reports if r.fixed_codes]
    if not fixed:
        return ""
    rules = by_code()
    total = sum(sum(r.fixed_codes.values()) for r in fixed)
    lines = [f"Fixed {plural(total, 'finding')}:"]
    for report in fixed:
        lines.append(f"- {report.path}:")
        for code, count in sorted(report.fixed_codes.items()):
            name = rules[code].name if code in rules else ""
            lines.append(f"    {count} × {code} ({name})")
    return "\n".join(lines) + "\n"


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
        "url": rule_url(d.code),
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
    """A SARIF reportingDescriptor: the rule's documentation, its link and default level."""
    doc = inspect.cleandoc(rule.__doc__ or "")
    descriptor: dict[str, Any] = {
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": _section(doc, "What it does") or rule.summary},
        "help": {"text": _plain(doc), "markdown": doc},
        "defaultConfiguration": {"level": SARIF_LEVEL[rule.severity.label]},
        "properties": {"tags": [rule.name], "graphBreaks": list(rule.graph_breaks)},
    }
    url = rule_url(code)
    if url:
        descriptor["helpUri"] = url
    return descriptor


def _section(doc: str, title: str) -> str:
    """The paragraph under `## title`, joined into one line."""
    lines = doc.splitlines()
    try:
        start = lines.index(f"## {title}") + 1
    except ValueError:
        return ""
    body = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        body.append(line.strip())
    return " ".join(" ".join(body).split())


def _plain(doc: str) -> str:
    """Markdown for readers of plain text: headings as `Title:`, code fences dropped."""
    out = []
    for line in doc.splitlines():
        if line.startswith("```"):
            continue
        out.append(f"{line[3:]}:" if line.startswith("## ") else line)
    return "\n".join(out).strip() + "\n"


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


def summary(
    reports: Sequence[FileReport], *, fixing: bool, diff: bool, noqa_added: int | None = None
) -> str:
    """The closing line(s) for stderr: counts of findings and of the files that have them."""
    remaining = sum(len(r.diagnostics) for r in reports)
    fixed = sum(r.fixes_applied for r in reports)
    safe = sum(1 for r in reports for d in r.diagnostics if _safe_fix(d))
    unsafe = sum(1 for r in reports for d in r.diagnostics if d.fix is not None and not d.fix.safe)
    errors = sum(1 for r in reports if r.error)
    files = len(reports)
    with_findings = sum(1 for r in reports if r.diagnostics or r.fixes_applied)
    if noqa_added is not None:  # --add-noqa
        head = f"Added {plural(noqa_added, 'noqa directive')} ({plural(files, 'file')} checked)."
    elif diff:
        changed = sum(1 for r in reports if r.changed)
        head = f"Would fix {plural(fixed, 'finding')} in {plural(changed, 'file')} ({files} checked)."
    elif remaining == 0 and fixed == 0:
        head = f"All checks passed ({plural(files, 'file')} checked)."
    else:
        head = f"Found {plural(remaining + fixed, 'finding')} in {plural(with_findings, 'file')}"
        head += f" ({files} checked"
        head += f"; {fixed} fixed, {remaining} remaining)." if fixing else ")."
    lines = [head]
    if not diff and not fixing and safe and noqa_added is None:
        lines.append(f"[*] {safe} fixable with `--fix`.")
    if not diff and unsafe and not fixing and noqa_added is None:
        lines.append(f"{unsafe} more fixable with `--fix --unsafe-fixes`.")
    if errors:
        lines.append(f"{errors} file{'s' if errors != 1 else ''} could not be checked.")
    return "\n".join(lines) + "\n"
