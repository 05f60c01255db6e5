"""Does the program read a `generate` output in a way left padding cannot change?

Padding prompts to a multiple of the prefill chunk keeps compiled generation to a few graphs, and
the new tokens stay the same; but the output then starts with the pad tokens. Code that decodes
the whole output with `skip_special_tokens=True`, or slices the new tokens off by the length of
the padded input (`out[:, inputs["input_ids"].shape[1]:]`), reads the same text as before; code
that cuts `len(prompt)` characters off a decoded string, counts tokens, or returns the output to
a caller this module cannot see, would not. Only the first kind is padded.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.scopes import ScopeTable

_DECODERS = frozenset({"decode", "batch_decode"})


def parents_of(tree: ast.AST) -> dict[int, ast.AST]:
    """Each node's parent, by id, for `padding_is_invisible` calls on the same tree."""
    return {id(child): node for node in all_nodes(tree) for child in ast.iter_child_nodes(node)}


def _skips_special_tokens(call: ast.Call) -> bool:
    return any(
        k.arg == "skip_special_tokens" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in call.keywords
    )


def _after_the_input(index: ast.AST) -> bool:
    """`[..., inputs["input_ids"].shape[1]:]`: a slice that starts where the (padded) input ends."""
    slices = index.elts if isinstance(index, ast.Tuple) else [index]
    last = slices[-1] if slices else None
    if not isinstance(last, ast.Slice) or last.lower is None or last.upper is not None:
        return False
    return any(
        isinstance(node, ast.Attribute) and node.attr == "shape" and "input_ids" in ast.unparse(node.value)
        for node in ast.walk(last.lower)
    )


def _read_safely(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Is the value of `node` (a generate output, or part of one) read only in those two ways?"""
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if _after_the_input(parent.slice):
                return True
            node = parent  # `out[0]`: still the whole sequence of one prompt
            continue
        if (
            isinstance(parent, ast.Call)
            and parent.args
            and parent.args[0] is node
            and isinstance(parent.func, ast.Attribute)
            and parent.func.attr in _DECODERS
        ):
            return _skips_special_tokens(parent)
        return False


def _loads(tree: ast.AST, scopes: ScopeTable, target: ast.Name) -> Iterator[ast.Name]:
    variable = scopes.binding_at(target, target.id)
    for node in all_nodes(tree):
        if (
            isinstance(node, ast.Name)
            and node.id == target.id
            and isinstance(node.ctx, ast.Load)
            and scopes.binding_at(node, node.id) == variable
        ):
            yield node


def padding_is_invisible(call: ast.Call, tree: ast.AST, scopes: ScopeTable, parents: dict[int, ast.AST]) -> bool:
    """Is every read of what `call` (a `model.generate(...)`) returns one left padding cannot change?"""
    parent = parents.get(id(call))
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return all(_read_safely(read, parents) for read in _loads(tree, scopes, parent.targets[0]))
    return _read_safely(call, parents)


def read_only_by(variable: ast.Name, calls: set[int], tree: ast.AST, scopes: ScopeTable, parents: dict[int, ast.AST]) -> bool:
    """Does every read of `variable` (the tokenized prompts) go straight into one of `calls` (the
    generate calls whose outputs padding leaves unchanged)? A reference model fed the same inputs
    would see the pad tokens too."""
    for read in _loads(tree, scopes, variable):
        if _measures_the_input(read, parents):
            continue
        node: ast.AST | None = parents.get(id(read))
        while node is not None and not isinstance(node, ast.Call):
            node = parents.get(id(node))
        if node is None or id(node) not in calls or _inside(read, node.func, parents):
            return False
    return True


def _measures_the_input(read: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """`out[:, inputs["input_ids"].shape[1]:]`: the read sizes the slice that drops the padded input."""
    child: ast.AST = read
    node = parents.get(id(read))
    while node is not None:
        if isinstance(node, ast.Slice):
            return child is node.lower and node.upper is None
        child, node = node, parents.get(id(node))
    return False


def _inside(node: ast.AST, root: ast.AST, parents: dict[int, ast.AST]) -> bool:
    current: ast.AST | None = node
    while current is not None:
        if current is root:
            return True
        current = parents.get(id(current))
    return False
