"""Which expressions may be dropped without changing what the program does.

An `if` whose whole body the migration removed can go only if evaluating its test did nothing
else: `if step % 10 == 0:` can, `if save_checkpoint(model, path):` cannot. A call counts as
doing nothing only for the builtins and queries that are known to read and never write.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from neuron_migrate.core.cst_children import children
from neuron_migrate.rewrite.codemods.base import dotted_name

PURE_BUILTINS = frozenset(
    {
        "abs", "all", "any", "bool", "callable", "float", "getattr", "hasattr", "int", "isinstance",
        "issubclass", "len", "max", "min", "repr", "round", "str", "sum", "type",
    }
)  # fmt: skip
PURE_FUNCTIONS = frozenset(
    {
        "os.environ.get",
        "os.getenv",
        "os.path.exists",
        "os.path.isdir",
        "os.path.isfile",
        "torch.accelerator.current_accelerator",
        "torch.accelerator.device_count",
        "torch.accelerator.is_available",
        "torch.cuda.is_available",
        "torch.device",
        "torch.distributed.get_rank",
        "torch.distributed.get_world_size",
        "torch.distributed.is_available",
        "torch.distributed.is_initialized",
        "torch.get_default_dtype",
    }
)
# Methods that only read their object, whatever it is.
PURE_METHODS = frozenset(
    {
        "item",
        "dim",
        "size",
        "numel",
        "startswith",
        "endswith",
        "lower",
        "upper",
        "strip",
        "keys",
        "values",
        "items",
    }
)


def has_effects(node: cst.CSTNode, resolve: Callable[[str], str | None]) -> bool:
    """Does evaluating `node` call something that may act, assign (`:=`), await or yield?

    `resolve` turns a dotted name into what it stands for in the file (`dist.get_rank` ->
    `torch.distributed.get_rank`). A lambda's body is not run by evaluating the lambda.
    """
    if isinstance(node, cst.NamedExpr | cst.Await | cst.Yield):
        return True
    if isinstance(node, cst.Lambda):
        return False
    if isinstance(node, cst.Call) and not _pure_call(node, resolve):
        return True
    return any(has_effects(child, resolve) for child in children(node))


def _pure_call(call: cst.Call, resolve: Callable[[str], str | None]) -> bool:
    func = call.func
    if isinstance(func, cst.Name) and func.value in PURE_BUILTINS:
        return True
    if isinstance(func, cst.Attribute) and func.attr.value in PURE_METHODS:
        return True
    dotted = dotted_name(func)
    return dotted is not None and (resolve(dotted) or dotted) in PURE_FUNCTIONS
