"""Modules and scripts beside a migrated file that it imports or runs, and that still import
the old stack.

A script runs with the modules of its folder (`from fsdp_utils import apply_fsdp`): migrated
alone, it fails at start-up where such a module still imports torch_xla. A module this run
migrates too is fine; any other that still imports the old stack gets a TODO at the import.
A script it runs as a program (`subprocess.run(["python", "merge.py"])`, a notebook's
`!torchrun train.py`) is part of the program too: where it still imports the old stack, or is
not there to be read (downloaded or written when the program runs), the call gets a TODO.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.names import ImportTable, ast_dotted_name
from neuron_migrate.core.oldstack import imports_old_stack
from neuron_migrate.rewrite.verify.checks import Problem

LEVELS = 4  # the file's folder and the folders above it a script may import from
# The functions that start a program from its command line (a list of words or a shell string).
RUNNERS = frozenset(
    {f"subprocess.{name}" for name in ("run", "call", "check_call", "check_output", "Popen", "getoutput", "getstatusoutput")}
    | {f"os.{name}" for name in ("system", "popen", "execv", "execvp", "execve", "execl", "execlp", "spawnv", "spawnvp")}
)
_SCRIPT = re.compile(r"""(?:^|(?<=[\s'"=]))([\w.-]+(?:/[\w.-]+)*\.py)(?=$|[\s'"])""")
_URL = re.compile(r"\S+://\S*")  # what a download names is not run


def old_stack_siblings(tree: ast.Module, path: Path, migrated: frozenset[str]) -> list[Problem]:
    """A problem at each import of a module beside `path` that still imports the old stack and is
    not among the files this run `migrated` (resolved paths)."""
    if not path.is_file():
        return []
    statements = statement_starts(tree)
    problems = []
    for node, module, found in _local_imports(tree, path):
        if str(found.resolve()) in migrated:
            continue
        try:
            text = found.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if imports_old_stack(text):
            line = statements.get(node.lineno, node.lineno)
            message = f"`{module}` ({found.name}) still imports the old stack, and this run did not migrate it: migrate it too"
            problems.append(Problem(line, message, module))
    return problems


def _local_imports(tree: ast.Module, path: Path) -> Iterator[tuple[ast.stmt, str, Path]]:
    """Each import of a module found beside `path`, with the file that holds it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found = _find(alias.name, [path.parent, *path.parent.parents][:LEVELS])
                if found is not None:
                    yield node, alias.name, found
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parents[node.level - 1] if node.level - 1 < len(path.parents) else None
                folders = [base] if base is not None else []
            else:
                folders = [path.parent, *path.parent.parents][:LEVELS]
            names = [node.module] if node.module else [alias.name for alias in node.names]
            for name in names:
                found = _find(name, folders)
                if found is not None:
                    yield node, ("." * node.level) + name, found


def _find(module: str, folders: list[Path]) -> Path | None:
    """The file of `module` in the first folder that holds it."""
    relative = Path(*module.split("."))
    for folder in folders:
        for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def script_left_behind(script: str, folder: Path, migrated: frozenset[str], written: frozenset[str] = frozenset()) -> str | None:
    """Why a Python script a program runs by name (`merge.py`, relative to the program's folder)
    keeps the migrated program from running natively, or None: this run migrates it, or it is
    there and imports nothing of the old stack. A script the program writes itself (`written`,
    a notebook's `%%writefile`) is migrated where it is written."""
    if script.rsplit("/", 1)[-1] in written:
        return None
    found = folder / script
    if str(found.resolve()) in migrated:
        return None
    if not found.is_file():
        return f"this runs `{script}`, which is not beside this file (downloaded or written when it runs?): migrate it too"
    try:
        text = found.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if imports_old_stack(text):
        return f"this runs `{script}`, which still imports the old stack, and this run did not migrate it: migrate it too"
    return None


def scripts_named(text: str) -> tuple[str, ...]:
    """The Python scripts a command line names (`torchrun --nproc_per_node=2 train.py`), as
    written (`scripts/train.py`)."""
    return tuple(dict.fromkeys(_SCRIPT.findall(_URL.sub(" ", text))))


def old_stack_scripts(tree: ast.Module, path: Path, migrated: frozenset[str]) -> list[Problem]:
    """A problem at each call that starts a Python script by name which keeps the program on the
    old stack (see `script_left_behind`)."""
    if not path.is_file():
        return []
    table = ImportTable.from_ast(tree)
    statements = statement_starts(tree)
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _qualified(table, node.func) not in RUNNERS:
            continue
        words = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for script in scripts_named(" ".join(words)):
            why = script_left_behind(script, path.parent, migrated)
            if why is not None:
                problems.append(Problem(statements.get(node.lineno, node.lineno), why, script))
    return problems


def _qualified(table: ImportTable, func: ast.expr) -> str | None:
    dotted = ast_dotted_name(func)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    bound = table.bindings.get(head)
    return f"{bound}.{rest}" if bound and rest else bound or dotted
