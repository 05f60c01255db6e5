"""Shows a comparison: a terminal table, a JSON document, and a loss-curve plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from neuron_migrate.validate.compare import (
    DIVERGE,
    MATCH,
    SKIPPED,
    Comparison,
    Item,
    Stats,
    Tolerance,
)
from neuron_migrate.validate.runner import Run

VERDICT_WORDS = {MATCH: "MATCH", DIVERGE: "DIVERGE", SKIPPED: "NOTHING COMPARED", "error": "ERROR"}
COLUMNS = ("max abs", "max rel", "norm rel", "cosine", "rel L2")


def _num(value: float) -> str:
    return f"{value:.2e}" if value == value else "nan"


def _stats_cells(stats: Stats | None) -> list[str]:
    if stats is None:
        return [""] * len(COLUMNS)
    return [
        _num(stats.max_abs),
        _num(stats.max_rel),
        _num(stats.norm_rel),
        f"{stats.cosine:.6f}",
        _num(stats.rel_l2),
    ]


def describe_run(run: Run) -> str:
    versions = run.captures[0].manifest.get("versions", {}) if run.captures else {}
    stack = ", ".join(f"{k} {versions[k]}" for k in ("torch", "torch_xla") if k in versions) or str(
        run.program.python
    )
    n = run.program.nproc
    procs = "1 process" if n is None else f"torchrun, {n} process{'es' if n > 1 else ''}"
    status = "" if run.ok else (" TIMED OUT" if run.timed_out else f" EXIT {run.returncode}")
    return f"{run.program.label:<9} {run.program.script}  ({stack}; {procs}; {run.seconds:.1f} s){status}"


def capture_warnings(runs: list[Run]) -> list[str]:
    """Parts of the capture that could not be installed in a program (the program still ran)."""
    warnings = []
    for run in runs:
        for capture in run.captures:
            for note in capture.manifest.get("notes", []):
                lines = note.strip().splitlines()
                summary = lines[0] + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")
                warnings.append(
                    f"capture in the {run.program.label} program (rank {capture.rank}): {summary}"
                )
    return warnings


def _tolerance(tol: Tolerance, per: str) -> str:
    return f"|Δ| ≤ {tol.atol:g} + {tol.rtol:g}·{per}"


def format_table(
    runs: list[Run], comparison: Comparison | None, verdict: str, errors: list[str]
) -> str:
    lines = [describe_run(run) for run in runs]
    if comparison is not None:
        p = comparison.precision
        lines.append(
            f"tolerances: {p.name}; losses {_tolerance(p.loss, '|ref|')} per step; "
            f"tensors {_tolerance(p.tensor, 'max|ref|')}"
        )
        lines.append("")
        width = max([len("item"), *(len(item.title) for item in comparison.items)])
        header = f"{'item':<{width}}  {'verdict':<8}" + "".join(f"{c:>10}" for c in COLUMNS)
        lines += [header, "-" * len(header)]
        for item in comparison.items:
            cells = "".join(f"{c:>10}" for c in _stats_cells(item.stats))
            lines.append(f"{item.title:<{width}}  {item.verdict:<8}{cells}".rstrip())
            if item.detail and not (
                item.stats and item.stats.max_abs == 0 and item.detail.startswith("worst:")
            ):
                lines.append(f"    {item.detail}")
        lines.append("")
        lines += [f"note: {note}" for note in comparison.notes]
    lines += [f"warning: {w}" for w in capture_warnings(runs)]
    lines += [f"error: {error}" for error in errors]
    counts = ""
    if comparison is not None:
        diverged = sum(item.verdict == DIVERGE for item in comparison.items)
        matched = sum(item.verdict == MATCH for item in comparison.items)
        counts = f" ({matched} items match, {diverged} diverge)"
    lines.append(f"result: {VERDICT_WORDS[verdict]}{counts}")
    return "\n".join(lines)


def _item_json(item: Item) -> dict[str, Any]:
    return {
        "key": item.key,
        "title": item.title,
        "verdict": item.verdict,
        "detail": item.detail,
        "stats": item.stats.as_dict() if item.stats else None,
        "tolerance": {"rtol": item.tolerance.rtol, "atol": item.tolerance.atol}
        if item.tolerance
        else None,
        "entries": [
            {
                "name": e.name,
                "verdict": e.verdict,
                "detail": e.detail,
                "stats": e.stats.as_dict() if e.stats else None,
            }
            for e in item.entries
        ],
        "series": item.series,
    }


def run_json(run: Run) -> dict[str, Any]:
    return {
        "label": run.program.label,
        "script": str(run.program.script),
        "python": str(run.program.python),
        "command": run.command,
        "returncode": run.returncode,
        "timed_out": run.timed_out,
        "seconds": round(run.seconds, 3),
        "log": str(run.log),
        "ranks": [
            {
                k: c.manifest.get(k)
                for k in (
                    "rank",
                    "world_size",
                    "versions",
                    "optimizer_steps",
                    "backward_calls",
                    "param_dtypes",
                    "autocast_dtypes",
                    "xla_bf16_env",
                    "dropout_calls",
                    "xla_metrics",
                    "compile",
                    "exception",
                    "notes",
                )
            }
            for c in run.captures
        ],
    }


def as_json(
    runs: list[Run], comparison: Comparison | None, verdict: str, exit_code: int, errors: list[str]
) -> str:
    document: dict[str, Any] = {
        "verdict": verdict,
        "exit_code": exit_code,
        "errors": errors,
        "runs": [run_json(run) for run in runs],
    }
    if comparison is not None:
        p = comparison.precision
        document["precision"] = {
            "name": p.name,
            "loss": {"rtol": p.loss.rtol, "atol": p.loss.atol},
            "tensor": {"rtol": p.tensor.rtol, "atol": p.tensor.atol},
            "near_tie": {"rtol": p.tie.rtol, "atol": p.tie.atol},
        }
        document["items"] = [_item_json(item) for item in comparison.items]
        document["notes"] = comparison.notes
    return json.dumps(document, indent=1)


def plot(comparison: Comparison, path: Path) -> None:
    """Loss curves, original vs migrated, with the relative difference per step underneath."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = [item for item in comparison.items if item.key.startswith("losses") and item.series]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    if not losses:
        top.text(0.5, 0.5, "no losses recorded", ha="center", va="center", transform=top.transAxes)
    for item in losses:
        series = item.series or {}
        tag = item.title.split("[")[-1].rstrip("]") if "[" in item.title else ""
        top.plot(series["original"], "o-", label=f"original {tag}".strip())
        top.plot(series["migrated"], "x--", label=f"migrated {tag}".strip())
        rel = [max(v, 1e-12) if v == v else 1e-12 for v in series["rel_diff"]]
        bottom.semilogy(rel, "s-", label=f"|Δ|/|original| {tag}".strip())
    tolerance = losses[0].tolerance if losses else None
    if tolerance is not None:
        bottom.axhline(tolerance.rtol, color="red", linestyle=":", label=f"rtol {tolerance.rtol:g}")
    top.set_ylabel("loss")
    top.set_title(
        f"losses: {VERDICT_WORDS[comparison.verdict]} ({comparison.precision.name} tolerances)"
    )
    top.legend()
    bottom.set_xlabel("step (backward call)")
    bottom.set_ylabel("relative difference")
    bottom.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
