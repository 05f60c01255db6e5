"""NM115: Dynamo flags that capture data-dependent ops as dynamic shapes."""

from __future__ import annotations

import ast

from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, constant

FLAGS = frozenset({"capture_scalar_outputs", "capture_dynamic_output_shape_ops"})
ENV = frozenset(
    {"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS", "TORCHDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS"}
)

BAD = """
import torch

torch._dynamo.config.capture_scalar_outputs = True

def forward(x):
    return x * x.sum().item()
"""
GOOD = """
def forward(x):
    return x * x.sum()
"""


class CaptureFlags(Rule):
    """Flags `capture_scalar_outputs` / `capture_dynamic_output_shape_ops` switched on.

    ## What it does
    Finds `torch._dynamo.config.capture_scalar_outputs = True`,
    `capture_dynamic_output_shape_ops = True`, the same through `torch._dynamo.config.patch(...)`,
    and the environment variables `TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS` /
    `TORCHDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS` set from Python.

    ## Why
    They make Dynamo capture `.item()`, `nonzero` and friends as unbacked symbols instead of
    breaking the graph: the graph then has dynamic shapes, which the Neuron backend rejects.

    ## Example
    ```python
    torch._dynamo.config.capture_scalar_outputs = True
    ```

    ## Use instead
    Remove the setting and fix the data-dependent ops (NM101-NM110).

    ## Fix safety
    Safe: deleting the assignment (or the environment variable) restores the default. No fix for
    `config.patch(...)`.
    """

    code = "NM115"
    name = "capture-dynamic-flags"
    summary = "flags that capture data-dependent ops as dynamic shapes"
    severity = Severity.ERROR
    requires = ("capture_", "TORCHDYNAMO_CAPTURE")
    nodes = (ast.Assign,)
    keywords = FLAGS
    calls = frozenset({"setdefault"})
    VALID = (
        GOOD,
        "import torch\n\ntorch._dynamo.config.capture_scalar_outputs = False\n",
    )
    INVALID = (
        Invalid(
            BAD,
            line=4,
            severity="error",
            fixed="\nimport torch\n\n\ndef forward(x):\n    return x * x.sum().item()\n",
        ),
        Invalid(
            "import os\nos.environ['TORCHDYNAMO_CAPTURE_DYNAMIC_OUTPUT_SHAPE_OPS'] = '1'\nx = 1\n",
            fixed="import os\nx = 1\n",
        ),
        Invalid(
            "import os\nos.environ['TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS'] = '1'  # for the sampler\nx = 1\n",
            fixed="import os\n# for the sampler\nx = 1\n",
        ),
        Invalid(
            "import torch\n\nwith torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):\n    pass\n",
            line=3,
        ),
        Invalid(
            "import torch\n\nif True:\n    torch._dynamo.config.capture_scalar_outputs = 1\n",
            fixed="import torch\n\nif True:\n    pass\n",
        ),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", fullgraph="rejected", partial="rejected")

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Assign)
        if len(node.targets) != 1:
            return
        target = node.targets[0]
        hit = None
        if isinstance(target, ast.Attribute) and target.attr in FLAGS:
            qualified = self.ctx.qualify(target) or ""
            if qualified.startswith("torch") and constant(node.value) not in (False, 0, None):
                hit = f"`{target.attr}`"
        elif (
            isinstance(target, ast.Subscript)
            and constant(target.slice) in ENV
            and (self.ctx.qualify(target.value) or "") == "os.environ"
            and constant(node.value) not in ("0", "")
        ):
            hit = f"`{constant(target.slice)}`"
        if hit:
            self._report(node, hit)

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        qualified = self.ctx.qualify(call.func) or ""
        if qualified.startswith("torch._dynamo.config.patch") and constant(keyword.value) not in (
            False,
            0,
            None,
        ):
            self.report(
                keyword,
                f"`{keyword.arg}` captures data-dependent ops as dynamic shapes, which Neuron rejects",
            )

    def visit_call(self, node: ast.Call, name: str) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute) or self.ctx.qualify(func.value) != "os.environ":
            return
        if node.args and constant(node.args[0]) in ENV:
            statement = self.ctx.parent()
            what = f"`{constant(node.args[0])}`"
            self._report(statement if isinstance(statement, ast.Expr) else node, what, node)

    def _report(self, statement: ast.AST, what: str, node: ast.AST | None = None) -> None:
        fix = None
        if isinstance(statement, ast.stmt):
            fix = self.ctx.fix(self.ctx.delete_statement(statement), "remove the setting")
        self.report(
            node or statement,
            f"{what} makes Dynamo capture data-dependent ops as unbacked symbols: dynamic graphs that "
            "Neuron rejects; remove it",
            fix=fix,
        )
