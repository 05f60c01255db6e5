"""How migrated code may spell a module at one place: reuse an import seen there, or bind a free name.

Writing `dist.get_rank()` is only right where `dist` is `torch.distributed` when that line runs:
not in a function whose own `dist = torch.cdist(a, b)` hides the module, nor above a function's
`import torch.distributed as dist` (which makes `dist` local to the whole function), nor in a
module-level helper where `torch` was only imported inside `main()`, nor in a function the
module calls before it reaches its own `import torch.distributed as dist`.
"""

from __future__ import annotations

import ast
import enum

from neuron_migrate.core.oldstack import OPTIMUM_NEURON
from neuron_migrate.core.oldstack import PACKAGES as OLD_STACK_PACKAGES
from neuron_migrate.core.scopes import COMPREHENSIONS, Scope, ScopeTable


class State(enum.Enum):
    USABLE = "usable"  # already means what we want, and is bound when the statement runs
    FREE = "free"  # bound nowhere this place can see: a module-level import can bind it
    LATE = "late"  # this function imports it as what we want, but only later (or conditionally)
    TOO_LATE = "too late"  # the module imports it as what we want, after code that may run this place
    TAKEN = "taken"  # means something else here


def _runs_in(scope: Scope) -> Scope:
    """The scope whose statements run in order with this one's: class bodies and comprehensions
    run where they stand, a function or lambda body only when called."""
    while scope.kind == "ClassDef" or scope.kind in COMPREHENSIONS:
        assert scope.parent is not None
        scope = scope.parent
    return scope


def state(
    scope: Scope, statement: int, name: str, qualified: str, table: ScopeTable | None = None, set_up: bool = False
) -> State:
    """Can `name` be written at `statement` of `scope` to mean the import of `qualified`?

    With the file's `table`, an import under an `if` also counts where the statement stands in
    that same block; without it, only imports that run whenever their scope does. A `set_up`
    statement is one the migration adds at module level, after the file's leading imports."""
    owner = scope.lookup(name)
    if owner is None:
        return State.FREE
    bound = owner.bound[name]
    if bound.imported_as != qualified:
        return State.TAKEN
    if set_up and table is not None and owner.kind == "Module":
        leading = any(i.block == 0 and i.statement < table.first_definition for i in bound.imports)
        return State.USABLE if leading else State.TOO_LATE
    helper = table is not None and statement >= len(table.statements)  # added at module level
    if owner.kind == "Module" and (helper or _runs_in(scope).kind != "Module"):
        # A function body runs when called, which may be before the module's later imports.
        if table is None or any(i.statement < _imports_bound(table, scope, helper) for i in bound.imports):
            return State.USABLE
        return State.TOO_LATE
    at_module = owner.kind == "Module"
    for imported in bound.imports:
        if imported.statement < statement and (imported.unconditional or at_module):
            return State.USABLE
        if table is not None and table.runs_before(imported, statement):
            return State.USABLE
    if owner is scope and scope.kind in ("FunctionDef", "Module"):
        return State.LATE
    return State.TAKEN


def _imports_bound(table: ScopeTable, scope: Scope, helper: bool) -> int:
    """Module-level imports before this statement have run whenever code here runs. A helper
    the migration adds runs as soon as the module runs its own code or calls the old stack."""
    if not helper:
        return table.imports_bound_for(_runs_in(scope))
    old_stack = {
        name
        for name, bound in table.module.bound.items()
        if any(i.qualified.split(".")[0] in OLD_STACK_PACKAGES or i.qualified.startswith(OPTIMUM_NEURON) for i in bound.imports)
    }
    return min(table.imports_bound_for(scope), table.first_read(old_stack, in_call=True))


def visible_import(
    table: ScopeTable, scope: Scope, statement: int, qualified: str, prefer: str | None = None, set_up: bool = False
) -> str | None:
    """A name already imported as `qualified` that can be written here (`prefer` first)."""
    if prefer is not None and state(scope, statement, prefer, qualified, table, set_up) is State.USABLE:
        return prefer
    for owner in scope.chain():
        for name, bound in owner.bound.items():
            if bound.imported_as == qualified and state(scope, statement, name, qualified, table, set_up) is State.USABLE:
                return name
    return None


def renamed(source: str, names: dict[str, str]) -> str:
    """`source` with each name read in it (`dist`, never `.dist` or `dist=`) replaced per `names`."""
    if not names:
        return source
    lines = source.split("\n")
    spots = sorted(
        (
            (node.lineno, node.col_offset, node.end_col_offset or node.col_offset, names[node.id])
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Name) and node.id in names
        ),
        reverse=True,
    )
    for line, start, end, new in spots:
        text = lines[line - 1].encode("utf-8")
        lines[line - 1] = (text[:start] + new.encode("utf-8") + text[end:]).decode("utf-8")
    return "\n".join(lines)
