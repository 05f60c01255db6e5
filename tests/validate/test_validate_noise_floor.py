"""The noise-floor rule, teacher-forced generation and localization, on captures made up in memory."""

from __future__ import annotations

import math

import pytest
import torch

from neuron_migrate.validate import noise_floor
from neuron_migrate.validate.compare import DIVERGE, MATCH, PRECISIONS, compare_runs
from neuron_migrate.validate.localize import localize
from neuron_migrate.validate.teacher_forcing import compare_forced

from .test_validate_compare import capture, training


def bf16_like(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a bf16 run of the same computation records: every value rounded to bf16."""
    return {k: v.to(torch.bfloat16).to(v.dtype) for k, v in values.items()}


def low_precision(tensors: dict[str, torch.Tensor], **manifest) -> object:
    return capture(tensors, param_dtypes=["bfloat16"], **manifest)


def test_r_ratio_is_one_for_the_same_rounding_and_zero_for_the_floor_itself():
    floor = torch.linspace(-2, 2, 1000)
    rounded = floor.to(torch.bfloat16).float()
    assert noise_floor.r_ratio(rounded, rounded, floor).value == pytest.approx(1.0, rel=1e-2)
    assert noise_floor.r_ratio(rounded, floor, floor).value == 0.0
    # Twice the original's error: R = 2.
    doubled = floor + 2 * (rounded - floor)
    assert noise_floor.r_ratio(rounded, doubled, floor).value == pytest.approx(2.0, rel=1e-3)


def test_a_quantity_precision_does_not_move_must_agree_to_float32():
    # The original equals its floor (an integer-valued quantity): eps keeps R finite and small
    # differences at float32 scale pass, a real difference does not.
    floor = torch.arange(100, dtype=torch.float32)
    assert noise_floor.r_ratio(floor, floor * (1 + 1e-7), floor).value < 1
    assert noise_floor.r_ratio(floor, floor * 1.01, floor).value > 100


def test_the_mark_for_one_tensor_allows_for_its_size():
    assert noise_floor.threshold(4, 2.0) > 4  # a 4-element bias: R of two equal runs spreads wide
    assert noise_floor.threshold(64, 2.0) == 2.0
    assert noise_floor.threshold(10**6, 1.2) == 1.2


def test_bf16_rounding_passes_on_the_floor_where_float32_tolerances_fail():
    floor_run = training()
    original = bf16_like(floor_run)
    migrated = bf16_like(training(noise=1e-7))  # the same computation, rounded the same way
    plain = compare_runs([capture(original)], [capture(migrated)], precision="fp32")
    assert plain.verdict == MATCH or plain.verdict == DIVERGE  # (either: not what is judged here)
    result = compare_runs(
        [low_precision(original)], [low_precision(migrated)], floor=[capture(floor_run)]
    )
    assert result.precision.name == "bf16"
    items = {i.key: i for i in result.items}
    assert result.verdict == MATCH, [(i.key, i.detail) for i in result.items]
    assert items["losses"].rule == "noise floor (R ≤ 2)"
    assert items["parameters"].ratio is not None and items["parameters"].ratio.value < 2
    assert any("noise floor of a float32 run" in n for n in result.notes)


def test_a_bug_hidden_in_bf16_tolerance_is_caught_by_the_floor():
    # A 1 % error in the final parameters: inside bf16's 1.6 % tolerance, far above its rounding.
    floor_run = training()
    original = bf16_like(floor_run)
    migrated = dict(original, **{"param/w": floor_run["param/w"] * 1.01})
    without_floor = compare_runs([low_precision(original)], [low_precision(migrated)])
    assert without_floor.verdict == MATCH  # the old rule lets it through
    result = compare_runs(
        [low_precision(original)], [low_precision(migrated)], floor=[capture(floor_run)]
    )
    parameters = next(i for i in result.items if i.key == "parameters")
    assert parameters.verdict == DIVERGE and parameters.ratio.value > 2


def test_without_a_floor_bf16_tolerances_still_apply():
    result = compare_runs(
        [low_precision(bf16_like(training()))], [low_precision(bf16_like(training(noise=5e-3)))]
    )
    assert result.verdict == MATCH
    assert next(i for i in result.items if i.key == "losses").rule.startswith("tolerance")


def test_overridden_tolerances_turn_the_floor_off():
    floor_run = training()
    result = compare_runs(
        [low_precision(bf16_like(floor_run))],
        [low_precision(bf16_like(floor_run))],
        rtol=0.1,
        floor=[capture(floor_run)],
    )
    assert all(i.ratio is None for i in result.items)


# -- teacher forcing -------------------------------------------------------------------------------


def forced(logits: torch.Tensor) -> object:
    """A capture whose generate() call 0 kept teacher-forced logits [T, B, V]."""
    return capture(
        {"generate/0/logits": logits},
        generate=[{"prompt_length": 2, "logits_dtype": "float32", "forced": True}],
    )


def logits(steps: int = 4, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randn(steps, 1, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def test_forced_logits_that_agree_match():
    e = logits()
    item = compare_forced(0, forced(e), forced(e + 1e-7), None, PRECISIONS["fp32"])
    assert item.verdict == MATCH and item.first_step is None
    assert item.detail == "4 positions agree within tolerance and choose the same tokens"


def test_a_constant_shift_is_no_difference():
    e = logits()
    assert compare_forced(0, forced(e), forced(e + 5.0), None, PRECISIONS["fp32"]).verdict == MATCH


def test_a_near_tie_is_told_from_a_real_difference():
    e = logits()
    top2 = e[2, 0].topk(2).indices
    tied = e.clone()
    tied[2, 0, top2[1]] = tied[2, 0, top2[0]] - 2e-4  # the original barely prefers its token
    migrated = tied.clone()
    migrated[2, 0, top2[1]] += 3e-4  # the migrated program barely prefers the other
    item = compare_forced(0, forced(tied), forced(migrated), None, PRECISIONS["fp32"])
    assert item.verdict == MATCH
    assert item.first_step == 2
    assert "first divergent position 2 (rows 0): near tie" in item.detail

    wrong = e.clone()
    wrong[2, 0, top2[1]] += 5.0  # a real difference: another token wins by far
    item = compare_forced(0, forced(e), forced(wrong), None, PRECISIONS["fp32"])
    assert item.verdict == DIVERGE
    assert "first divergent position 2 (rows 0): real difference" in item.detail
    assert "logits out of tolerance from position 2, rows 0" in item.detail
    assert item.series is not None and item.series["parting"] == [2.0]


def test_forced_logits_against_the_floor():
    floor = logits(vocab=200)
    original = floor.to(torch.bfloat16).float()
    migrated = (floor + 1e-3 * torch.randn_like(floor)).to(torch.bfloat16).float()
    precision = PRECISIONS["bf16"]
    item = compare_forced(0, forced(original), forced(migrated), forced(floor), precision)
    assert item.verdict == MATCH, item.detail
    assert item.rule.startswith("teacher forcing: noise floor")
    bugged = migrated.clone()
    bugged[1:] *= 1.05  # every logit 5 % off from position 1
    item = compare_forced(0, forced(original), forced(bugged), forced(floor), precision)
    assert item.verdict == DIVERGE and "from position 1" in item.detail


# -- localization ------------------------------------------------------------------------------------


def layers(outputs: dict[str, torch.Tensor], phases: dict[str, dict[str, torch.Tensor]], step=0):
    tensors = {f"layers/out/{i:05d}/{k}": v for i, (k, v) in enumerate(outputs.items())}
    for phase, values in phases.items():
        tensors.update({f"layers/{phase}/{k}": v for k, v in values.items()})
    manifest = {
        "layers": {
            "step": step,
            "modules": [[k, "Linear"] for k in outputs],
            "truncated": False,
            "phases": sorted(phases),
        }
    }
    return capture(tensors, **manifest)


def test_the_first_module_that_differs_is_named():
    out = {"fc1": torch.ones(4), "act": torch.ones(4), "fc2": torch.ones(4)}
    wrong = dict(out, act=torch.ones(4) * 1.5, fc2=torch.ones(4) * 2)
    params = {"step0/before": {"fc1.weight": torch.ones(2)}}
    found = localize(layers(out, params), layers(wrong, params), None, PRECISIONS["fp32"])
    assert (found.finding, found.where) == ("forward", "act")
    assert found.headline.startswith(
        "the forward of step 0: the first module whose output differs is act"
    )


def test_an_update_that_differs_is_named_before_the_forward():
    out = {"fc1": torch.ones(4)}
    w = torch.ones(2)
    good = {"step0/grad": {"fc1.weight": w}, "step0/after": {"fc1.weight": w * 0.9}}
    bad = {"step0/grad": {"fc1.weight": w}, "step0/after": {"fc1.weight": w * 0.1}}
    found = localize(
        layers(out, good, step=1),
        layers({"fc1": out["fc1"] * 3}, bad, step=1),
        None,
        PRECISIONS["fp32"],
    )
    assert (found.finding, found.where) == ("update", "fc1.weight")
    assert "the optimizer step after step 0: the gradients agree" in found.headline


def test_gradients_changed_between_backward_and_the_optimizer_are_a_sync_problem():
    out = {"fc1": torch.ones(4)}
    g = torch.ones(3)
    good = {"step0/backward_grad": {"fc1.weight": g}, "step0/grad": {"fc1.weight": g / 2}}
    bad = {"step0/backward_grad": {"fc1.weight": g}, "step0/grad": {"fc1.weight": g}}
    found = localize(layers(out, good), layers(out, bad), None, PRECISIONS["fp32"])
    assert found.finding == "gradient sync"
    assert "all-reduce" in found.headline


def test_modules_named_differently_are_matched_by_position_and_it_is_said():
    out_o = {"fc1": torch.ones(4), "fc2": torch.ones(4)}
    out_m = {"layers.0": torch.ones(4), "layers.1": torch.ones(4) * 2}
    found = localize(layers(out_o, {}), layers(out_m, {}), None, PRECISIONS["fp32"])
    assert found.where == "layers.1"
    assert any(
        "name their modules differently" in n and "matched by position" in n for n in found.notes
    )


def test_module_outputs_against_the_floor():
    floor = {"fc": torch.linspace(-1, 1, 256)}
    original = {"fc": floor["fc"].to(torch.bfloat16).float()}
    migrated = {"fc": (floor["fc"] * (1 + 1e-3)).to(torch.bfloat16).float()}
    precision = PRECISIONS["bf16"]
    o, f = layers(original, {}), layers(floor, {})
    m = layers(migrated, {})
    found = localize(o, m, [noise_floor.Yardstick("float32", f, o, m)], precision)
    assert found.finding == "none" and found.modules[0].ratio is not None
    w = layers({"fc": (floor["fc"] * 1.02).to(torch.bfloat16).float()}, {})
    found = localize(o, w, [noise_floor.Yardstick("float32", f, o, w)], precision)
    assert (
        found.finding == "forward"
        and found.modules[0].ratio.value > noise_floor.COMPONENT_THRESHOLD
    )
    assert math.isfinite(found.modules[0].ratio.value)


def rounded_apart(values: dict[str, torch.Tensor], seed: int, size: float) -> dict[str, torch.Tensor]:
    """What another backend's float32 kernels record for the same computation: the exact values
    moved by independent rounding-like noise of relative `size` (grown through many layers)."""
    g = torch.Generator().manual_seed(seed)
    return {
        k: (v.double() * (1 + size * torch.randn(v.shape, generator=g, dtype=torch.float64))).to(
            v.dtype
        )
        for k, v in values.items()
    }


def test_float32_rounding_past_the_tolerance_passes_on_a_float64_floor():
    exact = {k: v.double() for k, v in training().items()}
    original = rounded_apart(exact, 1, 3e-4)  # past the float32 tolerances (rtol 1e-5 / 1e-4)
    migrated = rounded_apart(exact, 2, 3e-4)
    plain = compare_runs([capture(original)], [capture(migrated)])
    assert plain.precision.name == "fp32" and plain.verdict == DIVERGE
    result = compare_runs([capture(original)], [capture(migrated)], floor=[capture(exact)])
    assert result.verdict == MATCH, [(i.key, i.detail) for i in result.items]
    items = {i.key: i for i in result.items}
    assert items["gradients"].rule == "tolerance (atol 1e-05, rtol 0.0001) or float64 noise floor (R ≤ 2)"
    assert any("noise floor of a float64 run" in n for n in result.notes)


def test_a_float32_bug_stays_a_bug_on_a_float64_floor():
    exact = {k: v.double() for k, v in training().items()}
    original = rounded_apart(exact, 1, 3e-4)
    migrated = dict(rounded_apart(exact, 2, 3e-4), **{"grad/w": exact["grad/w"] * 1.01})
    result = compare_runs([capture(original)], [capture(migrated)], floor=[capture(exact)])
    gradients = next(i for i in result.items if i.key == "gradients")
    assert result.verdict == DIVERGE and gradients.verdict == DIVERGE
    assert gradients.ratio is not None and gradients.ratio.value > 2


def test_a_rounding_flip_in_one_tensor_is_judged_against_the_groups_rounding():
    # Where a rounding flip lands differs from run to run: here the original's bias happens to sit
    # 1e-9 from the float64 run and the migrated bias 1e-3 off, small against the rounding the
    # original shows across the group. Its own R is huge; against the group it passes.
    exact = {k: v.double() for k, v in training().items()}
    exact["grad/b"] = torch.full((8,), 0.05, dtype=torch.float64)
    original = rounded_apart(exact, 1, 3e-3)
    original["grad/b"] = exact["grad/b"] * (1 + 1e-9)
    migrated = rounded_apart(exact, 2, 3e-3)
    migrated["grad/b"] = exact["grad/b"] + 1e-3
    result = compare_runs([capture(original)], [capture(migrated)], floor=[capture(exact)])
    gradients = next(i for i in result.items if i.key == "gradients")
    assert gradients.verdict == MATCH, gradients.entries
    bias = next(e for e in gradients.entries if e.name == "b")
    assert bias.stats.mismatches > 0 and bias.ratio.value < 2
    # The same bias doubled is a bug.
    migrated["grad/b"] = exact["grad/b"] * 2
    result = compare_runs([capture(original)], [capture(migrated)], floor=[capture(exact)])
    assert next(i for i in result.items if i.key == "gradients").verdict == DIVERGE


def test_a_float64_floor_is_used_only_where_it_lands_near_the_original():
    # Rounding moves a float32 run's losses by far less than 1e-2 from its float64 twin; a twin
    # that drew other random numbers (dropout after the first forward) lands farther off.
    from neuron_migrate.validate import pipeline

    losses = torch.tensor([2.0, 1.5, 1.2], dtype=torch.float64)
    original = [capture({"loss": losses})]
    assert pipeline._floor_is_close([capture({"loss": losses * (1 + 3e-4)})], original)
    assert not pipeline._floor_is_close([capture({"loss": losses * 1.05})], original)
    assert not pipeline._floor_is_close([capture({"loss": losses[:2]})], original)
