"""The perturbation floor: a float32 run judged against the original run again with its rounding
moved, where a float64 run cannot serve as the floor.

The first tests use captures made up in memory; the slow ones run a small ResNet (BatchNorm over a
batch of 4, whose rounding grows step by step past the float32 tolerances) against its faithful
copy, which sums its convolutions in another order, and against that copy with a bug planted in it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from neuron_migrate.validate import noise_floor, pipeline, report
from neuron_migrate.validate.compare import DIVERGE, MATCH, PRECISIONS, compare_runs
from neuron_migrate.validate.localize import localize
from neuron_migrate.validate.runner import CaptureOptions, Program, Run

from .conftest import PROGRAMS, items_by_key, plant, validate_json
from .test_validate_compare import capture, training
from .test_validate_noise_floor import layers, rounded_apart

ORIGINAL = PROGRAMS / "small_resnet_train.py"
FAITHFUL = PROGRAMS / "small_resnet_reordered.py"


def chaotic(seed: int) -> dict[str, torch.Tensor]:
    """A float32 run from the original's weights whose rounding grew to 3e-3 over its steps, as a
    BatchNorm model's does."""
    run = training()
    return dict(rounded_apart(run, seed, 3e-3), **{"init/w": run["init/w"]})


def test_rounding_grown_past_the_tolerance_passes_on_the_perturbation_floor():
    original = training()
    perturbed = [[capture(chaotic(1))], [capture(chaotic(2))]]
    migrated = chaotic(3)
    plain = compare_runs([capture(original)], [capture(migrated)])
    assert plain.verdict == DIVERGE
    result = compare_runs([capture(original)], [capture(migrated)], perturbed=perturbed)
    assert result.verdict == MATCH, [(i.key, i.detail) for i in result.items]
    items = {i.key: i for i in result.items}
    assert items["parameters"].rule.endswith("or perturbation noise floor (R ≤ 2)")
    assert items["parameters"].ratio is not None and items["parameters"].ratio.value < 2
    assert any("perturbation floor" in n for n in result.notes)
    # A 10 % error in the gradients is far past what rounding grew to.
    bugged = dict(migrated, **{"grad/w": original["grad/w"] * 1.1})
    result = compare_runs([capture(original)], [capture(bugged)], perturbed=perturbed)
    gradients = next(i for i in result.items if i.key == "gradients")
    assert gradients.verdict == DIVERGE and gradients.ratio is not None
    assert gradients.ratio.value > 2


def test_r_is_measured_against_the_farther_perturbed_run():
    original = training()
    near = {k: v * (1 + 1e-6) for k, v in original.items()}  # a run that happened to stay close
    perturbed = [[capture(near)], [capture(chaotic(2))]]
    result = compare_runs([capture(original)], [capture(chaotic(3))], perturbed=perturbed)
    assert result.verdict == MATCH
    alone = compare_runs([capture(original)], [capture(chaotic(3))], perturbed=perturbed[:1])
    assert alone.verdict == DIVERGE


def test_perturbed_runs_of_the_migrated_program_measure_from_it():
    # --noise-floor migrated: R = ||original - migrated|| / ||perturbed migrated - migrated||.
    migrated = chaotic(3)
    perturbed = [[capture(chaotic(1))], [capture(chaotic(2))]]
    result = compare_runs(
        [capture(training())], [capture(migrated)], perturbed=perturbed, perturbed_of="migrated"
    )
    assert result.verdict == MATCH
    assert any("||perturbed - migrated||" in n for n in result.notes)
    same = [[capture(migrated)], [capture(migrated)]]  # bit-identical: the tolerances judge
    result = compare_runs(
        [capture(training())], [capture(migrated)], perturbed=same, perturbed_of="migrated"
    )
    assert result.verdict == DIVERGE


def test_a_perturbed_run_bit_identical_to_the_original_leaves_the_tolerance_to_judge():
    original = training()
    perturbed = [[capture(dict(original))], [capture(dict(original))]]
    close = dict(original, **{"grad/w": original["grad/w"] * (1 + 1e-6)})
    result = compare_runs([capture(original)], [capture(close)], perturbed=perturbed)
    gradients = next(i for i in result.items if i.key == "gradients")
    assert result.verdict == MATCH and gradients.rule.startswith("tolerance")
    assert all(e.ratio is None for e in gradients.entries)  # no division by zero
    off = dict(original, **{"grad/w": original["grad/w"] * (1 + 1e-3)})
    result = compare_runs([capture(original)], [capture(off)], perturbed=perturbed)
    assert next(i for i in result.items if i.key == "gradients").verdict == DIVERGE


def test_localization_names_the_first_module_past_its_own_floor():
    # fc1 differs past the float32 tolerance by rounding the perturbed runs show too; fc2 by 5 %.
    exact = {"fc1": torch.linspace(-1, 1, 256), "fc2": torch.linspace(0, 2, 256)}
    original = layers(exact, {})
    perturbed = [layers(rounded_apart(exact, seed, 1e-3), {}) for seed in (1, 2)]
    moved = rounded_apart(exact, 3, 1e-3)
    migrated = layers(dict(moved, fc2=exact["fc2"] * 1.05), {})
    precision = PRECISIONS["fp32"]
    found = localize(original, migrated, None, precision)
    assert found.where == "fc1"  # the first module that differs at all
    floors = [
        noise_floor.Yardstick(noise_floor.PERTURBATION, original, p, migrated) for p in perturbed
    ]
    found = localize(original, migrated, floors, precision)
    assert (found.finding, found.where) == ("forward", "fc2")
    fc1, fc2 = found.modules
    assert fc1.verdict == MATCH and fc1.ratio is not None
    assert fc1.ratio.value <= noise_floor.COMPONENT_THRESHOLD
    assert fc2.ratio is not None and fc2.ratio.value > 10
    assert "or perturbation noise floor (R ≤ 1.2, per module)" in found.rule


# -- the passes, with made-up runs ------------------------------------------------------------------


def fake_runs(monkeypatch, perturbed: dict[int, dict[str, torch.Tensor]], moved: bool) -> list[str]:
    """validate's runs replaced by made-up ones: the original, a faithful migration whose rounding
    grew past the tolerance, a float64 run that strays (a dropout mask drawn in float64), and
    the perturbed runs given. Returns the options each run was started with."""
    started = []

    def run_programs(programs, options: CaptureOptions, work_dir, timeout):
        runs = []
        for program in programs:
            changed = None
            if options.upcast == "float64":
                tensors = {k: v * 1.05 for k, v in training().items()}
                changed = {"module widened": 1}
            elif options.perturb:
                tensors = perturbed[options.perturb]
                changed = {"module outputs moved by 1 ulp": 4} if moved else {}
            else:
                tensors = training() if program.label == "original" else chaotic(3)
            started.append(
                options.upcast or (f"perturb {options.perturb}" if options.perturb else program.label)
            )
            capture_ = capture(tensors, upcast=changed)
            status = [{"torch_imported": True, "attached": True}]
            runs.append(Run(program, [], 0, 0.0, work_dir / "log", [capture_], processes=status))
        return runs

    monkeypatch.setattr(pipeline, "run_programs", run_programs)
    return started


def run_validate(tmp_path: Path) -> pipeline.Result:
    programs = [
        Program(label, tmp_path / f"{label}.py", Path("python"), cwd=tmp_path)
        for label in ("original", "migrated")
    ]
    return pipeline.validate(programs, pipeline.Settings(), tmp_path / "work")


def test_where_the_float64_run_strays_the_perturbation_floor_judges(monkeypatch, tmp_path):
    started = fake_runs(monkeypatch, {1: chaotic(1), 2: chaotic(2)}, moved=True)
    result = run_validate(tmp_path)
    assert started == ["original", "migrated", "float64", "perturb 1", "perturb 2"]
    assert result.verdict == MATCH and result.comparison is not None
    assert result.comparison.judged_by == "perturbation floor"
    assert result.passes[-1].startswith("perturbation floor: the original program 2 more times")
    assert result.passes[-1].endswith("because the float64 run could not serve as the floor")
    assert any("float64 run of the original strays" in n for n in result.comparison.notes)
    assert len(result.perturbed_runs) == 2
    table = report.format_table(result)
    assert table.rstrip().endswith("judged by the perturbation floor")
    assert "perturbation floor: " in table and "tol|ptb R" in table
    document = report.document(result)
    assert document["judged_by"] == "perturbation floor"
    assert [r["label"] for r in document["perturbed_runs"]] == ["perturbed1", "perturbed2"]
    assert "judged by the perturbation floor" in report.markdown(document)


def test_perturbed_runs_bit_identical_to_the_original_leave_the_tolerances(monkeypatch, tmp_path):
    fake_runs(monkeypatch, {1: training(), 2: training()}, moved=False)
    result = run_validate(tmp_path)
    assert result.verdict == DIVERGE and result.comparison is not None
    assert result.comparison.judged_by == "tolerances"
    assert any(
        n.startswith("no perturbation floor: the perturbed runs came out bit-identical")
        for n in result.comparison.notes
    )


# -- the small ResNet, end to end ------------------------------------------------------------------


@pytest.mark.slow
def test_a_faithful_resnet_copy_is_a_match_on_the_perturbation_floor(capsys):
    code, document = validate_json(capsys, str(ORIGINAL), str(FAITHFUL))
    assert (code, document["verdict"]) == (0, "match"), document["items"]
    assert document["judged_by"] == "perturbation floor"
    assert document["noise_floor"]["runs"] == 2
    # The float64 run ran first, and called the faithful copy DIVERGE: chaos, not the migration.
    assert document["floor_run"]["returncode"] == 0
    assert document["passes"][-1].startswith("perturbation floor:")
    assert document["passes"][-1].endswith("because the float64 floor left items diverging")
    items = items_by_key(document)
    losses = items["losses"]
    assert "or perturbation noise floor" in losses["rule"]
    assert losses["ratio"]["r"] < noise_floor.RUN_THRESHOLD
    # Rounding alone takes the curves past the float32 tolerance, the perturbed ones as well.
    parts = losses["series"]["parts_from"]
    assert parts["migrated"] is not None and parts["floor"] is not None
    assert "trajectories part beyond the tolerance" in losses["detail"]
    for key in ("gradients", "parameters"):
        assert items[key]["ratio"]["r"] < noise_floor.RUN_THRESHOLD


@pytest.mark.slow
def test_a_changed_batchnorm_epsilon_diverges_and_is_localized_to_that_batchnorm(
    capsys, tmp_path
):
    wrong = plant(
        FAITHFUL,
        tmp_path / "eps.py",
        "        self.layer3 = Block(32, 64, 2)\n",
        "        self.layer3 = Block(32, 64, 2)\n        self.layer2.bn1.eps = 1e-3\n",
    )
    code, document = validate_json(capsys, str(ORIGINAL), str(wrong), "--localize")
    assert (code, document["verdict"]) == (1, "diverge")
    assert document["judged_by"] == "perturbation floor"
    items = items_by_key(document)
    assert items["losses"]["first_step"] == 0
    assert items["gradients"]["ratio"]["r"] > 100
    (found,) = document["localization"]
    assert (found["step"], found["finding"], found["where"]) == (0, "forward", "layer2.bn1")
    assert "(BatchNorm2d)" in found["headline"]
    rows = {row["name"]: row for row in found["modules"]}
    # The reordered convolutions before it differ, within their floor.
    assert rows["layer2.conv1"]["verdict"] == "match" and rows["layer2.conv1"]["ratio"]["r"] < 1.2
    assert rows["layer2.bn1"]["ratio"]["r"] > 100
