"""A migrated file checked against the libraries it now targets, before it is written.

The codemods' rules are not trusted to be right on code they were never tuned on: each migrated
file's imports and calls are checked against the installed target stack (`target`, `checks`),
and whatever of the old stack it still reads with no TODO on it is found (`leftovers`).
A line that fails gets a TODO naming the failure, and the report says which checks ran.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from neuron_migrate.rewrite.results import FileResult, Verification
from neuron_migrate.rewrite.verify.checks import Problem, check
from neuron_migrate.rewrite.verify.gates import availability_tests
from neuron_migrate.rewrite.verify.launch import torchrun_variables_cleared
from neuron_migrate.rewrite.verify.leftovers import (
    old_stack_left,
    old_stack_objects,
    tpu_trainer_arguments,
    xla_choices,
)
from neuron_migrate.rewrite.verify.siblings import old_stack_scripts, old_stack_siblings
from neuron_migrate.rewrite.verify.target import environment

CODE = "NM091"  # the rule code of the TODOs this step writes


def verify(result: FileResult, python: str | None = None, migrated_together: frozenset[str] = frozenset()) -> None:
    """Check `result.migrated` in the interpreter `python` (default: this one), mark each problem
    with a TODO above its statement, and record what was checked. Only a migrated file is checked:
    an untouched one is the user's code as it was."""
    from neuron_migrate.rewrite.engine import manual_items

    if result.error or not result.changed:
        return
    try:
        tree = ast.parse(result.migrated)
    except SyntaxError:
        return  # the engine refuses such output before this
    target = environment(python)
    verdict = check(tree, result.migrated, target, _beside(Path(result.path)), result.original)
    target.save()  # worker processes end without running exit hooks
    if not result.kept_as_it_was:  # a file left whole keeps its old stack on purpose, and says so
        verdict.problems += old_stack_left(tree, result.migrated) + old_stack_objects(tree, result.migrated, target)
        verdict.problems += xla_choices(tree, result.migrated) + torchrun_variables_cleared(tree)
        verdict.problems += tpu_trainer_arguments(tree, result.migrated) + availability_tests(result.original, tree, result.migrated)
        migrated = migrated_together | {str(Path(result.path).resolve())}
        verdict.problems += old_stack_siblings(tree, Path(result.path), migrated)
        verdict.problems += old_stack_scripts(tree, Path(result.path), migrated)
    marked = with_todos(result.migrated, verdict.problems)
    unmarked = None
    if marked != result.migrated:
        if _compiles(marked, result.path):
            result.migrated = marked
            result.manual = manual_items(marked)
        else:  # a TODO line would not fit where the statement is: never call such a file checked
            unmarked = f"{len(verdict.problems)} line(s) failed the check and could not be marked with a TODO"
    result.verification = Verification(
        problems=len(verdict.problems),
        not_installed=tuple(sorted(verdict.not_installed)),
        unknown=verdict.unknown or unmarked,
        versions=dict(sorted(verdict.versions.items())),
    )


def _beside(path: Path, levels: int = 4) -> frozenset[str]:
    """The modules and packages in the file's folder and the folders above it, up to its project's
    root: its imports find them before an installed package of the same name (a script of
    `process/` run from the root imports the root's `datasets/`)."""
    if not path.is_file():
        return frozenset()
    names: set[str] = set()
    for folder in [path.parent, *path.parent.parents][:levels]:
        try:
            changed = folder.stat().st_mtime_ns  # a file added or removed: listed again
        except OSError:
            break
        listed = _modules_in(str(folder), changed)
        if listed is None:
            break
        modules, root = listed
        names.update(modules)
        if root:
            break
    return frozenset(names - {path.stem})


_PROJECT_ROOT = frozenset({".git", "pyproject.toml", "setup.py", "setup.cfg"})


@functools.lru_cache(maxsize=256)
def _modules_in(folder: str, changed: int) -> tuple[frozenset[str], bool] | None:
    """The modules and packages a folder holds, and whether it is a project's root; None where it
    cannot be listed. Listed once while the folder is unchanged (`changed`, its modification
    time): the files of one folder share it."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return None
    modules = frozenset(
        entry.stem if entry.suffix == ".py" else entry.name
        for entry in entries
        if entry.suffix == ".py" or (entry.is_dir() and entry.name.isidentifier())
    )
    return modules, any(entry.name in _PROJECT_ROOT for entry in entries)


def _compiles(text: str, path: str) -> bool:
    try:
        compile(text, path, "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def with_todos(text: str, problems: list[Problem], code: str = CODE) -> str:
    """`text` with a TODO line (of rule `code`) above each problem's statement, indented like it; a TODO already
    there (from an earlier run) is not written twice, nor one whose subject a TODO above names
    (a codemod that flagged the same keyword or name said why)."""
    if not problems:
        return text
    lines = text.splitlines(keepends=True)
    by_line: dict[int, list[str]] = {}
    for problem in problems:
        if problem.subject and f"`{problem.subject}" in _todos_above(lines, problem.line):
            continue
        todo = f"# TODO(neuron-migrate {code}): {problem.message}"
        if todo not in by_line.setdefault(problem.line, []):
            by_line[problem.line].append(todo)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for number in sorted(by_line, reverse=True):
        statement = lines[number - 1]
        indent = statement[: len(statement) - len(statement.lstrip(" \t"))]
        above = {line.strip() for line in lines[max(0, number - 1 - len(by_line[number]) - 8) : number - 1]}
        new = [f"{indent}{todo}{newline}" for todo in by_line[number] if todo not in above]
        lines[number - 1 : number - 1] = new
    return "".join(lines)


def _todos_above(lines: list[str], line: int) -> str:
    """The TODO comments directly above line `line` (1-based), as one text."""
    found = []
    for text in reversed(lines[: line - 1]):
        stripped = text.strip()
        if not stripped.startswith("#"):
            break
        if "TODO(neuron-migrate" in stripped:
            found.append(stripped)
    return "\n".join(found)
