"""NM304: `generate()` with the default dynamic KV cache, which grows every token."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import UNSAFE
from neuron_migrate.checks.rules.base import Invalid, Rule, keyword

MODEL_NAMES = re.compile(r"(?i)\w*(model|lm|llm|generator|net|policy|student|teacher|pipe)")
SETTINGS = re.compile(r"(?i)[\w.]*(kwargs|config|gen\w*|args|params|options|settings)")
GENERATE_KEYWORDS = frozenset(
    {
        "input_ids",
        "max_new_tokens",
        "max_length",
        "do_sample",
        "num_beams",
        "attention_mask",
        "inputs",
    }
)


class GenerateDynamicCache(Rule):
    """Flags `model.generate(...)` without a static cache.

    ## What it does
    Finds `generate()` calls on a model-like object (named `model`, `lm`, ..., or called with
    `max_new_tokens`, `input_ids`, ...) that pass neither `cache_implementation=` nor
    `generation_config=` (nor `**generate_kwargs`, which may hold either), in files that never
    mention `cache_implementation`.

    ## Why
    The default `DynamicCache` grows by one position per generated token: a new KV shape every
    step. transformers compiles the forward pass only for a compileable (static) cache.

    ## Example
    ```python
    out = model.generate(**inputs, max_new_tokens=64)
    ```

    ## Use instead
    ```python
    generation_config = GenerationConfig(
        cache_implementation="static", max_cache_len=1024, max_new_tokens=64,
        compile_config=CompileConfig(backend="neuron", dynamic=False, mode="default"),
    )
    out = model.generate(**inputs, generation_config=generation_config)
    ```

    ## Fix safety
    Unsafe: the fix adds `cache_implementation="static"`; the cache length and the compile
    configuration still need choosing.
    """

    code = "NM304"
    name = "generate-dynamic-cache"
    summary = "`generate()` with the default dynamic KV cache"
    calls = frozenset({"generate"})
    VALID = (
        "out = model.generate(**inputs, max_new_tokens=8, cache_implementation='static')\n",
        "out = model.generate(**inputs, generation_config=gen_config)\n",
        "model.generation_config.cache_implementation = 'static'\nout = model.generate(**inputs)\n",
        "ids = self.generate(spec)\n",
        "out = self.model.generate(**model_inputs, **generate_kwargs)\n",
    )
    INVALID = (
        Invalid(
            "out = model.generate(**inputs, max_new_tokens=64)\n",
            unsafe_fixed='out = model.generate(**inputs, max_new_tokens=64, cache_implementation="static")\n',
        ),
        Invalid("tokens = lm.generate(input_ids)\n", line=1),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute) or self.ctx.qualify(func.value) is not None:
            return
        if (
            keyword(node, "cache_implementation")
            or keyword(node, "generation_config")
            or "cache_implementation" in self.ctx.text
        ):
            return
        if any(k.arg is None and SETTINGS.fullmatch(dotted(k.value) or "") for k in node.keywords):
            return  # `**generate_kwargs` may carry `cache_implementation`
        receiver = dotted(func.value) or ""
        modelish = bool(MODEL_NAMES.fullmatch(receiver.rsplit(".", 1)[-1]))
        if not modelish and not any(k.arg in GENERATE_KEYWORDS for k in node.keywords):
            return
        fix = self.ctx.fix(
            self.ctx.add_argument(node, 'cache_implementation="static"'),
            "use a static cache",
            UNSAFE,
        )
        self.report(
            node,
            "`generate()` with the default dynamic KV cache gets a new cache shape every token; use "
            '`cache_implementation="static"` with `max_cache_len` and a neuron `compile_config`',
            fix=fix,
            start=self.ctx.method_start(node),
        )
