"""HTML and text renderings of a migration: side-by-side and unified diffs, findings, summaries.

Everything is styled inline (no `<style>` blocks, no classes the page must define), so the output
reads the same in JupyterLab's light and dark themes, in a trusted or untrusted notebook, and in
static renderings such as nbconvert's HTML export. Classes are still set (`nm-diff`, `nm-add`,
...) so that tests and user CSS can find the parts.
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from neuron_migrate.core import source
from neuron_migrate.core.wording import plural
from neuron_migrate.rewrite.results import Change, ManualItem, Note

# Backgrounds with transparency, so that they tint whatever theme they sit on.
ADDED = "rgba(46, 160, 67, 0.18)"
ADDED_STRONG = "rgba(46, 160, 67, 0.45)"
REMOVED = "rgba(248, 81, 73, 0.18)"
REMOVED_STRONG = "rgba(248, 81, 73, 0.45)"
MUTED = "opacity: 0.6;"
MONO = "font-family: var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, monospace); font-size: 12px;"
SIMILAR = 0.6  # lines at least this alike (difflib's ratio) get their changed characters marked
VERDICT_COLOURS = {"ok": "#2ea043", "warn": "#d29922", "bad": "#f85149"}


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def prose(text: str) -> str:
    """A message as HTML, its `backticked` parts as code."""
    parts = escape(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return escape(text)
    return "".join(
        f"<code>{part}</code>" if index % 2 else part for index, part in enumerate(parts)
    )


def badge(text: str, tone: str) -> str:
    colour = VERDICT_COLOURS[tone]
    return (
        f'<span class="nm-badge nm-{tone}" style="display: inline-block; padding: 1px 8px; '
        f"border-radius: 10px; border: 1px solid {colour}; color: {colour}; font-weight: 600; "
        f'font-size: 12px;">{escape(text)}</span>'
    )


# -- diffs ---------------------------------------------------------------------------------------


def unified_diff(
    old: str, new: str, old_label: str = "original", new_label: str = "migrated"
) -> str:
    """A plain unified diff (what `neuron-migrate rewrite --diff` prints)."""
    return source.unified_diff(old, new, old_label, new_label, mark_missing_newline=False)


def _intraline(old: str, new: str) -> tuple[str, str]:
    """Both lines as HTML, with the characters that differ marked more strongly (only when the
    lines are alike: marking characters between unrelated lines is noise)."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    if matcher.ratio() < SIMILAR:
        return escape(old), escape(new)
    left, right = [], []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        a, b = escape(old[i1:i2]), escape(new[j1:j2])
        if op == "equal":
            left.append(a)
            right.append(b)
            continue
        if a:
            left.append(
                f'<span style="background: {REMOVED_STRONG}; border-radius: 2px;">{a}</span>'
            )
        if b:
            right.append(
                f'<span style="background: {ADDED_STRONG}; border-radius: 2px;">{b}</span>'
            )
    return "".join(left), "".join(right)


@dataclass
class _Row:
    kind: str  # "equal" | "delete" | "insert" | "replace" | "skip"
    old_no: int | None = None
    old: str = ""
    new_no: int | None = None
    new: str = ""
    skipped: int = 0


def _rows(old: list[str], new: list[str], context: int | None) -> list[_Row]:
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    groups = (
        [matcher.get_opcodes()] if context is None else list(matcher.get_grouped_opcodes(context))
    )
    rows: list[_Row] = []
    shown_until = 0  # old-side line index up to which rows were emitted
    for group in groups:
        first = group[0][1]
        if first > shown_until:
            rows.append(_Row("skip", skipped=first - shown_until))
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                rows += [
                    _Row("equal", i + 1, old[i], j + 1, new[j])
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                ]
            elif op == "delete":
                rows += [_Row("delete", i + 1, old[i]) for i in range(i1, i2)]
            elif op == "insert":
                rows += [_Row("insert", new_no=j + 1, new=new[j]) for j in range(j1, j2)]
            else:
                width = max(i2 - i1, j2 - j1)
                for k in range(width):
                    i, j = i1 + k, j1 + k
                    rows.append(
                        _Row(
                            "replace",
                            i + 1 if i < i2 else None,
                            old[i] if i < i2 else "",
                            j + 1 if j < j2 else None,
                            new[j] if j < j2 else "",
                        )
                    )
        shown_until = group[-1][2]
    if context is not None and groups and shown_until < len(old):
        rows.append(_Row("skip", skipped=len(old) - shown_until))
    return rows


_CELL = "padding: 0 6px; white-space: pre-wrap; word-break: break-all; vertical-align: top; text-align: left; border: none;"
_NUMBER = f"padding: 0 6px; text-align: right; vertical-align: top; user-select: none; border: none; {MUTED}"


def side_by_side(
    old: str,
    new: str,
    old_label: str = "original",
    new_label: str = "migrated",
    context: int | None = None,
) -> str:
    """An HTML table: the old text left, the new right, changed characters marked.

    `context=None` shows every line (right for a cell); a number keeps that many unchanged lines
    around each change and folds the rest (right for a whole file).
    """
    rows = _rows(old.splitlines(), new.splitlines(), context)
    body = []
    for row in rows:
        if row.kind == "skip":
            body.append(
                f'<tr class="nm-skip"><td colspan="4" style="{_CELL} text-align: center; {MUTED}">'
                f"⋯ {plural(row.skipped, 'unchanged line')} ⋯</td></tr>"
            )
            continue
        left, right = escape(row.old), escape(row.new)
        left_bg = right_bg = ""
        if row.kind == "replace" and row.old_no and row.new_no:
            left, right = _intraline(row.old, row.new)
        if row.kind in ("delete", "replace") and row.old_no:
            left_bg = f"background: {REMOVED};"
        if row.kind in ("insert", "replace") and row.new_no:
            right_bg = f"background: {ADDED};"
        cls = {"equal": "nm-same", "delete": "nm-del", "insert": "nm-add", "replace": "nm-chg"}[
            row.kind
        ]
        body.append(
            f'<tr class="{cls}">'
            f'<td style="{_NUMBER} {left_bg}">{row.old_no or ""}</td>'
            f'<td style="{_CELL} {left_bg} width: 50%;">{left}</td>'
            f'<td style="{_NUMBER} {right_bg} border-left: 1px solid rgba(128,128,128,0.35);">{row.new_no or ""}</td>'
            f'<td style="{_CELL} {right_bg} width: 50%;">{right}</td></tr>'
        )
    header = (
        f'<tr><th colspan="2" style="{_CELL} font-weight: 600;">{escape(old_label)}</th>'
        f'<th colspan="2" style="{_CELL} font-weight: 600; border-left: 1px solid rgba(128,128,128,0.35);">'
        f"{escape(new_label)}</th></tr>"
    )
    return (
        f'<table class="nm-diff nm-side" style="border-collapse: collapse; width: 100%; '
        f'table-layout: fixed; margin: 4px 0; line-height: 1.45; {MONO}">'
        f'<colgroup><col style="width: 3.5em"><col><col style="width: 3.5em"><col></colgroup>'
        f"<thead>{header}</thead><tbody>{''.join(body)}</tbody></table>"
    )


def unified_html(
    old: str, new: str, old_label: str = "original", new_label: str = "migrated"
) -> str:
    """The unified diff, coloured line by line."""
    lines = []
    for line in unified_diff(old, new, old_label, new_label).splitlines():
        style = ""
        if line.startswith(("+++", "---")):
            style = "font-weight: 600;"
        elif line.startswith("@@"):
            style = MUTED
        elif line.startswith("+"):
            style = f"background: {ADDED};"
        elif line.startswith("-"):
            style = f"background: {REMOVED};"
        lines.append(f'<div style="{style} white-space: pre-wrap;">{escape(line) or " "}</div>')
    return f'<div class="nm-diff nm-unified" style="margin: 4px 0; line-height: 1.45; {MONO}">{"".join(lines)}</div>'


def code_block(text: str, title: str | None = None, open_: bool = False) -> str:
    pre = f'<pre style="margin: 4px 0; padding: 6px; {MONO} white-space: pre-wrap;">{escape(text)}</pre>'
    if title is None:
        return pre
    return f"<details{' open' if open_ else ''}><summary>{escape(title)}</summary>{pre}</details>"


# -- findings ------------------------------------------------------------------------------------


def rule_summary(code: str) -> str:
    """One line on what a rule is about, for a tooltip; empty when the code is unknown."""
    from neuron_migrate.catalog import all_rules

    for rule in all_rules():
        if rule.code == code:
            return f"{rule.code} {rule.name}: {rule.summary} (neuron-migrate rules {rule.code})"
    return ""


def code_tag(code: str) -> str:
    return (
        f'<code class="nm-code" title="{escape(rule_summary(code))}" style="font-weight: 600;">'
        f"{escape(code)}</code>"
    )


def items_list(title: str, rows: Iterable[str]) -> str:
    rows = list(rows)
    if not rows:
        return ""
    items = "".join(f'<li style="margin: 1px 0;">{row}</li>' for row in rows)
    return f'<div style="margin-top: 6px;"><b>{escape(title)}</b><ul style="margin: 2px 0 0 0;">{items}</ul></div>'


def migration_findings_html(
    changes: Sequence[Change], manual: Sequence[ManualItem], notes: Sequence[Note]
) -> str:
    # Identical changes (one per call site) read better counted once.
    counted: dict[tuple[str, str], int] = {}
    for change in changes:
        counted[(change.code, change.message)] = counted.get((change.code, change.message), 0) + 1
    parts = [
        items_list(
            "Changes",
            (
                f"{code_tag(code)} {prose(message)}{f' (×{n})' if n > 1 else ''}"
                for (code, message), n in counted.items()
            ),
        ),
        items_list(
            "Left for you (TODO comments in the code)",
            (f"{code_tag(m.code)} {_where(m)}{prose(m.message)}" for m in manual),
        ),
        items_list("Notes", (f"{code_tag(n.code)} {prose(n.message)}" for n in notes)),
    ]
    return "".join(parts)


def _where(item: ManualItem) -> str:
    if not item.line:
        return ""
    cell = f"cell {item.cell}:" if item.cell is not None else ""
    return f'<span style="{MUTED}">{cell}{item.line}:{item.column}</span> '


def migration_findings_text(
    changes: Sequence[Change], manual: Sequence[ManualItem], notes: Sequence[Note]
) -> str:
    lines = []
    seen: set[tuple[str, str]] = set()
    for change in changes:
        if (change.code, change.message) not in seen:
            seen.add((change.code, change.message))
            lines.append(f"  change  {change.code} {change.message}")
    for m in manual:
        where = f"{m.line}:{m.column}: " if m.line else ""
        lines.append(f"  TODO    {m.code} {where}{m.message}")
    lines += [f"  note    {n.code} {n.message}" for n in notes]
    return "\n".join(lines)


@dataclass
class Diff:
    """Two versions of a text, shown as a diff: side by side (or unified) in a notebook, a unified
    diff everywhere else.

        Diff(before, after, "train.py (GPU)", "train.py (fixed)")
    """

    old: str
    new: str
    old_label: str = "before"
    new_label: str = "after"
    view: str = "side"
    context: int | None = 3  # unchanged lines kept around each change; None: all

    def _repr_html_(self) -> str:
        if self.old == self.new:
            return f"<i>{escape(self.old_label)} and {escape(self.new_label)} are the same</i>"
        if self.view == "unified":
            return unified_html(self.old, self.new, self.old_label, self.new_label)
        return side_by_side(self.old, self.new, self.old_label, self.new_label, self.context)

    def __repr__(self) -> str:
        if self.old == self.new:
            return f"{self.old_label} and {self.new_label} are the same"
        return unified_diff(self.old, self.new, self.old_label, self.new_label).rstrip("\n")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
