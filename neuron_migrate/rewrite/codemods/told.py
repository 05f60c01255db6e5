"""Strings that are messages to a person, which codemods about string values pass over."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.core.messages import MESSAGE_CALLS
from neuron_migrate.rewrite.codemods.base import Codemod, MigrationContext, dotted_name


def _message_call(node: cst.Call) -> bool:
    return (dotted_name(node.func) or "").rpartition(".")[2] in MESSAGE_CALLS


class StringValues(Codemod):
    """A codemod about what strings hold: `told` is true inside a docstring (or another string
    standing alone), a message call (`print`, `logger.info`) and a `raise`, where a string only
    tells a person something and changes nothing the program does."""

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._told = 0

    @property
    def told(self) -> bool:
        return self._told > 0

    def visit_Expr(self, node: cst.Expr) -> None:
        self._told += isinstance(node.value, cst.SimpleString | cst.ConcatenatedString)

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr:
        self._told -= isinstance(original_node.value, cst.SimpleString | cst.ConcatenatedString)
        return updated_node

    def visit_Raise(self, node: cst.Raise) -> None:
        self._told += 1

    def leave_Raise(self, original_node: cst.Raise, updated_node: cst.Raise) -> cst.Raise:
        self._told -= 1
        return updated_node

    def visit_Call(self, node: cst.Call) -> None:
        self._told += _message_call(node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self._told -= _message_call(original_node)
        return updated_node
