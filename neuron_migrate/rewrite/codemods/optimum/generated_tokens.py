"""Does left padding a prompt leave what the program gets from `generate` as it was?

Padding prompts to a multiple of the prefill chunk keeps compiled generation to a few graphs, and
the new tokens stay the same; but the output then starts with the pad tokens, and every length
that counts the prompt counts them too. So a prompt is padded only where each `generate` call it
feeds
- takes the whole tokenizer output (`**inputs`), or `input_ids` with its `attention_mask`: without
  the mask the pad tokens are attended (the pad token is the end-of-text token);
- bounds the length by `max_new_tokens` alone: `max_length`, `min_length`, a `generation_config`
  object and the checkpoint's default `max_length` all count the padded prompt;
- and whose output is read whole per row and decoded with `skip_special_tokens=True`, or sliced
  from the length of the padded input (`out[:, inputs["input_ids"].shape[1]:]`).
Code that slices by another length (`len(prompt_ids)`), cuts `len(prompt)` characters off a decoded
string, counts tokens, or returns the output to a caller this module cannot see, is left unpadded.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from neuron_migrate.core.ast_nodes import all_nodes
from neuron_migrate.core.scopes import ScopeTable

_DECODERS = frozenset({"decode", "batch_decode"})
# Keywords of `generate` whose lengths count the prompt, or that may set such a length.
_PROMPT_LENGTHS = frozenset({"max_length", "min_length", "generation_config"})


def parents_of(tree: ast.AST) -> dict[int, ast.AST]:
    """Each node's parent, by id, for `padding_is_invisible` calls on the same tree."""
    return {id(child): node for node in all_nodes(tree) for child in ast.iter_child_nodes(node)}


def _skips_special_tokens(call: ast.Call) -> bool:
    return any(
        k.arg == "skip_special_tokens" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in call.keywords
    )


def _field_of(node: ast.AST | None, field: str) -> str | None:
    """`inputs["input_ids"]` / `inputs.input_ids` -> "inputs" (for `field` "input_ids")."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        key = node.slice
        if isinstance(key, ast.Constant) and key.value == field:
            return node.value.id
    if isinstance(node, ast.Attribute) and node.attr == field and isinstance(node.value, ast.Name):
        return node.value.id
    return None


def prompts_of(call: ast.Call) -> str | None:
    """The variable whose tokenized prompts `call` (a `generate`) takes whole, with their mask."""
    splats = [k.value for k in call.keywords if k.arg is None]
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if len(call.args) > 1 or any(isinstance(a, ast.Starred) for a in call.args) or len(splats) > 1:
        return None
    ids = call.args[0] if call.args else keywords.get("input_ids", keywords.get("inputs"))
    mask = keywords.get("attention_mask")
    if splats:
        whole = splats[0]
        return whole.id if isinstance(whole, ast.Name) and ids is None and mask is None else None
    source = _field_of(ids, "input_ids")
    return source if source is not None and _field_of(mask, "attention_mask") == source else None


def _counts_new_tokens_only(call: ast.Call) -> bool:
    keywords = {k.arg for k in call.keywords}
    return "max_new_tokens" in keywords and not keywords & _PROMPT_LENGTHS


def _after_the_input(index: ast.AST, prompts: str) -> bool:
    """`[..., inputs["input_ids"].shape[1]:]`: a slice that starts where the padded input ends."""
    slices = index.elts if isinstance(index, ast.Tuple) else [index]
    last = slices[-1] if slices else None
    if not isinstance(last, ast.Slice) or last.upper is not None or last.step is not None:
        return False
    lower = last.lower
    return (
        isinstance(lower, ast.Subscript)
        and isinstance(lower.value, ast.Attribute)
        and lower.value.attr == "shape"
        and _field_of(lower.value.value, "input_ids") == prompts
        and ast.unparse(lower.slice) in ("1", "-1")
    )


def _whole_rows(index: ast.AST) -> bool:
    """`out[0]`, `out[i]`, `out[:]`: rows of the output, each still the whole sequence."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    if isinstance(index, ast.Tuple) and len(parts) > 1:
        return False  # `out[0, k:]` picks columns too
    part = parts[0] if parts else None
    if isinstance(part, ast.Slice):
        return part.lower is None and part.upper is None and part.step is None
    return part is not None


def _read_safely(node: ast.AST, prompts: str, parents: dict[int, ast.AST]) -> bool:
    """Is the value of `node` (a generate output, or part of one) read only in those two ways?"""
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if _after_the_input(parent.slice, prompts):
                return True
            if not _whole_rows(parent.slice):
                return False
            node = parent
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
    """Does left padding the prompts of `call` (a `model.generate(...)`) leave its result, and every
    read of it, as they were?"""
    prompts = prompts_of(call)
    if prompts is None or not _counts_new_tokens_only(call):
        return False
    parent = parents.get(id(call))
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return all(_read_safely(read, prompts, parents) for read in _loads(tree, scopes, parent.targets[0]))
    return _read_safely(call, prompts, parents)


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
