"""What a migrated file asks of the libraries it now targets, checked against them.

Every import of a target library must resolve, and every call whose callee the file's imports
name (`TrainingArguments(...)`, `torch.compile(...)`) must fit the callee's real signature:
keywords it accepts, no more positional arguments than it takes, no required one left out. A
call the migration wrote and a transformers-4 call left in a file that now runs on transformers
5 are checked alike. A class of the file built on library classes alone (a trainer subclass
whose base the migration swapped) is checked against them: the methods it calls on `self`, the
methods it overrides (they must take what the library passes), and its constructor, where it
inherits one; and a parameter of its own it forwards by position to `super().__init__` must land
in a parameter of the same meaning (transformers 5 renamed optional ones). What cannot be known (a method of a value, a call spreading `*args` or
`**kwargs`) is not judged.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from neuron_migrate.core.ast_nodes import statement_starts
from neuron_migrate.core.names import ast_dotted_name
from neuron_migrate.core.oldstack import old_stack_module
from neuron_migrate.core.scopes import ScopeTable
from neuron_migrate.rewrite.verify.target import Answer, TargetEnvironment

# The native stack a migrated file runs on: what its imports and calls are checked against.
TARGET_PACKAGES = frozenset(
    {"torch", "transformers", "trl", "peft", "diffusers", "accelerate", "safetensors", "datasets", "huggingface_hub"}
)

# Libraries whose classes a migration puts under a user's subclass (`NeuronTrainer` -> `Trainer`):
# such a class is checked against its new bases. A model class is not: its submodules are set at
# run time.
SWAPPED_BASES = frozenset({"transformers", "trl", "peft", "diffusers", "accelerate"})
MODULE_CLASS = re.compile(r"^(?:\w*Model\w*|\w+For[A-Z]\w*|\w*(?:Attention|Layer|Block|Embeddings|MLP|Norm|Decoder|Encoder))$")

# Namespaces filled at run time: an op library a script loads (`torch.ops.my_ops`), and the
# `neuron` device module, which torch-neuronx registers. Nothing here can say what they hold.
_FILLED_AT_RUN_TIME = ("torch.ops.", "torch.classes.")
NEURON_MODULE = "torch.neuron"
NEURON_PACKAGE = "torch-neuronx"

_STANDARD = frozenset(sys.stdlib_module_names) | {"__future__"}

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


def check(
    tree: ast.Module, source: str, target: TargetEnvironment, local: frozenset[str] = frozenset(), original: str | None = None
) -> Verdict:
    """`source` parsed as `tree`, checked against `target`. `local`: the modules beside the file,
    which its imports find before any installed package of the same name. `original`: the file
    before migration, whose own calls of its own functions are the user's (only those the
    migration wrote are checked against their `def`)."""
    verdict = Verdict(local=local)
    if original is not None:
        verdict.problems += _own_calls_written(tree, original)
    table = ScopeTable.from_ast(tree, source)
    statements = statement_starts(tree)
    for statement, guarded in _imports(tree):
        if not guarded:
            _check_import(statement, target, verdict, statements)
    inherited = _inherited_constructors(tree, table)
    forwarders = _forwarders(tree, table)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            _check_call(node, table, target, verdict, statements, inherited)
            _check_forwarded(node, table, target, verdict, statements, forwarders)
        elif isinstance(node, ast.ClassDef):
            _check_subclass(node, table, target, verdict, statements)
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
        top = name.split(".")[0]
        if top not in TARGET_PACKAGES and top not in verdict.local and not old_stack_module(name) and top not in _STANDARD:
            # Not checked here, but a package absent where the file will run fails its import:
            # the file is not called checked then.
            if target.installed(top) is False:
                verdict.not_installed.add(top)
            continue
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


def _own_calls_written(tree: ast.Module, original: str) -> list[Problem]:
    """Calls of the file's own module-level functions that the migration wrote (`main(RANK, args)`
    for `xmp.spawn(main, args=(args,))`), bound to their `def` as Python would bind them."""
    try:
        before = {ast.unparse(n) for n in ast.walk(ast.parse(original)) if isinstance(n, ast.Call)}
    except (SyntaxError, ValueError):
        return []
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.decorator_list
    }
    if not functions:
        return []
    statements = statement_starts(tree)
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions):
            continue
        if ast.unparse(node) in before:
            continue  # the user's call, as it was
        for why, subject in _mismatches(node, _parameters_of(functions[node.func.id])):
            line = statements.get(node.lineno, node.lineno)
            problems.append(Problem(line, f"`{node.func.id}()`: {why} (its `def` in this file)", subject))
    return problems


def _parameters_of(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[tuple[str, int, bool], ...]:
    """A `def`'s parameters as `(name, kind, has a default)`, the shape the target's answers take."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = len(args.defaults)
    found: list[tuple[str, int, bool]] = [
        (a.arg, inspect.Parameter.POSITIONAL_ONLY if a in args.posonlyargs else inspect.Parameter.POSITIONAL_OR_KEYWORD, i >= len(positional) - defaults)
        for i, a in enumerate(positional)
    ]
    if args.vararg is not None:
        found.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, True))
    found += [(a.arg, inspect.Parameter.KEYWORD_ONLY, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg is not None:
        found.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, True))
    return tuple(found)


def _inherited_constructors(tree: ast.Module, table: ScopeTable) -> dict[str, str]:
    """Module-level classes of the file that take their constructor from one target-library base
    (`class MyTrainer(Trainer)` with no `__init__`): called, they take what that base takes."""
    found: dict[str, str] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or len(cls.bases) != 1 or cls.keywords:
            continue
        if any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in ("__init__", "__new__") for node in cls.body):
            continue
        base = table.module.resolve_dotted(ast_dotted_name(cls.bases[0]) or "")
        if base is not None and base.split(".")[0] in TARGET_PACKAGES and table.module.meaning(cls.name) is None:
            found[cls.name] = base
    return found


def _check_call(
    call: ast.Call,
    table: ScopeTable,
    target: TargetEnvironment,
    verdict: Verdict,
    statements: dict[int, int],
    inherited: dict[str, str] | None = None,
) -> None:
    dotted = ast_dotted_name(call.func)
    # What the name is where the call stands: an import there, and nothing else bound to it.
    qualified = table.innermost(call.lineno, call.col_offset).resolve_dotted(dotted) if dotted else None
    if qualified is None and dotted in (inherited or {}):
        qualified = (inherited or {})[dotted]  # a subclass of the file's own, built as its base is
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


def _forwarders(tree: ast.Module, table: ScopeTable) -> dict[str, tuple[frozenset[str], tuple[str, ...]]]:
    """Module-level functions and classes whose `**kwargs` go, untouched, only to calls the file's
    imports name (`def load(name, **kw): return AutoModel.from_pretrained(name, **kw)`): what
    each names itself, and the calls a keyword it does not name reaches."""
    found: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
    for statement in tree.body:
        function: ast.stmt | None = statement
        if isinstance(statement, ast.ClassDef):
            function = next((n for n in statement.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if not isinstance(function, ast.FunctionDef) or function.args.kwarg is None:
            continue
        kwargs = function.args.kwarg.arg
        reads = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == kwargs]
        spreads = [
            n
            for n in ast.walk(function)
            if isinstance(n, ast.Call) and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwargs for k in n.keywords)
        ]
        callees = [table.innermost(c.lineno, c.col_offset).resolve_dotted(ast_dotted_name(c.func) or "") for c in spreads]
        if spreads and len(reads) == len(spreads) and all(callees):
            args = function.args
            own = frozenset(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))
            found[statement.name] = (own, tuple(c for c in callees if c))  # type: ignore[attr-defined]
    return found


def _check_forwarded(
    call: ast.Call,
    table: ScopeTable,
    target: TargetEnvironment,
    verdict: Verdict,
    statements: dict[int, int],
    forwarders: dict[str, tuple[frozenset[str], tuple[str, ...]]],
) -> None:
    """A keyword given to a function of the file that hands it on (`load(name, torchscript=True)`)
    must be one the library call it reaches takes."""
    if not (isinstance(call.func, ast.Name) and call.func.id in forwarders):
        return
    if table.innermost(call.lineno, call.col_offset).lookup(call.func.id) is not table.module:
        return  # another binding of the name where the call stands
    own, callees = forwarders[call.func.id]
    for callee in callees:
        answer = _ask(callee, target, verdict)
        if answer is None or answer.parameters is None:
            continue
        kinds = {name: kind for name, kind, _ in answer.parameters}
        if inspect.Parameter.VAR_KEYWORD in kinds.values():
            continue
        for keyword in call.keywords:
            if keyword.arg is not None and keyword.arg not in own and kinds.get(keyword.arg, inspect.Parameter.POSITIONAL_ONLY) == inspect.Parameter.POSITIONAL_ONLY:
                line = statements.get(call.lineno, call.lineno)
                shown = callee.rsplit(".", 1)[-1]
                message = f"`{call.func.id}()` hands `{keyword.arg}` on to `{shown}()`, which takes no such keyword in {_where(answer, callee)}"
                verdict.problems.append(Problem(line, message, keyword.arg))


def _check_subclass(cls: ast.ClassDef, table: ScopeTable, target: TargetEnvironment, verdict: Verdict, statements: dict[int, int]) -> None:
    """A class built on a target library's classes alone (`class MyTrainer(Trainer)`, the base a
    migration may have swapped): the methods it calls on `self` must exist there, and a method it
    overrides must take what the library passes it (`compute_loss(..., num_items_in_batch=...)`)."""
    scope = table.innermost(cls.lineno, cls.col_offset)
    bases = [scope.resolve_dotted(ast_dotted_name(base) or "") for base in cls.bases]
    if not bases or any(base is None or base.split(".")[0] not in SWAPPED_BASES for base in bases):
        return  # a base of the user's own may define anything, and torch's were not swapped
    known = [b for b in bases if b is not None]
    _check_super_init(cls, known, target, verdict, statements)
    if any(MODULE_CLASS.match(base.rsplit(".", 1)[-1]) for base in bases if base):
        return  # a model: its submodules are attributes set at run time
    own = {node.name for node in cls.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    own |= {
        target.attr if isinstance(target, ast.Attribute) else target.id
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) or (isinstance(target, ast.Attribute) and ast_dotted_name(target.value) == "self")
    }
    shown = ", ".join(f"`{b.rsplit('.', 1)[-1]}`" for b in known)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and ast_dotted_name(node.func.value) == "self"
            and node.func.attr not in own
            and not node.func.attr.startswith("__")
        ):
            answers = [_ask(f"{base}.{node.func.attr}", target, verdict) for base in known]
            if answers and all(a is not None and a.missing is not None for a in answers):
                where = _where(answers[0], known[0])  # type: ignore[arg-type]
                line = statements.get(node.lineno, node.lineno)
                verdict.problems.append(Problem(line, f"`self.{node.func.attr}()`: {shown} has no such method in {where}", node.func.attr))
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef) or method.args.kwarg is not None:
            continue
        if method.name.startswith("__"):
            continue  # the user calls constructors and operators, the library the hooks
        answer = next((a for a in (_ask(f"{b}.{method.name}", target, verdict) for b in known) if a is not None and a.parameters), None)
        if answer is None or answer.parameters is None:
            continue
        taken = {a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)}
        passed = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        named = [name for name, kind, _ in answer.parameters if kind in passed]
        if method.args.vararg is not None or len(taken) >= len(named):
            continue  # as many parameters: renamed ones still take what is passed by position
        missing = [name for name in named if name not in taken and name != "self"]
        if missing:
            line = statements.get(method.lineno, method.lineno)
            verdict.problems.append(
                Problem(
                    line,
                    f"`{method.name}` overrides {shown}'s, which takes {', '.join(f'`{m}`' for m in missing)} too in {_where(answer, known[0])}: add {'it' if len(missing) == 1 else 'them'}",
                    method.name,
                )
            )


def _check_super_init(cls: ast.ClassDef, bases: list[str], target: TargetEnvironment, verdict: Verdict, statements: dict[int, int]) -> None:
    """`super().__init__(config, position_embedding_type)` forwarding the subclass's own parameter
    by position: where the library renamed or reordered its optional parameters
    (`BertSelfAttention(config, is_causal=...)` in transformers 5), the value lands in another."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None or len(bases) != 1:
        return
    forwarded = {a.arg for a in (*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs)}
    for node in ast.walk(init):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "__init__"
            and isinstance(node.func.value, ast.Call)
            and ast_dotted_name(node.func.value.func) == "super"
        ):
            continue
        answer = _ask(bases[0], target, verdict)
        if answer is None or answer.parameters is None or any(isinstance(a, ast.Starred) for a in node.args):
            return
        positional = [p for p in answer.parameters if p[1] in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        names = {p[0] for p in answer.parameters}
        for arg, (name, _, optional) in zip(node.args, positional, strict=False):
            if isinstance(arg, ast.Name) and arg.id != name and arg.id in forwarded and arg.id not in names and optional:
                line = statements.get(node.lineno, node.lineno)
                base = bases[0].rsplit(".", 1)[-1]
                verdict.problems.append(
                    Problem(line, f"`{arg.id}` goes to `{base}`'s `{name}` by position in {_where(answer, bases[0])}: pass what `{name}` means by keyword", arg.id)
                )
        return


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
