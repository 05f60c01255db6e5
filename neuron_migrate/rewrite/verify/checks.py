"""What a migrated file asks of the libraries it now targets, checked against them.

Every import of a target library must resolve, and every call whose callee the file's imports
name (`TrainingArguments(...)`, `torch.compile(...)`) must fit the callee's real signature:
keywords it accepts, no more positional arguments than it takes, no required one left out. A
call the migration wrote and a transformers-4 call left in a file that now runs on transformers
5 are checked alike. What cannot be known (a method of a value, a call spreading `*args` or
`**kwargs`) is not judged.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.core.scopes import ScopeTable
from neuron_migrate.rewrite.verify.target import Answer, TargetEnvironment

# The native stack a migrated file runs on: what its imports and calls are checked against.
TARGET_PACKAGES = frozenset(
    {"torch", "transformers", "trl", "peft", "diffusers", "accelerate", "safetensors", "datasets", "huggingface_hub"}
)

# Namespaces filled at run time: an op library a script loads (`torch.ops.my_ops`), and the
# `neuron` device module, which torch-neuronx registers. Nothing here can say what they hold.
_FILLED_AT_RUN_TIME = ("torch.ops.", "torch.classes.")
NEURON_MODULE = "torch.neuron"
NEURON_PACKAGE = "torch-neuronx"

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Problem:
    line: int  # where the statement holding it starts
    message: str  # one line: the call or import, and what the target says of it
    subject: str = ""  # the name or keyword it is about (a TODO above that names it says enough)


@dataclass
class Verdict:
    """What checking one file found: its problems, and what could not be checked."""

    problems: list[Problem] = field(default_factory=list)
    not_installed: set[str] = field(default_factory=set)  # target packages the file uses, absent there
    unknown: str | None = None  # why nothing could be checked (the probe failed)
    versions: dict[str, str] = field(default_factory=dict)  # package -> version checked against
    missing_imports: set[str] = field(default_factory=set)  # names imports ask for in vain
    local: frozenset[str] = frozenset()  # top-level modules beside the file: not the libraries'


def check(tree: ast.Module, source: str, target: TargetEnvironment, local: frozenset[str] = frozenset()) -> Verdict:
    """`source` parsed as `tree`, checked against `target`. `local`: the modules beside the file,
    which its imports find before any installed package of the same name."""
    verdict = Verdict(local=local)
    table = ScopeTable.from_ast(tree, source)
    statements = statement_starts(tree)
    for statement, guarded in _imports(tree):
        if not guarded:
            _check_import(statement, target, verdict, statements)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            _check_call(node, table, target, verdict, statements)
    if target.broken is not None:
        verdict.unknown = target.broken
    return verdict


def _ask(name: str, target: TargetEnvironment, verdict: Verdict) -> Answer | None:
    """The target's answer, when it is one a problem can be told from."""
    top = name.split(".")[0]
    if top not in TARGET_PACKAGES or top in verdict.local or name.startswith(_FILLED_AT_RUN_TIME):
        return None
    if f"{name}.".startswith(f"{NEURON_MODULE}."):
        verdict.not_installed.add(NEURON_PACKAGE)
        return None
    answer = target.find(name)
    if answer is None or answer.error is not None:
        return None
    if not answer.installed:
        verdict.not_installed.add(top)
        return None
    verdict.versions[top] = answer.version
    return answer


def _where(answer: Answer, name: str) -> str:
    top = name.split(".")[0]
    return f"{top} {answer.version}".rstrip()


def _check_import(node: ast.Import | ast.ImportFrom, target: TargetEnvironment, verdict: Verdict, statements: dict[int, int]) -> None:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.level or not node.module:
        return
    else:
        names = [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
    for name in names:
        answer = _ask(name, target, verdict)
        if answer is not None and answer.missing is not None:
            verdict.missing_imports.add(answer.missing)
            what = f"`{answer.missing}`"
            verdict.problems.append(
                Problem(
                    statements[node.lineno],
                    f"{what} does not exist in {_where(answer, name)}: this import fails",
                    answer.missing.rsplit(".", 1)[-1],
                )
            )


def _check_call(call: ast.Call, table: ScopeTable, target: TargetEnvironment, verdict: Verdict, statements: dict[int, int]) -> None:
    dotted = ast_dotted_name(call.func)
    # What the name is where the call stands: an import there, and nothing else bound to it.
    qualified = table.innermost(call.lineno, call.col_offset).resolve_dotted(dotted) if dotted else None
    if qualified is None:
        return
    answer = _ask(qualified, target, verdict)
    if answer is None:
        return
    line = statements.get(call.lineno, call.lineno)
    shown = f"`{dotted}()`"
    if answer.missing is not None:
        if answer.missing in verdict.missing_imports:
            return  # its import says so already
        message = f"{shown}: `{answer.missing}` does not exist in {_where(answer, qualified)}"
        verdict.problems.append(Problem(line, message, answer.missing.rsplit(".", 1)[-1]))
        return
    if answer.parameters is None:
        return
    for why, subject in _mismatches(call, answer.parameters):
        verdict.problems.append(Problem(line, f"{shown}: {why} in {_where(answer, qualified)}", subject))


def _mismatches(call: ast.Call, parameters: tuple[tuple[str, int, bool], ...]) -> Iterator[tuple[str, str]]:
    """How `call` fails to bind to these parameters, as `inspect.Signature.bind` would say it
    (with the keyword it is about, if any)."""
    kinds = {name: kind for name, kind, _ in parameters}
    spread_args = any(isinstance(a, ast.Starred) for a in call.args)
    spread_kwargs = any(k.arg is None for k in call.keywords)
    takes_kwargs = inspect.Parameter.VAR_KEYWORD in kinds.values()
    takes_args = inspect.Parameter.VAR_POSITIONAL in kinds.values()
    positional = [name for name, kind, _ in parameters if kind in _POSITIONAL]
    if not spread_args and not takes_args and len(call.args) > len(positional):
        yield f"takes at most {len(positional)} positional arguments, {len(call.args)} given", ""
    given = set(positional[: len(call.args)]) if not spread_args else set(positional)
    for keyword in call.keywords:
        if keyword.arg is None:
            continue
        kind = kinds.get(keyword.arg)
        if kind is None or kind == inspect.Parameter.POSITIONAL_ONLY:
            if not takes_kwargs:
                yield f"no keyword `{keyword.arg}`", keyword.arg
        else:
            given.add(keyword.arg)
    if spread_args or spread_kwargs:
        return
    required = [
        name
        for name, kind, has_default in parameters
        if not has_default and kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    left = [name for name in required if name not in given]
    if left:
        yield "missing " + ", ".join(f"`{name}`" for name in left), ""


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import, and whether a `try` around it expects it may fail."""

    def walk(body: list[ast.stmt], guarded: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node, guarded
            elif isinstance(node, ast.Try):
                yield from walk(node.body, True)
                for handler in node.handlers:
                    yield from walk(handler.body, guarded)
                yield from walk(node.orelse, guarded)
                yield from walk(node.finalbody, guarded)
            else:
                for name in ("body", "orelse"):
                    inner = getattr(node, name, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                        yield from walk(inner, guarded)
                for case in getattr(node, "cases", ()):
                    yield from walk(case.body, guarded)

    yield from walk(tree.body, False)
