"""Checks one source text: prefilter, parse with `ast`, one walk for all rules, suppressions, fixes.

The cheap steps come first: a file that mentions none of the gate strings (torch, cuda, xla,
transformers, ...) cannot match any rule and is not even parsed; the rules that run on a file
are those whose trigger strings it holds and that can report at the chosen severity there (a
rule that weighs by place needs code that can be hot); a file no rule can run on is parsed
only to report a syntax error. All rules share a single walk of
the tree, dispatched by callee name, keyword, attribute name or node type. Fixes are text edits at `ast`
positions; they are applied in passes until nothing more applies, and the result of every pass
must parse, or the file is left as it was.
"""

from __future__ import annotations

import ast
import functools
import gc
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from neuron_migrate.checks import suppressions
from neuron_migrate.checks.context import FileContext
from neuron_migrate.checks.model import Diagnostic, Edit, FileReport, Severity
from neuron_migrate.checks.rules import REDIRECTS, all_rules, known_codes
from neuron_migrate.checks.rules.base import Rule
from neuron_migrate.checks.values import BINDERS
from neuron_migrate.core.source import syntax_error_message

MAX_FIX_PASSES = 10


@dataclass(frozen=True)
class CheckOptions:
    codes: frozenset[str] | None = None  # enabled rule codes; None: all
    target: str = "portable"  # "portable" | "neuron"
    min_severity: Severity = Severity.WARNING
    fix: bool = False
    unsafe_fixes: bool = False

    def enabled(self) -> frozenset[str]:
        return known_codes() if self.codes is None else self.codes


# Fields that never hold code worth checking: names, flags, operators and type annotations
# (never run).
_SCALARS = frozenset(
    {
        "op",
        "ops",
        "ctx",
        "id",
        "arg",
        "attr",
        "name",
        "module",
        "level",
        "kind",
        "type_comment",
        "is_async",
        "conversion",
        "names",
        "asname",
        "type_ignores",
        "annotation",
        "returns",
        "args_annotation",
        "posonlyargs",
        "kwonlyargs",
        "vararg",
        "kwarg",
        "simple",
        "tag",
        "kwd_attrs",  # match statements: `case C(x=...)` names, `**rest`
        "rest",
    }
)
# `case True:` holds the constant itself, not a node.
_CHILDREN: dict[type, tuple[str, ...]] = {ast.Constant: (), ast.MatchSingleton: ()}
_SCOPES = frozenset(
    {
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.Lambda,
        ast.For,
        ast.AsyncFor,
        ast.While,
    }
)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)

# A file that contains none of these cannot hold anything a rule looks for (every rule's
# examples pass this gate, which a test checks): it is not even parsed.
GATE = (
    *("torch", "TORCH", "ensor", "cuda", "xla", "XLA", "neuron", "NEURON", "transformers", "trl"),
    *("DataLoader", "padding", "Collator", "generate(", "from_pretrained", "prefill", "forward"),
    *("_step", ".backward(", "GPU", "WORLD_SIZE", "world_size", "nproc", "tp_size"),
    *("parallel_size", "noqa", "NOQA", "neuron-migrate:"),
)


def _children(cls: type) -> tuple[str, ...]:
    fields = _CHILDREN.get(cls)
    if fields is None:
        fields = tuple(f for f in cls._fields if f not in _SCALARS)  # type: ignore[attr-defined]
        if cls is ast.arguments:
            fields = ("defaults", "kw_defaults")
        _CHILDREN[cls] = fields
    return fields


_WORDS = re.compile(r"[A-Za-z0-9_]+")


def passes_gate(text: str) -> bool:
    return any(marker in text for marker in GATE)


# Code becomes hot (compiled, or run every step) only through these: a function whose name makes
# it so (`forward`, a `*_step`, `compute_loss`: `context.COMPILED_NAMES`, `STEP_NAMES`), a
# `torch.compile` (or `_dynamo.optimize`), a training loop. A superset of what `Places` finds.
HOT = re.compile(
    r"def\s+(?:_?forward\w*|\w*_step|_?compute_\w*loss\w*)\s*\(|compile|optimize|\.backward\(|\.step\("
)


def applicable_rules(text: str, options: CheckOptions) -> list[type[Rule]]:
    """The enabled rules that can find something at the chosen severity in this text: their
    trigger strings occur, and (for rules that weigh by place) some code can be hot.

    A rule dispatched only by name is never called where none of its names occurs, so once some
    other rule makes the file worth parsing, such rules come along without the word scan."""
    eligible, by_name, others = _eligible(options, HOT.search(text) is not None)
    chosen = [rule for rule in others if rule.may_match(text)]
    if not by_name:
        return chosen
    if not chosen:
        words = frozenset(_WORDS.findall(text))
        by_name = [rule for rule in by_name if rule.may_match(text, words)]
    taken = {*chosen, *by_name}
    return [rule for rule in eligible if rule in taken]


@functools.lru_cache(maxsize=16)
def _eligible(
    options: CheckOptions, hot: bool
) -> tuple[list[type[Rule]], list[type[Rule]], list[type[Rule]]]:
    """The rules that can report at the chosen severity in a file with (or without) hot code, and
    those of them dispatched only by name, and the others: the same for every file of a run."""
    enabled = options.enabled()
    eligible = []
    for rule in all_rules():
        if rule.code not in enabled:
            continue
        if rule.contextual and rule.quiet_when_cold and not hot:
            most = Severity.INFO
        else:
            most = max(rule.severity, rule.eager_severity) if rule.contextual else rule.severity
        if most >= options.min_severity:
            eligible.append(rule)
    by_name = [rule for rule in eligible if rule.dispatched_by_name_only()]
    return eligible, by_name, [rule for rule in eligible if not rule.dispatched_by_name_only()]


class Walker:
    """One walk over the tree, calling each rule where it asked to be called.

    The walk is the hot loop of `check` (every node of every file), so it binds what it needs to
    locals and never descends into nodes no rule can use (names, constants, operators).
    """

    def __init__(self, ctx: FileContext, rules: list[Rule], skip_cold: bool = False) -> None:
        self.ctx = ctx
        # With `skip_cold`, the body of a function that is not hot is not walked when nothing in
        # its text could be reported there: no trigger of a rule that reports outside hot code
        # too, no word that makes code hot (a nested `forward`, a training loop), no import.
        anywhere: list[str] = []
        for rule in rules:
            if rule.contextual and rule.quiet_when_cold:
                continue
            triggers = rule.triggers()
            if triggers is None:
                skip_cold = False
                break
            anywhere += triggers
        self.skip_cold = skip_cold
        self.anywhere = tuple(sorted(set(anywhere)))
        calls: dict[str, list[Rule]] = defaultdict(list)
        keywords: dict[str, list[Rule]] = defaultdict(list)
        attributes: dict[str, list[Rule]] = defaultdict(list)
        nodes: dict[type, list[Rule]] = defaultdict(list)
        for rule in rules:
            for name in rule.calls:
                calls[name].append(rule)
            for name in rule.keywords:
                keywords[name].append(rule)
            for name in rule.attributes:
                attributes[name].append(rule)
            for kind in rule.nodes:
                nodes[kind].append(rule)
        self.walk = self._make_walk(dict(calls), dict(keywords), dict(attributes), dict(nodes))

    def walk_module(self, tree: ast.Module) -> None:
        self.ctx.stack.append(tree)
        try:
            for statement in tree.body:
                self.walk(statement)
        finally:
            self.ctx.stack.pop()
            self._close()

    def _close(self) -> None:
        """Break the reference cycle of the recursive closures, so that reference counting alone
        frees the tree (the check runs with the cyclic garbage collector paused)."""
        for cell in self.walk.__closure__ or ():
            if callable(cell.cell_contents) and getattr(cell.cell_contents, "__name__", "") in (
                "walk",
                "walk_scope",
            ):
                cell.cell_contents = None

    # One long closure on purpose: this is the loop every node of every file goes through, and
    # splitting it into methods costs an attribute lookup and a call per node (about a third of
    # the time of `check`). `walk` dispatches a node to the rules; `walk_scope` keeps the place
    # (compiled function, training loop, data preparation) that rules weigh their findings by.
    def _make_walk(
        self,
        calls: dict[str, list[Rule]],
        keywords: dict[str, list[Rule]],
        attributes: dict[str, list[Rule]],
        nodes: dict[type, list[Rule]],
    ) -> Callable[[ast.AST], None]:
        ctx = self.ctx
        stack = ctx.stack
        functions = ctx.functions
        bind = ctx.values.bind
        binders = BINDERS
        add_import = ctx.aliases.add
        bindings = ctx.aliases.bindings
        leaves = frozenset({ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue} - set(nodes))
        children = _CHILDREN
        scopes = _SCOPES
        call_t, attribute_t, name_t, import_t, import_from_t = (
            ast.Call,
            ast.Attribute,
            ast.Name,
            ast.Import,
            ast.ImportFrom,
        )

        def walk(node: ast.AST) -> None:
            stack.append(node)
            cls = node.__class__
            if cls is call_t:
                func = node.func  # type: ignore[attr-defined]
                fcls = func.__class__
                if fcls is attribute_t:
                    name = func.attr
                elif fcls is name_t:
                    name = func.id
                    if name not in calls and name in bindings:  # `from torch import nonzero as nz`
                        name = bindings[name].rpartition(".")[2]
                else:
                    name = None
                if name in calls:
                    for rule in calls[name]:
                        rule.visit_call(node, name)  # type: ignore[arg-type]
                if keywords:
                    for kw in node.keywords:  # type: ignore[attr-defined]
                        if kw.arg in keywords:
                            for rule in keywords[kw.arg]:
                                rule.visit_keyword(node, kw)  # type: ignore[arg-type]
            elif cls is attribute_t:
                if node.attr in attributes:  # type: ignore[attr-defined]
                    for rule in attributes[node.attr]:  # type: ignore[attr-defined]
                        rule.visit_attribute(node)  # type: ignore[arg-type]
            elif cls is import_t or cls is import_from_t:
                add_import(node)  # type: ignore[arg-type]
            if cls in binders and functions:
                bind(node, functions[-1], stack[-2])
            if cls in nodes:
                for rule in nodes[cls]:
                    rule.visit(node)
            if cls in scopes:
                walk_scope(node, cls)
            else:
                fields = children.get(cls)
                if fields is None:
                    fields = _children(cls)
                for field in fields:
                    value = getattr(node, field)
                    if value is None:
                        continue
                    if value.__class__ is list:
                        for item in value:
                            if item is not None and item.__class__ not in leaves:
                                walk(item)
                    elif value.__class__ not in leaves:
                        walk(value)
            stack.pop()

        def walk_scope(node: ast.AST, cls: type) -> None:
            previous = ctx.place
            if cls is ast.ClassDef:
                ctx.classes.append(node)  # type: ignore[arg-type]
                for child in (*node.decorator_list, *node.bases, *node.keywords, *node.body):  # type: ignore[attr-defined]
                    walk(child)
                ctx.classes.pop()
                return
            if cls in _LOOPS:
                for child in (
                    getattr(node, "target", None),
                    getattr(node, "iter", None),
                    getattr(node, "test", None),
                ):
                    if child is not None and child.__class__ not in leaves:
                        walk(child)
                place = ctx.loop_place(node)
                if place is not None:
                    ctx.place = place
                for child in (*node.body, *node.orelse):  # type: ignore[attr-defined]
                    walk(child)
                ctx.place = previous
                return
            # Functions and lambdas: decorators and defaults run where the function is defined.
            for child in getattr(node, "decorator_list", ()):
                walk(child)
            walk(node.args)  # type: ignore[attr-defined]
            if cls is ast.Lambda:
                if node.body.__class__ not in leaves:  # type: ignore[attr-defined]
                    walk(node.body)  # type: ignore[attr-defined]
                return
            place = ctx.enter_function(node)
            ctx.functions.append(node)
            if not (skip_cold and not place.hot and inert(node)):
                for child in node.body:  # type: ignore[attr-defined]
                    walk(child)
            ctx.functions.pop()
            ctx.place = previous

        text = ctx.text
        anywhere = self.anywhere
        skip_cold = self.skip_cold
        span = ctx.places.span

        def inert(function: ast.AST) -> bool:
            start, end = span(function)
            body = text[start:end]
            return not (
                "import" in body
                or HOT.search(body) is not None
                or any(trigger in body for trigger in anywhere)
            )

        return walk


def check_once(
    text: str, path: str, options: CheckOptions, must_parse: bool = False
) -> tuple[list[Diagnostic], str | None, bool]:
    """(diagnostics after suppressions and the severity threshold, error, whether it was parsed).

    A text without a gate string is not parsed, unless `must_parse`: a fixed text must be proven
    to parse whatever the fix removed."""
    if not (must_parse or passes_gate(text)):
        return [], None, False
    # The tree holds no reference cycles, and collecting while it is alive costs a third of the
    # run: the cyclic collector waits until the file is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(text, path, options)
    except Exception as exc:  # a bug in a rule must not stop the run; the file is reported
        return [], f"{path}:1:1: internal error while checking ({exc!r}); please report it", True
    finally:
        if collecting:
            gc.enable()


def _check(
    text: str, path: str, options: CheckOptions
) -> tuple[list[Diagnostic], str | None, bool]:
    enabled = options.enabled()
    chosen = applicable_rules(text, options)
    audits_suppressions = suppressions.UNUSED_CODE in enabled and "NM" in text and bool(
        suppressions.may_have_suppressions(text)
    )
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return [], syntax_error_message(path, exc), True
    except (ValueError, RecursionError, MemoryError) as exc:
        return [], f"{path}:1:1: cannot parse: {exc}", True
    if not (chosen or audits_suppressions):
        return [], None, True
    ctx = FileContext(path, text, tree, options.target, enabled)
    rules = [rule(ctx) for rule in chosen]
    skip_cold = options.min_severity > Severity.INFO and not audits_suppressions
    walker = Walker(ctx, rules, skip_cold)
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(limit, 20_000))
        walker.walk_module(tree)
        for rule in rules:
            rule.finish()
    except RecursionError:
        return [], f"{path}:1:1: cannot check: nesting too deep", True
    finally:
        sys.setrecursionlimit(limit)

    diagnostics = ctx.diagnostics
    found = suppressions.find(text, ctx.positions, REDIRECTS)
    diagnostics = suppressions.apply(diagnostics, found, ctx.positions)
    wants_unused = suppressions.UNUSED_CODE in enabled and "NM" in text
    if wants_unused and found:
        diagnostics += suppressions.unused(text, found, ctx.positions, enabled, known_codes())
    diagnostics = [d for d in diagnostics if d.severity >= options.min_severity]
    diagnostics.sort(key=lambda d: (d.line, d.column, d.code))
    return _dedupe(diagnostics), None, True


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, int, int]] = set()
    unique = []
    for d in diagnostics:
        key = (d.code, d.line, d.column)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def apply_fixes(text: str, diagnostics: list[Diagnostic], unsafe: bool) -> tuple[str, list[str]]:
    """Apply the non-overlapping fixes (first come first served); the rest wait for the next pass.
    Returns the text and the codes of the fixes applied."""
    chosen: list[Edit] = []
    taken: list[tuple[int, int]] = []
    codes: list[str] = []
    for diagnostic in diagnostics:
        fix = diagnostic.fix
        if fix is None or not (fix.safe or unsafe):
            continue
        spans = [(e.start, e.end) for e in fix.edits]
        if any(_overlaps(span, other) for span in spans for other in taken):
            continue
        taken += spans
        chosen += fix.edits
        codes.append(diagnostic.code)
    for edit in sorted(chosen, key=lambda e: (e.start, e.end), reverse=True):
        text = text[: edit.start] + edit.content + text[edit.end :]
    return text, codes


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == a[1] or b[0] == b[1]:  # insertions conflict only at the same point or inside a range
        return a[0] == b[0] or b[0] < a[0] < b[1] or a[0] < b[0] < a[1]
    return a[0] < b[1] and b[0] < a[1]


def check_source(
    text: str, path: str = "<stdin>", options: CheckOptions | None = None
) -> FileReport:
    """Check (and with `options.fix`, fix) one Python source text. Never raises for bad input."""
    options = options or CheckOptions()
    report = FileReport(path=path, original=text)
    diagnostics, error, parsed = check_once(text, path, options)
    report.skipped = not parsed
    if error:
        report.error = error
        return report
    if options.fix:
        current, applied = text, 0
        for _ in range(MAX_FIX_PASSES):
            if not any(d.fix and (d.fix.safe or options.unsafe_fixes) for d in diagnostics):
                break
            candidate, codes = apply_fixes(current, diagnostics, options.unsafe_fixes)
            if not codes or candidate == current:
                break
            after, error, _ = check_once(candidate, path, options, must_parse=True)
            if error:
                report.error = (
                    f"{path}:1:1: internal error: a fix produced code that does not parse ({error.split(': ', 2)[-1]}); "
                    "file left unchanged, please report it"
                )
                report.diagnostics = diagnostics
                return report
            current, diagnostics, applied = candidate, after, applied + len(codes)
            for code in codes:
                report.fixed_codes[code] = report.fixed_codes.get(code, 0) + 1
        if applied:
            report.fixed = current
            report.fixes_applied = applied
            report.changed = current != text
    report.diagnostics = diagnostics
    return report
