"""Inline suppressions: `# noqa: NM101` (flake8-compatible) and `# neuron-migrate: ignore[NM101]`.

A suppression applies to findings that start or end on its line, or whose (simple) statement
ends there. Suppressions that silence
nothing are findings themselves (NM900), fixed by removing the codes that are not needed.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

from neuron_migrate.checks.context import Positions
from neuron_migrate.checks.model import SAFE, Diagnostic, Edit, Fix, Severity

NOQA = re.compile(r"#\s*(?i:noqa)(?::\s?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?")
IGNORE = re.compile(r"#\s*neuron-migrate:\s*ignore(?:\[(?P<codes>[^\]\n]*)\])?")
_CODE = re.compile(r"[A-Z]+[0-9]+")
OWN_CODE = re.compile(r"NM\d{3}")
UNUSED_CODE = "NM900"


@dataclass
class Suppression:
    line: int
    start: int  # character offsets of the directive in the text
    end: int
    kind: str  # "noqa" | "ignore"
    codes: tuple[str, ...] | None  # None: every code
    used: set[str] = field(default_factory=set)

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


def may_have_suppressions(text: str) -> bool:
    return "noqa" in text or "NOQA" in text or "neuron-migrate:" in text


def find(
    text: str, positions: Positions, redirects: dict[str, str]
) -> dict[int, list[Suppression]]:
    """Suppressions by line. Codes are mapped through `redirects` (renamed rules keep working)."""
    found: dict[int, list[Suppression]] = {}
    if not may_have_suppressions(text):
        return found
    for kind, pattern in (("noqa", NOQA), ("ignore", IGNORE)):
        for match in pattern.finditer(text):
            line, _ = positions.location(match.start())
            raw = match.group("codes")
            codes = None if raw is None else tuple(redirects.get(c, c) for c in _CODE.findall(raw))
            if codes == () and kind == "ignore":
                codes = None
            found.setdefault(line, []).append(
                Suppression(line, match.start(), match.end(), kind, codes)
            )
    return found


def apply(
    diagnostics: list[Diagnostic], suppressions: dict[int, list[Suppression]], positions: Positions
) -> list[Diagnostic]:
    """Drop suppressed findings; drop fixes that would edit a line suppressed for their code."""
    if not suppressions:
        return diagnostics
    kept = []
    for diagnostic in diagnostics:
        if _suppressed(
            diagnostic.code,
            {diagnostic.line, diagnostic.end_line, diagnostic.statement_end},
            suppressions,
        ):
            continue
        fix = diagnostic.fix
        if fix is not None and diagnostic.code != UNUSED_CODE:
            lines: set[int] = set()
            for edit in fix.edits:
                first = positions.location(edit.start)[0]
                last = positions.location(max(edit.start, edit.end - 1))[0]
                lines.update(range(first, last + 1))
            if any(s.covers(diagnostic.code) for line in lines for s in suppressions.get(line, ())):
                diagnostic.fix = None
        kept.append(diagnostic)
    return kept


def _suppressed(code: str, lines: set[int], suppressions: dict[int, list[Suppression]]) -> bool:
    hit = False
    for line in lines:
        for suppression in suppressions.get(line, ()):
            if suppression.covers(code):
                suppression.used.add(code)
                hit = True
    return hit


def unused(
    text: str,
    suppressions: dict[int, list[Suppression]],
    positions: Positions,
    enabled: frozenset[str],
    known: frozenset[str],
) -> list[Diagnostic]:
    """NM900 findings: suppressions of this tool's codes that silenced nothing."""
    results = []
    comments: set[int] | None = None
    for line in sorted(suppressions):
        for s in suppressions[line]:
            if s.kind == "noqa" and s.codes is None:
                continue  # a blanket `# noqa` may be meant for another linter
            if s.codes is None:
                stale, unknown = ([] if s.used else ["*"]), []
            else:
                own = [c for c in s.codes if OWN_CODE.fullmatch(c)]
                unknown = [c for c in own if c not in known]
                stale = [c for c in own if c in known and c in enabled and c not in s.used]
            if not stale and not unknown:
                continue
            if comments is None:
                comments = _comment_starts(text)
            if s.start not in comments and not _inside_comment(text, s.start, comments):
                continue  # the directive is inside a string literal
            results.append(_finding(text, s, stale, unknown, positions))
    return results


def _finding(
    text: str, s: Suppression, stale: list[str], unknown: list[str], positions: Positions
) -> Diagnostic:
    if stale == ["*"]:
        message = "unused `neuron-migrate: ignore` (nothing to suppress on this line)"
    else:
        parts = []
        if stale:
            parts.append(f"unused suppression of {', '.join(stale)}")
        if unknown:
            parts.append(f"unknown rule code {', '.join(unknown)}")
        message = "; ".join(parts)
    drop = set(stale) | set(unknown)
    remaining = None if s.codes is None else [c for c in s.codes if c not in drop]
    if remaining:
        directive = text[s.start : s.end]
        raw = (
            directive[directive.lower().index("noqa") + 4 :]
            if s.kind == "noqa"
            else directive[directive.index("[") :]
        )
        head = directive[: len(directive) - len(raw)]
        new = (
            f"{head}: {', '.join(remaining)}"
            if s.kind == "noqa"
            else f"{head}[{', '.join(remaining)}]"
        )
        edit = Edit(s.start, s.end, new)
    else:
        start = s.start
        while start > 0 and text[start - 1] in " \t":
            start -= 1
        rest = text[s.end : positions.lines_span(s.line, s.line)[1]]
        if rest.strip() and not rest.lstrip().startswith("#"):
            edit = Edit(
                s.start, s.end, "#"
            )  # keep the words that follow the directive as a comment
        else:
            end = s.end + (len(rest) - len(rest.lstrip(" \t")))
            edit = Edit(start, end, "")
    line, column = positions.location(s.start)
    end_line, end_column = positions.location(s.end)
    fix = Fix((edit.located(positions.location),), SAFE, "remove the unused suppression")
    return Diagnostic(
        UNUSED_CODE, message, line, column, end_line, end_column, Severity.WARNING, fix
    )


def _comment_starts(text: str) -> set[int]:
    positions = Positions(text)
    starts: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                starts.add(positions.starts[token.start[0] - 1] + token.start[1])
    except (tokenize.TokenError, SyntaxError):
        pass
    return starts


def _inside_comment(text: str, offset: int, comments: set[int]) -> bool:
    line_start = text.rfind("\n", 0, offset) + 1
    return any(line_start <= c < offset for c in comments)


def add_noqa(text: str, diagnostics: list[Diagnostic]) -> tuple[str, int]:
    """ruff's `--add-noqa`: a `# noqa: CODE` for each finding, on a line where a comment can go
    and that suppresses it (its first line, its last, or the end of its statement), merged into a
    `# noqa:` already there. Returns the new text and the number of lines given a directive."""
    positions = Positions(text)
    open_lines = _comment_lines(text)
    wanted: dict[int, set[str]] = {}
    for d in diagnostics:
        if d.code == UNUSED_CODE:
            continue
        for line in (d.line, d.end_line, d.statement_end):
            if line and line in open_lines:
                wanted.setdefault(line, set()).add(d.code)
                break
    found = find(text, positions, {})
    edits: list[tuple[int, int, str]] = []
    for line, codes in wanted.items():
        existing = [s for s in found.get(line, []) if s.kind == "noqa"]
        if existing:
            directive = existing[0]
            if directive.codes is None:
                continue  # a blanket `# noqa` covers them already
            merged = sorted(set(directive.codes) | codes)
            if set(merged) == set(directive.codes):
                continue
            head = text[directive.start : directive.end]
            head = head[: head.lower().index("noqa") + 4]
            edits.append((directive.start, directive.end, f"{head}: {', '.join(merged)}"))
            continue
        start, end = positions.lines_span(line, line)
        body = text[start:end]
        stripped = body.rstrip("\r\n")
        at = start + len(stripped.rstrip(" \t"))
        edits.append((at, start + len(stripped), f"  # noqa: {', '.join(sorted(codes))}"))
    for start, end, content in sorted(edits, reverse=True):
        text = text[:start] + content + text[end:]
    return text, len(edits)


def _comment_lines(text: str) -> set[int]:
    """Lines whose end is outside any string: a comment there is a comment."""
    lines: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT) or (token.type == tokenize.ENDMARKER and token.start[1] > 0):
                lines.add(token.start[0])
    except (tokenize.TokenError, SyntaxError):
        pass
    return lines
