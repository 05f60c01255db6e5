"""NM027: strings that name an artifact or a step of the old stack."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.core.messages import MESSAGE_CALLS
from neuron_migrate.core.oldstack import OLD_STACK_STRINGS
from neuron_migrate.rewrite.codemods.base import (
    Codemod,
    MigrationContext,
    dotted_name,
    string_value,
)


class OldStackStrings(Codemod):
    """Flags strings that name what only the old stack made or read.

    ## What it does
    A string that names a file layout, a variable or a command of the old stack
    (`"adapter_default"`, `"NEURON_EXTRACT_GRAPHS_ONLY"`, a path into optimum-neuron's sources,
    `optimum.commands.optimum_cli`) gets a TODO on its statement that says what became of it.
    The statement stays as it was.

    ## Why
    Such a string is not an import or a call, so nothing fails when it outlives the old stack:
    a test for `<output_dir>/adapter_default` is false from now on and skips what it guarded, a
    child run started with `NEURON_EXTRACT_GRAPHS_ONLY=1` trains for real instead of only
    extracting graphs. Only a person can say what the program should do instead.

    ## Example
    ```python
    adapter_dir = os.path.join(args.output_dir, "adapter_default")
    ```

    ## Use instead
    ```python
    adapter_dir = args.output_dir  # PEFT saves the adapter in the output folder itself
    ```

    ## Fix safety
    No fix: a TODO only.
    """

    code = "NM027"
    name = "old-stack-strings"
    summary = "strings naming old-stack artifacts, variables or commands -> TODO"
    markers = tuple(OLD_STACK_STRINGS)
    needs_old_stack_import = False

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._told = 0  # inside a docstring or a message to a person: nothing the program does

    def visit_Expr(self, node: cst.Expr) -> None:
        self._told += isinstance(node.value, cst.SimpleString | cst.ConcatenatedString)

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr:
        self._told -= isinstance(original_node.value, cst.SimpleString | cst.ConcatenatedString)
        return updated_node

    def visit_Call(self, node: cst.Call) -> None:
        self._told += (dotted_name(node.func) or "").rpartition(".")[2] in MESSAGE_CALLS

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self._told -= (dotted_name(original_node.func) or "").rpartition(".")[2] in MESSAGE_CALLS
        return updated_node

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        value = string_value(original_node)
        if value is not None and not self._told:
            for word, message in OLD_STACK_STRINGS.items():
                if word in value:
                    self.todo(message)
        return updated_node
