"""NM306: `from_pretrained` given both `distributed_config` and `device_mesh`."""

from __future__ import annotations

import ast

from neuron_migrate.checks.rules.base import Invalid, Rule, keyword


class MeshAndDistributedConfig(Rule):
    """Flags `from_pretrained(..., distributed_config=..., device_mesh=...)`.

    ## What it does
    Finds `from_pretrained` calls that pass both arguments.

    ## Why
    transformers 5.23 builds its own mesh from `distributed_config` and drops the `device_mesh`
    it was given, without a word: the mesh the code set up (for Neuron's device type and sizes)
    is not the one used.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained(path, distributed_config=dc, device_mesh=mesh)
    ```

    ## Use instead
    ```python
    model = AutoModelForCausalLM.from_pretrained(path, distributed_config=dc)
    ```

    ## Fix safety
    Safe: removing `device_mesh` keeps what transformers already does.
    """

    code = "NM306"
    name = "mesh-and-distributed-config"
    summary = "`from_pretrained` drops `device_mesh` when `distributed_config` is set"
    calls = frozenset({"from_pretrained"})
    VALID = ("model = AutoModel.from_pretrained(p, device_mesh=mesh)\n",)
    INVALID = (
        Invalid(
            "model = AutoModel.from_pretrained(p, distributed_config=dc, device_mesh=mesh)\n",
            fixed="model = AutoModel.from_pretrained(p, distributed_config=dc)\n",
        ),
    )

    def visit_call(self, node: ast.Call, name: str) -> None:
        mesh = keyword(node, "device_mesh")
        if mesh is None or keyword(node, "distributed_config") is None:
            return
        fix = self.ctx.fix(self.ctx.remove_keyword(node, mesh), "remove `device_mesh`")
        self.report(
            mesh,
            "`device_mesh` is ignored when `distributed_config` is given (transformers builds its own mesh)",
            fix=fix,
        )
