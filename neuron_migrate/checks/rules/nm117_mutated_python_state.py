"""NM117: Python state of an object that compiled code itself changes, read in a branch."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from neuron_migrate.checks import values
from neuron_migrate.checks.context import FUNCTIONS, MODULE, FileContext
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, is_tensor_call

BAD = """
import torch


class Table(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Buffer(torch.randn(16, 8))

    def forward(self, ids):
        self.table = self.table.to(dtype=torch.float32)
        return self.table[ids] * 2


table = Table()


def forward(ids):
    return table(ids)
"""
GOOD = """
import torch


class Table(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Buffer(torch.randn(16, 8))

    def forward(self, ids):
        table = self.table.to(dtype=torch.float32)
        return table[ids] * 2


table = Table()


def forward(ids):
    return table(ids)
"""

COUNTER = """
import torch


class RingCache:
    is_compileable = True

    def __init__(self, window):
        self.window = window
        self.seen = 0
        self.keys = torch.zeros(1, window, 8)

    def update(self, k):
        full = self.seen >= self.window
        self.seen += k.shape[1]
        if full:
            self.keys.copy_(torch.roll(self.keys, -1, 1))
        return self.keys
"""

# Methods through which compiled code writes a cache or state object built for compile.
ENTRY = re.compile(r"update|update_\w+|__call__")
# Methods named for initialisation (`lazy_initialization`, `_init_cache`) run once: what they
# set changes once.
INITIALISING = frozenset({"init", "initialize", "initialise", "initialization", "initialisation"})
# Method names of tensors, containers and strings: `x.view(...)` is no call of a class here.
NOT_OURS = frozenset(
    {
        *(
            "to",
            "view",
            "reshape",
            "size",
            "type",
            "float",
            "half",
            "double",
            "int",
            "long",
            "bool",
        ),
        *(
            "cuda",
            "cpu",
            "numpy",
            "item",
            "tolist",
            "clone",
            "detach",
            "copy",
            "copy_",
            "get",
            "items",
        ),
        *(
            "keys",
            "values",
            "append",
            "extend",
            "insert",
            "pop",
            "remove",
            "index",
            "count",
            "setdefault",
        ),
        *(
            "format",
            "join",
            "split",
            "strip",
            "replace",
            "startswith",
            "endswith",
            "lower",
            "upper",
        ),
        *(
            "sum",
            "mean",
            "max",
            "min",
            "all",
            "any",
            "expand",
            "permute",
            "transpose",
            "contiguous",
        ),
        *(
            "unsqueeze",
            "squeeze",
            "flatten",
            "chunk",
            "masked_fill",
            "fill_",
            "zero_",
            "add_",
            "mul_",
        ),
        *("apply", "eval", "train", "parameters", "modules", "children", "named_parameters"),
    }
)
# Conversions that return the tensor itself when nothing changes (an `nn.Buffer` stays one).
SAME_OBJECT = frozenset(
    {
        "to",
        "type",
        "float",
        "half",
        "bfloat16",
        "double",
        "cuda",
        "cpu",
        "contiguous",
        "requires_grad_",
    }
)
# Tensor methods that make a new tensor.
TENSOR_METHODS = frozenset({"clone", "detach", "index_select", "new_zeros", "new_ones", "new_full"})
_SELF_CALL = re.compile(r"self\.([A-Za-z_]\w*)\s*\(")
_RECEIVER = re.compile(r"([A-Za-z_]\w*)$")
_SUPER_CALL = re.compile(r"\bsuper\(\)\.([A-Za-z_]\w*)\s*\(")
# A statement that may store into `self.x` (`self.x =`, `self.x +=`, `self.x[i] =`, `a, self.x =`).
# (It starts with the literal, which the regex engine finds fast; a `\b` in front is five times
# slower on model files.)
_SELF_STORE = re.compile(
    r"self\.\w+(?:\[[^\]\n]*\])?[ \t]*(?:,[^=\n]*)?(?:[-+*/%|&^@]|//|\*\*|>>|<<)?=(?!=)"
)
_TARGETS_BEFORE = re.compile(r"[ \t]*(?:[\w.\[\]]+[ \t]*,[ \t]*)*")
_BUFFER = re.compile(r"[ \t]*self\.(\w+)\s*=\s*(?:[\w.]*\.)?Buffer\(")
_COMPILEABLE = re.compile(r"^[ \t]+is_compileable\s*(?::[^=\n]*)?=\s*(True|False)\b", re.MULTILINE)
_PUNCTUATION = frozenset({"+=", "-=", "*=", "/=", "//=", "|=", "&="})


@dataclass
class _Class:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    bases: list[str]
    lineage: list[str] = field(default_factory=list)  # itself, then its bases in this file (MRO)


@dataclass
class _Store:
    attr: str
    node: ast.AST  # the target
    method: str
    how: str  # "`= True`", "`+=`", "an assignment"
    value: ast.AST | None  # what is stored, when the statement tells
    tensor: bool  # the value is a tensor
    counter: bool  # `+=`, or a value computed from itself: new every call
    initialising: bool  # in a method named for initialisation (`lazy_initialization`)
    guards: frozenset[str]  # the `self.<attr>` that the tests of the `if`s around it read


@dataclass
class _Compiled:
    function: ast.FunctionDef | ast.AsyncFunctionDef
    owner: str  # the class that defines it
    via: str  # the class through which compiled code reaches it
    label: str  # where it is, and why it is compiled


class MutatedPythonState(Rule):
    """Flags Python state that compiled code changes and reads in a branch, and stores into an `nn.Buffer`.

    ## What it does
    In compiled code, finds a read of `self.<attr>` in an `if`/`while` test, a comparison, a
    conditional expression or an `assert` (directly, or through a local assigned from it) where
    the class, or a class of the same file it inherits from, assigns `self.<attr>` (`=`, `+=`,
    tuple targets, `self.flags[i] = True`) in a method that compiled code reaches. Also finds
    `self.<buffer> = self.<buffer>.to(...)` in compiled code where the attribute was made with
    `nn.Buffer(...)`.

    Compiled code is `forward` and what it calls (`self.helper()`, methods of the file's other
    classes it calls by name), functions given to `torch.compile`, and the `update`/`update_*`
    methods (and `__call__`) of classes built for compile, such as the KV-cache layers of
    transformers, which the model's compiled forward calls from another file: classes that set
    `is_compileable = True`, call `torch._dynamo.mark_static_address`, or inherit from such a
    class in the same file (an `is_compileable = False` of their own wins).
    Attributes set only in `__init__` or in methods that compiled code does not reach
    (`self.training`, configuration flags) are left alone, as are mutations under
    `if not is_torchdynamo_compiling():`.

    ## Why
    Dynamo guards on the Python values compiled code reads: `self.is_initialized == False`,
    `self.cumulative_length_int == 0`. When the compiled code changes the value, the next call
    fails the guard and compiles a new graph; with static shapes there is no automatic dynamic
    fallback for Python numbers, so a counter compiles one graph per call until the recompile
    limit (8), then runs eagerly (a warning). A flag or mode set to constants, state set lazily
    (under a test of state, or in a method named for initialisation) and `is None` tests take a
    few values: one more graph each (info). Measured on the stand-in `neuron` backend: a cache
    whose `update` compares a Python count it increments compiled 4 graphs in 4 calls; with the
    count in a 0-d tensor, 1. Storing back an `nn.Buffer` that `.to()` returned unchanged is a
    graph break (GB4841) and fails under `fullgraph=True`; reassigning other tensor attributes
    compiles.

    ## Example
    ```python
    def update(self, key_states, value_states):
        full = self.cumulative_length_int >= self.max_cache_len
        self.cumulative_length_int += key_states.shape[-2]
    ```

    ## Use instead
    Keep state that changes every call in a tensor updated in place, initialise lazily set state
    before the first compiled call, and convert buffers into a local:
    ```python
    def update(self, key_states, value_states):
        self.cumulative_length.add_(key_states.shape[-2])  # a 0-d tensor
    ```
    ```python
    pos_encoding = self.pos_encoding.to(device=device, dtype=dtype)
    ```

    ## Fix safety
    No automatic fix: where state should live is the author's choice.
    """

    code = "NM117"
    name = "mutated-python-state"
    summary = "Python state that compiled code changes, read in a branch (a new graph per value)"
    graph_breaks = ("GB4841",)
    # Compiled code is found by these words (`forward`, `torch.compile`, `is_compileable`).
    requires = ("forward", "compile", "mark_static_address")
    VALID = (
        GOOD,
        # Set in `__init__` only: a configuration, not state.
        "import torch\n\nclass Block(torch.nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        "        self.use_bias = config.use_bias\n        self.proj = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n        if self.use_bias and self.training:\n            x = x + 1\n        return self.proj(x)\n",
        # Changed by eager code only (`reset` is not called from compiled code).
        "import torch\n\nclass Cache:\n    is_compileable = True\n\n    def __init__(self):\n        self.ready = False\n\n"
        "    def reset(self):\n        self.ready = False\n\n    def update(self, k):\n        if self.ready:\n            return k\n        return k * 2\n",
        # Changed by compiled code, but never read in a test.
        "import torch\n\nclass Counter(torch.nn.Module):\n    def forward(self, x):\n        self.last_shape = x.shape\n"
        "        return x * 2\n",
        # A plain class not built for compile, which compiled code does not call.
        "import torch\n\nclass Tally:\n    def update(self, n):\n        if self.total > 10:\n            return\n"
        "        self.total += n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n",
        # Eager only: Dynamo never runs the store.
        "import torch\n\nclass Stats(torch.nn.Module):\n    def forward(self, x):\n        if self.calls < 3:\n"
        "            x = x * 2\n        if not torch.compiler.is_compiling():\n            self.calls += 1\n        return x\n",
        # A registered buffer converted into a local.
        "import torch\n\nclass Rope(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.inv_freq = torch.nn.Buffer(torch.ones(4))\n\n    def forward(self, x):\n"
        "        if self.inv_freq.device != x.device:\n            self.inv_freq = self.inv_freq.to(x.device)\n"
        "        return x * self.inv_freq\n",
    )
    INVALID = (
        Invalid(COUNTER, line=14, severity="warning", message="`self.seen`"),
        Invalid(BAD, line=11, severity="warning", message="GB4841"),
        # A lazily initialised cache layer: one more graph when the flag flips.
        Invalid(
            "import torch\n\nclass StaticKV:\n    def __init__(self, size):\n        self.size = size\n        self.ready = False\n\n"
            "    def setup(self, k):\n        self.keys = torch.zeros(k.shape[0], self.size, k.shape[-1])\n"
            "        torch._dynamo.mark_static_address(self.keys)\n        self.ready = True\n\n"
            "    def update(self, k, pos):\n        if not self.ready:\n            self.setup(k)\n"
            "        self.keys.index_copy_(1, pos, k)\n        return self.keys\n",
            line=14,
            severity="info",
            message="one more graph",
        ),
        # A mode switch that forward calls: through a local, and in a sibling class it calls.
        Invalid(
            "import torch\nfrom torch import nn\n\nclass Attention(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.mode = 'sparse'\n\n    def set_mode(self, mode):\n        current = self.mode\n        if mode == current:\n"
            "            return\n        self.mode = mode\n\n    def forward(self, x):\n        return x if self.mode == 'full' else x * 2\n\n"
            "class Encoder(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.attn = Attention()\n\n"
            "    def forward(self, x):\n        if x.shape[1] < 64:\n            self.attn.set_mode('full')\n        return self.attn(x)\n",
            line=11,
            severity="warning",
            message="`current` (`self.mode`",
        ),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.tensor([1, 2])", breaks=("GB4841",), fullgraph="unsupported"
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.classes: dict[str, _Class] = {}
        self.compiled: dict[int, _Compiled] = {}
        self.storing: dict[int, bool] = {}  # method -> whether it may store into `self`
        self.owners: dict[int, str] = {}  # method -> the class defining it
        self.bodies: dict[int, tuple[int, int]] = {}
        self.stateful: set[str] = (
            set()
        )  # classes with a method that compiled code may reach and that stores into `self`

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.text
        places = ctx.places.by_node
        built = "is_compileable" in text or "mark_static_address" in text
        if not built and not any(p.compiled for p in places.values()):
            return
        if "self." not in text:
            return
        self._collect(ctx.tree.body)
        if not self.classes:
            return
        # State changes only in methods compiled code can reach: compiled themselves, the `update`
        # of a cache, or called somewhere in the file (`set_input_embeddings` is called from outside).
        self.stateful = {
            name
            for name, info in self.classes.items()
            for mname, method in info.methods.items()
            if (mname == "__call__" or not mname.startswith("__"))
            and self._stores_in(method)
            and (
                (places.get(id(method)) or MODULE).compiled
                or (built and ENTRY.fullmatch(mname) is not None)
                or text.find(f".{mname}(") != -1
            )
        }
        if not self.stateful:
            return
        for info in self.classes.values():
            info.lineage = self._mro(info.node.name)
        self._reach(built)
        stores = self._stores()
        buffers = self._buffers() if "Buffer(" in text else {}
        if not stores and not buffers:
            return
        for compiled in self.compiled.values():
            lineage = self.classes[compiled.owner].lineage
            mutated = {a: s for c in lineage for a, s in stores.get(c, {}).items()}
            if mutated:
                self._reads(compiled, mutated)
            owned = {a for c in lineage for a in buffers.get(c, ())}
            if owned:
                self._buffer_stores(compiled, owned)

    # -- the classes of the file ----------------------------------------------------------------
    def _collect(self, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                methods = {n.name: n for n in node.body if isinstance(n, FUNCTIONS)}
                bases = [_last(b) for b in node.bases]
                self.classes[node.name] = _Class(node, methods, [b for b in bases if b])
                for method in methods.values():
                    self.owners[id(method)] = node.name
                nested = [n for n in node.body if isinstance(n, ast.ClassDef)]
                if nested:
                    self._collect(nested)  # type: ignore[arg-type]
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for part in ("body", "orelse", "finalbody"):
                    self._collect(getattr(node, part, []))
                for handler in getattr(node, "handlers", []):
                    self._collect(handler.body)

    def _mro(self, name: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """C3 linearisation over the bases defined in this file (others are left out)."""
        info = self.classes.get(name)
        if info is None or name in seen:
            return []
        seen = seen | {name}
        sequences = [self._mro(b, seen) for b in info.bases if b in self.classes and b != name]
        sequences = [s for s in sequences if s] + [
            [b for b in info.bases if b in self.classes and b != name]
        ]
        result = [name]
        while any(sequences):
            for sequence in sequences:
                if not sequence:
                    continue
                head = sequence[0]
                if not any(head in s[1:] for s in sequences):
                    break
            else:  # inconsistent: fall back on depth first
                return list(dict.fromkeys([name, *(c for s in sequences for c in s)]))
            result.append(head)
            sequences = [s[1:] if s and s[0] == head else s for s in sequences]
        return result

    def _resolve(
        self, via: str, method: str, after: str | None = None
    ) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        lineage = self.classes[via].lineage
        if after is not None:
            lineage = lineage[lineage.index(after) + 1 :] if after in lineage else []
        for name in lineage:
            found = self.classes[name].methods.get(method)
            if found is not None:
                return name, found
        return None

    def _built_for_compile(self, name: str) -> str | None:
        """Why the class is built for compile, or None: its own `is_compileable` decides, then a
        call of `mark_static_address`, then its bases."""
        for ancestor in self.classes[name].lineage:
            info = self.classes[ancestor]
            start, end = self.ctx.places.span(info.node)
            inner = [self.ctx.places.span(m) for m in info.node.body if isinstance(m, ast.ClassDef)]
            for match in _COMPILEABLE.finditer(self.ctx.text, start, end):
                if any(s <= match.start() < e for s, e in inner):
                    continue
                if match.group(1) == "False":
                    return None
                return _inherited("`is_compileable = True`", ancestor, name)
            if self.ctx.text.find("mark_static_address", start, end) != -1:
                return _inherited("it calls `torch._dynamo.mark_static_address`", ancestor, name)
        return None

    # -- what compiled code reaches -----------------------------------------------------------
    def _reach(self, built: bool) -> None:
        ctx = self.ctx
        places = ctx.places.by_node
        work: list[
            tuple[ast.FunctionDef | ast.AsyncFunctionDef, str, str]
        ] = []  # (method, via, label)
        for name, info in self.classes.items():
            for method in info.methods.values():
                place = places.get(id(method))
                if place is not None and place.compiled:
                    work.append((method, name, place.label))
            if built:
                why = self._built_for_compile(name)
                if why is None:
                    continue
                entries = {
                    m for c in info.lineage for m in self.classes[c].methods if ENTRY.fullmatch(m)
                }
                for entry in sorted(entries):
                    resolved = self._resolve(name, entry)
                    if resolved is not None:
                        work.append(
                            (
                                resolved[1],
                                name,
                                f"in `{entry}` of `{name}`, built for torch.compile: {why}",
                            )
                        )
        # Methods of the file's other classes that compiled code calls by name (`self.attn.set_mode()`),
        # among the classes with state to change: a method that stores into `self` outside `__init__`.
        stateful = self.stateful
        names: dict[str, list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]] = {}
        for cname, info in self.classes.items():
            if not stateful.intersection(info.lineage):
                continue
            for mname, method in info.methods.items():
                if not (mname.startswith("__") or mname in NOT_OURS):
                    names.setdefault(mname, []).append((cname, method))
        needles = [(f".{name}(", name) for name in names]
        seen: set[tuple[int, str]] = set()
        text = ctx.text
        while work:
            method, via, label = work.pop()
            if (id(method), via) in seen:
                continue
            seen.add((id(method), via))
            owner = self._owner(method, via)
            known = self.compiled.get(id(method))
            if known is None or (via == owner and known.via != owner):
                self.compiled[id(method)] = _Compiled(
                    method, owner, via, label
                )  # named by its own class
            start, end = self._body(method)
            caller = f"`{method.name}` of `{owner}`"
            for match in _SELF_CALL.finditer(text, start, end):
                if match.start() and (
                    text[match.start() - 1].isalnum() or text[match.start() - 1] in "_."
                ):
                    continue  # `my_self.f(`, `x.self.f(`
                resolved = self._resolve(via, match.group(1))
                if resolved is not None:
                    work.append(
                        (
                            resolved[1],
                            via,
                            f"in `{match.group(1)}`, called from {caller} in compiled code",
                        )
                    )
            if text.find("super().", start, end) != -1:
                for match in _SUPER_CALL.finditer(text, start, end):
                    resolved = self._resolve(via, match.group(1), after=owner)
                    if resolved is not None:
                        work.append(
                            (
                                resolved[1],
                                via,
                                f"in `{match.group(1)}` of `{resolved[0]}`, called from {caller} in compiled code",
                            )
                        )
            for needle, called in needles:
                at = text.find(needle, start, end)
                while at != -1:
                    self._called(at, called, names[called], via, caller, start, work)
                    at = text.find(needle, at + 1, end)

    def _called(
        self,
        at: int,
        called: str,
        targets: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]],
        via: str,
        caller: str,
        start: int,
        work: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str, str]],
    ) -> None:
        """`<receiver>.<called>(` at `at` in compiled code: what it reaches."""
        text = self.ctx.text
        before = text[max(start, at - 40) : at]
        if before.endswith(("self", "super()")) and not before.endswith(("_self", ".self")):
            return  # `self.f()`, `super().f()`: resolved through the class
        receiver = _RECEIVER.search(before)
        name = receiver.group(1) if receiver is not None else None
        if name is not None and name in self.classes:
            target = self.classes[name].methods.get(called)
            if target is not None:  # `StaticLayer.lazy_initialization(self, ...)`
                work.append(
                    (
                        target,
                        via,
                        f"in `{called}` of `{name}`, called from {caller} in compiled code",
                    )
                )
            return
        if name is not None and name in self.ctx.aliases.bindings:
            return  # `torch.update(...)`: a module's function
        for cname, target in targets:
            work.append(
                (
                    target,
                    cname,
                    f"in `{called}` of `{cname}`, called from {caller} in compiled code",
                )
            )

    def _body(self, function: ast.AST) -> tuple[int, int]:
        """The text of a function's body, without its docstring (whose examples call things)."""
        known = self.bodies.get(id(function))
        if known is None:
            known = self.bodies[id(function)] = self._measure(function)
        return known

    def _measure(self, function: ast.AST) -> tuple[int, int]:
        body = function.body  # type: ignore[attr-defined]
        first = body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            if len(body) == 1:
                return 0, 0
            first = body[1]
        return self.ctx.positions.lines_span(first.lineno, function.end_lineno or first.lineno)  # type: ignore[attr-defined]

    def _stores_in(self, method: ast.AST) -> bool:
        """Whether the method's text may store into `self` (a statement `self.x = ...`)."""
        known = self.storing.get(id(method))
        if known is None:
            start, end = self._body(method)
            text = self.ctx.text
            known = any(
                _statement_start(text, m.start()) for m in _SELF_STORE.finditer(text, start, end)
            )
            self.storing[id(method)] = known
        return known

    def _owner(self, method: ast.AST, via: str) -> str:
        return self.owners.get(id(method), via)

    # -- what compiled code changes -------------------------------------------------------------
    def _stores(self) -> dict[str, dict[str, list[_Store]]]:
        """class -> attribute -> the stores of compiled code into `self.<attribute>`."""
        found: dict[str, dict[str, list[_Store]]] = {}
        for compiled in self.compiled.values():
            if not self._stores_in(compiled.function):
                continue
            method = compiled.function.name
            initialising = not method.startswith("__") and any(
                word in INITIALISING for word in method.lower().split("_")
            )
            for statement, tests, eager in _statements(compiled.function.body, (), False):
                if eager:
                    continue
                for attr, target, value, how in _targets(statement):
                    if value is None and how == "item":
                        continue
                    if value is not None and _conversion(value, attr):
                        continue  # `self.x = self.x.to(...)`: the same state, converted
                    tensor = value is not None and self._tensor(value, compiled.function)
                    counter = how in _PUNCTUATION or (
                        isinstance(value, ast.BinOp) and not tensor and _arithmetic_of(value, attr)
                    )
                    guards = frozenset(a for test in tests for a in _self_reads(test))
                    store = _Store(
                        attr,
                        target,
                        method,
                        _how(how, value),
                        value,
                        tensor,
                        counter,
                        initialising,
                        guards,
                    )
                    found.setdefault(compiled.owner, {}).setdefault(attr, []).append(store)
        return found

    def _tensor(self, value: ast.AST, function: ast.AST) -> bool:
        if is_tensor_call(self.ctx, value):
            return True
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and (value.func.attr in SAME_OBJECT or value.func.attr in TENSOR_METHODS)
        ):
            return True
        return self.ctx.values.kind(value, function) in values.TENSORS

    def _buffers(self) -> dict[str, set[str]]:
        """class -> the attributes it makes with `nn.Buffer(...)`."""
        text = self.ctx.text
        spans = sorted(
            ((*self.ctx.places.span(info.node), name) for name, info in self.classes.items()),
            key=lambda s: s[1] - s[0],
        )
        found: dict[str, set[str]] = {}
        at = text.find("Buffer(")
        while at != -1:
            line_start = text.rfind("\n", 0, at) + 1
            match = _BUFFER.match(text, line_start, at + 7)
            if match is not None:
                owner = next((name for start, end, name in spans if start <= at < end), None)
                if owner is not None:
                    found.setdefault(owner, set()).add(match.group(1))
            at = text.find("Buffer(", at + 7)
        return found

    # -- reads that decide ------------------------------------------------------------------
    def _reads(self, compiled: _Compiled, mutated: dict[str, list[_Store]]) -> None:
        ctx = self.ctx
        function = compiled.function
        start, end = self._body(function)
        text = ctx.text
        lines: set[int] = set()  # the lines that read `self.<attr>`
        for mutated_attr in mutated:
            needle = f"self.{mutated_attr}"
            at = text.find(needle, start, end)
            while at != -1:
                lines.add(ctx.positions.location(at)[0])
                at = text.find(needle, at + len(needle), end)
        if not lines:
            return
        aliases: dict[str, list[tuple[tuple[int, int], str | None]]] = {}
        deciding: list[tuple[ast.AST, bool, str]] = []
        seen: set[int] = set()
        for statement, _, _ in _statements(function.body, (), False):
            for header, kind in _headers(statement):
                first, last = header.lineno, header.end_lineno or header.lineno  # type: ignore[attr-defined]
                if not any(line in lines for line in range(first, last + 1)) and not (
                    aliases and any(name in ctx.source(header) for name in aliases)
                ):
                    continue
                if kind is not None:  # the test of an `if` or `while`
                    for part, identity in _deciding(header):
                        if id(part) not in seen:
                            seen.add(id(part))
                            deciding.append((part, identity, kind))
                self._decisions(header, mutated, aliases, deciding, seen)
        reported: set[str] = set()
        initialisers: set[str] = set()  # a lazy initialisation is reported once, at its first test
        for part, identity, kind in sorted(deciding, key=lambda d: (d[0].lineno, d[0].col_offset)):  # type: ignore[attr-defined]
            attr = _self_attr(part)
            through = None
            if attr is None and isinstance(part, ast.Name):
                attr = _alias(aliases.get(part.id, ()), (part.lineno, part.col_offset))
                through = part.id
            if attr is None or attr not in mutated or attr in reported:
                continue
            stores = mutated[attr]
            if all(s.tensor for s in stores) and not identity:
                continue  # a tensor compared by value: data-dependent (NM112), not a guard
            reported.add(attr)
            if all(s.initialising for s in stores):
                made_by = {s.method for s in stores}
                if made_by <= initialisers:
                    continue  # `self.left_pad`, set beside the flag already reported
                initialisers |= made_by
            self._report_read(compiled, part, attr, through, kind, identity, mutated)

    def _decisions(
        self,
        header: ast.AST,
        mutated: dict[str, list[_Store]],
        aliases: dict[str, list[tuple[tuple[int, int], str | None]]],
        deciding: list[tuple[ast.AST, bool, str]],
        seen: set[int],
    ) -> None:
        """The tests and comparisons in `header`, and the locals it assigns from `self.<attr>`."""
        for node in ast.walk(header):
            cls = node.__class__
            if cls is ast.Assign:
                attr = _self_attr(node.value)  # type: ignore[attr-defined]
                for target in node.targets:  # type: ignore[attr-defined]
                    for name in _names(target):
                        kept = attr if attr in mutated and isinstance(target, ast.Name) else None
                        if kept is not None or name in aliases:
                            end = (node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
                            aliases.setdefault(name, []).append((end, kept))
            elif cls is ast.AugAssign or cls is ast.AnnAssign:
                for name in _names(node.target):  # type: ignore[attr-defined]
                    if name in aliases:
                        end = (node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
                        aliases[name].append((end, None))
            if cls is ast.IfExp or cls is ast.Assert:
                kind = _KINDS[cls]
                for part, identity in _deciding(node.test):  # type: ignore[attr-defined]
                    if id(part) not in seen:
                        seen.add(id(part))
                        deciding.append((part, identity, kind))
            elif cls is ast.Compare:
                for part, identity in _deciding(node):
                    if id(part) not in seen:
                        seen.add(id(part))
                        deciding.append((part, identity, "comparison"))

    def _report_read(
        self,
        compiled: _Compiled,
        node: ast.AST,
        attr: str,
        through: str | None,
        kind: str,
        identity: bool,
        mutated: dict[str, list[_Store]],
    ) -> None:
        stores = mutated[attr]
        first = min(stores, key=lambda s: (s.node.lineno, s.node.col_offset))  # type: ignore[attr-defined]
        where = f"{first.how} in `{first.method}`, line {first.node.lineno}"  # type: ignore[attr-defined]
        more = len({s.node.lineno for s in stores}) - 1  # type: ignore[attr-defined]
        if more:
            where += f", and {more} more"
        shown = f"`{through}` (`self.{attr}`)" if through else f"`self.{attr}`"
        if _bounded(stores, identity, mutated):
            effect = (
                "Dynamo guards on its value, so a call that changes it compiles one more graph (one per "
                "value it takes); set it before the first compiled call (initialise eagerly) or outside "
                "compiled code"
            )
            severity = Severity.INFO
        else:
            counts = any(s.counter for s in stores)
            hint = (
                "keep the count in a tensor updated in place (`.add_()`)"
                if counts
                else "decide it outside compiled code, or pass it in"
            )
            effect = (
                f"Dynamo guards on its value, so every new value compiles a new graph (8 at most, then "
                f"eager); {hint}"
            )
            severity = Severity.WARNING
        diagnostic = self.ctx.report(
            self,
            node,
            f"{shown} decides this {kind} and compiled code changes it ({where}): {effect}",
            severity=severity,
        )
        diagnostic.where = compiled.label
        diagnostic.statement_end = _statement_end(compiled.function, node)

    def _buffer_stores(self, compiled: _Compiled, buffers: set[str]) -> None:
        for statement, tests, eager in _statements(compiled.function.body, (), False):
            if eager or not isinstance(statement, ast.Assign):
                continue
            value = statement.value
            if not (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in SAME_OBJECT
                and _self_attr(value.func.value) in buffers
            ):
                continue
            for target in statement.targets:
                attr = _self_attr(target)
                if attr is None or attr not in buffers:
                    continue
                if any(_reads(test, attr) for test in tests):
                    continue  # converted only when it differs: a new tensor, no buffer
                source = _self_attr(value.func.value)
                diagnostic = self.ctx.report(
                    self,
                    target,
                    f"`self.{attr}` is an `nn.Buffer` stored back in compiled code: when `.{value.func.attr}()` "
                    f"returns `self.{source}` unchanged, Dynamo cannot trace the store, a graph break (GB4841) "
                    f"and a failure under fullgraph=True; use a local (`{attr} = self.{source}.{value.func.attr}(...)`)",
                )
                diagnostic.where = compiled.label
                diagnostic.statement_end = statement.end_lineno or statement.lineno


_KINDS: dict[type, str] = {
    ast.If: "`if`",
    ast.While: "`while`",
    ast.IfExp: "conditional expression",
    ast.Assert: "`assert`",
}


def _statement_start(text: str, at: int) -> bool:
    """Whether `self.x` at `at` starts a statement's targets (`a, self.x = ...`), not a keyword
    argument (`f(self.x, n=1)`)."""
    line = text.rfind("\n", 0, at) + 1
    return _TARGETS_BEFORE.fullmatch(text, line, at) is not None


def _last(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # `Generic[T]`
        return _last(node.value)
    return None


def _inherited(why: str, ancestor: str, name: str) -> str:
    return why if ancestor == name else f"{why} in its base `{ancestor}`"


def _self_attr(node: ast.AST | None) -> str | None:
    """`x` for `self.x` (and for `self.x[i]`, whose value is in `self.x`)."""
    if node is None:
        return None
    if isinstance(node, ast.Subscript):
        node = node.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def _names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _names(element)
    elif isinstance(target, ast.Starred):
        yield from _names(target.value)


def _alias(bindings: tuple | list, at: tuple[int, int]) -> str | None:
    """The attribute a local name was last assigned from before `at`, if that was `self.<attr>`."""
    chosen = None
    for position, attr in bindings:
        if position <= at:
            chosen = attr
    return chosen


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)


def _arithmetic_of(value: ast.AST, attr: str) -> bool:
    """`self.n + k`, `(self.n + 1) % size`: a new value computed from the old one."""
    if isinstance(value, ast.BinOp):
        return _arithmetic_of(value.left, attr) or _arithmetic_of(value.right, attr)
    return _self_attr(value) == attr


def _conversion(value: ast.AST, attr: str) -> bool:
    """`self.x.to(...)`, `self.x.to(...) if self.x is not None else None`: `self.x` converted."""
    if isinstance(value, ast.IfExp):
        return all(
            _conversion(part, attr) or _constant(part) or _self_attr(part) == attr
            for part in (value.body, value.orelse)
        )
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.value.__class__ is ast.Attribute
        and _self_attr(value.func.value) == attr
    )


def _how(how: str, value: ast.AST | None) -> str:
    if how in _PUNCTUATION:
        return f"`{how}`"
    if value is not None and _constant(value):
        return f"`= {ast.unparse(value)}`"
    return "an assignment"


def _targets(statement: ast.stmt) -> Iterator[tuple[str, ast.AST, ast.AST | None, str]]:
    """(attribute, target, value or None, how) for each store into `self.<attribute>`."""
    cls = statement.__class__
    if cls is ast.Assign:
        for target in statement.targets:  # type: ignore[attr-defined]
            yield from _split(target, statement.value)  # type: ignore[attr-defined]
    elif cls is ast.AugAssign:
        attr = _self_attr(statement.target) if statement.target.__class__ is ast.Attribute else None  # type: ignore[attr-defined]
        if attr is not None:
            symbol = _AUG.get(statement.op.__class__, "op=")  # type: ignore[attr-defined]
            yield attr, statement.target, statement.value, symbol  # type: ignore[attr-defined]
    elif cls is ast.AnnAssign and statement.value is not None:  # type: ignore[attr-defined]
        yield from _split(statement.target, statement.value)  # type: ignore[attr-defined]


def _split(
    target: ast.AST, value: ast.AST | None
) -> Iterator[tuple[str, ast.AST, ast.AST | None, str]]:
    if isinstance(target, ast.Attribute):
        attr = _self_attr(target)
        if attr is not None:
            yield attr, target, value, "="
    elif isinstance(target, ast.Subscript):
        # `self.flags[i] = True`: a Python value in a container Dynamo guards on.
        attr = _self_attr(target.value)
        if attr is not None:
            yield attr, target, value if value is not None and _constant(value) else None, "item"
    elif isinstance(target, ast.Tuple | ast.List):
        parts = (
            value.elts
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts)
            else None
        )
        for i, element in enumerate(target.elts):
            if isinstance(element, ast.Starred):
                element = element.value
            yield from _split(element, parts[i] if parts is not None else None)


_AUG = {
    ast.Add: "+=",
    ast.Sub: "-=",
    ast.Mult: "*=",
    ast.Div: "/=",
    ast.FloorDiv: "//=",
    ast.BitOr: "|=",
    ast.BitAnd: "&=",
}


def _statements(
    body: list[ast.stmt], tests: tuple[ast.expr, ...], eager: bool
) -> Iterator[tuple[ast.stmt, tuple[ast.expr, ...], bool]]:
    """Every statement of a body (not of nested definitions), with the tests of the `if`s and
    `while`s around it, and whether only eager code runs it (`if not is_compiling():`)."""
    for statement in body:
        yield statement, tests, eager
        cls = statement.__class__
        if cls is ast.If:
            compiling = _compiling(statement.test)  # type: ignore[attr-defined]
            inner = (*tests, statement.test)  # type: ignore[attr-defined]
            yield from _statements(statement.body, inner, eager or compiling == -1)  # type: ignore[attr-defined]
            yield from _statements(statement.orelse, inner, eager or compiling == 1)  # type: ignore[attr-defined]
        elif cls is ast.While:
            yield from _statements(statement.body, (*tests, statement.test), eager)  # type: ignore[attr-defined]
            yield from _statements(statement.orelse, tests, eager)  # type: ignore[attr-defined]
        elif cls in (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith):
            yield from _statements(statement.body, tests, eager)  # type: ignore[attr-defined]
            yield from _statements(getattr(statement, "orelse", []), tests, eager)
        elif cls is ast.Try or cls.__name__ == "TryStar":
            for part in (statement.body, statement.orelse, statement.finalbody):  # type: ignore[attr-defined]
                yield from _statements(part, tests, eager)
            for handler in statement.handlers:  # type: ignore[attr-defined]
                yield from _statements(handler.body, tests, eager)
        elif cls is ast.Match:
            for case in statement.cases:  # type: ignore[attr-defined]
                yield from _statements(case.body, tests, eager)


def _headers(statement: ast.stmt) -> tuple[tuple[ast.AST, str | None], ...]:
    """What a statement evaluates itself (a compound statement's test, not its body)."""
    cls = statement.__class__
    if cls is ast.If or cls is ast.While:
        return ((statement.test, _KINDS[cls]),)  # type: ignore[attr-defined]
    if cls in (ast.For, ast.AsyncFor):
        return ((statement.iter, None),)  # type: ignore[attr-defined]
    if cls in (ast.With, ast.AsyncWith):
        return tuple((item.context_expr, None) for item in statement.items)  # type: ignore[attr-defined]
    if cls is ast.Match:
        return ((statement.subject, None),)  # type: ignore[attr-defined]
    if (
        cls in (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        or cls.__name__ == "TryStar"
    ):
        return ()
    return ((statement, None),)


def _compiling(test: ast.AST) -> int:
    """1 for `if is_compiling():` (any `*compiling()` call), -1 for `if not is_compiling():`, else 0."""
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        negated, test = True, test.operand
    if isinstance(test, ast.Call):
        func = test.func
        name = (
            func.attr
            if isinstance(func, ast.Attribute)
            else func.id
            if isinstance(func, ast.Name)
            else ""
        )
        if name.endswith("compiling"):
            return -1 if negated else 1
    return 0


def _reads(test: ast.AST, attr: str) -> bool:
    return attr in _self_reads(test)


def _self_reads(test: ast.AST) -> set[str]:
    return {
        a
        for node in ast.walk(test)
        if node.__class__ is ast.Attribute and (a := _self_attr(node)) is not None
    }


def _bounded(stores: list[_Store], identity: bool, mutated: dict[str, list[_Store]]) -> bool:
    """Whether the guard can take a few values only, each compiled once: an `is None` test, a
    flag or mode set to constants, state set lazily (under a test of state, or while
    initialising). Counters and values computed from the inputs are not."""
    if any(s.counter for s in stores):
        return False
    if identity:
        return True
    lazy = {a for a, others in mutated.items() if not any(o.counter for o in others)}
    return all(
        (s.value is not None and _constant(s.value)) or s.initialising or bool(s.guards & lazy)
        for s in stores
    )


def _deciding(expr: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
    """The names and `self.<attr>` reads whose values decide a test (and whether through an
    identity test such as `is None`): through `and`/`or`/`not`, comparisons and arithmetic, not
    into calls."""
    stack: list[tuple[ast.AST, bool]] = [(expr, False)]
    while stack:
        node, identity = stack.pop()
        cls = node.__class__
        if cls is ast.BoolOp:
            stack.extend((v, identity) for v in node.values)  # type: ignore[attr-defined]
        elif cls is ast.UnaryOp:
            stack.append((node.operand, identity))  # type: ignore[attr-defined]
        elif cls is ast.Compare:
            parts = (node.left, *node.comparators)  # type: ignore[attr-defined]
            if all(op.__class__ in (ast.Is, ast.IsNot) for op in node.ops):  # type: ignore[attr-defined]
                if any(
                    p.__class__ is ast.Constant for p in parts
                ):  # `x is None`, not `a is self.keys`
                    stack.extend((part, True) for part in parts)
                continue
            stack.extend((part, False) for part in parts)
        elif cls is ast.BinOp:
            stack.extend(((node.left, identity), (node.right, identity)))  # type: ignore[attr-defined]
        elif cls is ast.Name or (
            (cls is ast.Attribute or cls is ast.Subscript) and _self_attr(node) is not None
        ):
            yield node, identity


def _statement_end(function: ast.AST, node: ast.AST) -> int:
    line = node.lineno  # type: ignore[attr-defined]
    best = 0
    for statement, _, _ in _statements(function.body, (), False):  # type: ignore[attr-defined]
        if statement.lineno <= line <= (
            statement.end_lineno or statement.lineno
        ) and not isinstance(statement, ast.If | ast.While | ast.For | ast.With | ast.Try):
            best = statement.end_lineno or statement.lineno
    return best
