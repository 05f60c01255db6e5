"""NM307: a `DynamicCache` made inside compiled code, whose KV shapes grow every decode step."""

from __future__ import annotations

import ast

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.rules.base import Invalid, Rule

CACHES = frozenset({"DynamicCache", "OffloadedCache", "QuantizedCache", "DynamicSlidingWindowLayer"})


class DynamicCacheInForward(Rule):
    """Flags a growing KV cache created in `forward` or in a compiled function.

    ## What it does
    Finds `DynamicCache(...)` (and `DynamicCache.from_legacy_cache(...)`, `OffloadedCache`,
    `QuantizedCache`) built inside `forward`, a function given to `torch.compile`, or what
    they call, typically `if use_cache and past_key_values is None: past_key_values =
    DynamicCache(...)`.

    ## Why
    A dynamic cache grows by one position per generated token, so every decode step hands the
    compiled `forward` key/value tensors of a new length: one compilation for the prefill and
    one more for every decode step (a tiny Llama compiled with `torch.compile(dynamic=False)`
    compiles five times for a prefill and four decode steps). Neuron compiles static shapes
    only, so each of those is a full graph compilation.

    ## Example
    ```python
    def forward(self, input_ids, past_key_values=None, use_cache=True):
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
    ```

    ## Use instead
    Create a fixed-size cache outside the compiled code and pass it in, or let `generate()` do
    it:
    ```python
    model.generate(**inputs, cache_implementation="static", max_new_tokens=64)
    cache = StaticCache(config=model.config, max_cache_len=1024)
    ```

    ## Fix safety
    No automatic fix: the cache length is the author's choice.
    """

    code = "NM307"
    name = "dynamic-cache-in-forward"
    summary = "a `DynamicCache` made in compiled code (a recompile per decode step)"
    contextual = True
    calls = frozenset({*CACHES, "from_legacy_cache"})
    VALID = (
        "from transformers import StaticCache\n\ndef forward(self, ids, past_key_values=None):\n"
        "    if past_key_values is None:\n        past_key_values = StaticCache(config=self.config, max_cache_len=64)\n"
        "    return self.model(ids, past_key_values=past_key_values)\n",
        "from transformers import DynamicCache\n\ndef run(model, ids):\n    cache = DynamicCache()\n"
        "    return model(ids, past_key_values=cache)\n",
        "def forward(self, x):\n    return self.cache.DynamicCache_count(x)\n",
    )
    INVALID = (
        Invalid(
            "from transformers import DynamicCache\n\nclass Model:\n"
            "    def forward(self, input_ids, past_key_values=None, use_cache=True):\n"
            "        if use_cache and past_key_values is None:\n"
            "            past_key_values = DynamicCache(config=self.config)\n"
            "        return self.layers(input_ids, past_key_values)\n",
            line=6,
            severity="warning",
            message="recompiles",
        ),
        Invalid(
            "from transformers import DynamicCache, EncoderDecoderCache\n\ndef forward(self, ids, past=None):\n"
            "    if past is None:\n        past = DynamicCache(config=self.config)\n"
            "    if self.cross and not isinstance(past, EncoderDecoderCache):\n"
            "        past = EncoderDecoderCache(past, DynamicCache(config=self.config))\n"
            "    return self.decoder(ids, past)\n",
            line=5,
        ),
        Invalid(
            "from transformers.cache_utils import DynamicCache\n\ndef forward(self, ids, past=None):\n"
            "    cache = DynamicCache.from_legacy_cache(past)\n    return self.decoder(ids, cache)\n",
            line=4,
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        if not self.ctx.place.compiled:
            return  # made by eager code: it decides the shapes, and the compiled code gets them
        func = node.func
        if name == "from_legacy_cache":
            if not isinstance(func, ast.Attribute) or (dotted(func.value) or "").rsplit(".", 1)[
                -1
            ] not in CACHES:
                return
            shown = f"{dotted(func.value)}.from_legacy_cache"
        else:
            qualified = self.ctx.qualify(func)
            if qualified is not None and "transformers" not in qualified and "cache" not in qualified:
                return
            shown = name
            outer = self.ctx.parent()
            if (
                isinstance(outer, ast.Call)
                and (dotted(outer.func) or "").endswith("EncoderDecoderCache")
                and (node in outer.args[1:] or any(k.value is node for k in outer.keywords if k.arg != "self_attention_cache"))
            ):
                return  # the cross-attention cache: filled once from the encoder, it never grows
        statement = self.ctx.statement()
        if statement is not None:
            if id(statement) in self.ctx.claimed:
                return  # `EncoderDecoderCache(DynamicCache(), DynamicCache())`: once
            self.ctx.claimed.add(id(statement))
        self.report(
            node,
            f"`{shown}(...)` in compiled code grows by one position per decode step: the compiled forward "
            "recompiles for every new cache length; pass a `StaticCache` "
            '(`cache_implementation="static"`) from outside',
        )
