"""Which Python a file needs when the running one cannot parse it and a newer one can.

`ast` parses with the grammar of the interpreter it runs in, so code written for Python 3.12 is a
SyntaxError on 3.11 though nothing is wrong with it. LibCST parses the newer grammars: where it
parses the file, the newer constructs in it say which Python to run the tool with.
"""

from __future__ import annotations

import sys

import libcst as cst

Version = tuple[int, int]


class _Newer(cst.CSTVisitor):
    """Collects (version, construct) for each construct newer than Python 3.11."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.found: list[tuple[Version, str]] = []
        self.closing_quotes: list[str] = []  # of the f-strings whose `{}` we are in

    def visit_TypeAlias(self, node: cst.TypeAlias) -> None:
        self.found.append(((3, 12), "`type` statements"))

    def visit_TypeParameters(self, node: cst.TypeParameters) -> None:
        self.found.append(((3, 12), "type parameter lists (`def f[T]`, `class C[T]`)"))

    def visit_TypeParam(self, node: cst.TypeParam) -> None:
        if node.default is not None:
            self.found.append(((3, 13), "type parameter defaults (`[T = int]`)"))

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self.closing_quotes.append(node.end)

    def leave_FormattedString(self, original_node: cst.FormattedString) -> None:
        self.closing_quotes.pop()

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        code = self.module.code_for_node(node.expression)
        quote = self.closing_quotes[-1]
        if quote in code or "\\" in code or (len(quote) == 1 and "\n" in code):
            self.found.append(((3, 12), "f-strings with their own quotes, backslashes or line breaks inside `{}`"))

    def visit_Comment(self, node: cst.Comment) -> None:
        if self.closing_quotes:
            self.found.append(((3, 12), "f-strings with comments inside `{}`"))

    def visit_TemplatedString(self, node: cst.TemplatedString) -> None:
        self.found.append(((3, 14), 'template strings (`t"..."`)'))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self._bare_tuple(node.type)

    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> None:
        self._bare_tuple(node.type)

    def _bare_tuple(self, caught: cst.BaseExpression | None) -> None:
        if isinstance(caught, cst.Tuple) and not caught.lpar:
            self.found.append(((3, 14), "`except A, B:` without parentheses"))


def needed_python(text: str, running: Version | None = None) -> tuple[Version, str] | None:
    """The newest Python `text` needs beyond `running` (default: this interpreter), and a
    construct that needs it; None when nothing in it is newer, or LibCST cannot parse it either
    (the file is broken, not new)."""
    running = running or (sys.version_info.major, sys.version_info.minor)
    try:
        module = cst.parse_module(text)
        finder = _Newer(module)
        module.visit(finder)
    except (cst.ParserSyntaxError, RecursionError, MemoryError):
        return None
    newer = [found for found in finder.found if found[0] > running]
    return max(newer, key=lambda found: found[0]) if newer else None


def newer_python_hint(text: str) -> str:
    """` (... need Python 3.12+, ...)` for a SyntaxError message, or "" when a newer Python
    would not parse `text` either."""
    needed = needed_python(text)
    if needed is None:
        return ""
    (major, minor), construct = needed
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f" ({construct} need Python {major}.{minor}+; neuron-migrate is running on Python {running})"
