"""NM204: command-line flags of transformers 4's training arguments, passed on in strings."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.rewrite.codemods.base import (
    MigrationContext,
    dotted_name,
    string_value,
)
from neuron_migrate.rewrite.codemods.told import StringValues
from neuron_migrate.rewrite.codemods.upgrade.table import TRAINING_KEYWORDS, Keyword

# The fields `HfArgumentParser` made flags of (`--tpu_num_cores`, or `--tpu-num-cores`) that
# transformers 5 has no more; a kept keyword (`optim`) is still a flag. TRL's renamed SFT fields
# are not among them: a script's own arguments often have their names (`--max_seq_length` of the
# language-modeling examples).
_GONE: dict[str, Keyword] = {k.old: k for k in TRAINING_KEYWORDS if not k.kept}
# What the keywords translated in code (`table.Keyword.rule`) become on a command line.
_RULES = {
    "ratio": "pass the ratio as `--warmup_steps` (a number below 1 is a ratio there)",
    "environment": "set the `TENSORBOARD_LOGGING_DIR` variable instead",
}
# A TODO is one line a reviewer reads at a glance: a reason that does not fit is left out.
_ROOM = 130
_SHORT = "drop it or pass its replacement"
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z_][\w-]*)")
MARKERS = tuple(f"--{spelling}" for old in _GONE for spelling in {old, old.replace("_", "-")})


def gone_flags(text: str) -> dict[str, str]:
    """Each flag in `text` (a word, or a command line) that transformers 5's argument parser
    stops on, in the order they come, with what to do about it."""
    found: dict[str, str] = {}
    for match in _FLAG.finditer(text):
        keyword = _GONE.get(match.group(1).replace("-", "_"))
        if keyword is None:
            continue
        flag = match.group()
        if keyword.new is not None and not keyword.rule:
            message = f"`{flag}` is `--{keyword.new}` in transformers 5, whose parser stops on the old flag"
        else:
            what = "drop it" if keyword.drop else _RULES.get(keyword.rule) or keyword.why
            message = f"`{flag}`: no such flag in transformers 5 (its parser stops on it); {what}"
            if len(message) > _ROOM:
                message = f"`{flag}`: no such flag in transformers 5 (its parser stops on it); {_SHORT}"
        found.setdefault(flag, message)
    return found


class UpgradeFlags(StringValues):
    """Flags transformers-4 training flags that a script passes on to another in strings.

    ## What it does
    A string that holds a flag of transformers 4's `TrainingArguments` that transformers 5
    removed (`"--tpu_num_cores"`, `"--evaluation_strategy"`,
    in a list of arguments or a whole command line) gets a TODO on its statement that names the
    flag and what replaced it. A flag the file defines itself (`parser.add_argument(...)`) is its
    own, and stays.

    ## Why
    The keywords of a call are upgraded where they are written (NM201), but a flag in a string
    reaches the parser of another script: `HfArgumentParser` stops on a flag it does not know,
    so a launcher that appends `--tpu_num_cores 8` stops every script it starts.

    ## Example
    ```python
    sys.argv = [script, *args, "--tpu_num_cores", str(cores)]
    ```

    ## Use instead
    ```python
    sys.argv = [script, *args]  # torchrun's --nproc_per_node sets the number of processes
    ```

    ## Fix safety
    No fix: a TODO only. Which parser reads the string is not known here.
    """

    code = "NM204"
    name = "upgrade-flags"
    summary = "transformers-4 training flags passed on in strings -> TODO"
    markers = MARKERS
    runs_alone = True

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        # Inside `add_argument(...)` (a flag of the file's own parser) or a comparison (a flag
        # looked for, not passed on).
        self._not_passed = 0

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        self._not_passed += (dotted_name(node.func) or "").endswith("add_argument")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self._not_passed -= (dotted_name(original_node.func) or "").endswith("add_argument")
        return super().leave_Call(original_node, updated_node)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        self._not_passed += 1

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison) -> cst.BaseExpression:
        self._not_passed -= 1
        return updated_node

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        value = string_value(original_node)
        if value is not None:
            self._passed_on(value)
        return updated_node

    def leave_FormattedString(self, original_node: cst.FormattedString, updated_node: cst.FormattedString) -> cst.FormattedString:
        self._passed_on("".join(p.value for p in original_node.parts if isinstance(p, cst.FormattedStringText)))
        return updated_node

    def _passed_on(self, text: str) -> None:
        if not (self._not_passed or self.told):
            for message in gone_flags(text).values():
                self.todo(message)
