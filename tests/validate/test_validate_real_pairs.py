"""Real pairs: each example that runs on the old stack (torch_xla 2.9, XLA:CPU) against its migration
(torch 2.13), and wrong migrations planted in them, which must be caught.

The examples run 5 steps. `xla_legacy_ordinals.py` is left out: it uses APIs removed in torch_xla
2.7, so it cannot run on the reference stack (examples/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.validate import pipeline
from neuron_migrate.validate.compare import DIVERGE, MATCH, compare_runs
from neuron_migrate.validate.runner import (
    CaptureOptions,
    Program,
    Run,
    default_python,
    run_programs,
)

from .conftest import EXAMPLES, PROGRAMS, plant

pytestmark = pytest.mark.slow
STEPS = ["--steps", "5"]

# name: (example, extra args, migrated launched by torchrun?, capture options)
PAIRS = {
    "single": ("xla_single_mpdeviceloader.py", [], False, CaptureOptions(forward="MLP")),
    "spawn": ("xla_spawn_multiprocess.py", [], True, CaptureOptions()),
    "torchrun": ("xla_torchrun_pg.py", [], True, CaptureOptions()),
    "step_closure": ("xla_step_closure.py", [], False, CaptureOptions()),
    "bf16_off": ("xla_bf16_env.py", ["--no-bf16"], False, CaptureOptions()),
    "bf16": ("xla_bf16_env.py", [], False, CaptureOptions()),
}


def _run(program: Program, options: CaptureOptions, tmp: Path) -> Run:
    (run,) = run_programs([program], options, tmp, timeout=300)
    assert run.ok, run.log_tail()
    return run


@pytest.fixture(scope="module")
def pairs(reference_python, migrated_examples, tmp_path_factory):
    """Runs a pair the first time a test asks for it (original and migrated side by side)."""
    done: dict[str, tuple[Run, Run]] = {}

    def get(name: str) -> tuple[Run, Run]:
        if name not in done:
            example, extra, torchrun, options = PAIRS[name]
            original = Program("original", EXAMPLES / example, reference_python, STEPS + extra)
            migrated = Program(
                "migrated",
                migrated_examples / example,
                default_python(),
                STEPS + extra,
                1 if torchrun else None,
            )
            runs = run_programs(
                [original, migrated], options, tmp_path_factory.mktemp(name), timeout=300
            )
            for run in runs:
                assert run.ok, f"{run.program.label}: exit {run.returncode}\n{run.log_tail()}"
            done[name] = (runs[0], runs[1])
        return done[name]

    return get


def _items(original: Run, migrated: Run, **kwargs):
    comparison = compare_runs(original.captures, migrated.captures, **kwargs)
    return comparison, {item.key: item for item in comparison.items}


@pytest.mark.parametrize("name", ["single", "spawn", "torchrun", "bf16_off"])
def test_fp32_examples_reproduce_the_original(pairs, name):
    original, migrated = pairs(name)
    comparison, items = _items(original, migrated)
    assert comparison.precision.name == "fp32"
    assert comparison.verdict == MATCH, [(i.key, i.verdict, i.detail) for i in comparison.items]
    losses = items["losses"]
    assert len(losses.entries) == 5 and all(e.verdict == MATCH for e in losses.entries)
    assert items["parameters"].verdict == MATCH and items["gradients"].verdict == MATCH
    if name == "single":
        assert items["forward"].verdict == MATCH  # --forward MLP: the first forward's logits


def test_capture_adds_no_graph_execution_on_xla(pairs):
    original, _ = pairs("single")
    metrics = original.captures[0].manifest["xla_metrics"]
    # One graph execution per step, as the script alone does (mark_step per step); measured
    # uncaptured: 2 compiles, 5 executions for 5 steps.
    assert metrics["ExecuteTime"] == 5
    assert metrics["CompileTime"] == 2


def test_autocast_example_matches_within_bf16_tolerances(pairs):
    original, migrated = pairs("step_closure")
    comparison, items = _items(original, migrated)
    assert comparison.precision.name == "bf16"  # autocast(bfloat16) on both sides
    assert items["precision"].detail == (
        "original: params float32, autocast bfloat16; migrated: params float32, autocast bfloat16"
    )
    assert comparison.verdict == MATCH, [(i.key, i.verdict, i.detail) for i in comparison.items]


def test_bf16_example_matches_on_the_noise_floor_rule(reference_python, migrated_examples, tmp_path):
    """XLA_USE_BF16=1 migrated to float32 init and casts where data moves: judged against a float32
    run of the original, every item is within its noise floor, and the initial weights are the
    original's exactly (the same float32 draw, rounded to bf16 the same way)."""
    example = "xla_bf16_env.py"
    programs = [
        Program("original", EXAMPLES / example, reference_python, STEPS),
        Program("migrated", migrated_examples / example, default_python(), STEPS),
    ]
    result = pipeline.validate(programs, pipeline.Settings(timeout=600), tmp_path)
    assert result.floor_run is not None and result.floor_run.ok, result.floor_run.log_tail()
    comparison = result.comparison
    items = {item.key: item for item in comparison.items}
    assert comparison.verdict == MATCH, [(i.key, i.verdict, i.detail) for i in comparison.items]
    assert comparison.floor == {
        "name": "float32",
        "program": str(EXAMPLES / example),
        "changed": {"XLA_USE_BF16": 1},
        "width": "float32",
    }
    assert comparison.judged_by == "float32 floor"
    assert items["precision"].detail == (
        "original: params bfloat16 (XLA_USE_BF16=1); migrated: params bfloat16 "
        "(the same dtypes: XLA_USE_BF16=1 became explicit casts)"
    )
    for key in ("losses", "initial", "gradients", "parameters"):
        assert items[key].rule == "noise floor (R ≤ 2)" and items[key].ratio is not None
    assert items["initial"].stats is not None and items["initial"].stats.max_abs == 0.0


def test_planted_learning_rate_change_is_caught(pairs, tmp_path, migrated_examples):
    original, _ = pairs("single")
    example = "xla_single_mpdeviceloader.py"
    wrong = plant(
        migrated_examples / example, tmp_path / example, "lr=args.lr,", "lr=args.lr * 1.1,"
    )
    migrated = _run(
        Program("migrated", wrong, default_python(), STEPS), PAIRS["single"][3], tmp_path / "run"
    )
    comparison, items = _items(original, migrated)
    assert comparison.verdict == DIVERGE
    assert items["losses"].entries[0].verdict == MATCH  # step 0 runs before the first update
    assert "first diverging step 1" in items["losses"].detail
    assert items["gradients"].verdict == MATCH and items["parameters"].verdict == DIVERGE


def test_planted_bf16_policy_change_is_caught(pairs, tmp_path, migrated_examples):
    original, _ = pairs("bf16")
    example = "xla_bf16_env.py"
    wrong = plant(
        migrated_examples / example,
        tmp_path / example,
        "TinyAttentionBlock().to(device, torch.bfloat16 if USE_BF16 else None)",
        "TinyAttentionBlock().to(device)",
    )
    migrated = _run(
        Program("migrated", wrong, default_python(), STEPS), CaptureOptions(), tmp_path / "run"
    )
    comparison, items = _items(original, migrated)
    assert comparison.verdict == DIVERGE
    assert items["precision"].verdict == DIVERGE
    assert (
        items["precision"].detail
        == "original: params bfloat16 (XLA_USE_BF16=1); migrated: params float32"
    )


def test_device_random_draws_are_the_same_on_both_stacks(reference_python, tmp_path):
    """A denoising (diffusion-planning style) trainer draws noise, timesteps and dropout masks on
    the XLA device every step. Its faithful migration matches once both programs draw on the host;
    left to their own device generators they part at step 0, and validate says why."""
    source = PROGRAMS / "xla_denoising_train.py"
    migrated = tmp_path / source.name
    migrated.write_text(rewrite_source(source.read_text(), str(source), Options()).migrated)
    programs = [
        Program("original", source, reference_python, STEPS),
        Program("migrated", migrated, default_python(), STEPS),
    ]
    result = pipeline.validate(programs, pipeline.Settings(timeout=600), tmp_path / "host")
    comparison = result.comparison
    assert comparison.verdict == MATCH, [(i.key, i.verdict, i.detail) for i in comparison.items]
    routed = result.runs[0].captures[0].manifest["host_random"]["routed"]
    assert routed == {"randint": 5, "randn_like": 5, "dropout": 5}
    native = pipeline.Settings(capture=CaptureOptions(host_random=False), timeout=600)
    result = pipeline.validate(programs, native, tmp_path / "native")
    items = {item.key: item for item in result.comparison.items}
    assert result.comparison.verdict == DIVERGE and items["losses"].first_step == 0
    assert any(
        "the original program drew random numbers on its device" in note
        and "randomness, not the migration, may explain it" in note
        for note in result.comparison.notes
    )
