"""NM404: CUDA graph APIs, which have no Neuron equivalent."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule

APIS = frozenset(
    {
        "torch.cuda.graphs",
        "torch.cuda.graph",
        "torch.cuda.CUDAGraph",
        "torch.cuda.make_graphed_callables",
        "torch.cuda.graph_pool_handle",
        "torch.compiler.cudagraph_mark_step_begin",
    }
)
STEP_BEGIN = "torch.compiler.cudagraph_mark_step_begin"


class CudaGraphs(Rule):
    """Flags `torch.cuda.CUDAGraph`, `torch.cuda.graph`, `make_graphed_callables` and
    `torch.compiler.cudagraph_mark_step_begin()`.

    ## What it does
    Finds uses of the CUDA graph APIs.

    ## Why
    There is no CUDA-graph equivalent on Trainium: compiled graphs already run as a whole on the
    device. The calls fail without CUDA.

    ## Example
    ```python
    torch.compiler.cudagraph_mark_step_begin()
    out = compiled(x)
    ```

    ## Use instead
    ```python
    out = compiled(x)
    ```

    ## Fix safety
    Safe for `cudagraph_mark_step_begin()` statements, which are deleted (they only matter to
    CUDA graphs). The others need restructuring by hand.
    """

    code = "NM404"
    name = "cuda-graphs"
    summary = "CUDA graph APIs have no Neuron equivalent"
    attributes = frozenset(
        {
            "graphs",
            "graph",
            "CUDAGraph",
            "make_graphed_callables",
            "graph_pool_handle",
            "cudagraph_mark_step_begin",
        }
    )
    calls = frozenset({"CUDAGraph", "graph", "make_graphed_callables", "cudagraph_mark_step_begin"})
    VALID = (
        "import torch\n\nout = compiled(x)\ng = torch.accelerator.Graph\n",
        "import networkx as nx\n\ng = nx.graph\n",
    )
    INVALID = (
        Invalid(
            "import torch\n\ntorch.compiler.cudagraph_mark_step_begin()\nout = compiled(x)\n",
            fixed="import torch\n\nout = compiled(x)\n",
        ),
        Invalid(
            "import torch\n\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    y = f(x)\n",
            line=3,
        ),
        Invalid(
            "from torch.cuda import make_graphed_callables\n\nf = make_graphed_callables(f, (x,))\n",
            line=3,
        ),
    )

    def visit_attribute(self, node: ast.Attribute) -> None:
        qualified = self.ctx.qualify(node)
        if qualified in APIS:
            self._report(node, qualified)

    def visit_call(self, node: ast.Call, name: str) -> None:
        if isinstance(node.func, ast.Name):
            qualified = self.ctx.qualify(node.func)
            if qualified in APIS:
                self._report(node.func, qualified)

    def _report(self, node: ast.AST, qualified: str) -> None:
        fix = None
        if qualified == STEP_BEGIN:
            call, statement = self.ctx.parent(), self.ctx.parent(2)
            if isinstance(call, ast.Call) and isinstance(statement, ast.Expr):
                fix = self.ctx.fix(self.ctx.delete_statement(statement), "delete the call")
        self.report(
            node, f"`{qualified}` is a CUDA graph API with no Neuron equivalent; remove it", fix=fix
        )
