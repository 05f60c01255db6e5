"""What a rule sees of the file being checked: positions, import aliases, what values are, and
where a node sits.

Everything here is built from the stdlib `ast` and plain text scans (no LibCST metadata), so a
check costs little more than the parse. "Where" is the point of the module: `.item()` inside
`forward` or a function given to `torch.compile` (and what they call) is a graph break; in the
eager code of a training step it is a host sync every step; in data preparation, generation
rounds, reward scoring or logging it is harmless, and the severity says so.
"""

from __future__ import annotations

import ast
import enum
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from neuron_migrate.checks import library_hazards
from neuron_migrate.checks.model import SAFE, Diagnostic, Edit, Fix, RuleIdentity, Severity
from neuron_migrate.checks.values import Values
from neuron_migrate.core.names import ImportTable, ast_dotted_name

_NEWLINE = re.compile(r"\r\n|\r|\n")


class Positions:
    """Line starts of a text, and the conversion from `ast`'s UTF-8 byte columns to characters."""

    def __init__(self, text: str) -> None:
        self.text = text
        if "\r" in text:
            self.starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
        else:  # the common case, a third of the time
            self.starts = [0, *itertools.accumulate(len(line) + 1 for line in text.split("\n")[:-1])]

    def line_text(self, line: int) -> str:
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return self.text[start:end]

    def offset(self, line: int, byte_col: int) -> int:
        """Character offset of (1-based line, UTF-8 byte column)."""
        if line > len(self.starts):
            return len(self.text)
        start = self.starts[line - 1]
        if byte_col <= 0:
            return start
        segment = self.line_text(line)
        if segment.isascii():
            return start + byte_col
        return start + len(segment.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def location(self, offset: int) -> tuple[int, int]:
        """1-based (line, character column) of a character offset."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.starts[lo] + 1

    def lines_span(self, first: int, last: int) -> tuple[int, int]:
        """Character offsets from the start of line `first` to the end of line `last`."""
        start = self.starts[first - 1]
        end = self.starts[last] if last < len(self.starts) else len(self.text)
        return start, end


# Names scripts use for these modules without importing them in the same file (notebook cells,
# snippets): used only when the file binds no such name itself.
CONVENTIONS = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "dist": "torch.distributed",
    "np": "numpy",
}


dotted = ast_dotted_name


def new_alias_table() -> ImportTable:
    """An empty alias table that also reads the usual short names (`np`, `F`) as modules."""
    return ImportTable(conventions=CONVENTIONS)


class Region(enum.Enum):
    COMPILED = "compiled"  # forward, a function given to torch.compile, or what they call
    STEP = "step"  # eager code that runs every step: a training/eval step, a training-loop body
    DATA = "data"  # data preparation: collators, datasets, tokenization
    OTHER = "other"


@dataclass(frozen=True)
class Place:
    region: Region
    label: str  # the reason, in the user's words: "in `forward` of `Net`, traced when compiled"
    # The setting without which this code does not run at all (`experts_implementation="eager"`
    # for the eager body of a `@use_experts_implementation` class): what is found here is shown
    # as information, with the setting named in the label.
    only_with: str = ""

    @property
    def hot(self) -> bool:
        return self.region in (Region.COMPILED, Region.STEP)

    @property
    def compiled(self) -> bool:
        return self.region is Region.COMPILED


MODULE = Place(Region.OTHER, "outside forward, compiled functions and training steps")
COMPILED_NAMES = re.compile(r"forward|_?forward_\w+")
STEP_NAMES = re.compile(r"\w*_step|compute_loss|_compute_loss\w*|compute_\w*_loss")
# Eager orchestration a training step calls that is not on its gradient path: generation
# rounds, reward scoring, logging, decoding to text, checkpoints. Matched word by word
# (`_get_per_token_logps` is no logging, `decoder_forward` no decoding).
ORCHESTRATION_WORDS = frozenset(
    {
        *("generate", "generation", "rollout", "rollouts", "sample", "sampling", "decode"),
        *("reward", "rewards", "score", "scores", "scoring", "judge", "tool", "tools"),
        *("log", "logs", "logging", "metric", "metrics", "print", "report", "save", "checkpoint"),
        *("callback", "callbacks", "evaluate", "evaluation", "eval", "profile", "profiling"),
    }
)


def orchestration(name: str) -> bool:
    return any(word in ORCHESTRATION_WORDS for word in name.lower().split("_"))


DATA_NAMES = re.compile(
    r"_?(collate|preprocess|prepare_(data|dataset|batch|features|train|validation|inputs_for_training)|"
    r"tokeniz|encode|load|build_dataset|get_dataset|make_dataset|create_dataset|group_texts|"
    r"data_collator|transform|augment|process|__getitem__|__getitems__|__iter__|__next__|__len__)"
)
DATA_CLASSES = re.compile(
    r"\w*(Dataset|Collator|Sampler|Processor|Tokenizer|TokenizerFast|FeatureExtractor|DataModule)"
)
COMPILED_DECORATORS = frozenset(
    {"torch.compile", "torch._dynamo.optimize", "torch.compiler.compile"}
)
# transformers' `@use_experts_implementation` replaces the decorated experts class's `forward`
# with the implementation `config._experts_implementation` names, `grouped_mm` unless the user
# asks for another: the eager per-expert loop written in the class runs only when asked for.
EXPERTS_DECORATOR = "use_experts_implementation"
EAGER_EXPERTS = 'experts_implementation="eager"'
EAGER_EXPERTS_LABEL = (
    f"traced only with `{EAGER_EXPERTS}`: by default `@{EXPERTS_DECORATOR}` runs `grouped_mm` instead"
)


def only_with_label(setting: str) -> str:
    """Why code traced only with `setting` is shown as information."""
    if setting == EAGER_EXPERTS:
        return EAGER_EXPERTS_LABEL
    return f"traced only with `{setting}` (NM308 reports where a compiled model's configuration sets it)"


_COMPILE_ARG = re.compile(r"\bcompile\(\s*(?:model\s*=\s*)?([A-Za-z_][\w.]*)\s*[,)]")
_SELF_CALL = re.compile(r"self\.([A-Za-z_]\w*)\s*\(")  # starts with a literal: searched fast
_IDENTIFIER_END = re.compile(r"\w+$")

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
COMPOUND = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
)


def _self_calls(text: str, start: int, end: int) -> list[str]:
    """The NAMEs of `self.NAME(...)` calls in text[start:end], in the order they first occur."""
    names: dict[str, None] = {}
    for match in _SELF_CALL.finditer(text, start, end):
        at = match.start()
        if not (at and _is_word(text[at - 1])):
            names.setdefault(match.group(1))
    return list(names)


def _plain_calls(text: str, start: int, end: int, functions: Iterable[str]) -> list[str]:
    """Which of `functions` text[start:end] calls by bare name (`helper(...)`, not `x.helper(...)`),
    in the order they are first called: a plain search per name, faster than any pattern over
    every identifier of the text."""
    first: dict[str, int] = {}
    for name in functions:
        at = text.find(name, start, end)
        while at != -1:
            if _plain_call_at(text, at, name, end):
                first[name] = at
                break
            at = text.find(name, at + 1, end)
    return sorted(first, key=first.__getitem__)


def _plain_call_at(text: str, at: int, name: str, end: int) -> bool:
    if at and (_is_word(text[at - 1]) or text[at - 1] == "."):
        return False
    j = at + len(name)
    if j < end and _is_word(text[j]):
        return False
    while j < end and text[j].isspace():
        j += 1
    return j < end and text[j] == "("


def _experts_class(cls: ast.ClassDef) -> bool:
    """Decorated with `@use_experts_implementation` (with or without arguments)."""
    for decorator in cls.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (dotted(target) or "").rsplit(".", 1)[-1] == EXPERTS_DECORATOR:
            return True
    return False


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


class Places:
    """Classifies functions once per file: the hot ones (and the helpers they call), data prep."""

    def __init__(self, tree: ast.Module, text: str, positions: Positions, aliases: ImportTable) -> None:
        self.text = text
        self.positions = positions
        self.aliases = aliases
        self.by_node: dict[int, Place] = {}
        self._roots: dict[int, str] = {}
        self.compiled_names = (
            {m.group(1).rsplit(".", 1)[-1] for m in _COMPILE_ARG.finditer(text)}
            if "compile(" in text
            else set()
        )
        module_functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        classes: list[ast.ClassDef] = []
        self._collect(tree.body, module_functions, classes)
        hot: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]] = []
        methods_of: dict[int, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for cls in classes:
            methods = {n.name: n for n in cls.body if isinstance(n, FUNCTIONS)}
            methods_of[id(cls)] = methods
            data_class = bool(DATA_CLASSES.fullmatch(cls.name)) or any(
                (dotted(b) or "").rsplit(".", 1)[-1].endswith(("Dataset", "DataModule"))
                for b in cls.bases
            )
            experts = _experts_class(cls)
            for name, method in methods.items():
                place = self.classify(method, cls.name)
                if experts and place is not None and place.region is Region.COMPILED:
                    place = Place(
                        Region.COMPILED,
                        f"in `{name}` of `{cls.name}`, {EAGER_EXPERTS_LABEL}",
                        EAGER_EXPERTS,
                    )
                if place is None and data_class:
                    place = Place(
                        Region.DATA,
                        f"in `{name}` of data class `{cls.name}`, which runs on the host",
                    )
                if place is not None:
                    self.by_node[id(method)] = place
                    if place.hot:
                        hot.append((method, cls))
        for function in module_functions.values():
            self._settings_of_nested(function)
            place = self.classify(function, None)
            if place is not None:
                self.by_node[id(function)] = place
                if place.hot:
                    hot.append((function, None))
        # What compiled code calls is compiled too, and what a step calls runs every step
        # (`self.helper(...)` and module-level functions), except the step's orchestration.
        while hot:
            function, owner = hot.pop()
            start, end = self.span(function)
            region = self.by_node[id(function)].region
            only_with = self.by_node[id(function)].only_with
            caller = self._roots.get(id(function)) or (
                self.by_node[id(function)].label.removeprefix("in ").split(", ")[0].split(": ")[0]
            )
            callees: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str, ast.ClassDef | None]] = []
            if owner is not None:
                methods = methods_of[id(owner)]
                for name in _self_calls(text, start, end):
                    if name in methods:
                        callees.append((methods[name], name, owner))
            if module_functions:
                for name in _plain_calls(text, start, end, module_functions):
                    callees.append((module_functions[name], name, None))
            for callee, name, callee_owner in callees:
                if self._promote(callee, name, caller, region, only_with):
                    hot.append((callee, callee_owner))

    def _collect(
        self,
        body: list[ast.stmt],
        functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
        classes: list[ast.ClassDef],
    ) -> None:
        for node in body:
            if isinstance(node, FUNCTIONS):
                functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                classes.append(node)
                nested = [n for n in node.body if isinstance(n, ast.ClassDef)]
                if nested:
                    self._collect(nested, {}, classes)  # type: ignore[arg-type]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                self.aliases.add(node)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                # Import guards (`if is_torch_available(): import torch`) and `try: import ...`.
                for field in ("body", "orelse", "finalbody"):
                    self._collect(getattr(node, field, []), functions, classes)
                for handler in getattr(node, "handlers", []):
                    self._collect(handler.body, functions, classes)

    def _settings_of_nested(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """The nested functions of a library decorator that run only with a setting
        (`dynamic_frequency_update` in `@dynamic_rope_update`: only with `rope_type="dynamic"`):
        traced when the decorated forward is, and shown as information that names the setting."""
        settings = library_hazards.only_with(function.name)
        if not settings:
            return
        for node in function.body:
            if isinstance(node, FUNCTIONS) and node.name in settings:
                setting = settings[node.name]
                self.by_node[id(node)] = Place(
                    Region.COMPILED,
                    f"in `{node.name}` of `@{function.name}`, {only_with_label(setting)}",
                    setting,
                )

    def _promote(
        self, callee: ast.AST, name: str, caller: str, region: Region, only_with: str = ""
    ) -> bool:
        current = self.by_node.get(id(callee))
        if (
            current is not None
            and (current.region is Region.COMPILED or current.region is region)
            # Traced only with a setting so far, and now from code traced without one: always.
            and not (current.only_with and region is Region.COMPILED and not only_with)
        ):
            return False
        if region is Region.COMPILED and only_with:
            place = Place(
                Region.COMPILED, f"in `{name}`, called from {caller}, {only_with_label(only_with)}", only_with
            )
        elif region is Region.COMPILED:
            place = Place(Region.COMPILED, f"in `{name}`, called from {caller}, traced when compiled")
        elif current is not None and current.region is Region.OTHER:
            return False  # orchestration already
        elif orchestration(name):
            place = Place(
                Region.OTHER,
                f"in `{name}`, eager orchestration called from {caller}, not on the compiled or gradient path",
            )
        else:
            place = Place(Region.STEP, f"in `{name}`, called from {caller}: eager code run every step")
        self.by_node[id(callee)] = place
        self._roots[id(callee)] = caller  # deeper helpers name the hot function they serve
        return place.hot

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.positions.lines_span(node.lineno, node.end_lineno or node.lineno)  # type: ignore[attr-defined]

    def classify(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, class_name: str | None
    ) -> Place | None:
        name = function.name
        owner = f" of `{class_name}`" if class_name else ""
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.aliases.resolve(target) in COMPILED_DECORATORS:
                return Place(Region.COMPILED, f"in `{name}`{owner}, compiled with torch.compile")
        if name in self.compiled_names:
            return Place(Region.COMPILED, f"in `{name}`{owner}, passed to torch.compile")
        if COMPILED_NAMES.fullmatch(name):
            return Place(Region.COMPILED, f"in `{name}`{owner}, traced when the model is compiled")
        if STEP_NAMES.fullmatch(name):
            return Place(Region.STEP, f"in `{name}`{owner}: eager code run every step")
        if DATA_NAMES.match(name):
            return Place(Region.DATA, f"in data preparation (`{name}`), which runs on the host")
        return None


class FileContext:
    """The state of one check run over one file; rules read it and report through it."""

    def __init__(
        self, path: str, text: str, tree: ast.Module, target: str, codes: frozenset[str]
    ) -> None:
        self.path = path
        self.text = text
        self.tree = tree
        self.target = target  # "portable" | "neuron"
        self.codes = codes  # the enabled rule codes (some rules defer to others)
        self.positions = Positions(text)
        self.aliases = new_alias_table()
        self.places = Places(tree, text, self.positions, self.aliases)
        self.stack: list[ast.AST] = []  # ancestors of the node being visited, itself last
        self.place = MODULE
        self.functions: list[ast.AST] = []  # enclosing function definitions, innermost last
        self.classes: list[ast.ClassDef] = []
        self.claimed: set[int] = set()  # nodes a more specific rule already explained
        self.diagnostics: list[Diagnostic] = []
        self.has_training_markers = ".backward(" in text or ".step(" in text
        self.values = Values(self.aliases)

    # -- values --------------------------------------------------------------------------------
    def kind(self, node: ast.AST) -> str | None:
        """What `node` holds here: a device tensor, a mask, NumPy, a CPU copy... (values.py)."""
        return self.values.kind(node, self.functions[-1] if self.functions else None)

    # -- names ---------------------------------------------------------------------------------
    def qualify(self, node: ast.AST) -> str | None:
        return self.aliases.resolve(node)

    @property
    def neuron_target(self) -> bool:
        return self.target == "neuron"

    # -- where ---------------------------------------------------------------------------------
    def enter_function(self, node: ast.AST) -> Place:
        previous = self.place
        place = self.places.by_node.get(id(node))
        if place is None and isinstance(node, FUNCTIONS):
            place = self.places.classify(node, None)  # nested definitions
        if place is None or (previous.compiled and not place.compiled) or (
            previous.hot and not place.hot
        ):
            place = previous
        self.place = place
        return place

    def loop_place(self, node: ast.AST) -> Place | None:
        """The training-loop place for a `for`/`while` loop, if it is one and nothing hotter applies."""
        if not self.has_training_markers or self.place.hot:
            return None
        start, end = self.places.span(node)
        text = self.text
        if text.find(".backward(", start, end) != -1:
            what = "`.backward()`"
        else:
            # `optimizer.step(`, `opt.step(`, `scaler.step(`; not `scheduler.step(`.
            at = text.find(".step(", start, end)
            while at != -1:
                name = _IDENTIFIER_END.search(text, max(start, at - 80), at)
                if name is not None and (
                    "opt" in name.group(0).lower() or name.group(0) == "scaler"
                ):
                    break
                at = text.find(".step(", at + 6, end)
            else:
                return None
            what = "`optimizer.step()`"
        return Place(
            Region.STEP,
            f"in the training loop at line {node.lineno}, which calls {what}: eager code run every step",  # type: ignore[attr-defined]
        )

    def parent(self, up: int = 1) -> ast.AST | None:
        index = len(self.stack) - 1 - up
        return self.stack[index] if index >= 0 else None

    def within(self, kinds: tuple[type[ast.AST], ...], field: str) -> ast.AST | None:
        """The nearest ancestor of one of `kinds` whose `field` holds the current node."""
        stack = self.stack
        for i in range(len(stack) - 2, -1, -1):
            ancestor = stack[i]
            if isinstance(ancestor, kinds):
                child = stack[i + 1]
                value = getattr(ancestor, field, None)
                if value is child or (isinstance(value, list) and any(v is child for v in value)):
                    return ancestor
            if isinstance(ancestor, ast.stmt):
                return None
        return None

    def statement(self) -> ast.stmt | None:
        for node in reversed(self.stack):
            if isinstance(node, ast.stmt):
                return node
        return None

    # -- positions -----------------------------------------------------------------------------
    def span(self, node: ast.AST) -> tuple[int, int]:
        p = self.positions
        return (
            p.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            p.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def source(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    # -- reporting -----------------------------------------------------------------------------
    def report(
        self,
        rule: RuleIdentity,
        node: ast.AST,
        message: str,
        *,
        fix: Fix | None = None,
        severity: Severity | None = None,
        start: int | None = None,
    ) -> Diagnostic:
        """Record a finding on `node` (or from character offset `start` to the node's end)."""
        node_start, end = self.span(node)
        line, column = self.positions.location(node_start if start is None else start)
        end_line, end_column = self.positions.location(end)
        where = ""
        if rule.contextual:
            where = self.place.label
            if self.place.only_with:
                severity = Severity.INFO  # the code runs only where the user asks for it
        if severity is None:
            severity = rule.severity
            if rule.contextual:
                if self.place.region is Region.STEP:
                    severity = rule.eager_severity
                elif not self.place.compiled:
                    severity = Severity.INFO
        statement = self.statement()
        last = (
            statement.end_lineno
            if statement is not None and not isinstance(statement, COMPOUND)
            else 0
        )
        diagnostic = Diagnostic(
            rule.code, message, line, column, end_line, end_column, severity, fix, where, last or 0
        )
        self.diagnostics.append(diagnostic)
        return diagnostic

    def method_start(self, call: ast.Call) -> int | None:
        """Character offset of the method name in `x.name(...)`, to point at the call that matters."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return None
        end = self.positions.offset(func.end_lineno, func.end_col_offset)  # type: ignore[arg-type]
        return end - len(func.attr)

    # -- fixes ---------------------------------------------------------------------------------
    def fix(
        self, edits: list[Edit] | Edit | None, message: str, applicability: str = SAFE
    ) -> Fix | None:
        if edits is None:
            return None
        if isinstance(edits, Edit):
            edits = [edits]
        return Fix(tuple(e.located(self.positions.location) for e in edits), applicability, message)

    def replace(self, node: ast.AST, content: str) -> Edit:
        start, end = self.span(node)
        return Edit(start, end, content)

    def set_keyword(self, call: ast.Call, name: str, value: str) -> Edit:
        """Give `call` the keyword `name=value`, replacing the value if the keyword is there."""
        for keyword in call.keywords:
            if keyword.arg == name:
                return self.replace(keyword.value, value)
        return self.add_argument(call, f"{name}={value}")

    def add_argument(self, call: ast.Call, argument: str) -> Edit:
        args: list[ast.AST] = [*call.args, *call.keywords]
        _, call_end = self.span(call)
        close = call_end - 1  # the closing parenthesis
        if not args:
            return Edit(close, close, argument)
        last = max(args, key=lambda a: (a.end_lineno, a.end_col_offset))  # type: ignore[attr-defined]
        _, last_end = self.span(last)
        between = self.text[last_end:close]
        comma = between.find(",")
        if comma != -1 and "\n" in between[comma:]:
            # One argument per line with a trailing comma: add another line like the last one.
            line_start = self.text.rfind("\n", 0, self.span(last)[0]) + 1
            indent = re.match(r"[ \t]*", self.text[line_start:]).group(0)  # type: ignore[union-attr]
            at = last_end + comma + 1
            return Edit(at, at, f"\n{indent}{argument},")
        return Edit(last_end, last_end, f", {argument}")

    def remove_keyword(self, call: ast.Call, keyword: ast.keyword) -> Edit:
        args: list[ast.expr | ast.keyword] = sorted(
            [*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset)
        )
        index = next(i for i, a in enumerate(args) if a is keyword)
        start, end = self.span(keyword)
        if index + 1 < len(args):
            following = self.span(args[index + 1])[0]
            between = self.text[end:following]
            if "#" in between:
                # A comment after the argument stays on its line: only `name=value,` goes.
                comma = between.find(",")
                return Edit(start, end + comma + 1 if comma != -1 else end, "")
            return Edit(start, following, "")
        if index > 0:
            previous_end = self.span(args[index - 1])[1]
            return Edit(previous_end, end, "")
        _, call_end = self.span(call)
        return Edit(start, call_end - 1, "")  # the only argument (a trailing comma goes too)

    def delete_statement(self, statement: ast.stmt) -> Edit | None:
        """Remove a statement (its whole lines), or turn it into `pass` if its block needs one."""
        parent = None
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i] is statement:
                parent = self.stack[i - 1]
                break
        if parent is None:
            return None
        siblings = None
        for field in ("body", "orelse", "finalbody"):
            value = getattr(parent, field, None)
            if isinstance(value, list) and any(s is statement for s in value):
                siblings = value
        if siblings is None:
            return None
        start, end = self.span(statement)
        line_start = self.positions.starts[statement.lineno - 1]
        line_end = self.positions.lines_span(
            statement.end_lineno or statement.lineno, statement.end_lineno or statement.lineno
        )[1]
        before = self.text[line_start:start]
        after = self.text[end:line_end]
        alone = not before.strip() and (not after.strip() or after.strip().startswith("#"))
        if len(siblings) == 1 or not alone:
            return Edit(start, end, "pass")
        if after.strip().startswith("#"):
            # Its trailing comment stays, on a line of its own at the statement's indent.
            return Edit(start, end + len(after) - len(after.lstrip(" \t")), "")
        return Edit(line_start, line_end, "")

    def iter_keywords(self, call: ast.Call) -> Iterator[tuple[str, ast.expr]]:
        for keyword in call.keywords:
            if keyword.arg is not None:
                yield keyword.arg, keyword.value
