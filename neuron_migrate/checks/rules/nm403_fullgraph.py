"""NM403: compiling for Neuron without `fullgraph=True` (graph breaks split silently)."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import UNSAFE, Severity
from neuron_migrate.checks.rules.base import Invalid, Rule, constant, is_compile, keyword


class Fullgraph(Rule):
    """Suggests `fullgraph=True` where the Neuron backend is named (informational).

    ## What it does
    Finds `torch.compile(..., backend="neuron")` (or any `torch.compile` with `--target
    neuron`) without `fullgraph=True`. Informational: shown with `--min-severity info`.

    ## Why
    Neuron recommends `fullgraph=True` "so graph breaks are raised rather than silently
    splitting the model". The caveat: under `fullgraph=True` some graph breaks (`nonzero`,
    `.item()`) become dynamic-shape errors instead (NM101-NM110 flag them).

    ## Example
    ```python
    model = torch.compile(model, backend="neuron", dynamic=False)
    ```

    ## Use instead
    ```python
    model = torch.compile(model, backend="neuron", dynamic=False, fullgraph=True)
    ```

    ## Fix safety
    Unsafe: a program whose graph breaks used to run then fails to compile until they are fixed.
    """

    code = "NM403"
    name = "fullgraph"
    summary = '`backend="neuron"` without `fullgraph=True`'
    severity = Severity.INFO
    calls = frozenset({"compile"})
    VALID = (
        "import torch\n\nm = torch.compile(m, backend='neuron', dynamic=False, fullgraph=True)\n",
        "import torch\n\nm = torch.compile(m, dynamic=False)\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\nm = torch.compile(m, backend='neuron', dynamic=False)\n",
            severity="info",
            unsafe_fixed="import torch\n\nm = torch.compile(m, backend='neuron', dynamic=False, fullgraph=True)\n",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        ctx = self.ctx
        if not is_compile(ctx, node):
            return
        backend = keyword(node, "backend")
        neuron = backend is not None and constant(backend.value) == "neuron"
        if not neuron and not (ctx.neuron_target and backend is None):
            return
        given = keyword(node, "fullgraph")
        if given is not None and constant(given.value) is not False:
            return
        fix = (
            ctx.fix(ctx.set_keyword(node, "fullgraph", "True"), "set `fullgraph=True`", UNSAFE)
            if all(k.arg for k in node.keywords)
            else None
        )
        self.report(
            node,
            "Neuron recommends `fullgraph=True`, so that graph breaks fail loudly instead of splitting the model",
            fix=fix,
        )
