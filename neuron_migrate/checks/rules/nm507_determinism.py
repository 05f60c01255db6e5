"""NM507: deterministic-algorithm switches, which turn off Adaptive Eager fusion."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, constant


class DeterministicAlgorithms(Rule):
    """Flags `torch.use_deterministic_algorithms(True)` and `torch.set_deterministic_debug_mode(...)`.

    ## What it does
    Finds the calls that make PyTorch choose deterministic kernels.

    ## Why
    On TorchNeuron they disable Adaptive Eager fusion, so eager code runs op by op, much slower.

    ## Example
    ```python
    torch.use_deterministic_algorithms(True)
    ```

    ## Use instead
    Enable it only while debugging, e.g. behind a `--deterministic` flag.

    ## Fix safety
    No automatic fix.
    """

    code = "NM507"
    name = "deterministic-algorithms"
    summary = "deterministic algorithms disable Adaptive Eager fusion"
    calls = frozenset({"use_deterministic_algorithms", "set_deterministic_debug_mode"})
    VALID = (
        "import torch\n\ntorch.use_deterministic_algorithms(False)\ntorch.use_deterministic_algorithms(args.deterministic)\n",
    )
    INVALID = (Invalid("import torch\n\ntorch.use_deterministic_algorithms(True)\n", line=3),)

    def visit_call(self, node: ast.Call, name: str) -> None:
        if self.ctx.qualify(node.func) != f"torch.{name}" or not node.args:
            return
        value = constant(node.args[0])
        if value in (False, 0, "default") or value is ast.AST:
            return
        self.report(
            node,
            f"`torch.{name}` turns off Adaptive Eager fusion on Neuron; enable it only for debugging",
        )
