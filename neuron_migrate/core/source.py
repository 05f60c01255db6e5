"""Source text as users see it: `path:line:col` error messages and unified diffs."""

from __future__ import annotations

import difflib


def syntax_error_message(path: str, exc: SyntaxError, source: str | None = None) -> str:
    """One line, `path:line:col: SyntaxError: ...`, as every tool reports a file it cannot parse.
    Given the `source`, it says which Python the file needs when a newer one would parse it (a
    LibCST parse: tools that never load LibCST, as `check`, leave it out)."""
    line = exc.lineno or 1
    column = exc.offset or 1
    hint = ""
    if exc.msg.startswith("Missing parentheses in call to 'print'"):
        hint = " (Python 2 code is not supported)"
    elif source is not None:
        from neuron_migrate.core.newer_syntax import newer_python_hint  # LibCST, for errors only

        hint = newer_python_hint(source)
    return f"{path}:{line}:{column}: SyntaxError: {exc.msg}{hint}"


def unified_diff(
    before: str, after: str, old_label: str, new_label: str, *, mark_missing_newline: bool = True
) -> str:
    """A unified diff; a missing final newline is marked the way `diff` and git do (for a patch)
    or simply supplied (for display)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), old_label, new_label
    )
    missing = "\n\\ No newline at end of file\n" if mark_missing_newline else "\n"
    ends = ("\n", "\r") if mark_missing_newline else ("\n",)
    return "".join(line if line.endswith(ends) else line + missing for line in lines)


def file_diff(path: str, before: str, after: str) -> str:
    """The diff of one file, labelled `a/path` and `b/path`."""
    return unified_diff(before, after, f"a/{path}", f"b/{path}")
