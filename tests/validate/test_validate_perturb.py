"""The perturbation floor run's rounding moves (`Perturb`), in a process of its own: it adds a
global module hook."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = Path(__file__).resolve().parents[2] / "neuron_migrate" / "validate" / "child"


def test_leaf_outputs_move_by_one_ulp_and_gradients_pass_unchanged():
    program = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(CHILD)!r})
        import torch
        from neuron_migrate_capture_precision import Perturb

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64))
        x = torch.randn(8, 64)
        plain = model[0](x)
        x.requires_grad_(True)
        state = torch.get_rng_state()
        perturb = Perturb(1)
        perturb.on_torch(torch)
        out = model(x)
        grad = torch.autograd.grad(out.sum(), x)[0]
        expected = torch.autograd.grad((x @ model[0].weight.T + model[0].bias).sum(), x)[0]
        print(json.dumps({{
            "moved": float((out.detach() != plain).float().mean()),
            # One step from each moved value back toward where it was is where it was.
            "one_ulp": bool(torch.equal(torch.nextafter(out.detach(), plain), plain)),
            "rng_untouched": bool(torch.equal(state, torch.get_rng_state())),
            "grad_equal": bool(torch.equal(grad, expected)),
            "changed": perturb.summary(),
        }}))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["moved"] == 1.0  # every element, up or down
    assert seen["one_ulp"]
    assert seen["rng_untouched"]  # the program's own draws stay those of the original
    assert seen["grad_equal"]
    # The Linear, not the Sequential that holds it.
    assert seen["changed"] == {"module outputs moved by 1 ulp": 1}
