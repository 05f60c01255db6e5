"""NM015: code that asks whether an old-stack package is installed."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.core.oldstack import PACKAGES
from neuron_migrate.rewrite.codemods.base import (
    Frame,
    MigrationContext,
    code_of,
    dotted_name,
    string_value,
)
from neuron_migrate.rewrite.codemods.told import StringValues

PROBE_TODO = (
    "{strings} {names} {packages}, absent natively: test `torch.accelerator.is_available()` instead of {them}"
)
# Calls that import the module their first argument names: not a probe but the package itself,
# which the families' own TODOs on a string naming their package cover.
IMPORTERS = frozenset({"importlib.import_module", "import_module", "__import__"})


class PackageProbes(StringValues):
    """Flags code that asks whether an old-stack package is installed.

    ## What it does
    A string that is exactly the name of an old-stack package (`"torch_xla"`, `"torch_neuronx"`,
    `"neuronx_distributed"`, ...) gets a TODO on its statement, unless it is only told to a person
    (printed, logged, raised). The rest of the statement stays.

    ## Why
    Scripts often choose their path with `importlib.util.find_spec("torch_xla")`, a version check or
    `"torch_neuronx" in sys.modules`. After the migration the package is not installed, so such a
    probe sends the migrated code down its no-accelerator path (or refuses to run), while the code
    it guarded now runs natively. Which question the probe stood for (an accelerator? Trainium?)
    only a person can say.

    ## Example
    ```python
    HAVE_XLA = importlib.util.find_spec("torch_xla") is not None
    ```

    ## Use instead
    ```python
    HAVE_ACCELERATOR = torch.accelerator.is_available()
    ```

    ## Fix safety
    No fix: a TODO only.
    """

    code = "NM015"
    name = "package-probes"
    summary = "probes of whether an old-stack package is installed -> TODO"
    markers = tuple(f"{quote}{package}{quote}" for package in PACKAGES for quote in "\"'")
    manual: ClassVar[dict[str, str]] = {}

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self._frame: Frame | None = None  # the statement the strings below are in
        self._strings: list[str] = []
        self._imported: set[int] = set()  # strings a call imports (`importlib.import_module("x")`)

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        if node.args and (dotted_name(node.func) or "") in IMPORTERS:
            self._imported.add(id(node.args[0].value))

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        if string_value(original_node) in PACKAGES and id(original_node) not in self._imported and not self.told:
            # One TODO per statement, naming every package string in it.
            frame = self.ctx.frames[-1]
            if self._frame is not frame:
                self._frame, self._strings = frame, []
            strings = self._strings
            said = _message(strings)
            if code_of(original_node) not in strings:
                strings.append(code_of(original_node))
            if (self.code, said) in frame.todos:
                frame.todos.remove((self.code, said))
            self.todo(_message(strings))
        return updated_node


def _message(strings: list[str]) -> str:
    several = len(strings) > 1
    return PROBE_TODO.format(
        strings=", ".join(f"`{s}`" for s in strings),
        names="name" if several else "names",
        packages="old-stack packages" if several else "an old-stack package",
        them="them" if several else "it",
    )
