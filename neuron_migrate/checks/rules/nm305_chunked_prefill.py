"""NM305: chunked prefill whose last chunk length depends on the prompt length."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, constant


class ChunkedPrefillPadding(Rule):
    """Flags `prefill_chunk_size=` in files that never pad prompts to a multiple of it.

    ## What it does
    Finds `prefill_chunk_size=C` (in `GenerationConfig(...)` or `generate(...)`) when the file
    has no `pad_to_multiple_of`.

    ## Why
    The prompt is run through the compiled forward pass in chunks of C tokens; the last chunk
    has `len(prompt) % C` tokens, a new shape for almost every prompt length. Measured: prompts
    of 5, 11 and 17 tokens with `prefill_chunk_size=8` compiled 7 graphs instead of 1.

    ## Example
    ```python
    config = GenerationConfig(cache_implementation="static", prefill_chunk_size=128)
    inputs = tokenizer(prompts, return_tensors="pt", padding=True)
    ```

    ## Use instead
    ```python
    inputs = tokenizer(prompts, return_tensors="pt", padding="longest",
                       pad_to_multiple_of=128, padding_side="left")
    ```

    ## Fix safety
    No automatic fix: the padding happens where the prompts are tokenized.
    """

    code = "NM305"
    name = "chunked-prefill-padding"
    summary = "chunked prefill without prompts padded to the chunk size"
    keywords = frozenset({"prefill_chunk_size"})
    VALID = (
        "config = GenerationConfig(prefill_chunk_size=8)\nenc = tok(p, padding='longest', pad_to_multiple_of=8)\n",
        "config = GenerationConfig(prefill_chunk_size=None)\n",
    )
    INVALID = (
        Invalid(
            "config = GenerationConfig(cache_implementation='static', prefill_chunk_size=8)\n",
            line=1,
        ),
    )

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        if constant(keyword.value) is None or "pad_to_multiple_of" in self.ctx.text:
            return
        self.report(
            keyword,
            "the last prefill chunk has `len(prompt) % prefill_chunk_size` tokens: a new shape per prompt length; "
            "left-pad prompts with `pad_to_multiple_of=` the chunk size",
        )
