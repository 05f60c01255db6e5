"""One-line bodies that hold old-stack code become indented blocks before any rewrite.

`if not xm.is_master_ordinal(): xm.rendezvous("data")` keeps its body on the header's line, where
no statement of its own exists: a rewrite that replaces a statement, inserts one before it or
marks it with a TODO has nowhere to go. Moving such a body to its own lines gives every codemod
the statements it expects; bodies without old-stack names keep their layout.
"""

from __future__ import annotations

import ast

import libcst as cst

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.rewrite.codemods.base import Transformer, Visitor


class _Names(Visitor):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names:
            self.found = True


class _ExpandSuites(Transformer):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.BaseSuite:
        finder = _Names(self.names)
        finder.scan(original_node)
        if not finder.found:
            return updated_node
        line = cst.SimpleStatementLine(body=updated_node.body, trailing_whitespace=updated_node.trailing_whitespace)
        return cst.IndentedBlock(body=[line])


def has_one_line_bodies(tree: ast.Module, text: str) -> bool:
    """Does any statement stand on its header's line (`if x: y`)? A cheap test on the `ast` tree
    that spares files without one a LibCST pass."""
    lines = text.splitlines()
    for node in all_nodes(tree):
        if isinstance(node, ast.stmt) and node.lineno <= len(lines):
            before = lines[node.lineno - 1].encode("utf-8", "surrogatepass")[: node.col_offset]
            if before.rstrip().endswith(b":"):
                return True
    return False


def expand_old_stack_suites(module: cst.Module, names: frozenset[str] | set[str]) -> cst.Module:
    """`module` with every one-line body that mentions one of `names` on lines of its own."""
    if not names:
        return module
    return module.visit(_ExpandSuites(frozenset(names)))
