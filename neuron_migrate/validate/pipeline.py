"""One `validate` run from end to end: which passes it makes over the programs, and why.

1. **capture**: the original and the migrated program, side by side;
2. **noise floor**: where they compute in low precision, one of them again in float32
   (`noise_floor`), unless told not to; where they compute in float32 and the float32
   tolerances leave an item diverging, one of them again in float64; and where that float64 run
   cannot serve as the floor or leaves an item diverging still, the same program twice more in
   float32 with its rounding moved (the perturbation floor), so that no float32 run is called
   DIVERGE for what rounding alone can do;
3. **rerun**, only where needed: every program again (the floor run too), with each `generate()`
   call following the original's tokens where generated tokens parted (`teacher_forcing`), and, on
   request, recording the first diverging step module by module (`localize`).

The CLI (`command`) and notebooks call `validate()`; `report` shows its `Result`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from neuron_migrate.validate import noise_floor
from neuron_migrate.validate.compare import (
    DIVERGE,
    MATCH,
    Comparison,
    Item,
    compare_runs,
    floor_yardsticks,
)
from neuron_migrate.validate.localize import Localization, localize, step_to_localize
from neuron_migrate.validate.runner import Capture, CaptureOptions, Program, Run, run_programs
from neuron_migrate.validate.teacher_forcing import compare_forced
from neuron_migrate.validate.workdir import Listing, isolated, listing

EXIT_MATCH, EXIT_DIVERGE, EXIT_ERROR = 0, 1, 2
FLOOR_SOURCES = ("original", "migrated", "off")
# The perturbation floor's runs: two, so that R is measured against the farther of two samples of
# what rounding does, not against one that happened to stay close.
PERTURBED_RUNS = 2


@dataclass
class Settings:
    """What a validate run is asked to do (the CLI's flags, less how to show the result)."""

    capture: CaptureOptions = field(default_factory=CaptureOptions)
    precision: str = "auto"
    rtol: float | None = None
    atol: float | None = None
    timeout: float = 600
    localize: bool = False
    noise_floor: str = "original"  # which program runs again in float32, or "off"


@dataclass
class Result:
    runs: list[Run]  # the capture pass: original, migrated
    comparison: Comparison | None
    verdict: str
    exit_code: int
    errors: list[str]
    floor_run: Run | None = None  # the float32 or float64 floor
    perturbed_runs: list[Run] = field(default_factory=list)  # the perturbation floor
    reruns: list[Run] = field(default_factory=list)
    localizations: list[Localization] = field(default_factory=list)
    passes: list[str] = field(default_factory=list)  # what was run, and why, in order


def validate(
    programs: list[Program],
    settings: Settings,
    work_dir: Path,
    log: Callable[[str], None] = lambda message: None,
) -> Result:
    """Runs the passes over ORIGINAL and MIGRATED; `log` hears of each pass as it starts."""
    work_dir.mkdir(parents=True, exist_ok=True)
    passes: list[str] = []

    def start(message: str) -> None:
        passes.append(message)
        log(message)

    # Before any run writes there: the later runs start in copies of the folders as they were.
    listings: dict[Path, Listing] = {}
    for program in programs:
        cwd = (program.cwd or Path.cwd()).resolve()
        listings.setdefault(cwd, listing(cwd, work_dir))
    start("capture: the original and the migrated program, side by side")
    runs = run_programs(programs, settings.capture, work_dir, settings.timeout)
    errors = run_errors(runs, settings)
    if errors or not all(run.captures for run in runs):
        return Result(runs, None, "error", EXIT_ERROR, errors, passes=passes)
    original, migrated = runs
    comparison = _compare(settings, original.captures, migrated.captures)
    result = Result(runs, comparison, comparison.verdict, EXIT_ERROR, errors, passes=passes)
    floor_program, width = _floor_program(programs, settings, comparison)
    if floor_program is not None:
        why = "" if width == "float32" else ", because float32 tolerances did not settle every item"
        start(f"noise floor: the {settings.noise_floor} program again, in {width}{why}")
        upcast = dataclasses.replace(settings.capture, upcast=width)
        result.floor_run = _run_one(
            floor_program, settings, upcast, work_dir, listings, comparison.notes
        )
        floor = _usable_floor(result.floor_run, comparison, width)
        if floor is not None:
            if width == "float64" and not _floor_is_close(floor, original.captures):
                comparison.notes.append(
                    "no noise floor: the float64 run of the original strays from its float32 run by more "
                    "than rounding (random draws made in float64 differ, or the program branches on "
                    "dtypes); float32 tolerances apply"
                )
            else:
                comparison = _compare(settings, original.captures, migrated.captures, floor)
                comparison.floor = _floor_info(result.floor_run, width, floor_program.script)
    if floor_program is not None and width == "float64" and _perturbation_wanted(comparison):
        comparison = _perturbation_floor(
            programs, settings, result, comparison, work_dir, start, listings
        )
    result.comparison = comparison
    _rerun(programs, settings, result, work_dir, start, listings)
    comparison = result.comparison
    xla = migrated.xla_use()
    if comparison.verdict not in (MATCH, DIVERGE):
        errors.append("nothing could be compared: the two programs recorded no common item")
        result.verdict, result.exit_code = "error", EXIT_ERROR
    elif xla and comparison.verdict == MATCH:
        errors.append(f"no MATCH: {_ran_on_xla(xla)}")
        result.verdict, result.exit_code = "error", EXIT_ERROR
    else:
        if xla:
            comparison.notes.append(_ran_on_xla(xla))
        result.verdict = comparison.verdict
        result.exit_code = EXIT_MATCH if comparison.verdict == MATCH else EXIT_DIVERGE
    return result


def _ran_on_xla(evidence: str) -> str:
    return (
        f"the migrated program ran on XLA ({evidence}), so it measured torch_xla, not the migration: "
        "run it natively with USE_TORCH_XLA=0 (transformers then leaves XLA alone) or with "
        "--migrated-python naming a Python without torch_xla"
    )


def _compare(
    settings: Settings,
    original: list[Capture],
    migrated: list[Capture],
    floor: list[Capture] | None = None,
    perturbed: list[list[Capture]] | None = None,
) -> Comparison:
    return compare_runs(
        original,
        migrated,
        settings.precision,
        settings.rtol,
        settings.atol,
        floor,
        perturbed,
        settings.noise_floor,
    )


def run_errors(runs: list[Run], settings: Settings) -> list[str]:
    errors = []
    for run in runs:
        name = f"the {run.program.label} program ({run.program.script})"
        if run.timed_out:
            errors.append(f"{name} did not finish within {settings.timeout:g} s")
        elif run.returncode != 0:
            errors.append(
                f"{name} failed with exit status {run.returncode}; last lines of its output:\n{run.log_tail()}"
            )
        elif run.capture_problem():
            errors.append(f"{name}: {run.capture_problem()}; nothing was compared")
        elif not run.captures and not settings.capture.compile_stats:
            forward = settings.capture.forward
            no_torch = not any(p.get("torch_imported") for p in run.processes)
            errors.append(
                f"{name} recorded nothing: it never called backward(), optimizer.step() or generate()"
                + (f", nor ran a {forward} module" if forward else "")
                + (" (it never imported torch)" if no_torch else "")
            )
    return errors


def _run_one(
    program: Program,
    settings: Settings,
    options: CaptureOptions,
    work: Path,
    listings: dict[Path, Listing],
    notes: list[str],
) -> Run:
    """`program` again, in a fresh copy of its working folder: not where its earlier run wrote."""
    fresh, shared = isolated(program, listings, work / "cwd" / program.label)
    if shared:
        notes.append(shared)
    (run,) = run_programs([fresh], options, work, settings.timeout)
    return run


# -- the noise floor ---------------------------------------------------------------------------


def _floor_program(
    programs: list[Program], settings: Settings, comparison: Comparison
) -> tuple[Program | None, str]:
    """The program to run again, and in which width: float32 under a bf16 run; float64 under a
    float32 run that the float32 tolerances could not settle (rounding of another backend's
    kernels, a gradient that is zero but for rounding), and only then."""
    if settings.noise_floor == "off":
        return None, ""
    if comparison.precision.name == "bf16":
        width = "float32"
    elif (
        comparison.precision.name == "fp32"
        and comparison.verdict == DIVERGE
        and _numeric_only(comparison)
    ):
        width = "float64"
    else:
        return None, ""  # tolerances named or overridden, or nothing a floor can settle
    return _floor_source(programs, settings), width


def _floor_source(programs: list[Program], settings: Settings) -> Program:
    source = programs[0] if settings.noise_floor == "original" else programs[1]
    return dataclasses.replace(source, label="floor")


def _numeric_only(comparison: Comparison) -> bool:
    """Whether every diverging item is one a float64 floor can judge: numbers that differ, not a
    policy, a tensor or a step that one side lacks, or weights that start apart."""
    return all(item.verdict != DIVERGE or _floor_can_settle(item) for item in comparison.items)


def _floor_can_settle(item: Item) -> bool:
    base = item.key.split("@")[0]
    if base == "losses":
        series = item.series or {}
        return len(series.get("original", ())) == len(series.get("migrated", ())) > 0
    return (
        base in ("gradients", "parameters", "forward")
        and "only in" not in item.detail
        and all(e.stats is not None for e in item.entries)
    )


# How far a float64 run may land from the float32 run it widens, relative to the losses' size:
# float32 rounding, even amplified past the float32 tolerances, moves a short run's losses by far
# less than a different random draw (a dropout mask) does.
FLOAT64_STRAY = 1e-2


def _floor_is_close(floor: list[Capture], original: list[Capture]) -> bool:
    for f, o in zip(floor, original, strict=False):
        fl, ol = f.tensors.get("loss"), o.tensors.get("loss")
        if fl is None or ol is None or len(fl) != len(ol):
            return False
        fl, ol = fl.double(), ol.double()
        if float((fl - ol).norm()) > FLOAT64_STRAY * (float(ol.norm()) + 1e-12):
            return False
    return True


def _usable_floor(run: Run, comparison: Comparison, width: str) -> list[Capture] | None:
    fallback = "bf16" if width == "float32" else "float32"
    if run.ok and run.capture_problem():
        comparison.notes.append(
            f"no noise floor: in the {width} run {run.capture_problem()}; {fallback} tolerances apply"
        )
        return None
    if not run.ok or not run.captures:
        comparison.notes.append(
            f"no noise floor: the {width} run of {run.program.script} failed (exit "
            f"{run.returncode}); {fallback} tolerances apply. Its last lines:\n{run.log_tail(5)}"
        )
        return None
    if not any(c.manifest.get("upcast") for c in run.captures):
        missed = (
            "no low precision to turn off (the program asks for it in a way validate does not "
            "intercept)"
            if width == "float32"
            else "no float32 module to widen (the program computes outside `nn.Module` calls)"
        )
        comparison.notes.append(
            f"no noise floor: the {width} run found {missed}; {fallback} tolerances apply"
        )
        return None
    return run.captures


def _floor_info(run: Run | None, width: str = "float32", script: Path | None = None) -> dict | None:
    if run is None:
        return None
    # The program as the user named it: the run itself started from a copy of its folder.
    return {
        "name": width,
        "program": str(script or run.program.script),
        "changed": _changed([run]),
        "width": width,
    }


def _changed(runs: list[Run]) -> dict[str, int]:
    """What the floor runs changed in the program, counted over their processes."""
    changed: dict[str, int] = {}
    for run in runs:
        for capture in run.captures:
            for name, count in (capture.manifest.get("upcast") or {}).items():
                changed[name] = changed.get(name, 0) + int(count)
    return changed


def _perturbation_wanted(comparison: Comparison) -> bool:
    """A float32 run that the float64 floor did not settle: refused, failed, or diverging still."""
    return (
        comparison.precision.name == "fp32"
        and comparison.verdict == DIVERGE
        and _numeric_only(comparison)
    )


def _perturbation_floor(
    programs: list[Program],
    settings: Settings,
    result: Result,
    comparison: Comparison,
    work: Path,
    start: Callable[[str], None],
    listings: dict[Path, Listing],
) -> Comparison:
    """The floor program twice more, with every module output moved by one ulp: the comparison
    judged against it, or `comparison` as it was where the runs give no floor."""
    why = (
        "the float64 floor left items diverging"
        if comparison.floor is not None
        else "the float64 run could not serve as the floor"
    )
    start(
        f"perturbation floor: the {settings.noise_floor} program {PERTURBED_RUNS} more times in "
        f"float32, every module output moved by one ulp, because {why}"
    )
    source = _floor_source(programs, settings)
    notes = comparison.notes
    runs = [
        _run_one(
            dataclasses.replace(source, label=f"perturbed{k}"),
            settings,
            dataclasses.replace(settings.capture, perturb=k),
            work,
            listings,
            notes,
        )
        for k in range(1, PERTURBED_RUNS + 1)
    ]
    result.perturbed_runs = runs
    fallback = "the float64 floor" if comparison.floor is not None else "float32 tolerances"
    failed = next((r for r in runs if not r.ok or not r.captures or r.capture_problem()), None)
    if failed is not None:
        what = failed.capture_problem() or f"failed (exit {failed.returncode})"
        notes.append(
            f"no perturbation floor: in its run {failed.program.label} {what}; {fallback} apply. "
            f"Its last lines:\n{failed.log_tail(5)}"
        )
        return comparison
    reference = result.runs[0 if settings.noise_floor == "original" else 1].captures
    if not _changed(runs) or all(_bit_identical(r.captures, reference) for r in runs):
        why = (
            ""
            if _changed(runs)
            else " (they moved no module output: the program computes outside `nn.Module` calls)"
        )
        notes.append(
            "no perturbation floor: the perturbed runs came out bit-identical to the "
            f"{settings.noise_floor}{why}; {fallback} apply"
        )
        return comparison
    original, migrated = result.runs
    perturbed = [r.captures for r in runs]
    judged = _compare(settings, original.captures, migrated.captures, perturbed=perturbed)
    judged.notes[:0] = [n for n in notes if n not in judged.notes and not _floor_note(n)]
    judged.floor = {
        "name": noise_floor.PERTURBATION,
        "program": str(source.script),
        "changed": _changed(runs),
        "width": "float32",
        "runs": len(runs),
    }
    return judged


def _floor_note(note: str) -> bool:
    """compare_runs' own note on the float64 floor (a comparison against another floor has its own)."""
    return note.startswith("what the float32 tolerances did not settle")


def _bit_identical(run: list[Capture], reference: list[Capture]) -> bool:
    if len(run) != len(reference):
        return False
    for a, b in zip(run, reference, strict=True):
        if a.tensors.keys() != b.tensors.keys():
            return False
        if any(not torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors):
            return False
    return True


# -- teacher forcing and localization ------------------------------------------------------------


def _rerun(
    programs: list[Program],
    settings: Settings,
    result: Result,
    work_dir: Path,
    start: Callable[[str], None],
    listings: dict[Path, Listing],
) -> None:
    comparison = result.comparison
    assert comparison is not None
    original = result.runs[0]
    teacher = _teacher(original, comparison)
    step = None
    if settings.localize and comparison.verdict == DIVERGE:
        first = comparison.first_diverging_rank
        step = step_to_localize(comparison, first.rank if first else None)
        if step is None:
            comparison.notes.append(
                "--localize: nothing that a training step computes diverges (only "
                "the precision policy, generation or the agreement of ranks), so no step was rerun"
            )
    if teacher is None and step is None:
        return
    why = []
    if teacher is not None:
        why.append("generate() following the original's tokens")
    if step is not None:
        why.append(f"step {step} recorded module by module")
    options = dataclasses.replace(settings.capture, teacher=teacher, localize=step)
    reruns = [(program, options) for program in programs]
    floor = comparison.floor or {}
    source = _floor_source(programs, settings)
    if floor.get("name") == noise_floor.PERTURBATION:
        reruns += [
            (
                dataclasses.replace(source, label=f"perturbed{k}"),
                dataclasses.replace(options, perturb=k),
            )
            for k in range(1, int(floor["runs"]) + 1)
        ]
    elif floor and result.floor_run is not None:
        reruns.append((source, dataclasses.replace(options, upcast=floor["width"])))
    labels = ", ".join(p.label for p, _ in reruns)
    start(f"rerun: {labels} again, with {' and '.join(why)}")
    notes = comparison.notes
    runs = [_run_one(p, settings, o, work_dir / "rerun", listings, notes) for p, o in reruns]
    result.reruns = runs
    failed = [r for r in runs if not r.ok or not r.captures]
    if failed:
        comparison.notes.append(
            f"the rerun of the {failed[0].program.label} program failed (exit {failed[0].returncode}): "
            f"no teacher forcing or localization. Its last lines:\n{failed[0].log_tail(5)}"
        )
        return
    by_label = {r.program.label: r.captures for r in runs}
    floor_caps = by_label.get("floor")
    if teacher is not None:
        _replace_generation(comparison, by_label["original"], by_label["migrated"], floor_caps)
    if step is not None:
        floors = {c.rank: c for c in floor_caps or []}
        perturbed = [
            {c.rank: c for c in captures}
            for label, captures in by_label.items()
            if label.startswith("perturbed")
        ]
        for o, m in zip(by_label["original"], by_label["migrated"], strict=False):
            yardsticks = floor_yardsticks(
                o,
                m,
                comparison.precision,
                floors.get(o.rank),
                [run[o.rank] for run in perturbed if o.rank in run],
                settings.noise_floor,
            )
            result.localizations.append(localize(o, m, yardsticks, comparison.precision))


def _teacher(original: Run, comparison: Comparison) -> dict | None:
    """The original's sequences for every generate() call whose tokens parted."""
    calls = {}
    capture = original.captures[0]
    for item in comparison.items:
        base = item.key.split("@")[0]
        if base.startswith("generate/") and item.first_step is not None:
            index = int(base.split("/")[1])
            calls[str(index)] = int(capture.manifest["generate"][index]["prompt_length"])
    if not calls:
        return None
    return {
        "file": str((capture.directory / capture.manifest["tensor_file"]).absolute()),
        "calls": calls,
    }


def _replace_generation(
    comparison: Comparison,
    original: list[Capture],
    migrated: list[Capture],
    floor: list[Capture] | None,
) -> None:
    o, m, f = original[0], migrated[0], floor[0] if floor else None
    for position, item in enumerate(comparison.items):
        base = item.key.split("@")[0]
        if not base.startswith("generate/") or item.first_step is None:
            continue
        index = int(base.split("/")[1])
        forced = compare_forced(index, o, m, f, comparison.precision)
        forced.detail = f"{item.detail}; teacher-forced: {forced.detail}"
        forced.key, forced.rank = item.key, item.rank
        comparison.items[position] = forced
