"""torchrun's variables cleared by the program that torchrun now starts.

A script launched by `xmp.spawn` could clear `RANK` or `WORLD_SIZE` (leftovers of a notebook or of
another launcher) without harm: the spawn numbered its processes itself. Migrated, the script is
started by torchrun, whose variables `init_process_group()` reads: clearing them makes it fail.
"""

from __future__ import annotations

import ast

from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.rewrite.verify.checks import Problem

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# What a process may set for itself: where the rendezvous is (a file's own launcher sets them).
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")
# Launchers of the file's own, which set these variables for the processes they start.
OWN_LAUNCHERS = ("multiprocessing.spawn", "multiprocessing.start_processes", "mp.spawn", "mp.start_processes")


def torchrun_variables_cleared(tree: ast.Module) -> list[Problem]:
    """A problem at each statement that pops, deletes or overwrites a variable torchrun sets, in a
    file that makes its process group from them (`init_process_group()` with no `init_method`)."""
    if not any(_reads_the_environment(node) for node in ast.walk(tree)) or any(
        isinstance(node, ast.Call) and (ast_dotted_name(node.func) or "").endswith(OWN_LAUNCHERS) for node in ast.walk(tree)
    ):
        return []
    problems: dict[int, list[str]] = {}
    for node in ast.walk(tree):
        for statement, names in _clears(node):
            found = problems.setdefault(statement, [])
            found += [n for n in names if n not in found]
    return [
        Problem(
            line,
            f"{', '.join(f'`{n}`' for n in names)} cleared here: torchrun sets {'it' if len(names) == 1 else 'them'} "
            "for `init_process_group()`, which then fails: drop this under torchrun",
            names[0],
        )
        for line, names in sorted(problems.items())
    ]


def _reads_the_environment(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and (ast_dotted_name(node.func) or "").endswith("init_process_group")
        and not any(k.arg in ("init_method", "store", "rank", "world_size") for k in node.keywords)
    )


def _clears(node: ast.AST) -> list[tuple[int, list[str]]]:
    """(statement line, variables) for `os.environ.pop("RANK")`, `del os.environ["RANK"]`,
    `os.environ["RANK"] = ...`, and a loop doing so over a literal list of names."""
    if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple | ast.List) and isinstance(node.target, ast.Name):
        names = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and e.value in TORCHRUN_VARIABLES]
        loop_variable = node.target.id
        if names and any(_clears_name(n, loop_variable) for n in ast.walk(node)):
            return [(node.lineno, names)]
        return []
    name = _cleared(node)
    if not (isinstance(name, ast.Constant) and name.value in TORCHRUN_VARIABLES and isinstance(node, ast.stmt | ast.expr)):
        return []
    if isinstance(node, ast.Assign) and name.value in RENDEZVOUS:
        return []  # pointing the rendezvous somewhere: torchrun's own address is overridden, not lost
    return [(node.lineno, [name.value])]


def _cleared(node: ast.AST) -> ast.expr | None:
    """The key `node` pops, deletes or assigns in `os.environ`."""
    if isinstance(node, ast.Call) and (ast_dotted_name(node.func) or "").endswith("environ.pop") and node.args:
        return node.args[0]
    if isinstance(node, ast.Delete | ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and (ast_dotted_name(target.value) or "").endswith("environ"):
                return target.slice
    return None


def _clears_name(node: ast.AST, variable: str) -> bool:
    key = _cleared(node)
    return isinstance(key, ast.Name) and key.id == variable
