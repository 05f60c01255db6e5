"""What a local name holds, as `values.py` infers it from the assignments of its function."""

from __future__ import annotations

import ast

import pytest

from neuron_migrate.checks import values
from neuron_migrate.checks.checker import CheckOptions, Walker
from neuron_migrate.checks.context import FileContext


def kind_of(body: str, name: str = "probe") -> str | None:
    """The kind of `name` where `return name` ends the function `f`."""
    text = "import numpy as np\nimport torch\n\ndef f(x: torch.Tensor, n: int, raw):\n" + body + f"    return {name}\n"
    tree = ast.parse(text)
    ctx = FileContext("t.py", text, tree, "portable", CheckOptions().enabled())
    Walker(ctx, []).walk_module(tree)
    function = tree.body[2]
    assert isinstance(function, ast.FunctionDef)
    returned = function.body[-1]
    assert isinstance(returned, ast.Return) and returned.value is not None
    return ctx.values.kind(returned.value, function)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    probe = np.random.randint(0, 4, size=(2, 3))\n    probe = probe + np.arange(3)\n", values.NUMPY),
        ("    probe = x.sum().item()\n", values.READ),
        ("    probe = int(raw.max())\n", values.READ),
        ("    probe = len(x)\n", values.PYTHON),
        ("    probe = x.shape[0] // 2\n", values.PYTHON),
        ("    probe = x > 0\n", values.MASK),
        ("    probe = torch.tensor(raw, dtype=torch.bool)\n", values.MASK),
        ("    probe = raw.eq(3).to(x.device)\n", values.MASK),  # moved, still boolean
        ("    probe = (x > 0).long()\n", values.TENSOR),
        ("    probe = torch.greater(x.sum(0), 0).nonzero()\n", values.RAGGED),
        ("    a, probe = torch.where(x > 0)\n", values.RAGGED),
        ("    probe = x.cpu()\n", values.CPU),
        ("    probe = torch.as_tensor(raw, device='cpu')\n", values.CPU),
        ("    probe = x.detach().numpy()\n", values.NUMPY),
        ("    probe = raw\n", None),  # an unannotated parameter: cannot tell
        ("    probe = n\n", values.PYTHON),
        ("    for probe in torch.unique(x):\n        pass\n", values.TENSOR),
        ("    hits = x.nonzero()\n    for probe in hits:\n        probe = probe[0]\n", values.TENSOR),
    ],
)
def test_kinds(body: str, expected: str | None) -> None:
    assert kind_of(body) == expected


def test_a_later_assignment_does_not_reach_back() -> None:
    assert kind_of("    probe = x > 0\n    other = probe\n    probe = 3\n", "other") == values.MASK
