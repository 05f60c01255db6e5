"""Old-stack names the migrated code still reads where no TODO says so.

The codemods migrate what they recognise. A module held in a variable, passed as an argument or
returned by a helper (`xm = _load_xla_model(); xm.mark_step()`) is out of their sight, and so is
any API no rule knows. Whatever the reason, a statement that still reads a name an old-stack
import binds, with no TODO on it, gets one: the output never claims more than was done.
"""

from __future__ import annotations

import ast

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.names import ImportTable, ast_dotted_name
from neuron_migrate.core.oldstack import MOVES_WITH_ITS_KERNEL, OPTIMUM_NEURON, PACKAGES
from neuron_migrate.core.scopes import Scope, ScopeTable
from neuron_migrate.rewrite.verify.checks import Problem
from neuron_migrate.rewrite.verify.target import TargetEnvironment

TODO = "TODO(neuron-migrate "


def uses_without_todo(source: str, tree: ast.Module) -> list[tuple[ast.Name, int, int]]:
    """`(name, statement line, function)` of each old-stack name read on a statement that
    carries no TODO (on its line or in the comments right above it), where no earlier statement of
    the same function carries one that names it (one TODO per name per function says enough);
    `function` is the line of the enclosing `def` (0: module level)."""
    table = ImportTable.from_ast(tree)
    # A kernel's language moves with the kernel, whose TODO is at its `@nki.jit`.
    names = table.names_under((*PACKAGES, OPTIMUM_NEURON)) - table.names_under(MOVES_WITH_ITS_KERNEL)
    if not names:
        return []
    lines = source.splitlines()
    left: list[tuple[ast.Name, int, int]] = []
    told: set[tuple[int, str]] = set()  # (function, name) a TODO already covers

    def first_line(statement: ast.stmt) -> int:
        return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])

    def todos(statement: ast.stmt) -> list[str]:
        """The TODO comments on the statement's first line and right above it."""
        first = first_line(statement)
        found = [lines[first - 1]] if TODO in lines[first - 1] else []
        row = first - 2
        while row >= 0 and lines[row].lstrip().startswith("#"):
            if TODO in lines[row]:
                found.append(lines[row])
            row -= 1
        return found

    def visit(node: ast.AST, statement: ast.stmt | None, function: int) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return
        if isinstance(node, ast.stmt):
            statement = node
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names and statement is not None:
            key = (function, node.id)
            marks = todos(statement)
            if any(f"`{node.id}" in todo for todo in marks):
                told.add(key)  # and the rest of the function with it
            elif not marks and key not in told:
                left.append((node, first_line(statement), function))
        inner = node.lineno if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else function
        for child in ast.iter_child_nodes(node):
            visit(child, statement, inner)

    visit(tree, None, 0)
    return left


def old_stack_left(tree: ast.Module, source: str) -> list[Problem]:
    """A problem at the first statement of each function that reads an old-stack name the
    codemods could not see (a variable or parameter holding the module, not its import) with no
    TODO on it. A name that is its import here was the codemods' to migrate or to mark, or the
    user's to keep: a rule they turned off is theirs."""
    left = uses_without_todo(source, tree)
    if not left:
        return []
    table = ImportTable.from_ast(tree)
    scopes = ScopeTable.from_ast(tree, source)
    problems: dict[tuple[int, str], Problem] = {}
    for node, statement, function in left:
        name = node.id
        if scopes.innermost(node.lineno, node.col_offset).meaning(name) is not None:
            continue
        message = f"`{name}` here is likely `{table.bindings.get(name, name)}`, reached through a name the migration cannot follow: migrate its uses by hand"
        problems.setdefault((function, name), Problem(statement, message, name))
    return list(problems.values())


def old_stack_objects(tree: ast.Module, source: str, target: TargetEnvironment | None = None) -> list[Problem]:
    """A problem at each use of an object an old-stack class made (`model =
    MistralForSampling.from_pretrained(...)`, left under its TODO): its methods and attributes
    (`model.to_neuron()`, `model.sample(...)`) are that library's API, to port along with the
    object. One per attribute of each object; a statement with a TODO of its own is left alone,
    and so is what every `torch.nn.Module` or optimizer has (`.parameters()`, `.eval()`), asked of
    `target`."""
    table = ImportTable.from_ast(tree)
    scopes = ScopeTable.from_ast(tree, source)
    old = OBJECT_LIBRARIES
    made: dict[tuple[object, str], str] = {}  # (owner scope or class, variable) -> the class
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        dotted = ast_dotted_name(node.value.func) or ""
        qualified = table.resolve_dotted(dotted) or ""
        if not any(qualified == p or qualified.startswith(p + ".") for p in old):
            continue
        classes = [part for part in dotted.split(".") if part[:1].isupper()]
        if not classes:
            continue  # a function's result (a tensor, a number), not an object of the library
        key = _variable(node.targets[0], scopes)
        if key is not None:
            made[key] = classes[-1]  # `MistralForSampling` of `MistralForSampling.from_pretrained`
    if not made:
        return []
    lines = source.splitlines()
    starts = statement_starts(tree)
    problems: dict[tuple[tuple[object, str], str], Problem] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        key = _variable(node.value, scopes)
        if key is None or key not in made:
            continue
        statement = starts.get(node.lineno, node.lineno)
        above = lines[statement - 2] if statement >= 2 else ""
        if TODO in lines[statement - 1] or TODO in above:
            continue
        if target is not None and _module_api(node.attr, target):
            continue  # a wrapper module's `.parameters()` stays what it was on the native module
        name = ast_dotted_name(node.value)
        message = f"`{name}.{node.attr}` is the API of `{made[key]}`, which `{name}` holds: port it with the object"
        problems.setdefault((key, node.attr), Problem(statement, message, f"{name}.{node.attr}"))
    return list(problems.values())


# The libraries whose objects have an API of their own: torch_xla's wrap torch's modules and
# optimizers, whose API they keep (`FSDP(model).parameters()`).
OBJECT_LIBRARIES = ("transformers_neuronx", "neuronx_distributed", "neuronx_distributed_inference", "torch_neuronx", OPTIMUM_NEURON)
# What every module and optimizer has, native or not.
_TORCH_BASES = ("torch.nn.Module", "torch.optim.Optimizer")


def _module_api(attribute: str, target: TargetEnvironment) -> bool:
    """Is `attribute` what every `torch.nn.Module` (or optimizer) of the target has?"""
    for base in _TORCH_BASES:
        answer = target.find(f"{base}.{attribute}")
        if answer is not None and answer.installed and answer.error is None and answer.missing is None:
            return True
    return False


def _variable(node: ast.expr, scopes: ScopeTable) -> tuple[object, str] | None:
    """Which variable `node` is: a name with the scope that binds it, or `self.x` with the class."""
    if isinstance(node, ast.Name):
        owner = scopes.innermost(node.lineno, node.col_offset).lookup(node.id)
        return (owner, node.id) if owner is not None else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        scope: Scope | None = scopes.innermost(node.lineno, node.col_offset)
        while scope is not None and scope.kind != "ClassDef":
            scope = scope.parent
        return (scope, f"self.{node.attr}") if scope is not None else None
    return None
