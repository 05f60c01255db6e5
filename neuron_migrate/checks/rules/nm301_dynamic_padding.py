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
# What the rule reports: a constant `padding=True` or `"longest"`, or a collator.
REPORTED = re.compile(r"""padding\s*=\s*(?:True|["']longest)|""" + "|".join(sorted(COLLATORS)))
# Prompt and completion padded apart and joined: padding either further would misalign them.
JOINED = """
import torch

def collate(self, prompts, completions):
    p = self.tokenizer(prompts, padding=True, padding_side="left", return_tensors="pt")
    c = self.tokenizer(completions, padding=True, padding_side="right", return_tensors="pt")
    p_ids, c_ids = p["input_ids"], c["input_ids"]
    return torch.cat((p_ids, c_ids), dim=1)
"""
# Only some fields kept, to go beside ids made elsewhere.
FILTERED = """
def prompt_inputs(self, texts, images):
    inputs = self.processing_class(images=images, text=texts, padding=True, return_tensors="pt")
    return {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
"""
# Callees that take `pad_to_multiple_of` for certain: tokenizers (a processor forwards it to its
# tokenizer only sometimes, and some collators reject it).
TOKENIZER_ONLY = re.compile(r"(?i)\w*(tokenizer|tokeniser|tok)")
CONCATENATES = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "pad_sequence"})


def reshaped_downstream(ctx, call: ast.Call) -> bool:
    """Whether what `call` returns, or a field of it, is later joined with other tensors,
    sliced, or filtered by key in the same function: padding it to another length there would
    misalign it with what it meets (`token_type_ids` beside `prompt_ids`, prompt beside
    completion), or be trimmed away again."""
    statement = ctx.statement()
    if not isinstance(statement, ast.Assign | ast.AnnAssign):
        return False
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    names = {t.id for t in targets if isinstance(t, ast.Name)}
    if not names:
        return True  # stored somewhere else: what happens to it is out of sight
    scope = ctx.functions[-1] if ctx.functions else ctx.tree
    after = statement.end_lineno or statement.lineno
    later = sorted(
        (n for n in ast.walk(scope) if isinstance(n, ast.stmt) and n.lineno > after),
        key=lambda n: n.lineno,
    )
    for node in later:
        if isinstance(node, ast.Assign) and _mentions(node.value, names):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        for part in ast.walk(node):
            if isinstance(part, ast.Call):
                callee = (dotted(part.func) or "").rsplit(".", 1)[-1]
                if callee in CONCATENATES and _mentions(part, names):
                    return True
            elif (isinstance(part, ast.Subscript) and _sliced(part.slice) and _mentions(part.value, names)) or (isinstance(part, ast.comprehension) and part.ifs and _mentions(part.iter, names)):
                return True
    return False


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _sliced(index: ast.AST) -> bool:
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return any(isinstance(p, ast.Slice) for p in parts)


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
    Safe when the call already has `max_length=` and truncation: `padding="max_length"` then
    pads every row to that length, on every device. Unsafe for a tokenizer call without
    `max_length=` and for transformers' collators: `pad_to_multiple_of=128` (the bucket TRL uses
    on Neuron) changes tensor shapes code after the call may rely on. No fix at all when the
    padded batch, or a field of it, is later joined with other tensors (`torch.cat`), sliced
    or filtered by key in the same function (padding it would misalign it with what it meets),
    for processors and other callees that may not take `pad_to_multiple_of`, and for collators
    not from transformers.
    """

    code = "NM301"
    name = "dynamic-padding"
    summary = "padding to the longest sequence per batch (a new shape per batch)"
    keywords = frozenset({"padding"})
    calls = COLLATORS
    requires_pattern = REPORTED
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
            "batch = tokenizer(texts, padding=True, max_length=512, return_tensors='pt')\n",
            fixed=None,
            message="new shape",
        ),
        Invalid(
            JOINED,
            line=5,
            fixed=None,
            unsafe_fixed=JOINED,
        ),
        Invalid(
            FILTERED,
            line=3,
            fixed=None,
            unsafe_fixed=FILTERED,
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
        fix = None
        if not reshaped_downstream(ctx, call):
            truncated = keyword(call, "truncation")
            if keyword(call, "max_length") is not None and truncated is not None and constant(
                truncated.value
            ) in (True, "longest_first", "only_first", "only_second"):
                # Every row is cut to `max_length`, so padding to it gives one shape.
                fix = ctx.fix(ctx.replace(kw.value, '"max_length"'), "pad to `max_length`", SAFE)
            elif keyword(call, "max_length") is None and last and TOKENIZER_ONLY.fullmatch(last):
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
        if (
            qualified is not None
            and qualified.startswith("transformers")
            and all(k.arg for k in node.keywords)
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and not reshaped_downstream(self.ctx, node)
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
