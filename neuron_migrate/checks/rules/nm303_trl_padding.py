"""NM303: TRL settings that switch off Neuron's fixed padding or flatten batches."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, constant, keyword

CONFIGS = frozenset(
    {
        "SFTConfig",
        "DPOConfig",
        "GRPOConfig",
        "KTOConfig",
        "ORPOConfig",
        "RewardConfig",
        "CPOConfig",
        "PRMConfig",
    }
)


class TrlPadding(Rule):
    """Flags `pad_to_multiple_of=None`, `padding_free=True` and BFD packing in TRL configs.

    ## What it does
    Finds TRL `*Config(...)` calls with `pad_to_multiple_of=None`, with `padding_free=True`,
    or with `packing=True` and the default `"bfd"` packing strategy (which turns padding-free
    on).

    ## Why
    TRL's default `pad_to_multiple_of="auto"` pads to 128 on Neuron; an explicit `None` turns
    that off. Padding-free batches are flattened sequences whose total length changes per batch,
    and TRL documents them for FlashAttention 2/3 only.

    ## Example
    ```python
    config = SFTConfig(output_dir="out", pad_to_multiple_of=None, packing=True)
    ```

    ## Use instead
    ```python
    config = SFTConfig(output_dir="out", packing=True, packing_strategy="wrapped")
    ```

    ## Fix safety
    Safe for `pad_to_multiple_of=None`, which is removed: TRL's default `"auto"` resolves to
    `None` on CPU and CUDA (nothing changes there) and to 128 on Neuron, where TRL's collator
    pads every field of the batch alike. No fix for `padding_free` or packing.
    """

    code = "NM303"
    name = "trl-padding"
    summary = "TRL config turns off fixed padding or flattens batches"
    calls = CONFIGS
    VALID = (
        "from trl import SFTConfig\n\nc = SFTConfig(output_dir='o', packing=True, packing_strategy='wrapped')\n",
        "from trl import SFTConfig\n\nc = SFTConfig(output_dir='o', pad_to_multiple_of=128)\n",
    )
    INVALID = (
        Invalid(
            "from trl import SFTConfig\n\nc = SFTConfig(output_dir='o', pad_to_multiple_of=None)\n",
            fixed="from trl import SFTConfig\n\nc = SFTConfig(output_dir='o')\n",
        ),
        Invalid(
            "from trl import SFTConfig\n\nc = SFTConfig(output_dir='o', padding_free=True)\n",
            line=3,
        ),
        Invalid(
            "from trl import SFTConfig\n\nc = SFTConfig(output_dir='o', packing=True)\n", line=3
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified is None or not qualified.startswith("trl"):
            return
        pad = keyword(node, "pad_to_multiple_of")
        if pad is not None and isinstance(pad.value, ast.Constant) and pad.value.value is None:
            fix = self.ctx.fix(
                self.ctx.remove_keyword(node, pad), 'remove it (back to "auto": 128 on Neuron)'
            )
            self.report(
                pad,
                "`pad_to_multiple_of=None` turns off TRL's fixed 128 padding on Neuron: a new shape per batch",
                fix=fix,
            )
        padding_free = keyword(node, "padding_free")
        if padding_free is not None and constant(padding_free.value) is True:
            self.report(
                padding_free,
                "padding-free batches change their total length per batch (and need FlashAttention); leave it off on Neuron",
            )
            return
        packing = keyword(node, "packing")
        strategy = keyword(node, "packing_strategy")
        if (
            packing is not None
            and constant(packing.value) is True
            and (strategy is None or constant(strategy.value) in ("bfd", "bfd_split"))
        ):
            self.report(
                packing,
                'packing with the `bfd` strategy turns padding-free on: a new total length per batch; use `packing_strategy="wrapped"`',
            )
