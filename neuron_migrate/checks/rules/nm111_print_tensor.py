"""NM111: `print` and logger calls inside compiled code, which Dynamo cannot trace."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import Region, dotted
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule

BAD = """
def forward(x):
    print(x)
    return x * 2
"""
GOOD = """
def forward(x):
    return x * 2
"""
LOG_METHODS = frozenset(
    {
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "log",
        "warning_once",
        "info_once",
    }
)
LOGGER = re.compile(r"(?i)_?(log|logger|logging|_logger)")
CONDITIONS = (ast.If, ast.IfExp, ast.ExceptHandler, ast.While, ast.For, ast.Try)


class PrintInCompiledCode(Rule):
    """Flags `print(...)` and `logger.info/warning/...` calls in `forward` and compiled code.

    ## What it does
    Finds `print` and logger calls in `forward`, compiled functions, step functions and the
    helpers they call. Calls that run on every step are warnings; calls under an `if`, a loop
    or an `except` (a warning for an unusual configuration, say) are informational, since they
    break the graph only when they run.

    ## Why
    Dynamo traces neither: `print` is "Failed to trace builtin operator" (GB0059), even with a
    constant string, and logger methods are "logging.Logger method not supported" (GB0291).
    The graph breaks there (and printing a tensor syncs the host); with `fullgraph=True`
    compilation fails.

    ## Example
    ```python
    def forward(self, x):
        h = self.proj(x)
        print(h)
        return h
    ```

    ## Use instead
    Log outside the compiled region, or every N steps from the training loop; for debugging,
    wrap the logging helper in `torch._dynamo.disable`.

    ## Fix safety
    No automatic fix.
    """

    code = "NM111"
    name = "print-in-compiled-code"
    summary = "`print`/logging inside compiled code breaks the graph"
    contextual = True
    graph_breaks = ("GB0059", "GB0291")
    calls = frozenset({"print", *LOG_METHODS})
    VALID = (
        GOOD,
        "def main(x):\n    print(x)\n",
        "def train(model, xs):\n    for x in xs:\n        print('step')\n",
    )
    INVALID = (
        Invalid(BAD, line=3, severity="warning", message="GB0059"),
        Invalid(
            "import logging\nlogger = logging.getLogger()\n\ndef forward(x):\n    logger.info(f'x={x}')\n    return x\n",
            line=5,
            message="GB0291",
        ),
        Invalid(
            "def forward(self, x, mask=None):\n    if mask is not None:\n        logger.warning_once('mask ignored')\n    return x\n",
            line=3,
            severity="info",
        ),
    )
    CONFIRM = Confirm(
        BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0059",), fullgraph="unsupported"
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        if self.ctx.place.region is not Region.COMPILED:
            return
        func = node.func
        if name == "print":
            if not isinstance(func, ast.Name):
                return
            gb = "GB0059"
        else:
            receiver = dotted(func.value) if isinstance(func, ast.Attribute) else None
            if receiver is None or not LOGGER.fullmatch(receiver.rsplit(".", 1)[-1]):
                return
            gb = "GB0291"
        conditional = self._conditional()
        when = " when it runs" if conditional else ""
        self.report(
            node,
            f"`{name}` in compiled code breaks the graph{when} ({gb}), and fails under fullgraph=True; "
            "log outside the compiled region",
            severity=Severity.INFO if conditional else None,
        )

    def _conditional(self) -> bool:
        for node in reversed(self.ctx.stack[:-1]):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                return False
            if isinstance(node, CONDITIONS):
                return True
        return False
