"""NM110: `.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `float(t)` on hot paths: a host sync each step."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.context import Region, dotted
from neuron_migrate.checks.rules.base import Confirm, Invalid, Rule, is_tensor_call, numpy_value

BAD = """
def forward(x):
    return x * x.sum().item()
"""
GOOD = """
def forward(x):
    return x * x.sum()
"""
GRAPH_BREAK = {"item": "GB0124", "tolist": "GB0109"}
TENSOR_NAMES = re.compile(r"(?i)\w*(loss|logits|preds?|grad_norm|total_norm|accuracy|acc)")


class HostSync(Rule):
    """Flags device-to-host copies in `forward`, compiled functions and training loops.

    ## What it does
    Finds `.item()`, `.tolist()`, `.cpu()`, `.numpy()` and `float()`/`int()`/`bool()` of a tensor
    (a torch call, or a name such as `loss` or `logits`) inside hot code; elsewhere they are
    informational. Calls under an `if` such as `if step % log_every == 0:` are fine. Shapes
    and conditions are left to NM109 and NM112.

    ## Why
    Each one waits for the device and copies to the host. Inside compiled code it is also a graph
    break (GB0124 `.item()`, GB0109 `.tolist()`). In eager TorchNeuron it is a sync point that
    also cuts Adaptive Eager fusion. On the old XLA stack `loss.item()` forced a compile and
    execution, which is why XLA scripts logged through step closures.

    ## Example
    ```python
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        print(loss.item())
    ```

    ## Use instead
    ```python
    for step, batch in enumerate(loader):
        loss = model(**batch).loss
        loss.backward()
        if step % 50 == 0:
            print(loss.item())
    ```

    ## Fix safety
    No automatic fix: how often to log is the author's choice.
    """

    code = "NM110"
    name = "host-sync"
    summary = "`.item()`/`.tolist()`/`.cpu()`/`float(t)` on a hot path syncs the host"
    contextual = True
    graph_breaks = ("GB0124", "GB0109")
    calls = frozenset({"item", "tolist", "cpu", "numpy", "float", "int", "bool"})
    VALID = (
        GOOD,
        "def forward(x, n):\n    return x * float(n)\n",
        "import numpy as np\n\ndef forward(x):\n    eps = np.random.rand(1).item()\n    a = np.array([1, 2])\n    return x * a.tolist()[0] * eps\n",
        "def train(model, loader, opt):\n    for step, b in enumerate(loader):\n        loss = model(b)\n"
        "        loss.backward()\n        opt.step()\n        if step % 10 == 0:\n            print(loss.item())\n",
    )
    INVALID = (
        Invalid(BAD, line=3, severity="warning", message="GB0124"),
        Invalid(
            "def train(model, loader, opt):\n    for b in loader:\n        loss = model(b)\n        loss.backward()\n"
            "        opt.step()\n        print(loss.item())\n",
            line=6,
            severity="warning",
            message="training loop",
        ),
        Invalid("def forward(x):\n    return x.tolist()\n", line=2),
        Invalid(
            "def training_step(self, batch):\n    loss = self(batch)\n    self.log('loss', float(loss))\n",
            line=3,
        ),
        Invalid("def forward(x):\n    return x.cpu()\n", line=2),
        Invalid(
            "import torch\n\ndef evaluate(preds):\n    return preds.cpu().numpy()\n",
            severity="info",
        ),
    )
    CONFIRM = Confirm(BAD, GOOD, inputs="torch.randn(8)", breaks=("GB0124",), fullgraph="rejected")

    def visit_call(self, node: ast.Call, name: str) -> None:
        ctx = self.ctx
        if id(node) in ctx.claimed:
            return
        func = node.func
        if isinstance(func, ast.Name):
            if name not in ("float", "int", "bool") or len(node.args) != 1 or node.keywords:
                return
            arg = node.args[0]
            target = dotted(arg)
            if not is_tensor_call(ctx, arg) and not (
                target and TENSOR_NAMES.fullmatch(target.rsplit(".", 1)[-1])
            ):
                return
            what = f"`{name}()` of a tensor"
        else:
            if name in ("float", "int", "bool") or node.args or ctx.qualify(func.value) is not None:  # type: ignore[attr-defined]
                return
            if numpy_value(ctx, func.value):  # type: ignore[attr-defined]
                return  # NumPy lives on the host
            if name == "numpy" and ctx.place.region is Region.COMPILED:
                return  # traced by Dynamo (trace_numpy); a sync only in eager code
            what = f"`.{name}()`"
        if self._throttled():
            return  # once every N steps is the recommended form
        gb = GRAPH_BREAK.get(name)
        broken = (
            f" and breaks the graph ({gb})" if gb and ctx.place.region is Region.COMPILED else ""
        )
        self.report(
            node,
            f"{what} waits for the device and copies to the host{broken}; keep values on the device, or "
            "read them every N steps",
            start=ctx.method_start(node) if isinstance(func, ast.Attribute) else None,
        )

    def _throttled(self) -> bool:
        """Inside `if step % N == 0:` (or similar): the sync happens once every N steps."""
        stack = self.ctx.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            if (
                isinstance(node, ast.If)
                and any(n is stack[i + 1] for n in node.body)
                and any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
                    for n in ast.walk(node.test)
                )
            ):
                return True
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.For | ast.While):
                return False
        return False
