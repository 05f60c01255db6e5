"""NM702: leftovers of the PyTorch/XLA stack (imports, environment variables): run `rewrite`."""

from __future__ import annotations

import ast

from neuron_migrate.checks.context import FileContext
from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Invalid, Rule, constant
from neuron_migrate.core import oldstack

PACKAGES = (*oldstack.PACKAGES, oldstack.OPTIMUM_NEURON)
ENV = frozenset(
    {
        "PJRT_DEVICE",
        "XLA_USE_BF16",
        "XLA_DOWNCAST_BF16",
        "NEURON_CC_FLAGS",
        "XLA_FLAGS",
        "XLA_IR_DEBUG",
        "XLA_HLO_DEBUG",
        "NEURON_NUM_RECENT_MODELS_TO_KEEP",
        "XLA_USE_32BIT_LONG",
    }
)


class OldStack(Rule):
    """Flags PyTorch/XLA-era code left in a native-PyTorch program.

    ## What it does
    Finds imports of `torch_xla`, `torch_neuronx`, `libneuronxla`, `neuronx_distributed` and
    `optimum.neuron`, and the XLA-era environment variables (`PJRT_DEVICE`, `XLA_USE_BF16`,
    `XLA_DOWNCAST_BF16`, `NEURON_CC_FLAGS`, ...). Imports inside a guard (`if`, `try`) are
    informational: they are dead code once the old stack is gone. `XLA_FLAGS` is flagged only
    in files that use PyTorch/XLA: JAX and TensorFlow read it too.

    ## Why
    PyTorch/XLA is not part of PyTorch 2.10 and later; on TorchNeuron these imports fail and
    these variables do nothing. `neuron-migrate rewrite` migrates most of this automatically.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm
    device = xm.xla_device()
    ```

    ## Use instead
    Run `neuron-migrate rewrite` on the file:
    ```python
    device = torch.device("neuron")
    ```

    ## Fix safety
    No fix in `check`: `neuron-migrate rewrite` is the fix.
    """

    code = "NM702"
    name = "old-stack"
    summary = "PyTorch/XLA-era imports and variables (run `neuron-migrate rewrite`)"
    severity = Severity.ERROR
    nodes = (ast.Import, ast.ImportFrom, ast.Subscript)
    calls = frozenset({"get", "setdefault", "getenv", "pop", "putenv"})
    requires = (*(p.split(".")[-1] for p in PACKAGES), *ENV)
    VALID = (
        "import torch\n\ndevice = torch.device('neuron')\n",
        "import os\n\nimport jax\n\nos.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'\n",
        "import os\n\nflags = os.environ.get('XLA_FLAGS', '')\n",
    )
    INVALID = (
        Invalid(
            "import torch_xla.core.xla_model as xm\n",
            line=1,
            severity="error",
            message="neuron-migrate rewrite",
        ),
        Invalid("from optimum.neuron import NeuronTrainer\n", line=1),
        Invalid("import os\n\nos.environ['PJRT_DEVICE'] = 'NEURON'\n", line=3),
        Invalid("import os\n\nos.environ['XLA_FLAGS'] = '--xla_dump_to=/tmp'\nos.environ['PJRT_DEVICE'] = 'NEURON'\n", line=3),
        Invalid(
            "try:\n    import torch_xla\nexcept ImportError:\n    torch_xla = None\n",
            severity="info",
        ),
    )

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self._pytorch_xla_file: bool | None = None

    def _old_variable(self, key: object) -> bool:
        """`key` is a PyTorch/XLA variable here (`XLA_FLAGS` of a JAX program is not)."""
        if key not in ENV:
            return False
        assert isinstance(key, str)
        if self._pytorch_xla_file is None:
            self._pytorch_xla_file = oldstack.uses_pytorch_xla(self.ctx.text)
        return oldstack.is_xla_variable(key, self._pytorch_xla_file) or not oldstack.XLA_VARIABLE.match(key)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Subscript):
            key = constant(node.slice)
            if self._old_variable(key) and (self.ctx.qualify(node.value) or "") == "os.environ":
                self.report(
                    node,
                    f"`{key}` belongs to the PyTorch/XLA stack and does nothing on TorchNeuron; run `neuron-migrate rewrite`",
                )
            return
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            modules = [node.module or ""] if not node.level else []  # type: ignore[attr-defined]
        old = next(
            (m for m in modules if any(m == p or m.startswith(p + ".") for p in PACKAGES)), None
        )
        if old is None:
            return
        guarded = any(isinstance(n, ast.If | ast.Try) for n in self.ctx.stack[:-1])
        severity = Severity.INFO if guarded else None
        place = "a guarded import of " if guarded else ""
        self.report(
            node,
            f"{place}`{old}` belongs to the PyTorch/XLA stack, gone in PyTorch 2.10+; run `neuron-migrate rewrite`",
            severity=severity,
        )

    def visit_call(self, node: ast.Call, name: str) -> None:
        if not node.args or not self._old_variable(constant(node.args[0])):
            return
        qualified = self.ctx.qualify(node.func) or ""
        if qualified.startswith(("os.environ.", "os.getenv", "os.putenv")):
            self.report(
                node,
                f"`{constant(node.args[0])}` belongs to the PyTorch/XLA stack and does nothing on TorchNeuron; run `neuron-migrate rewrite`",
            )
