"""NM027: strings that name an artifact or a step of the old stack."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.core.oldstack import OLD_STACK_STRINGS, old_stack_imported_in
from neuron_migrate.rewrite.codemods.base import FileFacts, string_value
from neuron_migrate.rewrite.codemods.told import StringValues


class OldStackStrings(StringValues):
    """Flags strings that name what only the old stack made or read.

    ## What it does
    A string that names a file layout, a variable or a command of the old stack
    (`"adapter_default"`, `"NEURON_EXTRACT_GRAPHS_ONLY"`, a path into optimum-neuron's sources,
    `optimum.commands.optimum_cli`) gets a TODO on its statement that says what became of it.
    So does a string that holds a program importing the old stack (a script written from a
    template, `python -c "import torch_xla ..."`), in a file or notebook of the old stack: the
    migration sees no code in it. The statement stays as it was.

    ## Why
    Such a string is not an import or a call, so nothing fails when it outlives the old stack:
    a test for `<output_dir>/adapter_default` is false from now on and skips what it guarded, a
    child run started with `NEURON_EXTRACT_GRAPHS_ONLY=1` trains for real instead of only
    extracting graphs, and a program held in a string fails when it runs. Only a person can say
    what the program should do instead.

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

    @classmethod
    def applies(cls, facts: FileFacts, text: str) -> bool:
        return super().applies(facts, text) or old_stack_imported_in(text) is not None

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        value = string_value(original_node)
        if value is not None and not self.told:
            for word, message in OLD_STACK_STRINGS.items():
                if word in value:
                    self.todo(message)
            self._program(value)
        return updated_node

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.FormattedString:
        if not self.told:
            self._program("".join(p.value for p in original_node.parts if isinstance(p, cst.FormattedStringText)))
        return updated_node

    def _program(self, text: str) -> None:
        """A TODO where `text` is a program that imports the old stack, in a file of that stack
        (a library that writes such code for its users is not one to migrate)."""
        if not (self.ctx.old_stack_file or self.ctx.path.endswith(".ipynb")):
            return
        package = old_stack_imported_in(text)
        if package is not None:
            self.todo(f"this string is a program importing `{package}`, and the migration does not look into strings: port it too")
