"""Old-stack names the migrated code still reads where no TODO says so.

The codemods migrate what they recognise. A module held in a variable, passed as an argument or
returned by a helper (`xm = _load_xla_model(); xm.mark_step()`) is out of their sight, and so is
any API no rule knows. Whatever the reason, a statement that still reads a name an old-stack
import binds, with no TODO on it, gets one: the output never claims more than was done.
"""

from __future__ import annotations

import ast
import re

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.messages import MESSAGE_CALLS
from neuron_migrate.core.names import ImportTable, ast_dotted_name
from neuron_migrate.core.oldstack import (
    CONVENTIONAL_ALIASES,
    MOVES_WITH_ITS_KERNEL,
    OPTIMUM_NEURON,
    PACKAGES,
)
from neuron_migrate.core.scopes import Scope, ScopeTable
from neuron_migrate.rewrite.verify.checks import Problem
from neuron_migrate.rewrite.verify.target import TargetEnvironment

TODO = "TODO(neuron-migrate "
# The conventional names that, unbound in a file, can only mean torch_xla's modules (`pl` and the
# package names are too common elsewhere to tell).
ELSEWHERE_ALIASES = frozenset({"xm", "xr", "xmp", "met", "xu", "xser", "xp", "xs"})


def uses_without_todo(source: str, tree: ast.Module) -> list[tuple[ast.Name, int, int, str]]:
    """`(name, statement line, function, use)` of each old-stack name read on a statement that
    carries no TODO (on its line or in the comments right above it). `use` is what is read: the
    attribute taken of the name (`xm.mark_step`), else the name; where an earlier statement of
    the same function carries a TODO that names that use (or the bare name), it says enough.
    `function` is the line of the enclosing `def` (0: module level)."""
    table = ImportTable.from_ast(tree)
    # A kernel's language moves with the kernel, whose TODO is at its `@nki.jit`.
    names = table.names_under((*PACKAGES, OPTIMUM_NEURON)) - table.names_under(MOVES_WITH_ITS_KERNEL)
    names |= bound_elsewhere(tree)
    if not names:
        return []
    lines = source.splitlines()
    left: list[tuple[ast.Name, int, int, str]] = []
    told: set[tuple[int, str]] = set()  # (function, use) a TODO already covers

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

    def visit(node: ast.AST, parent: ast.AST | None, statement: ast.stmt | None, function: int) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return
        if isinstance(node, ast.stmt):
            statement = node
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names and statement is not None:
            use = f"{node.id}.{parent.attr}" if isinstance(parent, ast.Attribute) and parent.value is node else node.id
            marks = todos(statement)
            if any(f"`{use}" in todo or f"`{node.id}`" in todo for todo in marks):
                told.add((function, use))  # and the rest of the function with it
                told.add((function, node.id))
            elif not marks and (function, use) not in told and (function, node.id) not in told:
                left.append((node, first_line(statement), function, use))
        inner = node.lineno if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else function
        for child in ast.iter_child_nodes(node):
            visit(child, node, statement, inner)

    visit(tree, None, None, 0)
    return left


def bound_elsewhere(tree: ast.Module) -> set[str]:
    """The conventional names of old-stack modules (`xm`, `xs`, `xmp`) that the file reads as
    modules (`xm.mark_step()`) but never binds: a star import, another cell or a module run
    before it binds them, out of the rules' sight."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ELSEWHERE_ALIASES:
            read.add(node.value.id)
    return read - bound


def _meaning(table: ImportTable, name: str) -> str:
    return table.bindings.get(name) or CONVENTIONAL_ALIASES.get(name, name)


def old_stack_left(tree: ast.Module, source: str) -> list[Problem]:
    """A problem at each statement that reads old-stack API the codemods could not see (through a
    variable or parameter holding the module, not its import) with no TODO on it: one per API
    used (`xm.mark_step`) per function, each at its first use. A name that is its import here was
    the codemods' to migrate or to mark, or the user's to keep: a rule they turned off is theirs."""
    left = uses_without_todo(source, tree)
    if not left:
        return []
    table = ImportTable.from_ast(tree)
    scopes = ScopeTable.from_ast(tree, source)
    uses: dict[int, dict[str, None]] = {}  # statement -> the uses it reads, in order
    seen: set[tuple[int, str]] = set()
    for node, statement, function, use in left:
        if scopes.innermost(node.lineno, node.col_offset).meaning(node.id) is not None or (function, use) in seen:
            continue
        seen.add((function, use))
        uses.setdefault(statement, {})[use] = None
    problems = []
    for statement, found in uses.items():
        spelled = ", ".join(f"`{use}`" for use in found)
        qualified = [_meaning(table, use.split(".")[0]) + use[len(use.split(".")[0]) :] for use in found]
        if len(found) == 1:
            message = f"{spelled} is likely `{qualified[0]}`, out of the rules' sight: port it by hand"
        else:
            modules = " and ".join(sorted({f"`{q.rsplit('.', 1)[0]}`" for q in qualified}))
            message = f"{spelled} are likely {modules}'s, out of the rules' sight: port them by hand"
        problems.append(Problem(statement, message, next(iter(found))))
    return problems


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
    imported = _imported_by_name(tree, old)  # `NxDModel = importlib.import_module("neuronx_distributed").NxDModel`
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and id(node) in imported:
            key = _variable(node.targets[0], scopes)
            if key is not None:
                made[key] = imported[id(node)][1].rpartition(".")[2]
            continue
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        dotted = ast_dotted_name(node.value.func) or ""
        head, _, rest = dotted.partition(".")
        through = next((q for name, q in imported.values() if name == head), None)
        qualified = table.resolve_dotted(dotted) or (f"{through}.{rest}" if through and rest else through) or ""
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


IMPORTERS = frozenset({"importlib.import_module", "import_module", "__import__"})


def _imported_by_name(tree: ast.Module, libraries: tuple[str, ...]) -> dict[int, tuple[str, str]]:
    """`id(assignment) -> (name, what it binds)` for `x = importlib.import_module("<old-stack module>")`,
    and attributes taken of it (`.NxDModel`): the old stack imported by a string, out of the
    import table's sight."""
    found: dict[int, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        attributes: list[str] = []
        while isinstance(value, ast.Attribute):
            attributes.insert(0, value.attr)
            value = value.value
        if not (isinstance(value, ast.Call) and (ast_dotted_name(value.func) or "") in IMPORTERS and value.args):
            continue
        module = value.args[0].value if isinstance(value.args[0], ast.Constant) else None
        if isinstance(module, str) and any(module == p or module.startswith(p + ".") for p in libraries):
            found[id(node)] = (node.targets[0].id, ".".join([module, *attributes]))
    return found


# A string that names XLA as a device, a backend or an option: `device_type="xla"` (autocast),
# `backend="openxla"`, `"xla:0"`, `fsdp_config={"xla": True}`. Labels that merely mention XLA
# (`"model_xla"`, `"xla/compile_time_s"`) are names, not choices.
XLA_CHOICE = re.compile(r"(?:open)?xla(?::\d+)?")
# A library's method that turns on its torch_xla path (`pipe.transformer.enable_xla_flash_attention()`):
# it raises, or does nothing, without torch_xla.
XLA_SWITCH = re.compile(r"(?:enable|set_use|use|apply)_\w*xla\w*")


def xla_choices(tree: ast.Module, source: str) -> list[Problem]:
    """A problem at each statement, with no TODO of its own, where a string chooses XLA: a device
    type (`torch.autocast("xla")`), a backend, an option key. No rule knows every place such a
    value goes, and each one fails or selects nothing natively."""
    lines = source.splitlines()
    starts = statement_starts(tree)
    messages: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = ast_dotted_name(node.func) or ""
            if called.rpartition(".")[2] in MESSAGE_CALLS:
                messages.update(id(n) for n in ast.walk(node))
            for keyword in node.keywords:
                if keyword.arg == "help":
                    messages.update(id(n) for n in ast.walk(keyword.value))
        elif isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)  # a docstring
        ):
            messages.update(id(n) for n in ast.walk(node))
    problems: dict[int, Problem] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and XLA_SWITCH.fullmatch(node.func.attr):
            statement = starts.get(node.lineno, node.lineno)
            above = lines[statement - 2] if statement >= 2 else ""
            if TODO not in lines[statement - 1] and TODO not in above and statement not in problems:
                method = f".{node.func.attr}()"
                problems[statement] = Problem(
                    statement, f"`{method}` turns on the library's torch_xla path, absent natively: drop it", method
                )
            continue
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in messages:
            continue
        if XLA_CHOICE.fullmatch(node.value) is None:
            continue
        statement = starts.get(node.lineno, node.lineno)
        above = lines[statement - 2] if statement >= 2 else ""
        if TODO in lines[statement - 1] or TODO in above or statement in problems:
            continue
        message = f"`\"{node.value}\"` chooses XLA, which the native stack has not: choose a native value"
        problems[statement] = Problem(statement, message, repr(node.value))
    return list(problems.values())


# Arguments that ran a Lightning `Trainer` on TPU cores through torch_xla (`tpu_cores=8` before
# Lightning 2, `accelerator="tpu"` after), whatever else the file imports.
TPU_KEYWORDS = frozenset({"tpu_cores", "num_tpu_cores"})


def tpu_trainer_arguments(tree: ast.Module, source: str) -> list[Problem]:
    """A problem at each statement, with no TODO of its own, that asks a trainer for TPU cores:
    natively there are none, and Lightning then refuses to start or falls back to the CPU."""
    lines = source.splitlines()
    starts = statement_starts(tree)
    problems: dict[int, Problem] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            tpu = keyword.arg in TPU_KEYWORDS or (
                keyword.arg == "accelerator" and isinstance(keyword.value, ast.Constant) and keyword.value.value == "tpu"
            )
            statement = starts.get(node.lineno, node.lineno)
            above = lines[statement - 2] if statement >= 2 else ""
            if not tpu or TODO in lines[statement - 1] or TODO in above or statement in problems:
                continue
            written = f'{keyword.arg}="tpu"' if keyword.arg == "accelerator" else f"{keyword.arg}="
            problems[statement] = Problem(
                statement,
                f'`{written}` runs the trainer on TPU cores through torch_xla: use `accelerator="auto"` and `devices=<cores>`',
                keyword.arg or "",
            )
    return list(problems.values())
