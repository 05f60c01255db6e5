"""Old-stack names replaced wherever the code refers to them: called, passed, stored or read.

An optimizer class or a wrap policy is used by name as often as it is called (`opt_cls =
syncfree.AdamW`, `partial(size_based_auto_wrap_policy, ...)`): the codemods that move such names
put the native one in place of each reference, never in an import, an attribute's name or a
keyword, and the import goes once unused.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Codemod, code_of, expr


class ReferenceRenames(Codemod):
    """A codemod whose `native(qualified, node)` gives the code that replaces a reference, or None."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_import = 0
        self._not_references: set[int] = set()  # names that are attributes or keywords

    def native(self, qualified: str, node: cst.Name | cst.Attribute) -> str | None:
        return None

    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        self._in_import -= 1
        return updated_node

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        self._in_import -= 1
        return updated_node

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_references.add(id(node.attr))  # `x.AdamW` is no use of the name `AdamW`

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_references.add(id(node.keyword))

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if id(original_node) in self._not_references:
            return updated_node
        return self._reference(updated_node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._reference(updated_node)

    def _reference(self, node: cst.Name | cst.Attribute) -> cst.BaseExpression:
        if self._in_import:
            return node
        qualified = self.qualify(node)
        new = self.native(qualified, node) if qualified else None
        if new is None:
            return node
        self.changed(f"`{code_of(node)}` -> `{new}`")
        return expr(new)
