"""Where two runs first part: the update, the module, or the gradient, at the first differing step.

A rerun of both programs records step S in detail (`child/neuron_migrate_capture_layers.py`):
every module's output, the parameters the forward used, the gradients as backward leaves them and
as the optimizer sees them, and the parameters after the update; and for every step before S the
gradients the optimizer saw and the parameters after its update. Read in causal order, the first
of these that differs is the answer; where the comparison had a noise floor, the floor runs are
recorded too, and "differs" means by more than that floor allows (rounding that a faithful
migration changes can grow past the tolerances before the real difference starts):

1. before S, the first step whose gradients differ (the backward or what follows it), or whose
   update differs while its gradients agree (the optimizer);
2. the parameters step S starts from (S = 0: the initialisation);
3. the first module, in the order the calls finish, whose output differs: the forward;
4. the first gradient, in the order backward computes them, that differs: the backward;
5. gradients equal as backward leaves them but not as the optimizer sees them: what runs between
   (all-reduce, clipping, scaling);
6. the update of step S.

Modules are matched by qualified name; where the programs name them differently but run the same
classes in the same order, by position, and the result says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from neuron_migrate.validate import noise_floor
from neuron_migrate.validate.compare import (
    DIVERGE,
    MATCH,
    Comparison,
    Entry,
    Precision,
    Stats,
    compare_tensors,
    tensor_stats,
)
from neuron_migrate.validate.noise_floor import Ratio, Yardstick, r_ratio
from neuron_migrate.validate.runner import Capture

# What each phase of a step holds, in the order a step computes them.
PHASES = ("before", "backward_grad", "grad", "after")


@dataclass
class Row:
    name: str
    kind: str  # module class, or "parameter"
    verdict: str
    stats: Stats | None
    ratio: Ratio | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "verdict": self.verdict,
            "stats": self.stats.as_dict() if self.stats else None,
            "ratio": self.ratio.as_dict() if self.ratio else None,
        }


@dataclass
class Localization:
    rank: int
    step: int
    finding: str  # update | start | forward | backward | gradient sync | none | unavailable
    where: str  # the module or parameter
    headline: str
    rule: str
    modules: list[Row] = field(default_factory=list)  # in the order the calls finished
    phases: dict[str, list[Row]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "step": self.step,
            "finding": self.finding,
            "where": self.where,
            "headline": self.headline,
            "rule": self.rule,
            "modules": [row.as_dict() for row in self.modules],
            "phases": {k: [row.as_dict() for row in v] for k, v in self.phases.items()},
            "notes": self.notes,
        }


def step_to_localize(comparison: Comparison, rank: int | None = None) -> int | None:
    """The first step at which `rank` (or the single rank) diverges, from the first comparison."""
    suffix = f"@rank{rank}" if rank is not None and comparison.ranks else ""
    items = {i.key: i for i in comparison.items}

    def diverges(key: str) -> bool:
        item = items.get(key + suffix)
        return item is not None and item.verdict == DIVERGE

    if diverges("initial") or diverges("gradients") or diverges("forward"):
        return 0
    losses = items.get("losses" + suffix)
    if losses is not None and losses.first_step is not None:
        return losses.first_step
    if diverges("parameters"):
        return max(0, len(losses.entries) - 1) if losses is not None else 0
    return None


def localize(
    original: Capture,
    migrated: Capture,
    floors: list[Yardstick[Capture]] | None,
    precision: Precision,
) -> Localization:
    """`floors`: the noise floor the comparison was judged against, as recorded in the rerun; each
    module is then judged against its own floor (R ≤ 1.2), and under a float32 run's floor passes
    within the tolerance too, so that the module named is the first to differ by more than
    rounding can, not the first to differ at all."""
    layers_o, layers_m = original.manifest.get("layers"), migrated.manifest.get("layers")
    rank = migrated.rank
    if not layers_o or not layers_m:
        return Localization(rank, -1, "unavailable", "", "the rerun recorded no module outputs", "")
    step = int(layers_o["step"])
    floors = [
        y
        for y in floors or []
        if all(c.manifest.get("layers") for c in (y.reference, y.faithful, y.candidate))
    ]
    if precision.name not in ("bf16", "fp32"):
        floors = []  # tolerances named or overridden
    second = precision.name == "fp32"
    tolerance = (
        f"{precision.name} tolerance (atol {precision.tensor.atol:g}, rtol {precision.tensor.rtol:g})"
    )
    mark = f"noise floor (R ≤ {noise_floor.COMPONENT_THRESHOLD:g}, per module)"
    if not floors:
        rule = tolerance
    else:
        rule = f"{tolerance} or {floors[0].name} {mark}" if second else mark
    result = Localization(rank, step, "none", "", "", rule)
    if layers_o.get("truncated") or layers_m.get("truncated"):
        result.notes.append("the model's outputs at this step were too large to keep them all")
    modules = _paired_modules(original, migrated, result.notes)
    outputs = [y.map(_outputs) for y in floors]
    for key_o, key_m, kind in modules:
        e, a = _outputs(original)[key_o], _outputs(migrated)[key_m]
        # Each run under its own program's name (they differ where modules pair by position).
        here = [y.map(functools.partial(_output, key_o, key_m)) for y in outputs]
        result.modules.append(_judge(key_m, kind, e, a, here, precision, second))
    order = _module_order([row.name for row in result.modules])
    for t in range(step + 1):
        for what in PHASES:
            phase = f"step{t}/{what}"
            rows = _phase(original, migrated, floors, phase, precision, order)
            if rows:
                result.phases[phase] = rows
    _conclude(result)
    return result


def _output(key_o: str, key_m: str, found: dict[str, torch.Tensor]) -> torch.Tensor | None:
    return found.get(key_o, found.get(key_m))


def _outputs(capture: Capture) -> dict[str, torch.Tensor]:
    found = {}
    for name, tensor in capture.group("layers/out").items():
        found[name.split("/", 1)[1]] = tensor
    return found


def _paired_modules(
    original: Capture, migrated: Capture, notes: list[str]
) -> list[tuple[str, str, str]]:
    """(original key, migrated key, class) in the migrated program's order."""
    listed_o = [tuple(m) for m in original.manifest["layers"]["modules"]]
    listed_m = [tuple(m) for m in migrated.manifest["layers"]["modules"]]
    outputs_o, outputs_m = _outputs(original), _outputs(migrated)
    names_o = {key for key, _ in listed_o}
    shared = [
        (key, key, kind)
        for key, kind in listed_m
        if key in names_o and key in outputs_o and key in outputs_m
    ]
    smaller = min(len(listed_o), len(listed_m))
    if smaller and len(shared) >= smaller / 2:
        unpaired = sorted({key for key, _ in listed_o} ^ {key for key, _ in listed_m})
        if unpaired:
            notes.append(
                f"{len(unpaired)} module call(s) run in only one program or under other names "
                f"({', '.join(unpaired[:4])}{' ...' if len(unpaired) > 4 else ''}): they are left out"
            )
        return shared
    kinds_o, kinds_m = [kind for _, kind in listed_o], [kind for _, kind in listed_m]
    if listed_o and kinds_o == kinds_m:
        notes.append(
            "the two programs name their modules differently (original "
            f"{', '.join(k for k, _ in listed_o[:3])} ...; migrated {', '.join(k for k, _ in listed_m[:3])} ...) "
            "but run the same module classes in the same order: modules are matched by position"
        )
        return [
            (ko, km, kind)
            for (ko, kind), (km, _) in zip(listed_o, listed_m, strict=True)
            if ko in outputs_o and km in outputs_m
        ]
    notes.append(
        "the two programs name their modules differently and run different module classes "
        f"(original {len(listed_o)} calls, migrated {len(listed_m)}; {len(shared)} names in common): "
        "module outputs are compared only where the names agree"
    )
    return shared


def _judge(
    name: str,
    kind: str,
    expected: torch.Tensor,
    actual: torch.Tensor,
    floors: list[Yardstick[torch.Tensor | None]],
    precision: Precision,
    second_opinion: bool,
) -> Row:
    if tuple(expected.shape) != tuple(actual.shape):
        return Row(name, kind, DIVERGE, None)
    stats = tensor_stats(expected, actual, precision.tensor)
    shape = tuple(expected.shape)
    here = [
        Yardstick(y.name, y.reference, y.faithful, y.candidate)
        for y in floors
        if y.reference is not None
        and y.faithful is not None
        and y.candidate is not None
        and tuple(y.reference.shape) == tuple(y.faithful.shape) == tuple(y.candidate.shape) == shape
        # A faithful run bit-identical to the reference: no scale to measure R in.
        and not (second_opinion and torch.equal(y.faithful, y.reference))
    ]
    if not here:
        return Row(name, kind, MATCH if stats.mismatches == 0 else DIVERGE, stats)
    ratio = noise_floor.least([r_ratio(y.faithful, y.candidate, y.reference) for y in here])
    mark = noise_floor.threshold(expected.numel(), noise_floor.COMPONENT_THRESHOLD)
    ok = ratio.value <= mark or (second_opinion and stats.mismatches == 0)
    return Row(name, kind, MATCH if ok else DIVERGE, stats, ratio)


def _module_order(names: list[str]) -> dict[str, int]:
    """Module name -> when it first finished, for ordering the parameters it owns."""
    order: dict[str, int] = {}
    for index, name in enumerate(names):
        order.setdefault(name.split("#")[0], index)
    return order


def _owner_rank(parameter: str, order: dict[str, int]) -> int:
    module = parameter.rsplit(".", 1)[0] if "." in parameter else "(root)"
    while module not in order and "." in module:
        module = module.rsplit(".", 1)[0]
    return order.get(module, len(order))


def _phase(
    original: Capture,
    migrated: Capture,
    floors: list[Yardstick[Capture]],
    phase: str,
    precision: Precision,
    order: dict[str, int],
) -> list[Row]:
    prefix = f"layers/{phase}"
    expected, actual = original.group(prefix), migrated.group(prefix)
    if not expected and not actual:
        return []
    item = compare_tensors(
        phase,
        phase,
        expected,
        actual,
        precision.tensor,
        True,
        [y.map(lambda c: c.group(prefix)) for y in floors],
        precision.name == "fp32",
    )
    backward = phase.endswith("grad")  # listed in the order backward computes them
    entries: list[Entry] = sorted(
        item.entries, key=lambda e: (_owner_rank(e.name, order), e.name), reverse=backward
    )
    rows = [Row(e.name, "parameter", e.verdict, e.stats, e.ratio) for e in entries]
    missing = sorted(set(expected) ^ set(actual))
    rows += [Row(name, "parameter (in one program only)", DIVERGE, None) for name in missing]
    return rows


def _first(rows: list[Row]) -> Row | None:
    return next((row for row in rows if row.verdict == DIVERGE), None)


def _measure(row: Row) -> str:
    if row.stats is None:
        return "shape or presence differs"
    text = (
        f"max abs {row.stats.max_abs:.3g}, relative {row.stats.norm_rel:.3g}, "
        f"cosine {row.stats.cosine:.6f}"
    )
    return text + (f", R {row.ratio.value:.3g}" if row.ratio else "")


def _conclude(result: Localization) -> None:
    s, phases = result.step, result.phases

    def first(t: int, what: str) -> Row | None:
        return _first(phases.get(f"step{t}/{what}", []))

    def finding(kind: str, row: Row, text: str) -> None:
        result.finding, result.where = kind, row.name
        result.headline = f"{text} ({_measure(row)})"

    for t in range(s):
        grad, after = first(t, "grad"), first(t, "after")
        if grad is not None:
            finding(
                "backward",
                grad,
                f"step {t}: the gradients the optimizer saw differ, first {grad.name}",
            )
            return
        if after is not None:
            finding("update", after, _update(f"the optimizer step after step {t}", after))
            return
    before = first(s, "before")
    if before is not None:
        what = "the initial parameters" if s == 0 else f"the parameters step {s} starts from"
        finding("start", before, f"{what} differ, first {before.name}")
        return
    module = _first(result.modules)
    if module is not None:
        finding(
            "forward",
            module,
            f"the forward of step {s}: the first module whose output differs is {module.name} "
            f"({module.kind})",
        )
        return
    backward = first(s, "backward_grad")
    if backward is not None:
        finding(
            "backward",
            backward,
            f"the backward of step {s}: every module output agrees; the first gradient to differ, in "
            f"the order backward computes them, is that of {backward.name}",
        )
        return
    synced = first(s, "grad")
    if synced is not None:
        finding(
            "gradient sync",
            synced,
            f"step {s}: the gradients agree as backward leaves them but not as the optimizer step sees "
            "them: what runs in between (gradient all-reduce, clipping, scaling) differs, "
            f"first {synced.name}",
        )
        return
    after = first(s, "after")
    if after is not None:
        finding("update", after, _update(f"the optimizer step of step {s}", after))
        return
    result.headline = f"at step {s} every module output, gradient and update agrees" + (
        "" if result.modules else " (no module ran between the backward calls)"
    )


def _update(which: str, row: Row) -> str:
    return (
        f"{which}: the gradients agree, the updated parameters do not (learning rate, momentum, "
        f"weight decay or the optimizer itself), first {row.name}"
    )
