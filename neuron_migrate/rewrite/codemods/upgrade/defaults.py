"""NM203: defaults that changed between the library versions, written out where a call relied on them."""

from __future__ import annotations

from typing import Any, ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Codemod, append_arg
from neuron_migrate.rewrite.codemods.optimum.support import make_arg
from neuron_migrate.rewrite.codemods.upgrade.keywords import LIBRARIES, owners
from neuron_migrate.rewrite.codemods.upgrade.table import ADAMW_UPDATE, DEFAULTS, KEYWORDS


class UpgradeDefaults(Codemod):
    """Writes out the old default where transformers 5 changed one that changes the results.

    ## What it does
    A call that leaves out a keyword whose default changed gets the old default written out:
    `from_pretrained` of a transformers model gets `dtype=torch.float32`, `TrainingArguments`
    (and TRL's configs) get `report_to="all"`, and transformers 4's `AdamW`, now torch's, gets
    its old `eps=1e-6` and `weight_decay=0.0`. A call with `**kwargs` is left alone: the keyword
    may be in there.

    ## Why
    transformers 4 loaded every model in float32; transformers 5 loads the checkpoint's own
    dtype, so a bfloat16 checkpoint now trains in bfloat16 and computes something else. torch's
    AdamW decays weights by 0.01 by default where transformers 4's did not; it also adds `eps`
    after the bias correction, which no default undoes: a TODO says so where it is built.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained(model_id)
    ```

    ## Use instead
    ```python
    model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.float32)
    ```

    ## Fix safety
    The program computes what it computed with the old versions. Drop a written-out default
    to take the new behaviour.
    """

    code = "NM203"
    name = "upgrade-defaults"
    summary = "defaults transformers 5 changed -> the old default, written out"
    markers = LIBRARIES
    runs_alone = True
    manual: ClassVar[dict[str, str]] = {}

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> Any:
        if not isinstance(updated_node.func, cst.Name | cst.Attribute) or any(a.star for a in updated_node.args):
            return updated_node
        table_owners = owners(self, original_node)
        given = {a.keyword.value for a in updated_node.args if a.keyword is not None}
        given |= {k.new for owner in table_owners for k in KEYWORDS.get(owner, ()) if k.old in given and k.new}
        positional = sum(a.keyword is None for a in updated_node.args)
        if "transformers.AdamW" in table_owners:
            self.todo(ADAMW_UPDATE)
        missing = [
            d
            for owner in table_owners
            for d in DEFAULTS.get(owner, ())
            if d.keyword not in given and (d.position is None or positional <= d.position)
        ]
        if not missing:
            return updated_node
        args = list(updated_node.args)
        for default in missing:
            value = default.old.format(torch=self.ctx.torch()) if "{torch}" in default.old else default.old
            args = append_arg(updated_node, args, make_arg(default.keyword, value))
            self.changed(f"`{default.keyword}={value}` written out: {default.why}")
        return updated_node.with_changes(args=args)
