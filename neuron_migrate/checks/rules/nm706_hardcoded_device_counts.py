"""NM706: device counts and parallel sizes copied from GPU configurations (informational)."""

from __future__ import annotations

import ast
import re

from neuron_migrate.checks.model import Severity
from neuron_migrate.checks.rules.base import Invalid, Rule, constant

KEYWORDS = frozenset(
    {
        "tp_size",
        "tensor_parallel_size",
        "tensor_model_parallel_size",
        "nproc_per_node",
        "pipeline_parallel_size",
        "pp_size",
        "num_gpus",
        "ngpu",
        "n_gpu",
        "gpus",
        "world_size",
    }
)
NAMES = re.compile(
    r"(NGPU|NUM_GPUS|N_GPUS|GPUS_PER_NODE|NPROC_PER_NODE|WORLD_SIZE|TP_SIZE|TP_DEGREE)"
)


class HardcodedDeviceCounts(Rule):
    """Points at hard-coded device counts and parallel sizes (informational).

    ## What it does
    Finds integer literals of 2 or more given to `tp_size=`, `tensor_parallel_size=`,
    `nproc_per_node=`, `world_size=`, `num_gpus=` and the like, or assigned to `NGPU`,
    `NUM_GPUS`, `WORLD_SIZE`, `TP_SIZE`. Informational: shown with `--min-severity info`.

    ## Why
    The unit on Trainium is the NeuronCore, not the GPU: with LNC=2 a Trn2 chip has 4 logical
    cores, and a trn2.48xlarge has 64. Sizes copied from an 8-GPU node are usually wrong.

    ## Example
    ```python
    NGPU = 8
    ```

    ## Use instead
    ```python
    NGPU = torch.accelerator.device_count()  # or int(os.environ["WORLD_SIZE"])
    ```

    ## Fix safety
    No automatic fix.
    """

    code = "NM706"
    name = "hardcoded-device-counts"
    summary = "device counts copied from GPU configurations"
    severity = Severity.INFO
    keywords = KEYWORDS
    nodes = (ast.Assign,)
    VALID = ("import torch\n\nNGPU = torch.accelerator.device_count()\nrun(tp_size=1)\n",)
    INVALID = (
        Invalid("NGPU = 8\n", severity="info"),
        Invalid("launch(nproc_per_node=8)\n", line=1),
    )

    def visit_keyword(self, call: ast.Call, keyword: ast.keyword) -> None:
        value = constant(keyword.value)
        if type(value) is int and value >= 2:
            self.report(
                keyword,
                f"`{keyword.arg}={value}` looks copied from a GPU setup; derive it from the NeuronCore count",
            )

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Assign)
        value = constant(node.value)
        if (
            type(value) is not int
            or value < 2
            or len(node.targets) != 1
            or not isinstance(node.targets[0], ast.Name)
        ):
            return
        if NAMES.fullmatch(node.targets[0].id):
            self.report(
                node,
                f"`{node.targets[0].id} = {value}` looks copied from a GPU setup; derive it from the NeuronCore count",
            )
