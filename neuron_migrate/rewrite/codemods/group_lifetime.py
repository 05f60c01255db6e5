"""Which calls of a file run before its process group exists.

torch_xla knew the ranks from the launcher (xmp.spawn, torchrun) before any process group, so
`xr.global_ordinal()` worked anywhere. `dist.get_rank()` needs the group: at module level, and
in a function before the `dist.init_process_group()` (or the process launch) in its own body,
the migrated code must read the launcher's environment (`RANK`, `WORLD_SIZE`) instead. The file
is read once, in source order; a function that neither initializes nor launches is assumed to run
once the group exists, as it does when called from the migrated entry point.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Visitor

IsCall = Callable[[cst.Call], bool]


def calls_before_group(module: cst.Module, is_init: IsCall, is_launch: IsCall) -> set[int]:
    """The ids of the calls in `module` that run before its process group exists."""
    timeline = _Timeline(is_init, is_launch)
    timeline.scan(module)
    return timeline.early


class _Timeline(Visitor):
    def __init__(self, is_init: IsCall, is_launch: IsCall) -> None:
        self.is_init = is_init
        self.is_launch = is_launch
        self.before = [True]  # per scope: no group yet; the module runs before any
        self.early: set[int] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        # Decorators and default values run where the function is defined, not when it is called.
        for decorator in node.decorators:
            self.scan(decorator)
        self.scan(node.params)
        finder = _StartsGroup(self.is_init, self.is_launch)
        finder.scan(node.body)
        self.before.append(finder.found)
        self.scan(node.body)
        self.before.pop()
        return False

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.before.append(False)  # runs later, when called

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.before.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if self.before[-1]:
            self.early.add(id(node))

    def leave_Call(self, original_node: cst.Call) -> None:
        if self.is_init(original_node):
            self.before[-1] = False


class _StartsGroup(Visitor):
    """Does this body (not the functions inside it) create the process group or launch processes?"""

    def __init__(self, is_init: IsCall, is_launch: IsCall) -> None:
        self.is_init = is_init
        self.is_launch = is_launch
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if self.is_init(node) or self.is_launch(node):
            self.found = True
