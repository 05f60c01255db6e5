"""The statements next to `xmp.spawn` that ran once, in the parent process, and would not be
the same if every rank ran them.

`xmp.spawn` ran in a parent process that waited for its workers: what came before it in the same
block ran once, before they started, and what came after ran once, after they had all finished.
Under torchrun there is no parent: every rank runs the whole script. Parsing arguments, imports,
definitions and plain assignments give each rank the same values, so they may run anywhere;
anything else (a download, a `makedirs`, a report) needs a person to decide.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence

import libcst as cst

from neuron_migrate.core.cst_children import children
from neuron_migrate.rewrite.codemods.base import Visitor, dotted_name


class ParentOnly(enum.Enum):
    BEFORE = "before"
    AFTER = "after"


# Calls that compute the same value in every process and touch nothing outside it.
SAME_ON_EVERY_RANK = frozenset(
    {
        "int", "float", "str", "bool", "len", "range", "dict", "list", "tuple", "set", "frozenset",
        "min", "max", "sum", "abs", "round", "sorted", "getattr", "isinstance", "vars",
        "get", "getenv", "join", "Path", "format", "lower", "upper", "strip", "split",
        "ArgumentParser", "add_argument", "add_argument_group", "add_mutually_exclusive_group",
        "set_defaults", "setdefault", "update", "filterwarnings", "basicConfig", "getLogger",
    }
)
# Argument and configuration parsing, by name: `parse()`, `get_args()`, `build_train_parser()`;
# not a name that says it acts (`copy_config_file_to_output_folder()`, `save_config()`).
PARSING = re.compile(r"pars|args|flags|config", re.IGNORECASE)
ACTS = re.compile(
    r"^_*(?:save|write|copy|dump|upload|download|create|make_?dirs?|mkdir|log|print|remove|delete|"
    r"clean|setup|set_up|init|move|rename|send|push|export)(?:_|$)",
    re.IGNORECASE,
)


def parent_only_statements(
    module: cst.Module, is_spawn: Callable[[cst.BaseStatement], bool]
) -> tuple[dict[int, ParentOnly], dict[int, int]]:
    """The ids of the statements, in the blocks holding a spawn, that only the parent ran; and
    for the first of them on each side of the spawn in a block that is not a `print` (which rank
    0 makes alone), how many such statements it leads: one TODO says it for all of them."""
    finder = _Finder(is_spawn)
    finder.scan(module)
    return finder.found, finder.leads


def print_call(statement: cst.CSTNode) -> cst.Call | None:
    """The `print(...)` a one-statement line consists of, if it is one."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    small = statement.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        func = small.value.func
        if isinstance(func, cst.Name) and func.value == "print":
            return small.value
    return None


class _Finder(Visitor):
    def __init__(self, is_spawn: Callable[[cst.BaseStatement], bool]) -> None:
        self.is_spawn = is_spawn
        self.found: dict[int, ParentOnly] = {}
        self.leads: dict[int, int] = {}

    def visit_Module(self, node: cst.Module) -> None:
        # Module-level code ran in every worker too (each imports the main module): only a
        # spawn there itself counts.
        self._scan(node.body, nested=False)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._scan(node.body, nested=True)

    def _holds_spawn(self, node: cst.CSTNode) -> bool:
        """The statement is a spawn, or a compound statement (`if`, `for`...) with one inside."""
        if isinstance(node, cst.BaseStatement) and self.is_spawn(node):
            return True
        if isinstance(node, cst.SimpleStatementLine | cst.FunctionDef | cst.ClassDef):
            return False
        return any(self._holds_spawn(child) for child in children(node))

    def _scan(self, body: Sequence[cst.BaseStatement], nested: bool) -> None:
        """In a block that runs in the parent (a function's, the main guard's, or one inside
        them), what comes before the statement holding a spawn ran before the workers started,
        what comes after it once they had finished."""
        holds = self._holds_spawn if nested else self.is_spawn
        spawns = [i for i, statement in enumerate(body) if holds(statement)]
        if not spawns:
            return
        first: dict[ParentOnly, int] = {}
        for i, statement in enumerate(body):
            if i in spawns or _same_on_every_rank(statement):
                continue
            side = ParentOnly.BEFORE if i < spawns[0] else ParentOnly.AFTER
            self.found[id(statement)] = side
            if print_call(statement) is None:
                lead = first.setdefault(side, id(statement))
                self.leads[lead] = self.leads.get(lead, 0) + 1


def _same_on_every_rank(statement: cst.BaseStatement) -> bool:
    if isinstance(statement, cst.FunctionDef | cst.ClassDef):
        return True
    if isinstance(statement, cst.SimpleStatementLine):
        return all(_small_same(small) for small in statement.body)
    return False


def _small_same(small: cst.BaseSmallStatement) -> bool:
    if isinstance(small, cst.Import | cst.ImportFrom | cst.Pass | cst.Global | cst.Nonlocal):
        return True
    if isinstance(small, cst.Expr):
        return isinstance(small.value, cst.SimpleString | cst.ConcatenatedString) or (
            isinstance(small.value, cst.Call) and _pure(small.value)
        )
    if isinstance(small, cst.Assign | cst.AnnAssign | cst.AugAssign):
        return small.value is None or _pure(small.value)
    return False


def _pure(node: cst.CSTNode) -> bool:
    """An expression that computes the same value on every rank, with no effect outside it."""
    if isinstance(node, cst.Call):
        name = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
        if not (name in SAME_ON_EVERY_RANK or (PARSING.search(name) and not ACTS.search(name))):
            return False
        return all(_pure(arg.value) for arg in node.args) and _pure_owner(node.func)
    if isinstance(node, cst.Lambda | cst.Yield | cst.Await | cst.NamedExpr):
        return False
    return all(_pure(child) for child in children(node))


def _pure_owner(func: cst.BaseExpression) -> bool:
    """`parser.add_argument`: what the method is called on must itself be pure."""
    return _pure(func.value) if isinstance(func, cst.Attribute) else True
