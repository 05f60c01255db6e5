"""The comparison on its own, with captures made up in memory: metrics, tolerances, verdicts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from neuron_migrate.validate.compare import (
    DIVERGE,
    MATCH,
    PRECISIONS,
    Tolerance,
    compare_generate,
    compare_runs,
    tensor_stats,
)
from neuron_migrate.validate.runner import Capture


def capture(tensors: dict[str, torch.Tensor], rank: int = 0, world: int = 1, **manifest) -> Capture:
    items = {
        k: {
            "dtype": str(v.dtype).replace("torch.", ""),
            "effective_dtype": manifest.pop("effective", None)
            or str(v.dtype).replace("torch.", ""),
            "shape": list(v.shape),
        }
        for k, v in tensors.items()
    }
    base = {
        "rank": rank,
        "world_size": world,
        "items": items,
        "param_dtypes": ["float32"],
        "autocast_dtypes": [],
        "loss_dtypes": ["float32"],
        "generate": [],
        "dropout_calls": 0,
    }
    base.update(manifest)
    return Capture(Path("."), base, tensors)


def training(lr: float = 0.1, steps: int = 6, noise: float = 0.0) -> dict[str, torch.Tensor]:
    """A few SGD steps on a fixed problem: losses, first-step grads, initial and final params."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 3, generator=g)
    x, y = torch.randn(16, 4, generator=g), torch.randn(16, 3, generator=g)
    init, losses, grads = w.clone(), [], None
    for _ in range(steps):
        w.requires_grad_(True)
        loss = ((x @ w - y) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, w)
        grads = grad.clone() if grads is None else grads
        losses.append(float(loss.detach()))
        w = (w - lr * grad).detach()
    losses_t = torch.tensor(losses, dtype=torch.float64) * (1 + noise)
    return {"loss": losses_t, "init/w": init, "grad/w": grads, "param/w": w * (1 + noise)}


def test_identical_runs_match():
    result = compare_runs([capture(training())], [capture(training())])
    assert result.verdict == MATCH
    assert [i.key for i in result.items] == [
        "precision",
        "losses",
        "initial",
        "gradients",
        "parameters",
    ]
    assert result.precision.name == "fp32"


def test_float32_rounding_noise_matches():
    result = compare_runs([capture(training())], [capture(training(noise=2e-7))])
    assert result.verdict == MATCH


def test_changed_learning_rate_diverges_from_step_1():
    result = compare_runs([capture(training(lr=0.1))], [capture(training(lr=0.11))])
    losses = next(i for i in result.items if i.key == "losses")
    assert result.verdict == DIVERGE
    assert losses.verdict == DIVERGE
    assert losses.entries[0].verdict == MATCH  # the first loss is computed before any update
    assert "first diverging step 1" in losses.detail
    assert next(i for i in result.items if i.key == "parameters").verdict == DIVERGE


def test_missing_and_reshaped_tensors_diverge():
    a = training()
    b = dict(a)
    b["param/extra"] = torch.zeros(2)
    b["grad/w"] = a["grad/w"].reshape(3, 4)
    result = compare_runs([capture(a)], [capture(b)])
    params = next(i for i in result.items if i.key == "parameters")
    grads = next(i for i in result.items if i.key == "gradients")
    assert params.verdict == DIVERGE and "only in migrated: extra" in params.detail
    assert grads.verdict == DIVERGE and "shape [4, 3] vs [3, 4]" in grads.detail


def test_fewer_losses_diverge():
    a = training()
    b = dict(a, loss=a["loss"][:-1])
    losses = next(i for i in compare_runs([capture(a)], [capture(b)]).items if i.key == "losses")
    assert losses.verdict == DIVERGE and "6 losses vs 5" in losses.detail


def test_bf16_policy_picks_bf16_tolerances_and_a_policy_change_diverges():
    a, b = training(), training(noise=5e-3)  # bf16-sized noise
    bf16 = capture(a, param_dtypes=["bfloat16"], xla_bf16_env="XLA_USE_BF16")
    result = compare_runs([bf16], [capture(b, param_dtypes=["bfloat16"])])
    assert result.precision.name == "bf16"
    assert result.verdict == MATCH
    changed = compare_runs([bf16], [capture(b)])  # the migrated program dropped bf16
    policy = changed.items[0]
    assert policy.verdict == DIVERGE
    assert policy.detail == "original: params bfloat16 (XLA_USE_BF16=1); migrated: params float32"


def test_autocast_counts_as_low_precision():
    result = compare_runs(
        [capture(training(), autocast_dtypes=["bfloat16"])],
        [capture(training(noise=5e-3), autocast_dtypes=["bfloat16"])],
    )
    assert result.precision.name == "bf16" and result.verdict == MATCH


def test_precision_and_tolerances_can_be_overridden():
    a, b = [capture(training())], [capture(training(noise=1e-3))]
    assert compare_runs(a, b).verdict == DIVERGE
    assert compare_runs(a, b, precision="bf16").verdict == MATCH
    loose = compare_runs(a, b, rtol=1e-2)
    assert loose.verdict == MATCH and loose.precision.loss == Tolerance(1e-2, 1e-6)
    assert compare_runs(a, b, atol=1.0).verdict == MATCH


def test_tensor_stats():
    e = torch.tensor([1.0, -2.0, 4.0])
    a = torch.tensor([1.0, -2.0, 4.5])
    s = tensor_stats(e, a, Tolerance(1e-4, 1e-5))
    assert s.max_abs == pytest.approx(0.5)
    assert s.max_rel == pytest.approx(0.125)
    assert s.norm_rel == pytest.approx(0.5 / 4)
    assert s.rel_l2 == pytest.approx(0.5 / math.sqrt(21))
    assert s.cosine == pytest.approx(float(torch.dot(e, a) / (e.norm() * a.norm())))
    assert s.mismatches == 1
    zero = tensor_stats(torch.zeros(3), torch.zeros(3), Tolerance(1e-4, 1e-5))
    assert (zero.cosine, zero.rel_l2, zero.norm_rel) == (1.0, 0.0, 0.0)


def test_group_scale_judges_small_tensors_against_the_model():
    # A bias near zero moved by optimizer noise: large against itself, small against the weights.
    e = {"w": torch.ones(4), "b": torch.tensor([1e-3, 0.0])}
    a = {"w": torch.ones(4), "b": torch.tensor([1.05e-3, 0.0])}
    result = compare_runs(
        [capture({"param/" + k: v for k, v in e.items()})],
        [capture({"param/" + k: v for k, v in a.items()})],
    )
    assert result.verdict == MATCH


def test_ranks_that_disagree_point_at_the_all_reduce():
    a = training()
    drifted = dict(a, **{"param/w": a["param/w"] + 0.01})
    result = compare_runs([capture(a)], [capture(a, 0, 2), capture(drifted, 1, 2)])
    keys = {i.key: i for i in result.items}
    assert "losses" not in keys  # world sizes differ: per-rank values are not comparable
    assert any("different numbers of processes" in n for n in result.notes)
    assert keys["replicas/migrated"].verdict == DIVERGE
    assert "missing all-reduce" in keys["replicas/migrated"].detail
    assert result.verdict == DIVERGE
    agreeing = compare_runs([capture(a)], [capture(a, 0, 2), capture(a, 1, 2)])
    assert agreeing.verdict == MATCH


def test_random_draws_are_noted_for_what_they_do_to_the_comparison():
    native = {"route": False, "routed": {}, "unrouted": {"dropout": 5, "randn_like": 1}}
    noted = compare_runs([capture(training(), host_random=native)], [capture(training())])
    assert any(
        "drew random numbers on its device (dropout x5, randn_like x1): each stack drew from its "
        "own device generator (--native-random)" in n and "randomness, not the migration" in n
        for n in noted.notes
    )
    routed = {"route": True, "routed": {"dropout": 5}, "unrouted": {}}
    noted = compare_runs([capture(training(), host_random=routed)], [capture(training())])
    assert any(
        "were made on the host (original: dropout x5), so both stacks draw the same" in n
        for n in noted.notes
    )
    quiet = compare_runs([capture(training(), host_random={"route": True})], [capture(training())])
    assert not any("random" in n for n in quiet.notes)


def generation(
    tokens: list[list[int]],
    top: list[list[list[float]]],
    top_idx: list[list[list[int]]],
    prompt: int = 2,
) -> Capture:
    return capture(
        {
            "generate/0/sequences": torch.tensor(tokens),
            "generate/0/top_values": torch.tensor(top),  # [steps, batch, k]
            "generate/0/top_indices": torch.tensor(top_idx),
        },
        generate=[{"prompt_length": prompt, "logits_dtype": "float32"}],
    )


def test_tokens_equal_match():
    c = generation([[1, 2, 7, 8]], [[[5.0, 3.0]], [[4.0, 1.0]]], [[[7, 9]], [[8, 3]]])
    item = compare_generate(0, c, c, PRECISIONS["fp32"])
    assert item.verdict == MATCH and item.detail == "all 1 rows equal"


def test_tokens_parting_at_a_near_tie_match_with_a_note():
    original = generation(
        [[1, 2, 7, 8]], [[[5.0, 4.99951171875]], [[4.0, 1.0]]], [[[7, 9]], [[8, 3]]]
    )
    migrated = generation(
        [[1, 2, 9, 4]], [[[5.0, 4.99951171875]], [[4.0, 1.0]]], [[[9, 7]], [[4, 3]]]
    )
    item = compare_generate(0, original, migrated, PRECISIONS["fp32"])
    assert item.verdict == MATCH
    assert item.entries[0].detail.startswith(
        "first divergence at token 0: near tie (logit gap 4.88e-04)"
    )


def test_tokens_parting_clearly_diverge():
    original = generation([[1, 2, 7, 8]], [[[5.0, 3.0]], [[4.0, 1.0]]], [[[7, 9]], [[8, 3]]])
    migrated = generation([[1, 2, 7, 3]], [[[5.0, 3.0]], [[4.0, 1.0]]], [[[7, 9]], [[3, 8]]])
    item = compare_generate(0, original, migrated, PRECISIONS["fp32"])
    assert item.verdict == DIVERGE
    assert item.detail == "row 0: first divergence at token 1"


def test_captures_written_without_safetensors_load(tmp_path):
    # The child falls back to torch.save where the program's environment lacks safetensors.
    import json

    from neuron_migrate.validate.runner import load_captures

    rank = tmp_path / "rank0"
    rank.mkdir()
    torch.save({"loss": torch.tensor([1.0, 0.5], dtype=torch.float64)}, rank / "tensors.pt")
    (rank / "manifest.json").write_text(
        json.dumps({"rank": 0, "tensor_file": "tensors.pt", "items": {}})
    )
    (loaded,) = load_captures(tmp_path)
    assert loaded.tensors["loss"].tolist() == [1.0, 0.5]
