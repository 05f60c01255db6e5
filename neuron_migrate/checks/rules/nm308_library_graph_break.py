"""NM308: a model set-up that sends every compiled step through a known graph break in transformers."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import FileContext
from neuron_migrate.checks.library_hazards import (
    DYNAMIC_ROPE,
    GRADIENT_CHECKPOINTING,
    LOSS_TYPE,
    LibraryHazard,
)
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, constant

COMPILES = re.compile(r"\bcompile\(|\btorch_compile\s*=\s*True")
SETS_LOSS_TYPE = re.compile(r"\bloss_type\b\s*=(?!=)")  # `model.loss_type = ...`, `loss_type=...`
LABELS = re.compile(r"\blabels\b|Trainer\(")
# transformers' Trainer sets `model.config.use_cache = args.use_cache` (False by default).
USE_CACHE_OFF = re.compile(r"\buse_cache\b\s*=\s*False|Trainer\(")
CHECKPOINTING = frozenset({"gradient_checkpointing_enable", "activation_checkpointing_enable"})
# Hub ids of the architectures whose classes are in `LOSS_TYPE.classes`, loaded through the
# `AutoModelForCausalLM` that picks those classes.
LOSS_TYPE_IDS = re.compile(r"(?:[\w.-]+/)?(?:distil)?(?:gpt2|openai-gpt|ctrl|gpt-sw3)(?:-[\w.]+)?")


def _library_message(opening: str, hazard: LibraryHazard) -> str:
    return f"{opening}: {hazard.what} (`{hazard.symbol}`, {hazard.where}); {hazard.fix}"


class LibraryGraphBreak(Rule):
    """Flags a model set-up that sends every compiled step through a graph break inside transformers.

    ## What it does
    In a file that compiles (`torch.compile`, `model.compile`, `torch_compile=True`), finds the
    user's call that chooses a path through transformers on which each compiled step breaks the
    graph, as measured on tiny models (the table in `neuron_migrate/checks/library_hazards.py`,
    checked by `benchmarks/check/library_hazards.py`):
    - a model of a class whose name gives transformers no `loss_type` (`GPT2LMHeadModel`,
      `BertLMHeadModel`, ..., or `AutoModelForCausalLM` with a GPT-2, GPT, CTRL or GPT-SW3 id),
      in a file that passes `labels`: `model.loss_function` warns once per process through
      `logger.warning_once`, which Dynamo cannot trace;
    - `model.gradient_checkpointing_enable()` (or `activation_checkpointing_enable()`) with
      `use_cache` left at its default and no `Trainer`, which turns it off itself: the forward
      warns that `use_cache=True` is incompatible with gradient checkpointing;
    - `rope_type="dynamic"` in a configuration: the rotary embedding compares the largest
      position id with its cached length on every call.

    ## Why
    A graph break splits each compiled step into graphs run one after another with eager code
    between them (a GPT-2 training step: 2 graphs per step instead of 1; a Llama forward with
    dynamic RoPE: 6). On Neuron each graph is a separate compilation and launch, and
    `fullgraph=True` fails outright. The break is in the library, so it is only fixed where the
    model is set up.

    ## Example
    ```python
    model = GPT2LMHeadModel.from_pretrained("gpt2")
    model.gradient_checkpointing_enable()
    step = torch.compile(model, backend="neuron", dynamic=False)
    loss = step(input_ids=ids, labels=ids).loss
    ```

    ## Use instead
    ```python
    model = GPT2LMHeadModel.from_pretrained("gpt2")
    model.loss_type = "ForCausalLM"
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    step = torch.compile(model, backend="neuron", dynamic=False)
    ```
    For RoPE, a static rope type (`"linear"`, `"yarn"`, or `"default"` with a long enough
    `max_position_embeddings`).

    ## Fix safety
    No automatic fix: the line to add belongs after the model is loaded, and a rope type changes
    the model's numerics beyond its trained length.
    """

    code = "NM308"
    name = "library-graph-break"
    summary = "a model set-up that sends every compiled step through a graph break in transformers"
    # The quoted forms only: "dynamic" alone is in every file that names a `DynamicCache`.
    requires = (*LOSS_TYPE.classes, "AutoModelForCausalLM", "checkpointing_enable", "'dynamic'", '"dynamic"')
    calls = frozenset({*CHECKPOINTING, "from_pretrained", *LOSS_TYPE.classes})
    keywords = frozenset({"rope_type"})
    nodes = (ast.Dict,)
    VALID = (
        # Not compiled.
        "from transformers import GPT2LMHeadModel\nmodel = GPT2LMHeadModel.from_pretrained('gpt2')\n"
        "loss = model(input_ids=ids, labels=ids).loss\n",
        # `loss_type` set; `use_cache` turned off.
        "import torch\nfrom transformers import GPT2LMHeadModel\n"
        "model = GPT2LMHeadModel.from_pretrained('gpt2')\nmodel.loss_type = 'ForCausalLM'\n"
        "model.gradient_checkpointing_enable()\nmodel.config.use_cache = False\n"
        "step = torch.compile(model, backend='neuron', dynamic=False)\nloss = step(input_ids=ids, labels=ids).loss\n",
        # A class that has a `loss_type`; a Trainer, which turns `use_cache` off itself.
        "import torch\nfrom transformers import LlamaForCausalLM, Trainer, TrainingArguments\n"
        "model = LlamaForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B')\n"
        "model.gradient_checkpointing_enable()\n"
        "trainer = Trainer(model=model, args=TrainingArguments('out', torch_compile=True))\n",
        # A static rope type.
        "import torch\nfrom transformers import LlamaConfig\n"
        "config = LlamaConfig(rope_parameters={'rope_type': 'linear', 'factor': 2.0})\n"
        "model = torch.compile(LlamaForCausalLM(config), backend='neuron', dynamic=False)\n",
        # The library's own entry points call each other on `self`.
        "import torch\nclass Model:\n    def enable(self):\n        self.activation_checkpointing_enable()\n"
        "    def compiled(self):\n        return torch.compile(self)\n",
        # Inference only: no labels, so no loss.
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        "model = torch.compile(AutoModelForCausalLM.from_pretrained('gpt2'), dynamic=False)\nout = model(input_ids=ids)\n",
    )
    INVALID = (
        Invalid(
            "import torch\nfrom transformers import GPT2LMHeadModel\n"
            "model = GPT2LMHeadModel.from_pretrained('gpt2')\n"
            "step = torch.compile(model, backend='neuron', dynamic=False)\nloss = step(input_ids=ids, labels=ids).loss\n",
            line=3,
            severity="warning",
            message="transformers/modeling_utils.py:4769",
        ),
        Invalid(
            "import torch\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained('openai-community/gpt2')\n"
            "model.compile(backend='neuron', dynamic=False)\nloss = model(**batch, labels=labels).loss\n",
            line=3,
            message='set `model.loss_type = "ForCausalLM"`',
        ),
        Invalid(
            "import torch\nfrom transformers import LlamaForCausalLM\n"
            "model = LlamaForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B')\n"
            "model.gradient_checkpointing_enable()\n"
            "step = torch.compile(model, backend='neuron', dynamic=False)\nstep(input_ids=ids, labels=ids).loss.backward()\n",
            line=4,
            message="`model.config.use_cache = False`",
        ),
        Invalid(
            "import torch\nfrom transformers import LlamaConfig, LlamaForCausalLM\n"
            "config = LlamaConfig(rope_parameters={'rope_type': 'dynamic', 'factor': 2.0})\n"
            "model = torch.compile(LlamaForCausalLM(config), backend='neuron', dynamic=False)\n",
            line=3,
            message="transformers/modeling_rope_utils.py:101",
        ),
        Invalid(
            "import torch\nfrom transformers import AutoConfig\n"
            "config = AutoConfig.from_pretrained('meta-llama/Llama-3.2-1B', rope_type='dynamic')\n"
            "model = torch.compile(AutoModelForCausalLM.from_config(config), dynamic=False)\n",
            line=3,
        ),
    )
    CONFIRM = Confirm(
        bad=(
            "import torch\nfrom transformers import GPT2Config, GPT2LMHeadModel\n\n"
            "torch.manual_seed(0)\nmodel = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,"
            " n_positions=32, bos_token_id=0, eos_token_id=0))\n\n"
            "def forward(ids):\n    return model(input_ids=ids, labels=ids).loss\n\n"
            "step = torch.compile(forward, backend='neuron', dynamic=False)\n"
        ),
        good=(
            "import torch\nfrom transformers import GPT2Config, GPT2LMHeadModel\n\n"
            "torch.manual_seed(0)\nmodel = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,"
            " n_positions=32, bos_token_id=0, eos_token_id=0))\nmodel.loss_type = 'ForCausalLM'\n\n"
            "def forward(ids):\n    return model(input_ids=ids, labels=ids).loss\n\n"
            "step = torch.compile(forward, backend='neuron', dynamic=False)\n"
        ),
        inputs="torch.randint(0, 64, (2, 8))",
        fullgraph="unsupported",
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.compiled = COMPILES.search(ctx.text) is not None

    def visit_call(self, node: ast.Call, name: str) -> None:
        if not self.compiled:
            return
        text = self.ctx.text
        if name in CHECKPOINTING:
            func = node.func
            on_a_model = isinstance(func, ast.Attribute) and getattr(func.value, "id", None) != "self"
            if on_a_model and not USE_CACHE_OFF.search(text):  # `self.` is the library's own
                self.report(
                    node,
                    _library_message(
                        "gradient checkpointing with `use_cache` at its default", GRADIENT_CHECKPOINTING
                    ),
                    start=self.ctx.method_start(node),
                )
            return
        if SETS_LOSS_TYPE.search(text) or not LABELS.search(text):
            return
        opening = self._without_loss_type(node, name)
        if opening is not None:
            self.report(node, _library_message(opening, LOSS_TYPE))

    def _without_loss_type(self, node: ast.Call, name: str) -> str | None:
        """How to name the model that has no `loss_type`, if this call makes one."""
        if name in LOSS_TYPE.classes:
            return f"`{name}` has no `loss_type`"  # built from a config
        func = node.func
        if name != "from_pretrained" or not isinstance(func, ast.Attribute):
            return None
        owner = (self.ctx.qualify(func.value) or "").rsplit(".", 1)[-1] or getattr(func.value, "id", "")
        if owner in LOSS_TYPE.classes:
            return f"`{owner}` has no `loss_type`"
        model_id = constant(node.args[0]) if node.args else ast.AST
        if owner == "AutoModelForCausalLM" and isinstance(model_id, str) and LOSS_TYPE_IDS.fullmatch(model_id):
            return f"`{model_id}` loads a class with no `loss_type`"
        return None

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        if self.compiled and constant(keyword.value) == "dynamic":
            self._report_rope(keyword)

    def visit(self, node: ast.AST) -> None:
        if not self.compiled or not isinstance(node, ast.Dict):
            return
        entries = {constant(k): v for k, v in zip(node.keys, node.values, strict=True) if k is not None}
        for key in ("rope_type", "type"):
            value = entries.get(key)
            if value is not None and constant(value) == "dynamic" and (key == "rope_type" or "factor" in entries):
                self._report_rope(value)

    def _report_rope(self, node: ast.AST) -> None:
        self.report(node, _library_message('`rope_type="dynamic"` in a compiled model', DYNAMIC_ROPE))
