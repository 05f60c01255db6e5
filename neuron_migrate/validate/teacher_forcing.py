"""Teacher-forced comparison of `generate()`: the logits of both programs on the original's tokens.

When greedy tokens part, the programs are run again with every `generate()` call made to follow
the original's sequences (`child/neuron_migrate_capture_forcing.py`), so the logits at every
position answer the same prefix. As in `torch_neuronx`'s `logit_validation`, at each position the
constant shift between the two logit vectors is removed (softmax does not see it) and the error
over the original's top-k logits, for several k, is taken relative to the largest logit; a
position where the programs would choose different tokens is a near tie when the original's gap
between the two tokens is within the noise (the logit error there, or the low-precision noise
floor), and a real difference when the logits themselves are out of tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from neuron_migrate.validate import noise_floor
from neuron_migrate.validate.compare import (
    DIVERGE,
    MATCH,
    Entry,
    Item,
    Precision,
    tensor_stats,
)
from neuron_migrate.validate.noise_floor import r_ratio
from neuron_migrate.validate.runner import Capture

# logit_validation's default map, keyed by top-k (None: every finite logit): relative tolerance.
LOW_PRECISION_TOLERANCES: dict[int | None, float] = {5: 0.01, 50: 0.02, 1000: 0.03, None: 0.05}
TOP_K = (5, 50, 1000, None)
FLOOR_K = 50  # R is taken over the original's top-50 logits


@dataclass
class Position:
    index: int
    errors: dict[str, float]  # "top5", ..., "all" -> max over rows of the normalised error
    gap: float  # the original's smallest top-1 - top-2 gap over rows
    parting_rows: list[int]  # rows where the programs would choose different tokens
    within: bool  # the logits are within tolerance (or the floor)
    ratio: float | None = None
    pair_error: float = 0.0  # the logit error on the two tokens the programs would choose
    rows_out: list[int] = field(default_factory=list)  # rows whose logits are out of tolerance

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "errors": self.errors,
            "gap": self.gap,
            "parting_rows": self.parting_rows,
            "within": self.within,
            "ratio": self.ratio,
            "pair_error": self.pair_error,
            "rows_out": self.rows_out,
        }


def _k_label(k: int | None) -> str:
    return "all" if k is None else f"top{k}"


def compare_forced(
    index: int,
    original: Capture,
    migrated: Capture,
    floor: Capture | None,
    precision: Precision,
) -> Item:
    key, title = f"generate/{index}", f"generate() call {index}: teacher-forced logits"
    e_all = original.tensors.get(f"{key}/logits")
    a_all = migrated.tensors.get(f"{key}/logits")
    if e_all is None or a_all is None:
        missing = "original" if e_all is None else "migrated"
        return Item(key, title, DIVERGE, detail=f"the {missing} program kept no forced logits")
    f_all = floor.tensors.get(f"{key}/logits") if floor is not None else None
    use_floor = f_all is not None and precision.name == "bf16"
    steps = min(
        len(e_all), len(a_all), len(f_all) if use_floor and f_all is not None else len(e_all)
    )
    tolerances = _tolerances(precision)
    positions: list[Position] = []
    for t in range(steps):
        positions.append(
            _position(t, e_all[t], a_all[t], f_all[t] if use_floor and f_all is not None else None,
                      tolerances, precision)
        )  # fmt: skip
    first_part = next((p for p in positions if p.parting_rows), None)
    first_out = next((p for p in positions if not p.within), None)
    entries = []
    if first_part is not None:
        tie = first_part.within and first_part.gap <= _tie_allowance(first_part, precision)
        kind = (
            f"near tie (the original's top-2 gap {first_part.gap:.3g} is within the noise)"
            if tie
            else "real difference (the logits there are out of tolerance)"
            if not first_part.within
            else f"the logits agree within tolerance but the gap {first_part.gap:.3g} is wider than their error"
        )
        entries.append(
            Entry(
                f"position {first_part.index}",
                MATCH if tie else DIVERGE,
                detail=f"first divergent position {first_part.index} (rows "
                f"{', '.join(map(str, first_part.parting_rows))}): {kind}",
            )
        )
    if first_out is not None:
        worst = max(first_out.errors.items(), key=lambda kv: kv[1])
        entries.append(
            Entry(
                f"position {first_out.index}",
                DIVERGE,
                detail=f"logits out of tolerance from position {first_out.index}"
                + (
                    f", rows {', '.join(map(str, first_out.rows_out))}"
                    if first_out.rows_out
                    else ""
                )
                + f" ({worst[0]} error {worst[1]:.3g}"
                + (f", R {first_out.ratio:.3g}" if first_out.ratio is not None else "")
                + ")",
            )
        )
    verdict = DIVERGE if any(e.verdict == DIVERGE for e in entries) else MATCH
    stats = tensor_stats(e_all[:steps], a_all[:steps], precision.tensor) if steps else None
    if entries:
        detail = "; ".join(e.detail for e in entries)
    else:
        detail = f"{steps} positions agree within tolerance and choose the same tokens"
    item = Item(key, title, verdict, stats, detail, entries, precision.tensor)
    item.rule = (
        f"teacher forcing: noise floor (R ≤ {noise_floor.RUN_THRESHOLD:g}, top-{FLOOR_K})"
        if use_floor
        else "teacher forcing: top-k logit tolerance ("
        + ", ".join(f"{_k_label(k)} {v:g}" for k, v in tolerances.items())
        + ")"
    )
    item.first_step = first_part.index if first_part is not None else None
    item.series = {
        "position": [float(p.index) for p in positions],
        **{f"error_{_k_label(k)}": [p.errors[_k_label(k)] for p in positions] for k in TOP_K},
        "gap": [p.gap for p in positions],
        "parting": [float(p.index) for p in positions if p.parting_rows],
        **({"r": [p.ratio or 0.0 for p in positions]} if use_floor else {}),
        **{f"tolerance_{_k_label(k)}": [v] for k, v in tolerances.items()},
    }
    return item


def _tolerances(precision: Precision) -> dict[int | None, float]:
    if precision.name == "bf16":
        return dict(LOW_PRECISION_TOLERANCES)
    return dict.fromkeys(TOP_K, precision.tensor.rtol)


def _tie_allowance(position: Position, precision: Precision) -> float:
    """How small a gap rounding alone can close: the logit error there, at least the tie tolerance."""
    return max(precision.tie.atol, 2 * position.pair_error)


def _position(
    t: int,
    expected: torch.Tensor,
    actual: torch.Tensor,
    floor: torch.Tensor | None,
    tolerances: dict[int | None, float],
    precision: Precision,
) -> Position:
    errors = {_k_label(k): 0.0 for k in TOP_K}
    pair_error, gap, parting, within = 0.0, math.inf, [], True
    ratios, rows_out = [], []
    for row in range(min(expected.shape[0], actual.shape[0])):
        e, a = expected[row].double(), actual[row].double()
        finite = torch.isfinite(e) & torch.isfinite(a)
        if not finite.any():
            continue
        shift = float((a[finite] - e[finite]).mean())
        aligned = a - shift
        scale = float(e[finite].abs().max()) or 1.0
        e_masked = torch.where(finite, e, torch.tensor(-math.inf, dtype=e.dtype))
        for k in TOP_K:
            count = int(finite.sum()) if k is None else min(k, int(finite.sum()))
            top = e_masked.topk(count).indices
            error = float((aligned[top] - e[top]).abs().max()) / scale
            label = _k_label(k)
            errors[label] = max(errors[label], error)
            if error > tolerances[k] + 1e-5 / scale:
                within = False
                if row not in rows_out:
                    rows_out.append(row)
        chosen_e, chosen_a = int(e_masked.argmax()), int(torch.where(finite, a, -math.inf).argmax())
        values = e_masked.topk(min(2, int(finite.sum()))).values
        if len(values) > 1:
            gap = min(gap, float(values[0] - values[1]))
        if chosen_e != chosen_a:
            parting.append(row)
            gap = min(gap, float(e[chosen_e] - e[chosen_a]))
            pair_error = max(
                pair_error,
                float((aligned[[chosen_e, chosen_a]] - e[[chosen_e, chosen_a]]).abs().max()),
            )
            if floor is not None:
                f = floor[row].double()
                pair_error = max(
                    pair_error,
                    float((e[[chosen_e, chosen_a]] - f[[chosen_e, chosen_a]]).abs().max()),
                )
        if floor is not None:
            f = floor[row].double()
            top = e_masked.topk(min(FLOOR_K, int(finite.sum()))).indices
            e_top, a_top, f_top = e[top], a[top], f[top]
            ratios.append(
                r_ratio(e_top - (e_top - f_top).mean(), a_top - (a_top - f_top).mean(), f_top).value
            )
    ratio = max(ratios) if ratios else None
    if ratio is not None:
        mark = noise_floor.threshold(FLOOR_K, noise_floor.RUN_THRESHOLD)
        within = ratio <= mark
        rows_out = [row for row, value in enumerate(ratios) if value > mark]
    gap = gap if math.isfinite(gap) else 0.0
    return Position(t, errors, gap, parting, within, ratio, pair_error, rows_out)
