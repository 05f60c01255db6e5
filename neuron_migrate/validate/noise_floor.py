"""The noise-floor rule: a low-precision run is judged against what low precision alone costs.

`R = ||migrated - floor|| / (||original - floor|| + eps)`, where `floor` is the same computation in
float32 (the original run again with its low precision turned off). The denominator is the error
the original's own precision makes; the numerator what the migrated program makes. A faithful
migration in the same precision lands near 1; a bug adds its own error on top. This is the
3-tensor method of AWS's Neuron equivalence tooling, whose pass mark is R < 1.2 for one forward of a
component; a training run compounds rounding over its steps, so whole runs get a looser mark
(the measurements behind both are in `benchmarks/validate/README.md`).

`eps` keeps quantities that low precision does not move (integer-valued, or fixed by the data)
from dividing by zero: it is the float32 tolerance of the quantity, so such a quantity must agree
as closely as float32 runs do.

Where a float64 run cannot serve as the floor of a float32 run (BatchNorm over a small batch
amplifies rounding until the float64 run follows a trajectory of its own), the floor is what
rounding alone does to the original: the original again, twice, with its rounding moved
(`Perturb` in the capture), and `R = ||migrated - original|| / ||perturbed - original||`. Both
are a `Yardstick`: R measured from its `reference`, a faithful run's distance as the unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

T = TypeVar("T")
U = TypeVar("U")

# One forward of one module (the localization): AWS's mark.
COMPONENT_THRESHOLD = 1.2
# Whole training runs (losses, gradients, final parameters) and generated logits.
RUN_THRESHOLD = 2.0
# The float32 scale below which no difference counts: relative to ||floor||.
FLOAT32_REL = 1e-6
# The name of the floor measured by perturbed float32 runs.
PERTURBATION = "perturbation"


@dataclass(frozen=True, eq=False)  # told apart by identity: they hold tensors
class Yardstick(Generic[T]):
    """One measure of the floor: `R = ||candidate - reference|| / ||faithful - reference||`.

    A float32 or float64 floor: (the floor run, the original, the migrated program); a perturbation
    floor, once per perturbed run: (the original, the perturbed original, the migrated program).
    `name` is the floor's ("float32", "float64", "perturbation")."""

    name: str
    reference: T
    faithful: T
    candidate: T

    @property
    def perturbed(self) -> bool:
        return self.name == PERTURBATION

    def map(self, read: Callable[[T], U]) -> Yardstick[U]:
        return Yardstick(self.name, read(self.reference), read(self.faithful), read(self.candidate))


@dataclass(frozen=True)
class Ratio:
    value: float
    numerator: float  # ||migrated - floor||
    denominator: float  # ||original - floor||

    def as_dict(self) -> dict[str, float | str]:
        return {
            "r": _finite(self.value),
            "migrated_error": _finite(self.numerator),
            "original_error": _finite(self.denominator),
        }


def r_ratio(
    original: torch.Tensor | list[torch.Tensor],
    migrated: torch.Tensor | list[torch.Tensor],
    floor: torch.Tensor | list[torch.Tensor],
) -> Ratio:
    """R over one tensor, or over several as if concatenated (the Frobenius norm of them all)."""
    o, m, f = (_flat(t) for t in (original, migrated, floor))
    numerator = float((m - f).norm())
    denominator = float((o - f).norm())
    eps = FLOAT32_REL * float(f.norm()) + torch.finfo(torch.float32).tiny
    return Ratio(numerator / (denominator + eps), numerator, denominator)


def least(ratios: list[Ratio]) -> Ratio:
    """R against several faithful runs: against the farthest of them, since a faithful migration
    may round as far as any of them does."""
    return min(ratios, key=lambda r: r.value)


def pooled_ratio(
    migrated: torch.Tensor,
    floor: torch.Tensor,
    group_original: list[torch.Tensor],
    group_floor: list[torch.Tensor],
) -> Ratio:
    """R of one tensor against the rounding of its whole group: the RMS of `migrated - floor`
    over the RMS of `original - floor` across all the group's tensors. The float32 floor of one
    tensor alone is no yardstick: which tensors a rounding flip lands in (a ReLU input near zero)
    differs from run to run, so one tensor of a faithful run can sit 1e-6 from the float64 run and
    the same tensor of another faithful run 1e-3; over the group the rounding evens out."""
    m, f = _flat(migrated), _flat(floor)
    o_all, f_all = _flat(group_original), _flat(group_floor)
    numerator = _rms(m - f)
    denominator = _rms(o_all - f_all)
    eps = FLOAT32_REL * _rms(f_all) + torch.finfo(torch.float32).tiny
    return Ratio(numerator / (denominator + eps), numerator, denominator)


def _rms(value: torch.Tensor) -> float:
    return float(value.norm()) / math.sqrt(max(value.numel(), 1))


def threshold(size: int, mark: float) -> float:
    """The mark for one tensor of `size` elements: R of two equally good low-precision results
    with independent rounding errors is the square root of an F(n, n) variable, whose log has a
    standard deviation of about 2/sqrt(n); a tensor of a few elements is allowed the spread it has
    one time in a thousand (3.1 standard deviations), and never less than `mark`."""
    return max(mark, math.exp(3.1 / math.sqrt(max(size, 1))))


def prefix_ratios(
    original: torch.Tensor, migrated: torch.Tensor, floor: torch.Tensor
) -> list[float]:
    """R over steps 0..k for every k: where a loss curve leaves the floor, not where one step is noisy."""
    o, m, f = (t.detach().to(torch.float64).flatten() for t in (original, migrated, floor))
    ratios = []
    for k in range(1, len(f) + 1):
        ratios.append(r_ratio(o[:k], m[:k], f[:k]).value)
    return ratios


def _flat(value: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64).flatten()
    if not value:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([t.detach().to(torch.float64).flatten() for t in value])


def _finite(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)
