"""The children of a LibCST node, in source order, without LibCST's visit machinery.

`node.visit(visitor)` rebuilds (and re-validates) every node it passes, even for a visitor that
changes nothing, and `node.children` runs a visit to collect them: a read-only scan of a module
costs about as much as a rewrite of it. The fields a node type visits, and their order, are read
once from its `_visit_and_replace_children`; each type's first node checks them against
`node.children`, and a type whose fields do not account for its children falls back to it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator

import libcst as cst

# Whitespace, punctuation and operators: no rewrite reads them, nor looks below them.
PUNCTUATION: frozenset[type] = frozenset(
    {
        *(
            kind
            for kind in vars(cst).values()
            if isinstance(kind, type)
            and issubclass(
                kind,
                cst.BaseParenthesizableWhitespace
                | cst.BaseBinaryOp
                | cst.BaseBooleanOp
                | cst.BaseCompOp
                | cst.BaseUnaryOp
                | cst.BaseAugOp,
            )
        ),
        cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
        cst.AssignEqual, cst.Colon, cst.Comma, cst.Dot, cst.Semicolon, cst.ImportStar,
        cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
        cst.LeftCurlyBrace, cst.RightCurlyBrace,
    }
)
# Nodes whose children are only punctuation (their parentheses): names and literals.
ATOMS: frozenset[type] = frozenset({cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis})
# What a traversal that reads no punctuation need not go below. Four in ten nodes of a module are
# whitespace.
INERT = PUNCTUATION | ATOMS

_VISITED_FIELD = re.compile(r"""visit_\w+\(\s*self,\s*["'](\w+)["']""")

# By node type: the names of the fields holding children, in the order LibCST visits them, or
# None where `node.children` must answer.
_FIELDS: dict[type, tuple[str, ...] | None] = {}


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """What `node.children` holds, in the same order."""
    kind = type(node)
    try:
        fields = _FIELDS[kind]
    except KeyError:
        fields = _FIELDS[kind] = _checked_fields(node)
    if fields is None:
        yield from node.children
        return
    for field in fields:
        value = getattr(node, field)
        held = type(value)
        if held is tuple or held is list:
            for item in value:
                if _is_node(type(item)):
                    yield item
        elif _is_node(held):
            yield value


def _is_node(kind: type) -> bool:
    """`issubclass(kind, cst.CSTNode)`, remembered: `isinstance` against LibCST's abstract classes
    is slow, and a field holds a node, a sequence of them, a sentinel, a string or None."""
    known = _NODE_TYPES.get(kind)
    if known is None:
        known = _NODE_TYPES[kind] = issubclass(kind, cst.CSTNode)
    return known


_NODE_TYPES: dict[type, bool] = {}


def _checked_fields(node: cst.CSTNode) -> tuple[str, ...] | None:
    try:
        source = inspect.getsource(type(node)._visit_and_replace_children)
    except (OSError, TypeError):
        return None
    fields = tuple(dict.fromkeys(_VISITED_FIELD.findall(source)))
    _FIELDS[type(node)] = fields
    if [id(c) for c in children(node)] != [id(c) for c in node.children]:
        return None
    return fields
