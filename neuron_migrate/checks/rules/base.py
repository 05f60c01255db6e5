"""What every check rule shares: the base class, its examples, and the expression tests rules reuse.

A rule is one module `nmNNN_name.py` holding one `Rule` subclass. Its docstring is its user
documentation (What it does / Why / Example / Use instead / Fix safety); `VALID` and `INVALID`
are snippets that the tests check (Fixit style); `CONFIRM` names a bad and a good snippet that the
dynamic tests compile with a stand-in `neuron` backend to show the predicted graph break or
rejection really happens.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import ClassVar

from neuron_migrate.checks import values
from neuron_migrate.checks.context import FileContext, dotted
from neuron_migrate.checks.model import Fix, Severity

# The published rules page (docs/rules.md, whose `## NM101` headings are its anchors) is named
# once, as `[project.urls] Rules` in pyproject.toml; a build that names none prints no links.
RULES_URL_LABEL = "rules"
GRAPH_BREAK_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{gb}.html"


@dataclass(frozen=True)
class Invalid:
    """A snippet the rule must flag, and what its fixes must make of it."""

    code: str
    line: int | None = (
        None  # line of the first finding of this rule (1-based, of the dedented code)
    )
    severity: str | None = None  # "info" | "warning" | "error", when it matters
    fixed: str | None = None  # the code after the safe fixes; None: no safe fix expected
    unsafe_fixed: str | None = None  # the code after safe and unsafe fixes
    target: str = "portable"
    message: str | None = None  # a substring of the message


@dataclass(frozen=True)
class Confirm:
    """A dynamic confirmation: both snippets define `forward(...)`; `inputs` builds its arguments.

    `partial` is what the bad snippet does under `fullgraph=False`: "break" (graph breaks with
    the ids in `breaks`, or more than one graph when `breaks` is empty) or "rejected" (the
    stand-in Neuron backend refuses a graph). `fullgraph` is what it does under `fullgraph=True`:
    "rejected" (a symbolic shape or an op the backend refuses) or "unsupported" (Dynamo itself
    refuses). The good snippet must compile to one graph with static shapes either way.
    """

    bad: str
    good: str
    inputs: str
    fullgraph: str  # "rejected" | "unsupported"
    breaks: tuple[str, ...] = ()
    partial: str = "break"  # "break" | "rejected"


class Rule:
    """Base class: subclasses set the class attributes and the visit methods they need."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.WARNING
    contextual: ClassVar[bool] = False  # `severity` in compiled code, less elsewhere
    # With `contextual`: the severity in eager code that runs every step (a training step or
    # loop body). Graph breaks and dynamic shapes cost nothing there; host syncs and dtypes do.
    eager_severity: ClassVar[Severity] = Severity.INFO
    # With `contextual`: False when the rule may report above info outside hot code too.
    quiet_when_cold: ClassVar[bool] = True
    graph_breaks: ClassVar[tuple[str, ...]] = ()  # the PyTorch graph-break ids it predicts
    # For rules that look at common nodes (every call, every function): the rule runs on a file
    # only if one of these strings occurs in it. Empty: always (dispatch is cheap).
    requires: ClassVar[tuple[str, ...]] = ()
    # For a rule dispatched by name whose names are common words (`padding`): a pattern the text
    # must also match for the rule to find anything, so that such words alone do not make a file
    # worth parsing.
    requires_pattern: ClassVar[re.Pattern[str] | None] = None
    calls: ClassVar[frozenset[str]] = frozenset()  # last name of the callee -> visit_call
    keywords: ClassVar[frozenset[str]] = frozenset()  # keyword of any call -> visit_keyword
    attributes: ClassVar[frozenset[str]] = frozenset()  # attribute name -> visit_attribute
    nodes: ClassVar[tuple[type[ast.AST], ...]] = ()  # node types -> visit
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()
    CONFIRM: ClassVar[Confirm | None] = None

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def visit_call(self, node: ast.Call, name: str) -> None:
        pass

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        pass

    def visit_attribute(self, node: ast.Attribute) -> None:
        pass

    def visit(self, node: ast.AST) -> None:
        pass

    def finish(self) -> None:
        """Called once after the walk, for rules that need the whole file."""

    def report(
        self,
        node: ast.AST,
        message: str,
        *,
        fix: Fix | None = None,
        severity: Severity | None = None,
        start: int | None = None,
    ) -> None:
        self.ctx.report(self, node, message, fix=fix, severity=severity, start=start)

    @classmethod
    def triggers(cls) -> tuple[str, ...] | None:
        """Strings one of which a file must hold for the rule to find anything in it: `requires`,
        else the names it is dispatched on; None when it visits every node of some kind."""
        if cls.requires:
            return cls.requires
        if cls.nodes:
            return None
        return tuple(sorted({*cls.calls, *cls.keywords, *cls.attributes}))

    @classmethod
    def dispatched_by_name_only(cls) -> bool:
        return not (cls.requires or cls.nodes)

    @classmethod
    def may_match(cls, text: str, words: frozenset[str] = frozenset()) -> bool:
        """Whether the file can hold what the rule looks for: one of `requires` occurs in its text,
        or (for a rule dispatched by name) one of its names is a word of it (`words`: its runs of
        identifier characters; a set lookup per name is what keeps this cheap on large trees)."""
        if cls.requires:
            return any(t in text for t in _least_requires(cls))
        if cls.nodes:
            return True
        if cls.requires_pattern is not None and cls.requires_pattern.search(text) is None:
            return False
        return not words.isdisjoint(_dispatch_names(cls))

    @classmethod
    def url(cls) -> str | None:
        return rule_url(cls.code)


_LEAST_REQUIRES: dict[type[Rule], tuple[str, ...]] = {}
_DISPATCH_NAMES: dict[type[Rule], frozenset[str]] = {}


def _least_requires(rule: type[Rule]) -> tuple[str, ...]:
    """`requires` without the strings that hold another of them (found whenever it is)."""
    least = _LEAST_REQUIRES.get(rule)
    if least is None:
        strings = rule.requires
        least = tuple(s for s in strings if not any(o != s and o in s for o in strings))
        _LEAST_REQUIRES[rule] = least
    return least


def _dispatch_names(rule: type[Rule]) -> frozenset[str]:
    names = _DISPATCH_NAMES.get(rule)
    if names is None:
        names = _DISPATCH_NAMES[rule] = frozenset({*rule.calls, *rule.keywords, *rule.attributes})
    return names


@functools.cache
def rules_page() -> str | None:
    """The published rules page of the installed distribution, if its metadata names one."""
    from importlib import metadata  # only when links are printed

    try:
        urls = metadata.metadata("neuron-migrate").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == RULES_URL_LABEL and url.strip().startswith(("https://", "http://")):
            return url.strip().split("#")[0]
    return None


def rule_url(code: str) -> str | None:
    """`https://.../rules.md#nm101`, or None when the build publishes no rules page."""
    page = rules_page()
    return f"{page}#{code.lower()}" if page else None


# ---- expression tests shared by rules --------------------------------------------------------


def callee_name(call: ast.Call) -> str | None:
    func = call.func
    if func.__class__ is ast.Attribute:
        return func.attr
    if func.__class__ is ast.Name:
        return func.id
    return None


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def argument(call: ast.Call, position: int | None, name: str | None) -> ast.expr | None:
    if name is not None:
        kw = keyword(call, name)
        if kw is not None:
            return kw.value
    if position is not None:
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        if position < len(positional) and len(positional) == len(call.args):
            return positional[position]
    return None


def has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    )


def constant(node: ast.AST | None) -> object:
    """The value of a literal (negative numbers included), else the class `ast.AST` as a sentinel."""
    if isinstance(node, ast.Constant):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
    return ast.AST


def is_method_call(ctx: FileContext, call: ast.Call) -> bool:
    """`x.name(...)` where `x` is not a module this file imports (so `torch.unique` is not one)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    return ctx.qualify(func.value) is None


# Tensor methods and torch functions whose result depends on tensor values (reductions and
# predicates): a branch on them is a branch on data.
VALUE_METHODS = frozenset(
    {
        "any",
        "all",
        "item",
        "sum",
        "max",
        "min",
        "mean",
        "norm",
        "prod",
        "std",
        "var",
        "amax",
        "amin",
        "count_nonzero",
        "argmax",
        "argmin",
        "median",
        "abs",
        "isnan",
        "isinf",
        "nonzero",
        "numel_nonzero",
        "equal",
        "allclose",
        "eq",
        "ne",
        "gt",
        "lt",
        "ge",
        "le",
        "logsumexp",
    }
)
# torch.* calls that return Python facts about tensors or the runtime, not tensor values.
NOT_TENSORS = re.compile(
    r"torch\.(is_\w+|jit\.\w+|compiler\.\w+|cuda\.\w+|distributed\.\w+|backends\.\w+|_dynamo\.\w+|"
    r"Size|finfo|iinfo|device|dtype|get_default_dtype|get_default_device|__version__|"
    r"are_deterministic_algorithms_enabled|version\.\w+|_utils\.\w+|fx\.\w+|utils\.\w+|"
    r"promote_types|result_type|can_cast|typename|get_num_threads|accelerator\.\w+|library\.\w+)"
)


def is_tensor_call(ctx: FileContext, node: ast.AST) -> bool:
    """A call that returns a tensor as far as syntax can tell: a `torch.*` op or a value method."""
    if not isinstance(node, ast.Call):
        return False
    qualified = ctx.qualify(node.func)
    if qualified is not None:
        return qualified.startswith("torch.") and not NOT_TENSORS.match(qualified)
    func = node.func
    return isinstance(func, ast.Attribute) and func.attr in VALUE_METHODS


def depends_on_values(ctx: FileContext, node: ast.AST) -> ast.AST | None:
    """The sub-expression that makes `node` depend on tensor values, if any.

    Shapes (`.shape`, `.size()`, `len()`, `.dim()`) are static and do not count; neither do
    `is None` tests, `isinstance` and friends.
    """
    stack = [node]
    while stack:
        current = stack.pop()
        cls = current.__class__
        if cls is ast.Call:
            func = current.func  # type: ignore[attr-defined]
            if (
                func.__class__ is ast.Attribute
                and func.attr in VALUE_METHODS
                and not numpy_value(ctx, func.value)
            ):
                base = dotted(func.value)
                if (
                    base is None
                    or ctx.qualify(func.value) is None
                    or ctx.qualify(func) in VALUE_FUNCTIONS
                ):
                    return current
            qualified = ctx.qualify(func)
            if qualified in VALUE_FUNCTIONS:
                return current
            if func.__class__ is ast.Name and func.id in (
                "len",
                "isinstance",
                "hasattr",
                "getattr",
                "callable",
                "type",
            ):
                continue
            if func.__class__ is ast.Attribute and (
                func.attr in values.STATIC_METHODS or func.attr.startswith("is_")
            ):
                continue
            stack.extend(current.args)  # type: ignore[attr-defined]
            stack.append(func)
            continue
        if cls in (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp):
            continue
        if isinstance(current, ast.Attribute):
            if current.attr in (
                "shape",
                "ndim",
                "dtype",
                "device",
                "is_cuda",
                "requires_grad",
                "training",
            ):
                continue
            stack.append(current.value)
            continue
        for child in ast.iter_child_nodes(current):
            stack.append(child)
    return None


VALUE_FUNCTIONS = frozenset(
    {
        "torch.any",
        "torch.all",
        "torch.equal",
        "torch.allclose",
        "torch.isin",
        "torch.count_nonzero",
        "torch.sum",
        "torch.max",
        "torch.min",
        "torch.mean",
        "torch.isnan",
        "torch.isinf",
        "torch.is_nonzero",
    }
)

MASK_NAME = re.compile(r"(?i).*(mask|keep|valid|selected|is_\w+)$")
BOOL_FUNCTIONS = frozenset(
    {
        "isnan",
        "isinf",
        "isfinite",
        "isneginf",
        "isposinf",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "isin",
        "bool",
        "eq",
        "ne",
        "gt",
        "ge",
        "lt",
        "le",
    }
)


def mask_kind(ctx: FileContext, node: ast.AST) -> str | None:
    """ "certain" when `node` is a boolean tensor by construction (a comparison, `.bool()`,
    `isnan`...), "named" when only its name says so (`mask`, `keep`), else None."""
    cls = node.__class__
    if cls is ast.Compare:
        # `a < b` on tensors; `x in y` and identity tests are not masks.
        ops = node.ops  # type: ignore[attr-defined]
        if all(op.__class__ in (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq) for op in ops):
            left = node.left  # type: ignore[attr-defined]
            if isinstance(left, ast.Constant) and all(
                isinstance(c, ast.Constant)
                for c in node.comparators  # type: ignore[attr-defined]
            ):
                return None
            return "certain"
        return None
    if cls is ast.UnaryOp and node.op.__class__ is ast.Invert:  # type: ignore[attr-defined]
        return mask_kind(ctx, node.operand)  # type: ignore[attr-defined]
    if cls is ast.BinOp and node.op.__class__ in (ast.BitAnd, ast.BitOr, ast.BitXor):  # type: ignore[attr-defined]
        kinds = {mask_kind(ctx, node.left), mask_kind(ctx, node.right)}  # type: ignore[attr-defined]
        if "certain" in kinds:
            return "certain"
        return "named" if "named" in kinds else None
    if cls is ast.Call:
        func = node.func  # type: ignore[attr-defined]
        name = (
            func.attr
            if isinstance(func, ast.Attribute)
            else func.id
            if isinstance(func, ast.Name)
            else None
        )
        if name in BOOL_FUNCTIONS:
            if name in ("eq", "ne", "gt", "ge", "lt", "le", "bool") and not isinstance(
                func, ast.Attribute
            ):
                return None
            if name == "bool" and node.args:  # type: ignore[attr-defined]
                return None
            return "certain"
        if name == "to" and any(ctx.qualify(a) == "torch.bool" for a in node.args):  # type: ignore[attr-defined]
            return "certain"
        return None
    if cls is ast.Name or cls is ast.Subscript:
        kind = ctx.kind(node)
        if kind == values.MASK:
            return "certain"  # made boolean: a comparison, `.bool()`, `dtype=torch.bool`
        if cls is ast.Name and kind is None and ctx.functions:
            made = ctx.values.assigned(node, ctx.functions[-1])  # type: ignore[arg-type]
            if made is not None and made.__class__ is not ast.Name and mask_kind(ctx, made) == "certain":
                return "certain"  # `keep = probs.sum(-1) > 0`
        if kind is not None and kind != values.TENSOR and cls is ast.Name:
            return None  # known not to be a boolean device tensor, whatever its name
    if cls is ast.Name or cls is ast.Attribute:
        name = node.id if cls is ast.Name else node.attr  # type: ignore[attr-defined]
        if (
            MASK_NAME.fullmatch(name)
            and not name.lower().startswith(("num_", "n_"))
            and not name.isupper()
        ):
            return "named"
    return None


def scalar_literal(ctx: FileContext, node: ast.AST) -> bool:
    """A number, `float("-inf")`, `math.inf` or `torch.finfo(...).min`: safe as `masked_fill`'s value."""
    if isinstance(constant(node), int | float) and not isinstance(constant(node), bool):
        return True
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return scalar_literal(ctx, node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float":
        return (
            len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        )
    qualified = ctx.qualify(node)
    if qualified in ("math.inf", "math.nan", "numpy.inf", "numpy.nan", "math.pi"):
        return True
    if (
        isinstance(node, ast.Attribute)
        and node.attr in ("min", "max", "eps", "tiny")
        and isinstance(node.value, ast.Call)
    ):
        return ctx.qualify(node.value.func) in ("torch.finfo", "torch.iinfo")
    return False


def plain_reference(node: ast.AST) -> bool:
    """`x`, `self.x`, `a.b.c`: safe to evaluate twice or to call a method on."""
    return dotted(node) is not None


def bound_in_scope(ctx: FileContext, name: str) -> bool:
    """Whether `name` is a parameter of, or assigned in, the enclosing function or the module."""
    for function in reversed(ctx.functions):
        args = function.args  # type: ignore[attr-defined]
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if any(a.arg == name for a in every):
            return True
        start, end = ctx.places.span(function)
        if re.compile(rf"^[ \t]*{re.escape(name)}\s*(:[^=\n]*)?=(?!=)", re.MULTILINE).search(
            ctx.text, start, end
        ):
            return True
    pattern = re.compile(rf"^{re.escape(name)}\s*(:[^=\n]*)?=(?!=)", re.MULTILINE)
    return pattern.search(ctx.text) is not None


def self_attribute_assigned(ctx: FileContext, name: str) -> bool:
    if not ctx.classes:
        return False
    start, end = ctx.places.span(ctx.classes[-1])
    return (
        re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=(?!=)").search(ctx.text, start, end)
        is not None
    )


def is_compile(ctx: FileContext, call: ast.Call) -> bool:
    """`torch.compile(...)` or `model.compile(...)` (nn.Module.compile takes the same arguments)."""
    qualified = ctx.qualify(call.func)
    if qualified is not None:
        return qualified in ("torch.compile", "torch.compiler.compile")
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "compile":
        return False
    return not any(k.arg in ("optimizer", "loss", "metrics") for k in call.keywords)  # not Keras


def is_compile_config(ctx: FileContext, call: ast.Call) -> bool:
    qualified = ctx.qualify(call.func)
    return (
        qualified is not None
        and qualified.startswith("transformers")
        and qualified.endswith("CompileConfig")
    )


def numpy_value(ctx: FileContext, node: ast.AST) -> bool:
    """Whether `node` holds a host value by how it was made: NumPy (`np.*(...)`, a method chain
    on one, or a local name last assigned from one), a CPU copy or a Python number. Nothing on
    those waits for the device, so `.item()`, `.max()` and masks on them are no device hazard."""
    return ctx.kind(node) in HOST_KINDS


HOST_KINDS = frozenset({values.NUMPY, values.CPU, values.PYTHON})


def tensor_truth(ctx: FileContext, test: ast.AST) -> ast.AST | None:
    """A device tensor (or a number read from one) used directly as a truth value in `test`:
    `if expert_idx == self.num_experts:` where `expert_idx` came from iterating a tensor."""
    stack = [test]
    while stack:
        current = stack.pop()
        cls = current.__class__
        if cls is ast.BoolOp:
            stack.extend(current.values)  # type: ignore[attr-defined]
        elif cls is ast.UnaryOp and current.op.__class__ is ast.Not:  # type: ignore[attr-defined]
            stack.append(current.operand)  # type: ignore[attr-defined]
        elif cls is ast.Compare:
            if any(op.__class__ in (ast.Is, ast.IsNot, ast.In, ast.NotIn) for op in current.ops):  # type: ignore[attr-defined]
                continue
            stack.extend((current.left, *current.comparators))  # type: ignore[attr-defined]
        elif (cls is ast.Name or cls is ast.Subscript) and ctx.kind(current) in DATA_KINDS:
            return current
    return None


DATA_KINDS = frozenset({*values.DEVICE_TENSORS, values.READ})


# ---- branches decided when the code is traced ------------------------------------------------

# `x.config.image_token_id >= self.vocab_size`: an id compared with a vocabulary size, a guard
# for out-of-range values that real checkpoints do not have.
_IDS = re.compile(r"\w*(_id|_ids|_index|_idx)")
_VOCABULARY = re.compile(r"\w*vocab\w*size")
_FACT_CALLS = frozenset({"len", "isinstance", "hasattr", "getattr", "callable"})


@dataclass(frozen=True)
class TraceTimeBranch:
    condition: str  # the part of the `if` test that is not a `None` test, as written
    out_of_range_guard: bool


def trace_time_branch(ctx: FileContext) -> TraceTimeBranch | None:
    """The nearest enclosing `if` (within the function) whose body holds the current statement and
    whose test reads only Python values fixed when the code is traced: attributes of `self` or of
    a configuration, constants, `is None` tests and `len`/`isinstance`. Dynamo evaluates such a
    test once and compiles only the branch taken, so what is in the body is compiled only when it
    holds."""
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        ancestor = stack[i]
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            return None
        if not isinstance(ancestor, ast.If) or not any(s is stack[i + 1] for s in ancestor.body):
            continue
        parts = _conjuncts(ancestor.test)
        if not all(_fixed_when_traced(ctx, p) for p in parts):
            continue
        telling = [p for p in parts if not _none_test(p)]
        if not telling:
            continue
        return TraceTimeBranch(
            " and ".join(ctx.source(p) for p in telling),
            any(_out_of_range_guard(p) for p in telling),
        )
    return None


def _conjuncts(test: ast.expr) -> list[ast.expr]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in _conjuncts(value)]
    return [test]


def _none_test(node: ast.expr) -> bool:
    """`x is None`, `x is not None`, or `or`/`and` of such tests: what the caller passed."""
    if isinstance(node, ast.BoolOp):
        return all(_none_test(v) for v in node.values)
    return (
        isinstance(node, ast.Compare)
        and all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops)
        and any(isinstance(c, ast.Constant) and c.value is None for c in (node.left, *node.comparators))
    )


def _fixed_when_traced(ctx: FileContext, node: ast.expr) -> bool:
    if _none_test(node):
        return True
    if isinstance(node, ast.BoolOp):
        return all(_fixed_when_traced(ctx, v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _fixed_when_traced(ctx, node.operand)
    if isinstance(node, ast.Compare):
        return all(_fixed_when_traced(ctx, v) for v in (node.left, *node.comparators))
    if isinstance(node, ast.BinOp):
        return _fixed_when_traced(ctx, node.left) and _fixed_when_traced(ctx, node.right)
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id in _FACT_CALLS
            and all(_fixed_when_traced(ctx, a) for a in node.args)
        )
    name = dotted(node)
    if name is None or "." not in name or ctx.kind(node) in values.DEVICE_TENSORS:
        return False
    root = name.split(".", 1)[0]
    return root == "self" or "config" in root


def _out_of_range_guard(node: ast.expr) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    names = [(dotted(v) or "").rsplit(".", 1)[-1] for v in (node.left, *node.comparators)]
    return any(_IDS.fullmatch(n) for n in names) and any(_VOCABULARY.fullmatch(n) for n in names)
