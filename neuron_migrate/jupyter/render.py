"""HTML and text renderings of a migration: diffs, findings, headlines, for every Jupyter output.

One stylesheet (`STYLES`) serves every output. What a reader needs to understand an output (added
and removed lines, the changed words, monospace, wrapping) is written inline on the elements, so
it survives sanitisers (an untrusted notebook, GitHub, nbviewer) and static exports; the rest
(syntax colours, the unified layout of a side-by-side diff in a narrow output, folding) is a
`<style>` block that each output carries, scoped to `.nm-out`, and that a sanitiser may drop
without losing meaning. Colours are JupyterLab's theme variables, with fallbacks.
"""

from __future__ import annotations

import difflib
import html
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from neuron_migrate.core import source
from neuron_migrate.core.wording import plural
from neuron_migrate.rewrite.results import Change, ManualItem, Note

# Backgrounds with transparency, so that they tint whatever theme they sit on.
ADDED = "rgba(46, 160, 67, 0.15)"
ADDED_WORD = "rgba(46, 160, 67, 0.40)"
REMOVED = "rgba(248, 81, 73, 0.15)"
REMOVED_WORD = "rgba(248, 81, 73, 0.40)"
TONES = {"ok": "#2ea043", "warn": "#d29922", "bad": "#f85149"}
SIMILAR = 0.5  # lines at least this alike (difflib's ratio) get their changed words marked
FOLDED = 8  # an added definition at least this long (a helper the migration writes) is folded
NARROW = 760  # px: narrower than this, a side-by-side diff shows one column (unified)

MONO = (
    "font-family: var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, monospace); "
    "font-size: 12px; line-height: 1.45;"
)
MUTED = "opacity: 0.6;"
# JupyterLab right-aligns table cells in outputs: code must say left.
_CODE = "text-align: left; vertical-align: top; white-space: pre-wrap; overflow-wrap: break-word;"
_NUMBER = f"text-align: right; vertical-align: top; {MUTED}"

# What a reader needs to read an output, written on the elements themselves.
STYLES = {
    "nm-out": "container-type: inline-size; margin: 2px 0;",
    "nm-diff": f"border-collapse: collapse; width: 100%; table-layout: fixed; margin: 4px 0; {MONO}",
    "nm-no": _NUMBER,
    "nm-code": _CODE,
    "nm-head": "text-align: left; font-weight: 600;",
    "nm-skip": f"text-align: center; {MUTED}",
    "nm-old-line": f"background: {REMOVED};",
    "nm-new-line": f"background: {ADDED};",
    "nm-w-del": f"background: {REMOVED_WORD}; border-radius: 2px;",
    "nm-w-add": f"background: {ADDED_WORD}; border-radius: 2px;",
    "nm-pre": f"margin: 4px 0; padding: 6px; {MONO} white-space: pre-wrap; overflow-wrap: break-word;",
    "nm-actions": "display: none;",  # shown by the JupyterLab piece, which makes the buttons work
}
# The rest, one `<style>` block per output, scoped to it: syntax colours (JupyterLab's editor
# theme), a side-by-side diff shown as one column where the output is narrow, the buttons.
STYLESHEET = f"""
.nm-out .nm-t-k {{ color: var(--jp-mirror-editor-keyword-color, #008000); font-weight: 600; }}
.nm-out .nm-t-s {{ color: var(--jp-mirror-editor-string-color, #ba2121); }}
.nm-out .nm-t-c {{ color: var(--jp-mirror-editor-comment-color, #408080); font-style: italic; }}
.nm-out .nm-t-m {{ color: var(--jp-mirror-editor-number-color, #080); }}
.nm-out .nm-t-b {{ color: var(--jp-mirror-editor-builtin-color, #008000); }}
.nm-out .nm-t-f {{ color: var(--jp-mirror-editor-def-color, #0000ff); }}
.nm-out .nm-t-d {{ color: var(--jp-mirror-editor-meta-color, #aa22ff); }}
.nm-out .nm-t-o {{ color: var(--jp-mirror-editor-operator-color, #aa22ff); }}
.nm-out .nm-diff td, .nm-out .nm-diff th {{ padding: 0 6px; border: none; tab-size: 4; }}
.nm-out .nm-diff td.nm-no {{ padding: 0 4px 0 0; user-select: none; }}
.nm-out .nm-diff tbody tr, .nm-out .nm-diff tbody tr:hover {{ background: transparent; }}
.nm-out td.nm-new, .nm-out th.nm-new {{ border-left: 1px solid rgba(128, 128, 128, 0.35); }}
.nm-out details.nm-fold > summary {{ cursor: pointer; {MUTED} }}
.nm-out .nm-actions button {{ margin: 4px 6px 4px 0; }}
@container (max-width: {NARROW}px) {{
  .nm-out table.nm-auto colgroup {{ display: none; }}
  .nm-out table.nm-auto, .nm-out table.nm-auto thead, .nm-out table.nm-auto tbody {{ display: block; }}
  .nm-out table.nm-auto tr {{ display: grid; grid-template-columns: 2.6em minmax(0, 1fr); }}
  .nm-out table.nm-auto th {{ grid-column: 1 / -1; }}
  .nm-out table.nm-auto tr.nm-skip td, .nm-out table.nm-auto tr.nm-fold td {{ grid-column: 1 / -1; }}
  .nm-out table.nm-auto td.nm-new {{ border-left: none; }}
  .nm-out table.nm-auto tr.nm-same td.nm-old, .nm-out table.nm-auto td.nm-empty {{ display: none; }}
}}
"""


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def attrs(*classes: str) -> str:
    """`class="..." style="..."` for elements of these classes, their styles written inline."""
    style = " ".join(STYLES[c] for c in classes if c in STYLES)
    return f'class="{" ".join(classes)}"' + (f' style="{style}"' if style else "")


def output(body: str) -> str:
    """One output: its content, in the element its stylesheet is scoped to."""
    return f"<div {attrs('nm-out')}><style>{STYLESHEET}</style>{body}</div>"


def prose(text: str) -> str:
    """A message as HTML, its `backticked` parts as code."""
    parts = escape(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return escape(text)
    return "".join(
        f"<code>{part}</code>" if index % 2 else part for index, part in enumerate(parts)
    )


def badge(text: str, tone: str) -> str:
    colour = TONES[tone]
    return (
        f'<span class="nm-badge nm-{tone}" style="display: inline-block; padding: 1px 8px; '
        f"border-radius: 10px; border: 1px solid {colour}; color: {colour}; font-weight: 600; "
        f'font-size: 12px;">{escape(text)}</span>'
    )


def headline(word: str, tone: str, text: str) -> str:
    return (
        f'<div class="nm-headline" style="margin: 2px 0;">{badge(word, tone)} '
        f"<b>{prose(text)}</b></div>"
    )


# -- syntax and words ----------------------------------------------------------------------------

_WORD = re.compile(r"\w+|\s+|[^\w\s]")


def _token_class(kind: Any) -> str:
    from pygments import token

    for base, name in (
        (token.Comment, "c"),
        (token.String, "s"),
        (token.Number, "m"),
        (token.Keyword, "k"),
        (token.Name.Builtin, "b"),
        (token.Name.Function, "f"),
        (token.Name.Class, "f"),
        (token.Name.Decorator, "d"),
        (token.Operator.Word, "k"),
        (token.Operator, "o"),
    ):
        if kind in base:
            return name
    return ""


def highlight(text: str) -> list[list[tuple[str, str]]]:
    """The lines of `text` (as `str.splitlines` cuts them), each a list of (class, piece):
    Python and IPython's syntax, coloured by the stylesheet; plain where Pygments is missing."""
    rows = text.splitlines()
    try:
        from IPython.lib.lexers import IPython3Lexer
        from pygments import lex

        lexer = IPython3Lexer(stripnl=False, ensurenl=False)
        tokens = [(_token_class(kind), value) for kind, value in lex("\n".join(rows), lexer)]
    except ImportError:
        tokens = [("", "\n".join(rows))]
    lines: list[list[tuple[str, str]]] = [[]]
    for kind, value in tokens:
        for number, piece in enumerate(value.split("\n")):
            if number:
                lines.append([])
            if piece:
                lines[-1].append((kind, piece))
    lines += [[] for _ in range(len(rows) - len(lines))]
    return lines[: len(rows)]


def _marked_ranges(old: str, new: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The character ranges of the words that differ between two alike lines (none when the
    lines are unrelated: marking words between them is noise)."""
    if difflib.SequenceMatcher(None, old, new, autojunk=False).ratio() < SIMILAR:
        return [], []
    a, b = _WORD.findall(old), _WORD.findall(new)
    starts_a = [0]
    for word in a:
        starts_a.append(starts_a[-1] + len(word))
    starts_b = [0]
    for word in b:
        starts_b.append(starts_b[-1] + len(word))
    left, right = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if i2 > i1 and "".join(a[i1:i2]).strip():
            left.append((starts_a[i1], starts_a[i2]))
        if j2 > j1 and "".join(b[j1:j2]).strip():
            right.append((starts_b[j1], starts_b[j2]))
    return left, right


def _line_html(pieces: list[tuple[str, str]], marks: list[tuple[int, int]], mark: str) -> str:
    """A line as HTML: its syntax classes, and each run of characters in `marks` in one `mark`
    span."""
    out: list[tuple[bool, str]] = []
    position = 0
    for kind, text in pieces:
        end = position + len(text)
        cuts = sorted({position, end, *(p for r in marks for p in r if position < p < end)})
        for start, stop in itertools.pairwise(cuts):
            piece = escape(text[start - position : stop - position])
            if kind:
                piece = f'<span class="nm-t-{kind}">{piece}</span>'
            out.append((any(a <= start and stop <= b for a, b in marks), piece))
        position = end
    return "".join(
        f"<span {attrs(mark)}>{''.join(p for _, p in run)}</span>"
        if inside
        else "".join(p for _, p in run)
        for inside, run in (
            (key, list(group)) for key, group in itertools.groupby(out, key=lambda x: x[0])
        )
    )


# -- diffs ---------------------------------------------------------------------------------------


def unified_diff(
    old: str, new: str, old_label: str = "original", new_label: str = "migrated"
) -> str:
    """A plain unified diff (what `neuron-migrate rewrite --diff` prints)."""
    return source.unified_diff(old, new, old_label, new_label, mark_missing_newline=False)


@dataclass
class _Row:
    kind: str  # "equal" | "delete" | "insert" | "replace" | "skip" | "fold"
    old_no: int | None = None
    new_no: int | None = None
    skipped: int = 0
    folded: tuple[int, int] = (0, 0)  # "fold": the new lines [start, end) of an added definition


def _long_definitions(lines: list[str], start: int, end: int) -> list[tuple[int, int]]:
    """The long top-level definitions among added lines [start, end) (helpers the migration
    writes, such as `DeviceLoader`), as [first, last) line ranges."""
    found = []
    line = start
    while line < end:
        if re.match(r"(?:class|def|async def) \w", lines[line]) or lines[line].startswith("@"):
            last = line + 1
            while last < end and (not lines[last].strip() or lines[last][:1] in " \t)"):
                last += 1
            if last - line >= FOLDED:  # with the blank lines that follow it
                found.append((line, last))
            line = max(last, line + 1)
        else:
            line += 1
    return found


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
                    _Row("equal", i + 1, j + 1)
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                ]
            elif op == "delete":
                rows += [_Row("delete", i + 1) for i in range(i1, i2)]
            else:
                rows += _changed(
                    old, new, i1, i2, j1, j2, "insert" if op == "insert" else "replace"
                )
        shown_until = group[-1][2]
    if context is not None and groups and shown_until < len(old):
        rows.append(_Row("skip", skipped=len(old) - shown_until))
    return rows


def _changed(
    old: list[str], new: list[str], i1: int, i2: int, j1: int, j2: int, kind: str
) -> list[_Row]:
    """Old lines [i1, i2) replaced by new lines [j1, j2): the long definitions among the new lines
    folded where they stand, the other lines paired with the old lines they are most alike."""
    folds = _long_definitions(new, j1, j2)
    folded = {j for first, last in folds for j in range(first, last)}
    pairs = _align(old, new, list(range(i1, i2)), [j for j in range(j1, j2) if j not in folded])
    rows: list[_Row] = []
    for i, j in pairs:
        while folds and j is not None and j > folds[0][0]:
            rows.append(_Row("fold", folded=folds.pop(0)))
        rows.append(_Row(kind, None if i is None else i + 1, None if j is None else j + 1))
    return rows + [_Row("fold", folded=fold) for fold in folds]


def _align(
    old: list[str], new: list[str], olds: list[int], news: list[int]
) -> list[tuple[int | None, int | None]]:
    """Old and new lines paired in order, each old line with the new line most like it (as
    difflib's Differ pairs them); unpaired lines alone, removed before added."""
    if not olds or not news:
        return [(i, None) for i in olds] + [(None, j) for j in news]
    best, pair = SIMILAR, None
    if len(olds) * len(news) <= 400:
        matcher = difflib.SequenceMatcher(autojunk=False)
        for j in news:
            matcher.set_seq2(new[j])
            for i in olds:
                matcher.set_seq1(old[i])
                if matcher.real_quick_ratio() > best and matcher.quick_ratio() > best:
                    ratio = matcher.ratio()
                    if ratio > best:
                        best, pair = ratio, (i, j)
    if pair is None:
        if len(olds) * len(news) > 400:  # too many to compare: in order
            return [(i, j) for i, j in itertools.zip_longest(olds, news)]
        return [(i, None) for i in olds] + [(None, j) for j in news]
    i, j = pair
    before = _align(old, new, [k for k in olds if k < i], [k for k in news if k < j])
    after = _align(old, new, [k for k in olds if k > i], [k for k in news if k > j])
    return [*before, (i, j), *after]


def _fold_html(new: list[str], coloured: list[list[tuple[str, str]]], first: int, last: int) -> str:
    name = re.sub(r"[(:].*", "", new[first] if not new[first].startswith("@") else new[first + 1])
    while last > first and not new[last - 1].strip():
        last -= 1
    code = "\n".join(_line_html(coloured[j], [], "") for j in range(first, last))
    return (
        f'<details class="nm-fold"><summary><code>{escape(name.strip())}</code>: '
        f"{plural(last - first, 'added line')} ({first + 1}-{last})</summary>"
        f"<pre {attrs('nm-pre', 'nm-new-line')}>{code}</pre></details>"
    )


class _Sides:
    """Both texts, split into lines and coloured once."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old.splitlines(), new.splitlines()
        self.old_colour, self.new_colour = highlight(old), highlight(new)

    def pair(self, row: _Row) -> tuple[str, str]:
        """The old and the new line of a row as HTML, their changed words marked."""
        old_marks: list[tuple[int, int]] = []
        new_marks: list[tuple[int, int]] = []
        if row.kind == "replace" and row.old_no and row.new_no:
            old_marks, new_marks = _marked_ranges(
                self.old[row.old_no - 1], self.new[row.new_no - 1]
            )
        left = (
            _line_html(self.old_colour[row.old_no - 1], old_marks, "nm-w-del") if row.old_no else ""
        )
        right = (
            _line_html(self.new_colour[row.new_no - 1], new_marks, "nm-w-add") if row.new_no else ""
        )
        return left, right


_ROW_CLASS = {"equal": "nm-same", "delete": "nm-del", "insert": "nm-add", "replace": "nm-chg"}


def side_by_side(
    old: str,
    new: str,
    old_label: str = "original",
    new_label: str = "migrated",
    context: int | None = None,
    narrow_unified: bool = True,
) -> str:
    """An HTML table: the old text left, the new right, the changed words marked, long added
    definitions folded. In an output narrower than `NARROW` px it shows as one column, removed
    lines above added ones (unless `narrow_unified` is False).

    `context=None` shows every line (right for a cell); a number keeps that many unchanged lines
    around each change and folds the rest (right for a whole file).
    """
    sides = _Sides(old, new)
    body = []
    for row in _rows(sides.old, sides.new, context):
        if row.kind == "skip":
            body.append(
                f'<tr class="nm-skip"><td colspan="4" {attrs("nm-skip")}>'
                f"⋯ {plural(row.skipped, 'unchanged line')} ⋯</td></tr>"
            )
            continue
        if row.kind == "fold":
            body.append(
                f'<tr class="nm-fold"><td colspan="2" {attrs("nm-old", "nm-empty")}></td>'
                f'<td colspan="2" {attrs("nm-code", "nm-new")}>'
                f"{_fold_html(sides.new, sides.new_colour, *row.folded)}</td></tr>"
            )
            continue
        left, right = sides.pair(row)
        old_side = ["nm-old"] + (["nm-old-line"] if row.kind in ("delete", "replace") else [])
        new_side = ["nm-new"] + (["nm-new-line"] if row.kind in ("insert", "replace") else [])
        if not row.old_no:
            old_side = ["nm-old", "nm-empty"]
        if not row.new_no:
            new_side = ["nm-new", "nm-empty"]
        body.append(
            f'<tr class="{_ROW_CLASS[row.kind]}">'
            f"<td {attrs('nm-no', *old_side)}>{row.old_no or ''}</td>"
            f"<td {attrs('nm-code', *old_side)}>{left}</td>"
            f"<td {attrs('nm-no', *new_side)}>{row.new_no or ''}</td>"
            f"<td {attrs('nm-code', *new_side)}>{right}</td></tr>"
        )
    header = (
        f'<tr><th colspan="2" {attrs("nm-head")}>{escape(old_label)}</th>'
        f'<th colspan="2" {attrs("nm-head", "nm-new")}>{escape(new_label)}</th></tr>'
    )
    kind = "nm-diff nm-side" + (" nm-auto" if narrow_unified else "")
    return (
        f'<table class="{kind}" style="{STYLES["nm-diff"]}">'
        '<colgroup><col style="width: 2.6em"><col><col style="width: 2.6em"><col></colgroup>'
        f"<thead>{header}</thead><tbody>{''.join(body)}</tbody></table>"
    )


def unified_html(
    old: str,
    new: str,
    old_label: str = "original",
    new_label: str = "migrated",
    context: int | None = 3,
) -> str:
    """The unified diff: removed lines, then the lines that replace them, words marked."""
    sides = _Sides(old, new)
    body = []
    pending: list[str] = []  # the added half of a replaced block, shown after its removed half

    def line(
        row_class: str, side: str, old_no: int | None, new_no: int | None, sign: str, code: str
    ) -> str:
        return (
            f'<tr class="{row_class}"><td {attrs("nm-no", side)}>{old_no or ""}</td>'
            f"<td {attrs('nm-no', side)}>{new_no or ''}</td>"
            f'<td {attrs("nm-code", side)}><span class="nm-sign" style="{MUTED}">{sign}</span>{code}</td></tr>'
        )

    for row in [*_rows(sides.old, sides.new, context), _Row("end")]:
        if row.kind != "replace" and pending:
            body += pending
            pending = []
        if row.kind == "skip":
            body.append(
                f'<tr class="nm-skip"><td colspan="3" {attrs("nm-skip")}>⋯ {plural(row.skipped, "unchanged line")} ⋯</td></tr>'
            )
        elif row.kind == "fold":
            body.append(
                f'<tr class="nm-fold"><td colspan="3" {attrs("nm-code")}>{_fold_html(sides.new, sides.new_colour, *row.folded)}</td></tr>'
            )
        elif row.kind in ("equal", "delete", "insert", "replace"):
            left, right = sides.pair(row)
            if row.kind == "equal":
                body.append(line("nm-same", "nm-same-line", row.old_no, row.new_no, " ", right))
            if row.kind in ("delete", "replace") and row.old_no:
                body.append(line("nm-del", "nm-old-line", row.old_no, None, "-", left))
            if row.kind in ("insert", "replace") and row.new_no:
                added = line("nm-add", "nm-new-line", None, row.new_no, "+", right)
                (pending if row.kind == "replace" else body).append(added)
    header = f'<tr><th colspan="3" {attrs("nm-head")}>{escape(old_label)} → {escape(new_label)}</th></tr>'
    return (
        f'<table class="nm-diff nm-unified" style="{STYLES["nm-diff"]}">'
        '<colgroup><col style="width: 2.6em"><col style="width: 2.6em"><col></colgroup>'
        f"<thead>{header}</thead><tbody>{''.join(body)}</tbody></table>"
    )


def diff_html(
    old: str, new: str, title: str, view: str = "auto", context: int | None = None
) -> str:
    """A diff in the given view: `auto` side by side (one column in a narrow output), `side`
    always side by side, `unified` one column."""
    if view == "unified":
        return unified_html(old, new, f"{title} (original)", f"{title} (migrated)", context)
    return side_by_side(
        old,
        new,
        f"{title} (original)",
        f"{title} (migrated)",
        context,
        narrow_unified=view == "auto",
    )


def code_block(text: str, title: str | None = None, open_: bool = False) -> str:
    code = "\n".join(_line_html(line, [], "") for line in highlight(text))
    pre = f"<pre {attrs('nm-pre')}>{code}</pre>"
    if title is None:
        return pre
    return f"<details{' open' if open_ else ''}><summary>{escape(title)}</summary>{pre}</details>"


def migrated_cell(text: str) -> str:
    """The migrated code of a cell, to copy, with the buttons that put it in the notebook (made
    to work, and shown, by the JupyterLab piece; `--replace` and `--insert` do it anywhere)."""
    code = "\n".join(_line_html(line, [], "") for line in highlight(text))
    buttons = (
        f"<div {attrs('nm-actions')}>"
        '<button class="nm-action nm-replace-cell" title="Replace this cell with the migrated code">Replace cell</button>'
        '<button class="nm-action nm-insert-below" title="Insert the migrated code as a new cell below">Insert below</button>'
        '<span class="nm-action-status"></span></div>'
    )
    return (
        f"{buttons}<details><summary>Migrated cell (to copy)</summary>"
        f"<pre {attrs('nm-pre', 'nm-migrated-source')}>{code}</pre></details>"
    )


# -- findings ------------------------------------------------------------------------------------


def rule_summary(code: str) -> str:
    """One line on what a rule is about, for a tooltip; empty when the code is unknown."""
    from neuron_migrate.catalog import all_rules

    for rule in all_rules():
        if rule.code == code:
            return f"{rule.code} {rule.name}: {rule.summary} (neuron-migrate rules {rule.code})"
    return ""


def code_tag(code: str) -> str:
    if not code:
        return ""
    return (
        f'<code class="nm-code-tag" title="{escape(rule_summary(code))}" style="font-weight: 600;">'
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
        items_list("Notes", (f"{code_tag(n.code)} {prose(n.message)}".strip() for n in notes)),
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
    lines += [f"  note    {f'{n.code} ' if n.code else ''}{n.message}" for n in notes]
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
    view: str = "auto"  # auto: side by side, one column in a narrow output; side; unified
    context: int | None = 3  # unchanged lines kept around each change; None: all

    def _repr_html_(self) -> str:
        if self.old == self.new:
            return f"<i>{escape(self.old_label)} and {escape(self.new_label)} are the same</i>"
        if self.view == "unified":
            return output(
                unified_html(self.old, self.new, self.old_label, self.new_label, self.context)
            )
        return output(
            side_by_side(
                self.old,
                self.new,
                self.old_label,
                self.new_label,
                self.context,
                self.view == "auto",
            )
        )

    def __repr__(self) -> str:
        if self.old == self.new:
            return f"{self.old_label} and {self.new_label} are the same"
        return unified_diff(self.old, self.new, self.old_label, self.new_label).rstrip("\n")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
