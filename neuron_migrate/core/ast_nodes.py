"""Facts of a parsed file that many readers need: its nodes, listed once, and where its statements start."""

from __future__ import annotations

import ast


def all_nodes(tree: ast.AST) -> list[ast.AST]:
    """`list(ast.walk(tree))`, kept on the tree (which nothing here changes) for the next reader."""
    nodes: list[ast.AST] | None = tree.__dict__.get("_all_nodes")
    if nodes is None:
        nodes = tree.__dict__["_all_nodes"] = list(ast.walk(tree))
    return nodes


def statement_starts(tree: ast.Module) -> dict[int, int]:
    """Each line that holds code -> the line where the innermost simple statement or compound
    header holding it starts: where a comment above it may go."""
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        last = node.end_lineno or node.lineno
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = body[0].lineno - 1 if body[0].lineno > node.lineno else node.lineno
        for line in range(node.lineno, last + 1):
            if line not in starts or starts[line] < node.lineno:
                starts[line] = node.lineno
    return starts
