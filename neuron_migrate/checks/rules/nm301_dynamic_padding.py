"""NM301: tokenizer and collator padding that makes the sequence length change per batch."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import SAFE, UNSAFE
from neuron_migrate.checks.rules.base import Invalid, Rule, constant, keyword

TOKENIZER_CALLEE = re.compile(
    r"(?i)\w*(tokenizer|tokeniser|tok|processor|encode_plus|batch_encode_plus|pad|apply_chat_template|__call__)"
)
TOKENIZER_KEYWORDS = frozenset(
    {"return_tensors", "truncation", "max_length", "return_attention_mask", "add_special_tokens"}
)
COLLATORS = frozenset(
    {
        "DataCollatorWithPadding",
        "DataCollatorForLanguageModeling",
        "DataCollatorForSeq2Seq",
        "DataCollatorForTokenClassification",
    }
)
BUCKET = 128


class DynamicPadding(Rule):
    """Flags padding to the longest sequence of each batch.

    ## What it does
    Finds tokenizer calls with `padding=True` or `padding="longest"` and no
    `pad_to_multiple_of`, and transformers' padding collators (`DataCollatorWithPadding`,
    `DataCollatorForLanguageModeling`, `DataCollatorForSeq2Seq`,
    `DataCollatorForTokenClassification`) without `pad_to_multiple_of` or `padding="max_length"`.

    ## Why
    Each batch gets the length of its longest sequence, so the model sees a new shape, and
    compiles a new graph, for almost every batch. Hugging Face's own example scripts warn that
    dynamic padding is "very bad for TPU"; Neuron's Trainer notes ask for `--pad_to_max_length`.

    ## Example
    ```python
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
    collator = DataCollatorWithPadding(tokenizer)
    ```

    ## Use instead
    ```python
    batch = tokenizer(texts, padding="max_length", truncation=True, max_length=512, return_tensors="pt")
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=128)
    ```

    ## Fix safety
    Safe when the call already has `max_length=`: `padding="max_length"` pads to that fixed
    length. Otherwise unsafe: `pad_to_multiple_of=128` (the bucket TRL uses on Neuron) is added,
    which changes tensor shapes code after the call may rely on.
    """

    code = "NM301"
    name = "dynamic-padding"
    summary = "padding to the longest sequence per batch (a new shape per batch)"
    keywords = frozenset({"padding"})
    calls = COLLATORS
    VALID = (
        "batch = tokenizer(texts, padding='max_length', truncation=True, max_length=512)\n",
        "batch = tokenizer(texts, padding=True, pad_to_multiple_of=128, return_tensors='pt')\n",
        "from transformers import DataCollatorWithPadding\n\ncollator = DataCollatorWithPadding(tok, pad_to_multiple_of=128)\n",
        "layer = nn.Conv2d(3, 8, 3, padding=True)\n",
    )
    INVALID = (
        Invalid(
            "batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors='pt')\n",
            fixed="batch = tokenizer(texts, padding=\"max_length\", truncation=True, max_length=512, return_tensors='pt')\n",
        ),
        Invalid(
            "enc = tok(texts, padding='longest', return_tensors='pt')\n",
            fixed=None,
            unsafe_fixed="enc = tok(texts, padding='longest', return_tensors='pt', pad_to_multiple_of=128)\n",
        ),
        Invalid(
            "from transformers import DataCollatorWithPadding\n\ncollator = DataCollatorWithPadding(tokenizer)\n",
            unsafe_fixed="from transformers import DataCollatorWithPadding\n\ncollator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=128)\n",
        ),
        Invalid(
            "from transformers import DataCollatorForLanguageModeling\n\nc = DataCollatorForLanguageModeling(tokenizer=tok, mlm=False)\n",
            line=3,
        ),
    )

    def visit_keyword(self, call: ast.Call, kw: ast.keyword) -> None:
        value = constant(kw.value)
        if value is not True and value != "longest":
            return
        if keyword(call, "pad_to_multiple_of") is not None:
            return
        callee = dotted(call.func)
        last = callee.rsplit(".", 1)[-1] if callee else None
        if not (last and TOKENIZER_CALLEE.fullmatch(last)) and not any(
            k.arg in TOKENIZER_KEYWORDS for k in call.keywords
        ):
            return
        ctx = self.ctx
        if keyword(call, "max_length") is not None:
            fix = ctx.fix(ctx.replace(kw.value, '"max_length"'), "pad to `max_length`", SAFE)
        else:
            fix = ctx.fix(
                ctx.add_argument(call, f"pad_to_multiple_of={BUCKET}"),
                f"pad to a multiple of {BUCKET}",
                UNSAFE,
            )
        self.report(
            kw,
            f"`padding={value!r}` pads each batch to its longest sequence: a new shape (and compile) per batch; "
            'use `padding="max_length"` with `max_length=`, or `pad_to_multiple_of=`',
            fix=fix,
        )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is not None and not qualified.startswith(("transformers", "trl")):
            return
        if keyword(node, "pad_to_multiple_of") is not None:
            return
        padding = keyword(node, "padding")
        if padding is not None and constant(padding.value) in ("max_length", False, "do_not_pad"):
            return
        fix = None
        if all(k.arg for k in node.keywords) and not any(
            isinstance(a, ast.Starred) for a in node.args
        ):
            fix = self.ctx.fix(
                self.ctx.add_argument(node, f"pad_to_multiple_of={BUCKET}"),
                f"pad to a multiple of {BUCKET}",
                UNSAFE,
            )
        self.report(
            node,
            f"`{name}` pads each batch to its longest sequence: a new shape (and compile) per batch; pass "
            f"`pad_to_multiple_of={BUCKET}` (or pad to a fixed length)",
            fix=fix,
        )
