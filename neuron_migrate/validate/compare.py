"""Judges whether two captured runs compute the same thing, item by item: with dtype-aware
tolerances, or, for a low-precision run with a float32 twin, against its noise floor
(`noise_floor`). Each item says which rule judged it.

Metrics per tensor follow the anchors in the Neuron stack and torch: max abs, element-wise max rel,
max-normalised rel (`max|a-e| / max|e|`, the scale `torch_neuronx.testing.neuron_allclose` uses),
cosine similarity and relative L2. A tensor matches when `max|a-e| <= atol + rtol * max|e|`
(neuron_allclose's rule); a loss step
when `|a-e| <= atol + rtol * |e|`; greedy tokens when they are equal, or when they first part at a
near tie of the original's logits (as `logit_validation` allows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from neuron_migrate.validate import noise_floor
from neuron_migrate.validate.noise_floor import Ratio, Yardstick, r_ratio
from neuron_migrate.validate.runner import Capture

MATCH, DIVERGE, SKIPPED = "match", "diverge", "skipped"
LOW_PRECISION = frozenset({"bfloat16", "float16"})


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


@dataclass(frozen=True)
class Precision:
    """Default tolerances for one precision class (see `jupyter-and-validation.md` §4.3)."""

    name: str
    loss: Tolerance  # per step, element-wise relative
    tensor: Tolerance  # max-normalised (neuron_allclose)
    tie: Tolerance  # logit gap that counts as a near tie: atol + rtol * |top logit|


# fp32: the old stack reproduces itself on the new one to float32 rounding on CPU (~2e-7 on losses);
# these leave room for different kernels (transformers uses rtol 1e-4 for fp32 across kernels).
# bf16: torch's bf16 rtol 1.6e-2 (two bf16 epsilons) for tensors; losses as Megatron's ~2 %.
PRECISIONS = {
    "fp32": Precision(
        "fp32", loss=Tolerance(1e-5, 1e-6), tensor=Tolerance(1e-4, 1e-5), tie=Tolerance(1e-4, 1e-3)
    ),
    "bf16": Precision(
        "bf16",
        loss=Tolerance(2e-2, 1e-3),
        tensor=Tolerance(1.6e-2, 1e-5),
        tie=Tolerance(1.6e-2, 1e-2),
    ),
}


@dataclass
class Stats:
    max_abs: float
    max_rel: float
    norm_rel: float
    cosine: float
    rel_l2: float
    mismatches: int
    size: int

    def as_dict(self) -> dict[str, float | int | str]:
        return {k: _finite(v) for k, v in self.__dict__.items()}


@dataclass
class Entry:
    """One tensor (or one loss step) inside an item."""

    name: str
    verdict: str
    stats: Stats | None = None
    detail: str = ""
    ratio: Ratio | None = None  # against the noise floor, where there is one


@dataclass
class Item:
    key: str  # stable id in JSON: "losses", "gradients", "parameters", "forward", "generate/0", "replicas/migrated", "precision"
    title: str
    verdict: str
    stats: Stats | None = None
    detail: str = ""
    entries: list[Entry] = field(default_factory=list)
    tolerance: Tolerance | None = None
    series: dict[str, list[float]] | None = None  # losses: original, migrated, rel_diff
    rule: str = ""  # what judged it: "fp32 tolerance", "noise floor (R ≤ 2)", "exact", ...
    ratio: Ratio | None = None
    first_step: int | None = None  # losses: the first step that diverges
    rank: int | None = None  # set when the programs ran several ranks


@dataclass
class RankSummary:
    """Where one rank first diverges: the step, and the item that shows it."""

    rank: int
    step: int | None  # None: the rank matches
    item: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "step": self.step, "item": self.item}


@dataclass
class Comparison:
    precision: Precision
    items: list[Item]
    notes: list[str]
    floor: dict[str, Any] | None = None  # which run measured the noise floor, what it changed
    ranks: list[RankSummary] = field(default_factory=list)

    @property
    def first_diverging_rank(self) -> RankSummary | None:
        diverging = [r for r in self.ranks if r.step is not None]
        return min(diverging, key=lambda r: (r.step, r.rank), default=None)

    @property
    def judged_by(self) -> str:
        """What the verdict was reached against: a noise floor (float32, float64, perturbation),
        or the tolerances alone."""
        return f"{self.floor['name']} floor" if self.floor else "tolerances"

    @property
    def verdict(self) -> str:
        verdicts = {item.verdict for item in self.items}
        if DIVERGE in verdicts:
            return DIVERGE
        return MATCH if MATCH in verdicts else SKIPPED


def tensor_stats(
    expected: torch.Tensor, actual: torch.Tensor, tol: Tolerance, scale: float | None = None
) -> Stats:
    """`scale` (default: max|expected|) is what max-normalised errors are relative to."""
    e = expected.detach().to(torch.float64).flatten()
    a = actual.detach().to(torch.float64).flatten()
    diff = (a - e).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if scale is None:
        scale = float(e.abs().max()) if e.numel() else 0.0
    tiny = torch.finfo(torch.float64).tiny
    max_rel = float((diff / e.abs().clamp_min(tiny)).max()) if diff.numel() else 0.0
    norm_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    e_norm, a_norm = float(e.norm()), float(a.norm())
    if e_norm == 0 and a_norm == 0:
        cosine = 1.0
    elif e_norm == 0 or a_norm == 0:
        cosine = 0.0
    else:
        cosine = float(torch.dot(e, a) / (e_norm * a_norm))
    rel_l2 = float((a - e).norm()) / e_norm if e_norm > 0 else (0.0 if a_norm == 0 else math.inf)
    mismatches = int((diff > tol.atol + tol.rtol * scale).sum())
    return Stats(max_abs, max_rel, norm_rel, cosine, rel_l2, mismatches, int(e.numel()))


def _finite(value: float) -> float | str:
    # JSON has no inf/nan
    return value if isinstance(value, int) or math.isfinite(value) else str(value)


# -- the items -------------------------------------------------------------------------------------


def precision_policy(capture: Capture) -> dict[str, Any]:
    m = capture.manifest
    return {
        "params": m.get("param_dtypes", []),
        "autocast": m.get("autocast_dtypes", []),
        "losses": m.get("loss_dtypes", []),
        "via": m.get("xla_bf16_env"),
    }


def _describe_policy(policy: dict[str, Any]) -> str:
    params = ", ".join(policy["params"]) or "-"
    text = f"params {params}"
    if policy["via"]:
        text += f" ({policy['via']}=1)"
    if policy["autocast"]:
        text += f", autocast {', '.join(policy['autocast'])}"
    return text


def choose_precision(original: Capture, migrated: Capture) -> Precision:
    dtypes: set[str] = set()
    for capture in (original, migrated):
        policy = precision_policy(capture)
        dtypes |= set(policy["params"]) | set(policy["autocast"]) | set(policy["losses"])
        dtypes |= {
            capture.effective_dtype(k)
            for k in capture.manifest.get("items", {})
            if k.startswith("forward/")
        }
        dtypes |= {g.get("logits_dtype") or "float32" for g in capture.manifest.get("generate", [])}
    return PRECISIONS["bf16"] if dtypes & LOW_PRECISION else PRECISIONS["fp32"]


def compare_precision(original: Capture, migrated: Capture) -> Item:
    a, b = precision_policy(original), precision_policy(migrated)
    same = (a["params"], a["autocast"]) == (b["params"], b["autocast"])
    detail = f"original: {_describe_policy(a)}; migrated: {_describe_policy(b)}"
    if not a["params"] and not b["params"] and not a["autocast"] and not b["autocast"]:
        return Item(
            "precision", "precision policy", SKIPPED, detail="no parameters or autocast seen"
        )
    if same and bool(a["via"]) != bool(b["via"]):
        changed = a["via"] or b["via"]
        detail += f" (the same dtypes: {changed}=1 became explicit casts)"
    item = Item("precision", "precision policy", MATCH if same else DIVERGE, detail=detail)
    item.rule = "same dtypes (parameters, autocast)"
    return item


def tolerance_rule(tol: Tolerance, precision: str = "") -> str:
    return f"{precision + ' ' if precision else ''}tolerance (atol {tol.atol:g}, rtol {tol.rtol:g})"


def floor_rule(threshold: float = noise_floor.RUN_THRESHOLD) -> str:
    return f"noise floor (R ≤ {threshold:g})"


def _floored_rule(tol: Tolerance, second_opinion: bool, name: str) -> str:
    return f"{tolerance_rule(tol)} or {name} {floor_rule()}" if second_opinion else floor_rule()


def compare_losses(
    original: Capture,
    migrated: Capture,
    tol: Tolerance,
    floors: list[Yardstick[Capture]] | None = None,
    second_opinion: bool = False,
) -> Item:
    """Step by step with the plain tolerance. Against a noise floor, the whole curve is judged by
    its R, and the first diverging step is where R over the steps up to it passes the mark (one
    step's R alone is too noisy to judge). As a `second_opinion` (a float32 run's float64 or
    perturbation floor), a step passes within the tolerance or within the mark, and the item says
    from which step the curves part beyond the tolerance, the migrated one and the floor's."""
    e = original.tensors.get("loss")
    a = migrated.tensors.get("loss")
    if e is None and a is None:
        return Item("losses", "losses", SKIPPED, detail="no backward() in either program")
    if e is None or a is None:
        missing = "original" if e is None else "migrated"
        return Item(
            "losses", "losses", DIVERGE, detail=f"the {missing} program never called backward()"
        )
    usable: list[Yardstick[torch.Tensor]] = []
    for y in floors or []:
        curves = [c.tensors.get("loss") for c in (y.reference, y.faithful, y.candidate)]
        if all(t is not None for t in curves):
            flat = (t.detach().double().flatten() for t in curves if t is not None)
            usable.append(Yardstick(y.name, *flat))
    n = min(len(e), len(a), *(len(t) for y in usable for t in (y.reference, y.faithful)))
    usable = [y.map(lambda t: t[:n]) for y in usable]
    if second_opinion:  # a faithful run bit-identical to the reference: no scale to measure R in
        usable = [y for y in usable if not torch.equal(y.faithful, y.reference)]
    prefix = None
    if usable and n:
        each = [noise_floor.prefix_ratios(y.faithful, y.candidate, y.reference) for y in usable]
        prefix = [min(rs) for rs in zip(*each, strict=True)]
    diverging_from = None
    if prefix is not None and prefix[-1] > noise_floor.RUN_THRESHOLD:
        diverging_from = next(k for k, r in enumerate(prefix) if r > noise_floor.RUN_THRESHOLD)
    entries = []
    rel_diff = []
    for step in range(n):
        exp, act = float(e[step]), float(a[step])
        diff = abs(act - exp)
        rel_diff.append(diff / abs(exp) if exp else (0.0 if diff == 0 else math.inf))
        detail = f"{exp:.6g} vs {act:.6g}"
        within = diff <= tol.atol + tol.rtol * abs(exp)
        if prefix is None:
            ok = within
        else:
            detail += f" (R {prefix[step]:.3g} up to here)"
            ok = diverging_from is None or step < diverging_from or (second_opinion and within)
        entries.append(Entry(f"step {step}", MATCH if ok else DIVERGE, detail=detail))
    stats = tensor_stats(e[:n], a[:n], tol) if n else None
    failing = [i for i, entry in enumerate(entries) if entry.verdict == DIVERGE]
    lengths_differ = len(e) != len(a)
    verdict = DIVERGE if failing or lengths_differ else MATCH
    details = []
    if lengths_differ:
        details.append(f"{len(e)} losses vs {len(a)}")
    if failing:
        details.append(f"first diverging step {failing[0]} ({entries[failing[0]].detail})")
    title = f"losses ({n} steps)"
    series: dict[str, Any] = {"original": e.tolist(), "migrated": a.tolist(), "rel_diff": rel_diff}
    item = Item("losses", title, verdict, stats, "; ".join(details), entries, tol, series)
    item.first_step = failing[0] if failing else (n if lengths_differ else None)
    if not usable or not n:
        item.rule = tolerance_rule(tol)
        return item
    item.rule = _floored_rule(tol, second_opinion, usable[0].name)
    item.ratio = noise_floor.least([r_ratio(y.faithful, y.candidate, y.reference) for y in usable])
    series["r_prefix"] = prefix or []
    if usable[0].perturbed:
        series["perturbed"] = [y.faithful.tolist() for y in usable]
    else:
        series["floor"] = usable[0].reference.tolist()
    if second_opinion:
        parts = {
            "migrated": _parting(e[:n], a[:n], tol),
            "floor": min(
                (p for y in usable if (p := _parting(y.reference, y.faithful, tol)) is not None),
                default=None,
            ),
        }
        series["parts_from"] = parts
        item.detail = "; ".join([*details, _parting_text(parts, usable[0].perturbed)])
    return item


def _parting(reference: torch.Tensor, other: torch.Tensor, tol: Tolerance) -> int | None:
    """The first step at which two loss curves are apart by more than the tolerance."""
    reference, other = reference.double(), other.double()
    apart = (other - reference).abs() > tol.atol + tol.rtol * reference.abs()
    return int(apart.nonzero()[0]) if bool(apart.any()) else None


def _parting_text(parts: dict[str, int | None], perturbed: bool) -> str:
    def at(step: int | None) -> str:
        return "never" if step is None else f"from step {step}"

    floor = "the perturbed runs from the original" if perturbed else "the original from float64"
    return (
        "trajectories part beyond the tolerance: the migrated from the original "
        f"{at(parts['migrated'])}, {floor} {at(parts['floor'])}"
    )


def compare_tensors(
    key: str,
    title: str,
    expected: dict[str, torch.Tensor],
    actual: dict[str, torch.Tensor],
    tol: Tolerance,
    group_scale: bool = False,
    floors: list[Yardstick[dict[str, torch.Tensor]]] | None = None,
    second_opinion: bool = False,
) -> Item:
    """With `group_scale`, errors are relative to the largest magnitude in the whole group (the model's
    parameters), as neuron_allclose scales by the global max: a bias that starts at zero then moves by
    optimizer noise (Adam moves every element by ~lr per step, whatever the gradient's size) is
    judged against the weights around it, not against its own tiny values.

    With `floors`, the group is judged by R over all the tensors the floor has, and each of them by
    its own R (with a mark that allows for its size) together with the plain tolerance. As a
    `second_opinion` (a float32 run's float64 or perturbation floor), a tensor outside the
    tolerance passes at R within the mark, against its own floor or against the rounding of the
    whole group (`noise_floor.pooled_ratio`), and the group's R counts only where some tensor is
    outside the tolerance; a tensor whose faithful runs are all bit-identical to the reference
    has no floor and is judged by the tolerance alone."""
    if not expected and not actual:
        return Item(key, title, SKIPPED, detail="not recorded")
    scale = None
    if group_scale and expected:
        scale = max(float(t.detach().abs().max()) if t.numel() else 0.0 for t in expected.values())
    entries = []
    only_e = sorted(set(expected) - set(actual))
    only_a = sorted(set(actual) - set(expected))
    floored: list[str] = []
    common = sorted(set(expected) & set(actual))
    floors = floors or []

    def measured(name: str) -> list[Yardstick[dict[str, torch.Tensor]]]:
        """The floors that hold `name` in the shape both programs have."""
        shape = tuple(expected[name].shape)
        return [
            y
            for y in floors
            if all(
                name in d and tuple(d[name].shape) == shape
                for d in (y.reference, y.faithful, y.candidate)
            )
        ]

    pooled = {n: measured(n) for n in common if tuple(expected[n].shape) == tuple(actual[n].shape)}
    for name in common:
        e, a = expected[name], actual[name]
        if tuple(e.shape) != tuple(a.shape):
            entries.append(Entry(name, DIVERGE, detail=f"shape {list(e.shape)} vs {list(a.shape)}"))
            continue
        stats = tensor_stats(e, a, tol, scale)
        here = pooled[name]
        if second_opinion:
            here = [y for y in here if not torch.equal(y.faithful[name], y.reference[name])]
        if not here:
            entries.append(Entry(name, MATCH if stats.mismatches == 0 else DIVERGE, stats))
            continue
        if second_opinion:
            # float32 against a floor of float32 runs: a tensor passes when the migrated side is no
            # farther from the reference than a faithful run is, on this tensor or by the group's
            # rounding.
            ratio = noise_floor.least(
                [
                    r
                    for y in here
                    for r in (
                        r_ratio(y.faithful[name], y.candidate[name], y.reference[name]),
                        noise_floor.pooled_ratio(
                            y.candidate[name],
                            y.reference[name],
                            [y.faithful[n] for n in pooled if y in pooled[n]],
                            [y.reference[n] for n in pooled if y in pooled[n]],
                        ),
                    )
                ]
            )
            ok = stats.mismatches == 0 or ratio.value <= noise_floor.RUN_THRESHOLD
        else:
            ratio = noise_floor.least(
                [r_ratio(y.faithful[name], y.candidate[name], y.reference[name]) for y in here]
            )
            # One tensor's R is a noisy sample (a few elements, a kernel that rounds differently):
            # it diverges when it is past its mark and outside the plain tolerance too; the
            # group's R below judges what the tensors do together.
            ok = stats.mismatches == 0 or ratio.value <= noise_floor.threshold(
                e.numel(), noise_floor.RUN_THRESHOLD
            )
        entries.append(Entry(name, MATCH if ok else DIVERGE, stats, ratio=ratio))
        floored.append(name)
    details = []
    if only_e:
        details.append(
            f"only in original: {', '.join(only_e[:5])}{' ...' if len(only_e) > 5 else ''}"
        )
    if only_a:
        details.append(
            f"only in migrated: {', '.join(only_a[:5])}{' ...' if len(only_a) > 5 else ''}"
        )
    group_ratio = None
    whole = [y for y in floors if all(y in pooled[n] for n in floored)]
    if floored and whole:
        group_ratio = noise_floor.least(
            [
                r_ratio(
                    [y.faithful[n] for n in floored],
                    [y.candidate[n] for n in floored],
                    [y.reference[n] for n in floored],
                )
                for y in whole
            ]
        )
    worst = _worst(entries)
    shape_errors = [e for e in entries if e.stats is None]
    if shape_errors:
        details.append(f"{shape_errors[0].name}: {shape_errors[0].detail}")
    elif worst is not None:
        details.append(f"worst: {worst.name}" + (f" (R {worst.ratio.value:.3g})" if worst.ratio else ""))
    diverged = (
        only_e
        or only_a
        or any(e.verdict == DIVERGE for e in entries)
        or (
            group_ratio is not None
            and group_ratio.value > noise_floor.RUN_THRESHOLD
            # A float32 run's floor is asked only about what the float32 tolerance did not settle.
            and not (second_opinion and all(e.stats and e.stats.mismatches == 0 for e in entries))
        )
    )
    title = f"{title} ({len(entries)} tensors)"
    item = Item(
        key,
        title,
        DIVERGE if diverged else MATCH,
        worst.stats if worst else None,
        "; ".join(details),
        entries,
        tol,
    )
    item.rule = (
        _floored_rule(tol, second_opinion, floors[0].name) if floored else tolerance_rule(tol)
    )
    item.ratio = group_ratio
    return item


def _worst(entries: list[Entry]) -> Entry | None:
    """The entry to show for an item: one that diverges first, then the largest R or error."""
    scored = [e for e in entries if e.stats is not None]
    return max(
        scored,
        key=lambda e: (
            e.verdict == DIVERGE,
            e.ratio.value if e.ratio else 0.0,
            e.stats.norm_rel if e.stats else 0.0,
        ),
        default=None,
    )


def compare_generate(
    index: int, original: Capture, migrated: Capture, precision: Precision
) -> Item:
    key, title = f"generate/{index}", f"generate() call {index}: tokens"
    e_seq = original.tensors.get(f"{key}/sequences")
    a_seq = migrated.tensors.get(f"{key}/sequences")
    if e_seq is None or a_seq is None:
        missing = "original" if e_seq is None else "migrated"
        return Item(
            key, title, DIVERGE, detail=f"the {missing} program made no generate() call {index}"
        )
    prompt = int(original.manifest["generate"][index]["prompt_length"])
    e_new, a_new = e_seq[:, prompt:], a_seq[:, prompt:]
    if e_seq.shape[0] != a_seq.shape[0]:
        return Item(key, title, DIVERGE, detail=f"batch {e_seq.shape[0]} vs {a_seq.shape[0]}")
    top_values = original.tensors.get(f"{key}/top_values")
    top_indices = original.tensors.get(f"{key}/top_indices")
    entries, verdict = [], MATCH
    first_divergence = None
    for row in range(e_seq.shape[0]):
        n = min(e_new.shape[1], a_new.shape[1])
        differ = (e_new[row, :n] != a_new[row, :n]).nonzero()
        if len(differ) == 0 and e_new.shape[1] == a_new.shape[1]:
            entries.append(Entry(f"row {row}", MATCH, detail=f"{n} tokens equal"))
            continue
        at = int(differ[0]) if len(differ) else n
        first_divergence = at if first_divergence is None else min(first_divergence, at)
        tie = _near_tie(
            top_values,
            top_indices,
            at,
            row,
            int(a_new[row, at]) if at < a_new.shape[1] else None,
            precision.tie,
        )
        if tie is not None:
            entries.append(
                Entry(
                    f"row {row}", MATCH, detail=f"first divergence at token {at}: near tie ({tie})"
                )
            )
        else:
            verdict = DIVERGE
            entries.append(Entry(f"row {row}", DIVERGE, detail=f"first divergence at token {at}"))
    stats, logits_part = None, None
    a_top = migrated.tensors.get(f"{key}/top_values")
    if top_values is not None and a_top is not None:
        steps = min(
            len(top_values),
            len(a_top),
            first_divergence if first_divergence is not None else len(top_values),
        )
        if steps:
            stats = tensor_stats(top_values[:steps], a_top[:steps], precision.tensor)
            logits_part = _logits_part(top_values[:steps], a_top[:steps], precision)
    diverging = [e for e in entries if "divergence" in e.detail]
    if diverging:
        detail = diverging[0].name + ": " + diverging[0].detail
    elif logits_part is not None and top_values is not None:
        # Equal greedy choices can hide different logits (a wrong mask, a wrong scale).
        verdict = DIVERGE
        detail = (
            f"all {len(entries)} rows choose the same tokens, but their top-{top_values.shape[-1]} "
            f"logits differ from position {logits_part[0]} (error {logits_part[1]:.3g} of the largest)"
        )
    else:
        detail = f"all {len(entries)} rows equal"
    item = Item(key, title, verdict, stats, detail, entries, precision.tensor)
    item.rule = "tokens equal (or parting at a near tie) and top-k logits within tolerance"
    item.first_step = first_divergence if first_divergence is not None else (
        logits_part[0] if logits_part is not None else None
    )
    return item


def _logits_part(
    expected: torch.Tensor, actual: torch.Tensor, precision: Precision
) -> tuple[int, float] | None:
    """The first position where the top-k logits ([T, B, k], same prefixes) are out of tolerance."""
    tol = precision.tensor
    for t in range(len(expected)):
        e, a = expected[t].double(), actual[t].double()
        scale = float(e.abs().max()) or 1.0
        error = float((a - e).abs().max())
        if error > tol.atol + tol.rtol * scale:
            return t, error / scale
    return None


def _near_tie(
    values, indices, step: int, row: int, token: int | None, tol: Tolerance
) -> str | None:
    """The logit gap, in the original, between its own choice and the migrated one, if small."""
    if values is None or indices is None or token is None or step >= len(values):
        return None
    row_values, row_indices = values[step, row], indices[step, row]
    hits = (row_indices == token).nonzero()
    if len(hits) == 0:
        return None  # not even in the original's top-k
    top = float(row_values[0])
    gap = top - float(row_values[int(hits[0])])
    return f"logit gap {gap:.2e}" if gap <= tol.atol + tol.rtol * abs(top) else None


def compare_replicas(label: str, captures: list[Capture], tol: Tolerance) -> Item:
    """Data-parallel ranks must end with the same parameters, whatever shard each one saw."""
    key, title = (
        f"replicas/{label}",
        f"{label}: ranks agree on final parameters ({len(captures)} ranks)",
    )
    reference = captures[0].group("param")
    if not reference:
        return Item(key, title, SKIPPED, detail="no parameters recorded")
    entries = []
    for capture in captures[1:]:
        item = compare_tensors(key, "", reference, capture.group("param"), tol, True)
        worst = _worst(item.entries)
        entries.append(
            Entry(
                f"rank {capture.rank} vs rank {captures[0].rank}",
                item.verdict,
                worst.stats if worst else None,
                item.detail,
            )
        )
    worst = _worst(entries)
    verdict = DIVERGE if any(e.verdict == DIVERGE for e in entries) else MATCH
    detail = ""
    if verdict == DIVERGE and worst is not None:
        detail = (
            f"{worst.name}: parameters differ after training on different shards; the gradients are "
            "not averaged across ranks (a missing all-reduce?)"
        )
    item = Item(key, title, verdict, worst.stats if worst else None, detail, entries, tol)
    item.rule = tolerance_rule(tol)
    return item


# -- the whole comparison --------------------------------------------------------------------------


def compare_runs(
    original: list[Capture],
    migrated: list[Capture],
    precision: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    floor: list[Capture] | None = None,
    perturbed: list[list[Capture]] | None = None,
    perturbed_of: str = "original",
) -> Comparison:
    """`floor`: the captures of a float32 twin run (see `noise_floor`), used when the runs are in
    low precision and the tolerances are not overridden; or of a float64 twin of a float32 run.
    `perturbed`: the captures of the perturbation floor's runs of a float32 run, each a run of the
    `perturbed_of` program."""
    if not original or not migrated:
        raise ValueError("both programs must have recorded something")
    chosen = _tolerances(original[0], migrated[0], precision, rtol, atol)
    use_floor = bool(floor) and chosen.name in ("bf16", "fp32")
    use_perturbed = bool(perturbed) and chosen.name == "fp32"
    floors = {c.rank: c for c in floor or []} if use_floor else {}
    perturbed_ranks = [{c.rank: c for c in run} for run in perturbed or []] if use_perturbed else []

    def yardsticks(o: Capture, m: Capture) -> list[Yardstick[Capture]]:
        runs = [run[o.rank] for run in perturbed_ranks if o.rank in run]
        return floor_yardsticks(o, m, chosen, floors.get(o.rank), runs, perturbed_of)
    notes: list[str] = []
    items = [compare_precision(original[0], migrated[0])]
    worlds = ([c.world_size for c in original], [c.world_size for c in migrated])
    several = len(original) > 1
    if len(original) == len(migrated) and worlds[0] == worlds[1]:
        for o, m in zip(original, migrated, strict=True):
            items += _compare_rank(o, m, chosen, several, notes, yardsticks(o, m))
    else:
        notes.append(
            f"the programs ran with different numbers of processes (original {len(original)} of world "
            f"{max(worlds[0])}, migrated {len(migrated)} of world {max(worlds[1])}): per-rank values are "
            "not comparable across them, so only the precision policy and the agreement of ranks are checked"
        )
    for label, captures in (("original", original), ("migrated", migrated)):
        if len(captures) > 1:
            items.append(compare_replicas(label, captures, chosen.tensor))
    notes += _random_notes(original, migrated)
    if use_floor and chosen.name == "fp32":
        notes.append(
            "what the float32 tolerances did not settle is judged against the noise floor of a float64 "
            "run of the same program: an item passes within the tolerance or at R within the mark"
        )
    elif use_perturbed:
        notes.append(
            f"what the float32 tolerances did not settle is judged against the perturbation floor: "
            f"{len(perturbed_ranks)} runs of the {perturbed_of} program with every module output moved "
            f"by one ulp; R = ||migrated - original|| / ||perturbed - {perturbed_of}||, against the "
            "farthest perturbed run; an item passes within the tolerance or at R within the mark"
        )
    if chosen.name.startswith("bf16"):
        notes.append(
            "a side computes in bfloat16/float16: items are judged against the noise floor of a float32 run"
            if use_floor
            else "a side computes in bfloat16/float16, so bf16 tolerances apply"
        )
    comparison = Comparison(chosen, items, notes)
    if several and len(original) == len(migrated):
        comparison.ranks = rank_summaries(items)
    return comparison


def floor_yardsticks(
    o: Capture,
    m: Capture,
    precision: Precision,
    floor: Capture | None,
    perturbed: list[Capture],
    perturbed_of: str = "original",
) -> list[Yardstick[Capture]]:
    """How one rank's R is measured: from the floor run (float32 under bf16, float64 under
    float32), or from the program the perturbed runs are of, against each of them."""
    if floor is not None:
        return [Yardstick("float32" if precision.name == "bf16" else "float64", floor, o, m)]
    reference, candidate = (o, m) if perturbed_of == "original" else (m, o)
    return [Yardstick(noise_floor.PERTURBATION, reference, p, candidate) for p in perturbed]


def rank_summaries(items: list[Item]) -> list[RankSummary]:
    """For each rank, the first step at which one of its items diverges (start, step k, or end)."""
    by_rank: dict[int, list[Item]] = {}
    for item in items:
        if item.rank is not None:
            by_rank.setdefault(item.rank, []).append(item)
    summaries = []
    for rank, rank_items in sorted(by_rank.items()):
        found: list[tuple[int, str]] = []
        for item in rank_items:
            if item.verdict != DIVERGE:
                continue
            base = item.key.split("@")[0]
            if base in ("initial", "gradients", "forward"):
                found.append((0, item.title))
            elif item.first_step is not None:
                found.append((item.first_step, item.title))
            elif base == "parameters":
                found.append((_steps_of(rank_items), item.title))
        step, title = min(found, default=(None, ""))
        summaries.append(RankSummary(rank, step, title))
    return summaries


def _steps_of(items: list[Item]) -> int:
    """The last step of a rank (its final parameters come after it)."""
    losses = next((i for i in items if i.key.startswith("losses")), None)
    return len(losses.entries) if losses is not None else 0


def _tolerances(
    o0: Capture, m0: Capture, precision: str, rtol: float | None, atol: float | None
) -> Precision:
    """The precision both runs are judged at: chosen from their dtypes, or named, then overridden."""
    chosen = choose_precision(o0, m0) if precision == "auto" else PRECISIONS[precision]
    if rtol is None and atol is None:
        return chosen

    def override(t: Tolerance) -> Tolerance:
        return Tolerance(t.rtol if rtol is None else rtol, t.atol if atol is None else atol)

    return Precision(
        chosen.name + " (overridden)", override(chosen.loss), override(chosen.tensor), chosen.tie
    )


def _compare_rank(
    o: Capture,
    m: Capture,
    chosen: Precision,
    several: bool,
    notes: list[str],
    floors: list[Yardstick[Capture]] | None = None,
) -> list[Item]:
    """Everything one rank of each program recorded, side by side (rows named per rank if several)."""
    tensors = chosen.tensor

    def floor(prefix: str) -> list[Yardstick[dict[str, torch.Tensor]]]:
        return [y.map(lambda c: c.group(prefix)) for y in floors or []]

    second = chosen.name == "fp32"  # a float64 or perturbation floor: a second opinion
    pair = [
        compare_losses(o, m, chosen.loss, floors, second),
        compare_tensors(
            "initial", "parameters before the first step", o.group("init"), m.group("init"),
            tensors, True, floor("init"), second,
        ),
        compare_tensors(
            "gradients", "gradients before the first step", o.group("grad"), m.group("grad"),
            tensors, True, floor("grad"), second,
        ),
        compare_tensors(
            "parameters", "final parameters", o.group("param"), m.group("param"), tensors, True,
            floor("param"), second,
        ),
        compare_tensors(
            "forward", "first forward output", o.group("forward/0"), m.group("forward/0"), tensors,
            floors=floor("forward/0"), second_opinion=second,
        ),
    ]  # fmt: skip
    calls = max(len(o.manifest.get("generate", [])), len(m.manifest.get("generate", [])))
    pair += [compare_generate(i, o, m, chosen) for i in range(calls)]
    if several:
        for item in pair:
            item.title += f" [rank {o.rank}]"
            item.key += f"@rank{o.rank}"
            item.rank = o.rank
    if pair[1].verdict == DIVERGE:
        notes.append(
            "the programs start from different weights (parameters before the first step differ), "
            "so everything after differs too: look at how the model is built and initialised "
            "(default dtype, device at creation, seeding)"
        )
    return [item for item in pair if item.verdict != SKIPPED]


def _random_notes(original: list[Capture], migrated: list[Capture]) -> list[str]:
    """What the programs drew at random, and whether the two stacks drew the same numbers."""
    notes, routed_by = [], {}
    for label, captures in (("original", original), ("migrated", migrated)):
        routed: dict[str, int] = {}
        unrouted: dict[str, int] = {}
        route = True
        dropout = 0
        for c in captures:
            summary = c.manifest.get("host_random") or {}
            route = route and summary.get("route", True)
            for name, count in (summary.get("routed") or {}).items():
                routed[name] = routed.get(name, 0) + int(count)
            for name, count in (summary.get("unrouted") or {}).items():
                unrouted[name] = unrouted.get(name, 0) + int(count)
            if not c.manifest.get("no_dropout"):
                dropout += int(c.manifest.get("dropout_calls", 0))
        if routed:
            routed_by[label] = routed
        if unrouted:
            how = (
                "each stack drew from its own device generator (--native-random)"
                if not route
                else "validate could not draw them on the host"
            )
            notes.append(
                f"the {label} program drew random numbers on its device ({_counts(unrouted)}): {how}, "
                "so the same seed gives different numbers on the two stacks; where values part, "
                "randomness, not the migration, may explain it"
                + (" (rerun without --native-random, or with --no-dropout)" if not route else "")
            )
        elif dropout and not route:
            notes.append(
                f"the {label} program applies dropout ({dropout} calls) on its own generator "
                "(--native-random): values are not expected to agree; --no-dropout turns it off"
            )
    if routed_by:
        sides = "; ".join(f"{label}: {_counts(counts)}" for label, counts in routed_by.items())
        notes.insert(
            0,
            f"random draws meant for a device, in 16-bit types or for dropout were made on the host "
            f"({sides}), so both stacks draw the same numbers",
        )
    return notes


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} x{count}" for name, count in sorted(counts.items(), key=lambda kv: -kv[1]))
