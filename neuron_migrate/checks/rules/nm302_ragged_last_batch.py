"""NM302: a training `DataLoader` that keeps the smaller last batch."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import SAFE, UNSAFE, Severity
from neuron_migrate.checks.rules.base import Invalid, Rule, constant, keyword

EVAL = re.compile(r"(?i).*(val|eval|test|dev|predict|infer)")
TRAIN = re.compile(r"(?i).*train")
ARGUMENTS = frozenset(
    {
        "TrainingArguments",
        "Seq2SeqTrainingArguments",
        "SFTConfig",
        "DPOConfig",
        "GRPOConfig",
        "KTOConfig",
        "ORPOConfig",
        "RewardConfig",
    }
)


class RaggedLastBatch(Rule):
    """Flags training data loaders without `drop_last=True`.

    ## What it does
    Finds `torch.utils.data.DataLoader(...)` without `drop_last=True` (unless it takes a
    `batch_sampler`, or `batch_size` is 1 or None), and `TrainingArguments` / TRL configs
    with `dataloader_drop_last=False`. Loaders that look like evaluation loaders (by the
    names of the variable or dataset: `val`, `eval`, `test`) are informational.

    ## Why
    Unless the dataset size divides by the batch size, the last batch is smaller: one more
    graph to compile, and in data parallelism ranks run different graphs at the end of each
    epoch.

    ## Example
    ```python
    loader = DataLoader(train_ds, batch_size=32, shuffle=True)
    ```

    ## Use instead
    ```python
    loader = DataLoader(train_ds, batch_size=32, shuffle=True, drop_last=True)
    ```

    ## Fix safety
    Safe with `shuffle=True`: the few samples left out change every epoch. Otherwise unsafe:
    the same samples are never seen. No fix for evaluation loaders.
    """

    code = "NM302"
    name = "ragged-last-batch"
    summary = "training `DataLoader` without `drop_last=True`"
    calls = frozenset({"DataLoader", *ARGUMENTS})
    VALID = (
        "from torch.utils.data import DataLoader\n\nloader = DataLoader(ds, batch_size=8, shuffle=True, drop_last=True)\n",
        "from torch.utils.data import DataLoader\n\nloader = DataLoader(ds, batch_sampler=sampler)\n",
        "from transformers import TrainingArguments\n\nargs = TrainingArguments('out', dataloader_drop_last=True)\n",
    )
    INVALID = (
        Invalid(
            "from torch.utils.data import DataLoader\n\ntrain_loader = DataLoader(train_ds, batch_size=8, shuffle=True)\n",
            fixed="from torch.utils.data import DataLoader\n\ntrain_loader = DataLoader(train_ds, batch_size=8, shuffle=True, drop_last=True)\n",
        ),
        Invalid(
            "import torch\n\nloader = torch.utils.data.DataLoader(ds, batch_size=8)\n",
            fixed=None,
            unsafe_fixed="import torch\n\nloader = torch.utils.data.DataLoader(ds, batch_size=8, drop_last=True)\n",
        ),
        Invalid(
            "from torch.utils.data import DataLoader\n\nval_loader = DataLoader(val_ds, batch_size=8)\n",
            severity="info",
        ),
        Invalid(
            "from transformers import TrainingArguments\n\nargs = TrainingArguments('out', dataloader_drop_last=False)\n",
            unsafe_fixed="from transformers import TrainingArguments\n\nargs = TrainingArguments('out', dataloader_drop_last=True)\n",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        qualified = self.ctx.qualify(node.func)
        if name in ARGUMENTS:
            if qualified is None or not qualified.startswith(("transformers", "trl", "optimum")):
                return
            given = keyword(node, "dataloader_drop_last")
            if given is not None and constant(given.value) is False:
                fix = self.ctx.fix(
                    self.ctx.replace(given.value, "True"), "set `dataloader_drop_last=True`", UNSAFE
                )
                self.report(
                    given,
                    "`dataloader_drop_last=False` keeps a smaller last batch: one more graph to compile",
                    fix=fix,
                )
            return
        if qualified is not None and not (
            qualified.startswith("torch.utils.data") or qualified.endswith(".DataLoader")
        ):
            return
        if keyword(node, "batch_sampler") is not None or any(k.arg is None for k in node.keywords):
            return
        batch_size = keyword(node, "batch_size")
        size_value = (
            node.args[1] if len(node.args) > 1 else batch_size.value if batch_size else None
        )
        if size_value is not None and constant(size_value) in (1, None):
            return
        drop = keyword(node, "drop_last")
        if drop is not None and constant(drop.value) is not False:
            return
        parent = self.ctx.parent()
        names = " ".join(
            filter(
                None,
                [dotted(t) for t in getattr(parent, "targets", [])]
                + [dotted(a) for a in node.args[:1]],
            )
        )
        shuffle = keyword(node, "shuffle")
        shuffled = shuffle is not None and constant(shuffle.value) is True
        if EVAL.match(names) and not TRAIN.match(names) and not shuffled:
            self.report(
                node,
                "an evaluation loader without `drop_last=True` compiles one more graph for its last batch",
                severity=Severity.INFO,
            )
            return
        ctx = self.ctx
        edit = (
            ctx.replace(drop.value, "True")
            if drop is not None
            else ctx.add_argument(node, "drop_last=True")
        )
        fix = ctx.fix(edit, "set `drop_last=True`", SAFE if shuffled else UNSAFE)
        self.report(
            node,
            "`DataLoader` without `drop_last=True` ends each epoch with a smaller batch: one more graph, and "
            "ranks out of step in data parallelism",
            fix=fix,
        )
