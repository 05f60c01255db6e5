"""Every node of a parsed file, listed once: many readers walk the same tree."""

from __future__ import annotations

import ast


def all_nodes(tree: ast.AST) -> list[ast.AST]:
    """`list(ast.walk(tree))`, kept on the tree (which nothing here changes) for the next reader."""
    nodes: list[ast.AST] | None = tree.__dict__.get("_all_nodes")
    if nodes is None:
        nodes = tree.__dict__["_all_nodes"] = list(ast.walk(tree))
    return nodes
