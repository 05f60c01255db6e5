"""Where the default dtype that replaces `XLA_USE_BF16=1` does not reach: loaded models, resets.

Under `XLA_USE_BF16=1` every float32 tensor was stored as bf16 on the device, whatever built it.
`torch.set_default_dtype(torch.bfloat16)` only decides the dtype of tensors and modules created
afterwards, and not even all of them: transformers' `from_pretrained` keeps the checkpoint's dtype
and `from_config` the dtype its config records (a config read with `from_pretrained` records the
checkpoint's), both float32 for a float32 checkpoint; a later `torch.set_default_dtype(torch.float32)`
undoes the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from neuron_migrate.core.oldstack import PRECISION
from neuron_migrate.rewrite.codemods.base import (
    append_arg,
    code_of,
    expr,
    keyword_arg,
    string_value,
)

if TYPE_CHECKING:
    from neuron_migrate.rewrite.codemods.base import Codemod

LOADERS = ("from_pretrained", "from_config")
DTYPE_KEYWORDS = ("dtype", "torch_dtype")
# What `from_pretrained` loads without parameters to cast.
NOT_A_MODEL = re.compile(r"(Tokenizer(Fast)?|Config|Processor|FeatureExtractor|Scheduler|Dataset)$")
TRANSFORMERS_MODEL = re.compile(r"^(AutoModel\w*|\w*(Model|For[A-Z]\w*|LMHeadModel))$")
RESETS = ("torch.set_default_dtype", "torch.set_default_tensor_type")
FULL_PRECISION = re.compile(
    r"^(torch\.)?(float32|float|float64|double|(cuda\.)?(Float|Double)Tensor)$"
)


class PrecisionPolicy:
    """The precision policy of one file, and the calls it must reach or that would undo it."""

    def __init__(self, codemod: Codemod) -> None:
        self.codemod = codemod
        self.variable: str | None = None  # the switch this program turned on
        self.unconditional = False  # set at module level, so in force wherever a model loads

    @property
    def dtype(self) -> str | None:
        return PRECISION[self.variable] if self.variable else None

    def start(self, switches: Sequence[tuple[str, bool]]) -> None:
        if switches:
            self.variable = switches[0][0]
            self.unconditional = any(unconditional for _, unconditional in switches)

    def note_policy(self, variable: str) -> None:
        dtype = PRECISION[variable]
        self.codemod.ctx.note(
            self.codemod.code,
            f"precision policy changed: {variable}=1 made XLA store float32 tensors as {dtype} on the "
            f"device; the migrated code calls `torch.set_default_dtype(torch.{dtype})` instead, so modules "
            f"built in the code and new float tensors are {dtype} on every device, the host included, while "
            "tensors made from numpy keep numpy's dtype until cast, models loaded with `from_pretrained` "
            "keep their checkpoint's dtype and `from_config` the dtype its config records, unless given "
            f"`dtype=torch.{dtype}` (added where this file loads one while the policy is in force; TODOs "
            "mark the others)",
        )

    def leave_call(self, call: cst.Call) -> cst.Call:
        if self.dtype is None or not isinstance(call.func, cst.Attribute):
            return call
        if call.func.attr.value in LOADERS:
            return self._loaded_model(call, call.func)
        if (
            self.codemod.qualify(call.func) in RESETS
            and call.args
            and _full_precision(call.args[0].value)
        ):
            self.codemod.todo(
                f"this resets the default dtype to `{code_of(call.args[0].value)}` and undoes the "
                f"`torch.set_default_dtype(torch.{self.dtype})` that replaced `{self.variable}=1` (under XLA the "
                "variable kept the device in reduced precision whatever the default was): remove it, or cast "
                "the model explicitly"
            )
        return call

    def _loaded_model(self, call: cst.Call, func: cst.Attribute) -> cst.Call:
        owner = code_of(func.value).rsplit(".", 1)[-1]
        if NOT_A_MODEL.search(owner):
            return call
        dtype = self.dtype
        given = next(
            (a for a in call.args if a.keyword is not None and a.keyword.value in DTYPE_KEYWORDS),
            None,
        )
        if given is not None:
            if (
                self.codemod.qualify(given.value) != f"torch.{dtype}"
                and string_value(given.value) != dtype
            ):
                self._todo(
                    f"it asks for `{code_of(given.value)}` here, while `{self.variable}=1` ran it in {dtype}: pass `dtype=torch.{dtype}` to keep that"
                )
            return call
        qualified = self.codemod.qualify(func.value) or ""
        transformers = qualified.startswith("transformers.") and TRANSFORMERS_MODEL.match(owner)
        if not transformers or not self.unconditional or any(a.star for a in call.args):
            self._todo(
                f"pass the dtype explicitly (`dtype=torch.{dtype}` where the policy applies, `torch_dtype=` for diffusers) or cast the model with `.to(torch.{dtype})`"
            )
            return call
        torch = self.codemod.ctx.torch()
        self.codemod.changed(
            f"`{owner}.{func.attr.value}(...)` -> `dtype=torch.{dtype}` (the default dtype does not reach it)"
        )
        return call.with_changes(
            args=append_arg(call, call.args, keyword_arg("dtype", expr(f"{torch}.{dtype}")))
        )

    def _todo(self, advice: str) -> None:
        self.codemod.todo(
            f"`{self.variable}=1` made this model {self.dtype} on the device, but the "
            "`torch.set_default_dtype` that replaces it does not reach `from_pretrained`/`from_config` "
            f"(they keep the dtype of the checkpoint or config): {advice}"
        )


def _full_precision(node: cst.BaseExpression) -> bool:
    text = string_value(node) if isinstance(node, cst.SimpleString) else code_of(node)
    return bool(text and FULL_PRECISION.match(text))
