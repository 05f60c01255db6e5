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
from typing import Any

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


# By node type: (field, how LibCST visits it) in visiting order, where `how` is the helper's
# name less `visit_`: "required", "optional", "sentinel", "sequence" or "body_sequence". A field
# holding a sequence is visited as one whatever its helper.
_VISITS = re.compile(r"""visit_(required|optional|sentinel|sequence|body_sequence)\(\s*self,\s*["'](\w+)["']""")
_PLANS: dict[type, tuple[tuple[str, str], ...] | None] = {}


def transform(node: cst.CSTNode, transformer: cst.CSTTransformer, skip: frozenset[type] = frozenset()) -> Any:
    """`node.visit(transformer)`, for a transformer whose hooks are `on_visit` and `on_leave`.

    LibCST rebuilds and re-validates every node it passes; here a node none of whose children
    changed comes back as itself, and children of the types in `skip` (punctuation no hook looks
    at) are not visited at all. Both leave the printed code as LibCST's visit would.
    """
    if not transformer.on_visit(node):
        return transformer.on_leave(node, node)
    kind = type(node)
    try:
        plan = _PLANS[kind]
    except KeyError:
        plan = _PLANS[kind] = _plan(kind)
    if plan is None:
        return transformer.on_leave(node, node._visit_and_replace_children(transformer))
    changes: dict[str, Any] = {}
    for field, how in plan:
        value = getattr(node, field)
        held = type(value)
        if held is tuple or held is list:
            items: list[Any] | None = None
            for index, item in enumerate(value):
                result = item if type(item) in skip else transform(item, transformer, skip)
                if result is item and items is None:
                    continue
                if items is None:
                    items = list(value[:index])
                if type(result) is cst.FlattenSentinel:
                    items.extend(result.nodes)
                elif type(result) is not cst.RemovalSentinel:
                    items.append(result)
            if items is not None:
                changes[field] = tuple(items)
            continue
        if value is None or held is cst.MaybeSentinel or held in skip:
            continue
        result = transform(value, transformer, skip)
        if result is value:
            continue
        if type(result) is cst.RemovalSentinel:
            if how == "required":
                raise TypeError(f"{kind.__name__}.{field} is required and cannot be removed")
            result = None if how == "optional" else cst.MaybeSentinel.DEFAULT
        elif type(result) is cst.FlattenSentinel:
            raise TypeError(f"{kind.__name__}.{field} cannot hold several nodes")
        changes[field] = result
    return transformer.on_leave(node, node.with_changes(**changes) if changes else node)


def _plan(kind: type) -> tuple[tuple[str, str], ...] | None:
    try:
        source = inspect.getsource(kind._visit_and_replace_children)  # type: ignore[attr-defined]
    except (OSError, TypeError, AttributeError):
        return None
    visits = _VISITS.findall(source)
    # Every child visit must be one of the helpers above, or LibCST's own visit has to do it.
    if len(visits) != len(re.findall(r"\bvisit_\w+\(", source)):
        return None
    # A field visited as a sequence or as one node, whichever it holds (`ImportFrom.names`): what
    # a removed single node becomes is the other helper's rule.
    plan: dict[str, str] = {}
    for how, field in visits:
        if how not in ("sequence", "body_sequence") or field not in plan:
            plan[field] = how
    return tuple(plan.items())
