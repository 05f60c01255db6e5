"""NM307: a decode loop that hands a model its own growing `DynamicCache` back, call after call."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import FileContext, dotted
from neuron_migrate.checks.rules.base import Invalid, Rule, constant, keyword

CACHES = frozenset({"DynamicCache", "OffloadedCache", "QuantizedCache"})
LOOPS = (ast.For, ast.AsyncFor, ast.While)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
# `**model_kwargs` may hold a cache; `**inputs` from a tokenizer does not.
MAY_HOLD_A_CACHE = re.compile(r"(?i)[\w.]*(kwargs|cache|past|model_inputs)[\w.]*")
CACHE_CHOICES = ("past_key_values", "cache_implementation", "generation_config")
# Helpers that read a cache's length to build masks or inputs: not the model that grows it.
HELPERS = re.compile(r"(?i)\w*mask\w*|_?(create|prepare|make|build|get)_\w+")


def _fed_back(value: ast.AST) -> ast.Name | None:
    """`out.past_key_values`, `out["past_key_values"]` or `getattr(out, "past_key_values", None)`:
    the cache an earlier output returned."""
    if (isinstance(value, ast.Attribute) and value.attr == "past_key_values") or (isinstance(value, ast.Subscript) and constant(value.slice) == "past_key_values"):
        receiver = value.value
    elif (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "getattr"
        and len(value.args) >= 2
        and constant(value.args[1]) == "past_key_values"
    ):
        receiver = value.args[0]
    else:
        return None
    return receiver if isinstance(receiver, ast.Name) else None


def _growing_cache(value: ast.AST | None) -> bool:
    """`DynamicCache(...)`, `DynamicCache.from_legacy_cache(...)`, and `EncoderDecoderCache` whose
    self-attention half is one of them."""
    if not isinstance(value, ast.Call):
        return False
    name = (dotted(value.func) or "").split(".")
    if name[-1] in CACHES or (len(name) > 1 and name[-1] == "from_legacy_cache" and name[-2] in CACHES):
        return True
    if name[-1] == "EncoderDecoderCache":
        first = value.args[0] if value.args else (keyword(value, "self_attention_cache") or ast.Pass())
        return _growing_cache(getattr(first, "value", first))
    return False


def _omits_the_cache(call: ast.Call) -> bool:
    """A model call that passes no cache (nor the choice of one), so the model makes its own."""
    for kw in call.keywords:
        if kw.arg in CACHE_CHOICES and constant(kw.value) is not None:
            return False
        if kw.arg == "use_cache" and constant(kw.value) is False:
            return False
        if kw.arg is None and MAY_HOLD_A_CACHE.fullmatch(dotted(kw.value) or ""):
            return False
    # `past_key_values` is no model's first or second positional parameter.
    return len(call.args) <= 2 and not any(isinstance(a, ast.Starred) for a in call.args)


class DynamicCacheDecodeLoop(Rule):
    """Flags a decode loop that passes a model's growing `DynamicCache` back to it on every call.

    ## What it does
    Finds a model call in a loop whose `past_key_values=` is a dynamic cache that grows with
    every call:
    - the `past_key_values` of an earlier output (`out.past_key_values`, directly or through a
      name), where that output came from a call before the loop that passed no cache, so the
      model made a `DynamicCache` itself;
    - a name that is `None` on the first pass and the last output's `past_key_values` after;
    - a `DynamicCache(...)` (or `OffloadedCache`, `QuantizedCache`, `from_legacy_cache`) made
      before the loop.

    It does not flag the `if use_cache and past_key_values is None: past_key_values =
    DynamicCache(...)` line in a model's `forward`: `generate()` always passes its own cache,
    and a training or evaluation forward makes a fresh cache on each call, which keeps the same
    shapes (one graph). Nor a call that passes one cache to each layer of a model in turn
    (`for layer in self.layers: layer(h, past_key_values=cache)`), nor Mamba-style
    `cache_params=`, whose states have a fixed size.

    ## Why
    A `DynamicCache` grows with every call, so each decode step hands the model key/value
    tensors of a new length: a model compiled for static shapes compiles once for the prefill
    and once more for every decode step (a tiny Llama compiled with `torch.compile(fullgraph=True,
    dynamic=False)` compiles five times for a prefill and four decode steps; with a
    `StaticCache` passed from the first call, twice: the prefill and one decode shape). On
    Neuron each of those is a full graph compilation.

    ## Example
    ```python
    out = model(**inputs, use_cache=True)
    for _ in range(32):
        next_ids = out.logits[:, -1:].argmax(-1)
        out = model(input_ids=next_ids, past_key_values=out.past_key_values, use_cache=True)
    ```

    ## Use instead
    Make a fixed-size cache before the first call and pass it to every call, or let
    `generate()` do it:
    ```python
    cache = StaticCache(config=model.config, max_cache_len=1024)
    out = model(**inputs, past_key_values=cache, use_cache=True)
    model.generate(**inputs, cache_implementation="static", max_new_tokens=64)
    ```

    ## Fix safety
    No automatic fix: the cache length is the author's choice.
    """

    code = "NM307"
    name = "dynamic-cache-decode-loop"
    summary = "a decode loop that passes a model its growing `DynamicCache` (a recompile per step)"
    keywords = frozenset({"past_key_values"})
    VALID = (
        # A fixed-size cache from the first call on.
        "from transformers import StaticCache\n\ndef decode(model, ids, n):\n"
        "    cache = StaticCache(config=model.config, max_cache_len=64)\n"
        "    out = model(input_ids=ids, past_key_values=cache, use_cache=True)\n"
        "    for _ in range(n):\n        ids = out.logits[:, -1:].argmax(-1)\n"
        "        out = model(input_ids=ids, past_key_values=out.past_key_values, use_cache=True)\n    return out\n",
        # A model's own forward: a cache made when none is passed, handed to each layer once.
        "from transformers import DynamicCache\n\nclass Model:\n"
        "    def forward(self, input_ids, past_key_values=None, use_cache=True):\n"
        "        if use_cache and past_key_values is None:\n"
        "            past_key_values = DynamicCache(config=self.config)\n"
        "        hidden = self.embed(input_ids)\n        for layer in self.layers:\n"
        "            hidden = layer(hidden, past_key_values=past_key_values)\n        return hidden\n",
        # Mamba-style state: a fixed size, whatever the number of tokens.
        "import torch\n\ndef decode(model, ids, n):\n    out = model(input_ids=ids, use_cache=True)\n"
        "    for _ in range(n):\n        ids = out.logits[:, -1:].argmax(-1)\n"
        "        out = model(input_ids=ids, cache_params=out.cache_params, use_cache=True)\n    return out\n",
        # One call, no loop; and a fresh cache for each batch.
        "from transformers import DynamicCache\n\ndef score(model, loader):\n    for batch in loader:\n"
        "        cache = DynamicCache()\n        yield model(**batch, past_key_values=cache).logits\n",
        # A recurrent model's own forward runs its blocks several times over the cache it was given
        # or made; a static cache on another branch; a mask helper that reads the cache's length.
        "from transformers import DynamicCache\n\nclass Model:\n"
        "    def forward(self, hidden, past_key_values=None, use_cache=True):\n"
        "        if use_cache and past_key_values is None:\n            past_key_values = DynamicCache(config=self.config)\n"
        "        for cycle in range(self.cycles):\n"
        "            hidden = self.block(hidden, past_key_values=past_key_values, offset=cycle)\n        return hidden\n",
        "from transformers import DynamicCache, StaticCache\n\ndef run(model, ids, static, n):\n    if static:\n"
        "        cache = StaticCache(config=model.config, max_cache_len=n)\n    else:\n        cache = DynamicCache()\n"
        "    for _ in range(n):\n        ids = model(ids, past_key_values=cache).logits.argmax(-1)\n",
        "from transformers import DynamicCache\n\ndef run(model, ids, n):\n    cache = DynamicCache()\n"
        "    for _ in range(n):\n        mask = create_causal_mask(config=model.config, past_key_values=cache)\n",
        # The first call's cache comes in through `**generate_kwargs`, which may hold a static one.
        "import torch\n\ndef decode(model, ids, generate_kwargs):\n    out = model(ids, **generate_kwargs)\n"
        "    while True:\n        out = model(out.logits.argmax(-1), past_key_values=out.past_key_values)\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\n\ndef greedy(model, inputs, steps):\n    out = model(**inputs, use_cache=True)\n"
            "    for _ in range(steps):\n        next_ids = out.logits[:, -1:].argmax(-1)\n"
            "        out = model(input_ids=next_ids, past_key_values=out.past_key_values, use_cache=True)\n"
            "    return out\n",
            line=8,
            severity="warning",
            message="the call at line 5 passed no cache",
        ),
        Invalid(
            "import torch\n\n\ndef greedy(model, ids, steps):\n    past = None\n    for _ in range(steps):\n"
            "        out = model(input_ids=ids, past_key_values=past, use_cache=True)\n"
            "        past = out.past_key_values\n        ids = out.logits[:, -1:].argmax(-1)\n    return ids\n",
            line=7,
            message="`None` on the first pass",
        ),
        Invalid(
            "from transformers import DynamicCache\n\ncache = DynamicCache()\nids = prompt\n"
            "while ids[0, -1] != eos:\n    logits = model(ids, past_key_values=cache).logits\n"
            "    ids = logits[:, -1:].argmax(-1)\n",
            line=6,
            message="the `DynamicCache` made at line 3",
        ),
        Invalid(
            "import torch\n\n\ndef greedy(model, inputs, steps):\n    with torch.no_grad():\n"
            "        outputs = model(**inputs)\n        for _ in range(steps):\n"
            "            past_key_values = outputs['past_key_values']\n"
            "            outputs = model(outputs.logits[:, -1:].argmax(-1), past_key_values=past_key_values)\n",
            line=9,
            message="the call at line 6 passed no cache",
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.assignments: dict[tuple[int, str], list[tuple[int, ast.expr]]] = {}

    def visit_keyword(self, call: ast.Call, kw: ast.keyword) -> None:
        loop = self._loop()
        if loop is None or self._bound_by(loop, call.func):
            return  # one call per layer (`for layer in self.layers`), not one per step
        if HELPERS.fullmatch((dotted(call.func) or "").rsplit(".", 1)[-1]):
            return
        scope: ast.AST = self.ctx.functions[-1] if self.ctx.functions else self.ctx.tree
        why = self._growing(kw.value, loop, scope)
        if why is None:
            return
        shown = self.ctx.source(call.func)
        if len(shown) > 40 or "\n" in shown:
            shown = (dotted(call.func) or "the model").rsplit(".", 1)[-1]
        self.report(
            call,
            f"`{shown}(...)` in a loop gets {why}: the cache grows with every call, so a model compiled for "
            "static shapes compiles again at every step (one graph per cache length); make "
            "a `StaticCache(config=..., max_cache_len=...)` before the first call and pass it to every call",
        )

    # -- where the cache comes from ------------------------------------------------------------
    def _growing(self, value: ast.AST, loop: ast.stmt, scope: ast.AST) -> str | None:
        receiver = _fed_back(value)
        if receiver is not None:
            return self._made_by_the_model(receiver, loop, scope)
        if not isinstance(value, ast.Name):
            return None
        start, end = loop.lineno, loop.end_lineno or loop.lineno
        assigned = self._assigned(scope, value.id)
        before = [(line, v) for line, v in assigned if line < start]
        inside = [(line, v) for line, v in assigned if start <= line <= end]
        if inside:
            receivers = [_fed_back(v) for _, v in inside]
            if not all(receivers):
                return None
            if not before:  # first set in the loop, from an output made before it
                return self._made_by_the_model(receivers[0], loop, scope)  # type: ignore[arg-type]
            line, first = before[-1]
            if constant(first) is None:
                return (
                    f"`past_key_values={value.id}`, `None` on the first pass (line {line}), so the model "
                    "makes a `DynamicCache` and gets it back on the next"
                )
            fed = _fed_back(first)
            return self._made_by_the_model(fed, loop, scope) if fed is not None else None
        # Made here, not the function's own `past_key_values=None` filled in when none is passed;
        # and the only cache the code makes (no `StaticCache` on another branch).
        if before and all(_growing_cache(v) for _, v in before) and not self._parameter(scope, value.id):
            return f"the `DynamicCache` made at line {before[-1][0]}"
        return None

    @staticmethod
    def _parameter(scope: ast.AST, name: str) -> bool:
        arguments = getattr(scope, "args", None)
        if not isinstance(arguments, ast.arguments):
            return False
        every = (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
        return any(a.arg == name for a in every)

    def _made_by_the_model(self, receiver: ast.Name, loop: ast.stmt, scope: ast.AST) -> str | None:
        """`out` was last set before the loop by a call that passed no cache."""
        before = [(line, v) for line, v in self._assigned(scope, receiver.id) if line < loop.lineno]
        if not before:
            return None
        line, made = before[-1]
        if not isinstance(made, ast.Call) or not _omits_the_cache(made):
            return None
        return (
            f"the `past_key_values` of `{receiver.id}`, a `DynamicCache` the model made because the call "
            f"at line {line} passed no cache"
        )

    # -- the code around the call --------------------------------------------------------------
    def _loop(self) -> ast.stmt | None:
        """The innermost loop whose body holds the call (within the same function)."""
        stack = self.ctx.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            if isinstance(node, SCOPES):
                return None
            if isinstance(node, LOOPS) and any(s is stack[i + 1] for s in (*node.body, *node.orelse)):
                return node
        return None

    @staticmethod
    def _bound_by(loop: ast.stmt, func: ast.expr) -> bool:
        """The callee is (or is indexed by) the loop's variable: `layer(...)`, `self.layers[i](...)`."""
        if not isinstance(loop, ast.For | ast.AsyncFor):
            return False
        targets = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        return any(isinstance(n, ast.Name) and n.id in targets for n in ast.walk(func))

    def _assigned(self, scope: ast.AST, name: str) -> list[tuple[int, ast.expr]]:
        """(line, value) of each `name = value` in the scope, outside nested definitions, in order."""
        key = (id(scope), name)
        found = self.assignments.get(key)
        if found is None:
            found = []
            stack = list(getattr(scope, "body", ()))
            while stack:
                node = stack.pop()
                if isinstance(node, SCOPES):
                    continue
                value: ast.expr | None = None
                if isinstance(node, ast.Assign):
                    if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                        value = node.value
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                    value = node.value
                if value is not None:
                    found.append((node.lineno, value))
                for field in ("body", "orelse", "finalbody", "handlers"):
                    stack.extend(getattr(node, field, ()))
                if isinstance(node, ast.Match):
                    for case in node.cases:
                        stack.extend(case.body)
            found.sort(key=lambda item: item[0])
            self.assignments[key] = found
        return found
