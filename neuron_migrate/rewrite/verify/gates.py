"""Tests of whether the old stack is installed that still guard code migrated off it.

`if HAS_NEURON: from optimum.neuron import NeuronModelForFeatureExtraction` becomes an import of
transformers, but `HAS_NEURON` (set by a probe here or in another module, or an object such as
`OptionalImports("optimum.neuron")`) still says whether optimum-neuron is installed: natively it
never is, so the migrated code behind the test never runs, and `if not HAS_NEURON: raise
ImportError(...)` stops the program. Each statement that still reads such a test gets a TODO.
"""

from __future__ import annotations

import ast
import re

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.oldstack import OPTIMUM_NEURON, PACKAGES, old_stack_module
from neuron_migrate.rewrite.verify.checks import Problem

TODO = "TODO(neuron-migrate "
# Names that say which stack is there (`HAS_NEURON`, `CHECK_OPTIMUM_NEURON`, `is_torch_xla_available`).
_STACK_WORD = re.compile(r"neuron|xla|tpu", re.IGNORECASE)
_INDENTED_IMPORT = re.compile(r"^[ \t]+(?:import|from)[ \t]", re.MULTILINE)


def availability_tests(original: str, tree: ast.Module, source: str) -> list[Problem]:
    """A problem at each statement of the migrated `tree` that reads a name the `original` tested
    before importing the old stack, where the migration took those imports from behind the test."""
    if _INDENTED_IMPORT.search(original) is None:
        return []  # no import inside a block: nothing guarded (and no second parse)
    try:
        before = ast.parse(original)
    except SyntaxError:
        return []
    migrated = {ast.dump(node.test): node for node in ast.walk(tree) if isinstance(node, ast.If)}
    gates = {
        name: package
        for name, (package, test) in _gates(before).items()
        if test in migrated and not any(_under(m, package) for s in migrated[test].body for m in _imported(s))
    }
    if not gates:
        return []
    lines = source.splitlines()
    starts = statement_starts(tree)
    problems: dict[int, Problem] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or (name := _read_name(node)) not in gates:
            continue
        statement = starts.get(node.lineno, node.lineno)
        above = lines[statement - 2] if statement >= 2 else ""
        if TODO in lines[statement - 1] or TODO in above or statement in problems:
            continue
        problems[statement] = Problem(
            statement,
            f"`{name}` tests for `{gates[name]}`, which the code it guarded no longer imports: test for what that code needs now",
            name,
        )
    return list(problems.values())


def _gates(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """The names an `if` tests before importing the old stack in its body, with the package and
    the test (as `ast.dump` gives it, to find the same `if` in the migrated code)."""
    found: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        package = next((m for statement in node.body for m in _imported(statement) if old_stack_module(m) or _under(m, OPTIMUM_NEURON)), None)
        if package is None:
            continue
        package = _package(package)
        for part in ast.walk(node.test):
            name = _read_name(part)
            if name is not None and _STACK_WORD.search(name):
                found.setdefault(name, (package, ast.dump(node.test)))
    return found


def _read_name(node: ast.AST) -> str | None:
    """The name a node reads (`CHECK_NEURON` of `CHECK_NEURON.is_available` is one of its own)."""
    return node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else None


def _imported(node: ast.AST) -> list[str]:
    modules: list[str] = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.Import):
            modules += [alias.name for alias in inner.names]
        elif isinstance(inner, ast.ImportFrom) and inner.module and not inner.level:
            modules += [inner.module, *(f"{inner.module}.{alias.name}" for alias in inner.names)]
    return modules


def _package(module: str) -> str:
    return OPTIMUM_NEURON if _under(module, OPTIMUM_NEURON) else next(p for p in PACKAGES if _under(module, p))


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")
