"""NM110: `.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `float(t)` on hot paths: a host sync each step."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks import values
from neuron_migrate.checks.context import dotted
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import HOST_KINDS, Confirm, Invalid, Rule, is_tensor_call

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
# `self._total_tokens += n`: a running count kept for the logs.
TALLY = re.compile(r"self\.\w*(?:total|count|num|seen|stats?)\w*\s*(?:\+=|=)")
ON_HOST: frozenset[str | None] = HOST_KINDS | {values.READ}
# A statement that logs, reports or decodes to text: a sync for the report, not for the step's result.
REPORTING = re.compile(
    r"(?<![\w.])(?:self\.)?(?:log\w*|_?logger|logging|wandb|writer|tb_writer|summary_writer|tqdm|pbar|"
    r"progress\w*|print|_?metrics|_?textual_logs|_?logs|state\.log_history)\b|\.log\w*\(|"
    r"\.(?:batch_)?decode\(|\.set_postfix\(|\.add_scalars?\("
)


class HostSync(Rule):
    """Flags device-to-host copies in compiled code and in the eager code of every step.

    ## What it does
    Finds `.item()`, `.tolist()`, `.cpu()`, `.numpy()` and `float()`/`int()`/`bool()` of a
    tensor (a torch call, a local name made by one, or a name such as `loss` or `logits`). In
    compiled code (`forward`, functions given to `torch.compile`, what they call) `.item()`,
    `.tolist()` and `float(t)` are errors: graph breaks that fail under `fullgraph=True`. In the
    eager code of a training or evaluation step they are warnings: a host sync every step. A
    value read there only for logs, metrics or decoded text is information: the sync still
    happens every step, for the report rather than for the step's result. Orchestration a step
    calls (generation rounds, reward scoring), calls under `if step % log_every == 0:` and values
    already on the host (NumPy arrays, `.cpu()` copies, Python numbers) are left alone. Shapes
    and conditions are NM109 and NM112.

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
        total += loss.item()
    ```

    ## Use instead
    ```python
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        total += loss.detach()
    ```

    ## Fix safety
    No automatic fix: how often to read a value is the author's choice.
    """

    code = "NM110"
    name = "host-sync"
    summary = "`.item()`/`.tolist()`/`.cpu()`/`float(t)` on a hot path syncs the host"
    severity = Severity.ERROR
    contextual = True
    eager_severity = Severity.WARNING
    graph_breaks = ("GB0124", "GB0109")
    calls = frozenset({"item", "tolist", "cpu", "numpy", "float", "int", "bool"})
    VALID = (
        GOOD,
        "import torch\n\ndef forward(x, sizes):\n    host = torch.tensor(sizes, device='cpu')\n"
        "    lengths = host.sum(-1).tolist()\n    return x * host.max().item() * len(lengths)\n",
        "def forward(x, n):\n    return x * float(n)\n",
        "import numpy as np\n\ndef forward(x):\n    eps = np.random.rand(1).item()\n    a = np.array([1, 2])\n    return x * a.tolist()[0] * eps\n",
        "def train(model, loader, opt):\n    for step, b in enumerate(loader):\n        loss = model(b)\n"
        "        loss.backward()\n        opt.step()\n        if step % 10 == 0:\n            print(loss.item())\n",
    )
    INVALID = (
        Invalid(BAD, line=3, severity="error", message="GB0124"),
        Invalid(
            "def train(model, loader, opt):\n    total = 0.0\n    for b in loader:\n        loss = model(b)\n"
            "        loss.backward()\n        opt.step()\n        total += loss.item()\n",
            line=7,
            severity="warning",
            message="training loop",
        ),
        Invalid(
            "def train(model, loader, opt):\n    for b in loader:\n        loss = model(b)\n        loss.backward()\n"
            "        opt.step()\n        print(loss.item())\n",
            line=6,
            severity="info",
            message="waits for the device and copies to the host on every step, only for logs",
        ),
        Invalid(
            "import torch\n\nclass Trainer:\n    def compute_loss(self, model, inputs):\n"
            "        out = model(**inputs)\n        self._metrics['entropy'].append(out.entropy.mean().item())\n"
            "        return out.loss\n",
            line=6,
            severity="info",
            message="on every step, only for logs, metrics or decoded text",
        ),
        Invalid(
            "import torch\n\nclass Trainer:\n    def compute_loss(self, model, inputs):\n"
            "        loss = model(**inputs).loss\n        scale = loss.detach().max().item()\n"
            "        self._metrics['loss'].append(loss.item())\n        return loss * scale\n",
            line=6,
            severity="warning",
            message="eager code run every step",
        ),
        Invalid(
            "import torch\n\nclass Trainer:\n    def training_step(self, model, inputs):\n"
            "        ids = self._generate_rollouts(model, inputs)\n        return model(ids).loss\n\n"
            "    def _generate_rollouts(self, model, inputs):\n        out = model.generate(**inputs)\n"
            "        n = out.ne(0).sum().item()\n        return out[:, :n]\n",
            line=10,
            severity="info",
            message="eager orchestration",
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
            kind = ctx.kind(arg)
            if kind in ON_HOST:
                return
            if (
                kind not in values.DEVICE_TENSORS
                and not is_tensor_call(ctx, arg)
                and not (target and TENSOR_NAMES.fullmatch(target.rsplit(".", 1)[-1]))
            ):
                return
            what = f"`{name}()` of a tensor"
        else:
            if name in ("float", "int", "bool") or node.args or ctx.qualify(func.value) is not None:  # type: ignore[attr-defined]
                return
            if ctx.kind(func.value) in ON_HOST:  # type: ignore[attr-defined]
                return  # NumPy, CPU copies and Python values live on the host
            if name == "numpy" and ctx.place.compiled:
                return  # traced by Dynamo (trace_numpy); a sync only in eager code
            what = f"`.{name}()`"
        if self._throttled():
            return  # once every N steps is the recommended form
        compiled = ctx.place.compiled
        gb = GRAPH_BREAK.get(name) if isinstance(func, ast.Attribute) else "GB0124"
        if compiled:
            severity = Severity.ERROR if gb else Severity.WARNING
            effect = (
                f" and breaks the graph ({gb}), a failure under fullgraph=True" if gb else " inside the graph"
            )
        else:
            severity = None  # the rule's weight for where it is
            effect = ""
            if ctx.place.hot and self._reporting(node):
                severity = Severity.INFO
                effect = " on every step, only for logs, metrics or decoded text"
        self.report(
            node,
            f"{what} waits for the device and copies to the host{effect}; keep values on the device, or "
            "read them every N steps",
            start=ctx.method_start(node) if isinstance(func, ast.Attribute) else None,
            severity=severity,
        )

    def _reporting(self, node: ast.Call) -> bool:
        """The value goes to a log, a metrics tally, a progress bar or `decode`: reporting, not
        the step itself (also a nested helper that only such statements call)."""
        ctx = self.ctx
        statement = ctx.statement()
        if statement is None:
            return False
        if REPORTING.search(ctx.source(statement)):
            return True
        if isinstance(statement, ast.Return) and len(ctx.functions) >= 2:
            helper = getattr(ctx.functions[-1], "name", "")
            start, end = ctx.places.span(ctx.functions[-2])
            uses = [
                line
                for line in ctx.text[start:end].splitlines()
                if re.search(rf"(?<![\w.]){re.escape(helper)}\(", line) and "def " not in line
            ]
            return bool(uses) and all(REPORTING.search(line) for line in uses)
        if isinstance(statement, ast.Assign) and ctx.functions:
            names = [t.id for t in statement.targets if isinstance(t, ast.Name)]
            _, end = ctx.places.span(ctx.functions[-1])
            after = ctx.text[ctx.span(statement)[1] : end].splitlines()
            for name in names:
                uses = [
                    line
                    for line in after
                    if re.search(rf"\b{re.escape(name)}\b", line)
                    and not re.match(rf"\s*{re.escape(name)}\s*=(?!=)", line)  # assigned again
                ]
                if uses and all(REPORTING.search(line) or TALLY.search(line) for line in uses):
                    return True
        return False

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
