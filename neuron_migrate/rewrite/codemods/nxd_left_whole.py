"""A neuronx-distributed program that cannot move as a whole stays as it was, torch_xla included.

NxD's layers and process groups run on torch_xla: rewriting a file's device, step or launch code
while its NxD stays gives a program that runs on neither stack. Such a file is given back as it
was, with a TODO above every line that holds its NxD back (the first in a function, where one
cause recurs there), so that a person sees all of them at once, and one above its first NxD
import that says why nothing else moved.
"""

from __future__ import annotations

import ast

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.rewrite.codemods.nxd_program import NXD
from neuron_migrate.rewrite.codemods.nxd_tensor_parallel import ALREADY_LEFT, Blocker, Plan
from neuron_migrate.rewrite.verify import with_todos
from neuron_migrate.rewrite.verify.checks import Problem

CODE = "NM025"
WHY = "left as it was, torch_xla too: its NxD moves to DTensor only as a whole"


def left_whole(text: str, tree: ast.Module, blocked: Plan) -> str:
    """`text` with the blockers of `blocked` marked: each at its statement, the file's own reasons
    (a program whose other file is left, a mesh built on some runs only) at its first NxD import."""
    if blocked.blocked == ALREADY_LEFT:
        return text  # an earlier run marked it
    starts = statement_starts(tree)
    function = _functions(tree)
    first: dict[tuple[str, int], Blocker] = {}
    for b in sorted((b for b in blocked.blockers if b.line), key=lambda b: b.line):
        first.setdefault((b.reason, function.get(b.line, 0)), b)  # one TODO per cause per function
    at_lines = list(first.values())
    header = _first_nxd_import(tree)
    why = WHY
    if at_lines:
        count = len({starts.get(b.line, b.line) for b in at_lines})
        why += f", and the line marked {CODE} below holds it back" if count == 1 else f", and the {count} lines marked {CODE} below hold it back"
    problems = [Problem(header, why)]
    problems += [Problem(header, b.reason) for b in blocked.blockers if not b.line]
    problems += [Problem(starts.get(b.line, b.line), b.reason) for b in at_lines]
    return with_todos(text, problems, CODE)


def _functions(tree: ast.Module) -> dict[int, int]:
    """Each line inside a function -> the line of the innermost `def` holding it."""
    found: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                if found.get(line, 0) < node.lineno:
                    found[line] = node.lineno
    return found


def _first_nxd_import(tree: ast.Module) -> int:
    """The line of the file's first import of neuronx-distributed (its first statement if none)."""
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == NXD for a in node.names))
        or (isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == NXD)
    ]
    return min(lines, default=tree.body[0].lineno if tree.body else 1)
