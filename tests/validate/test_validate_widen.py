"""The float64 floor run's widening (`Widen`), in a process of its own: it patches `nn.Module`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = Path(__file__).resolve().parents[2] / "neuron_migrate" / "validate" / "child"


def test_modules_and_their_float32_inputs_are_widened_at_the_first_call():
    program = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(CHILD)!r})
        import torch
        from neuron_migrate_capture_precision import Widen

        widen = Widen()
        widen.on_torch(torch)
        torch.manual_seed(0)
        made = torch.nn.Linear(3, 2)
        weight = made.weight.detach().clone()  # made in float32: the program's own draw

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = made

            def forward(self, pixel_values, ids, scale=None):
                return self.proj(pixel_values) * scale, ids

        out, ids = Model()(pixel_values=torch.ones(4, 3), ids=torch.arange(4), scale=torch.tensor(2.0))
        print(json.dumps({{
            "out": str(out.dtype), "ids": str(ids.dtype), "weight": str(made.weight.dtype),
            "same_values": bool((made.weight.float() == weight).all()), "changed": widen.summary(),
        }}))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["out"] == "torch.float64" and seen["weight"] == "torch.float64"
    assert seen["ids"] == "torch.int64"  # integers stay what they are
    assert seen["same_values"]  # widened from the float32 draw, not drawn again
    # Model (its Linear with it) once; pixel_values and scale by keyword.
    assert seen["changed"] == {"module widened": 1, "input widened": 2}
