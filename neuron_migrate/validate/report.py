"""Shows a validate result: a terminal table, a JSON document, plots, and a Markdown or HTML report.

The JSON document (`document`) is what everything else is drawn from after the run: `markdown`,
`html` and `Report` (which a notebook displays) take a document, so a report can be made again
from a `--json` file written on another machine.
"""

from __future__ import annotations

import base64
import html as html_escape
import io
import json
from pathlib import Path
from typing import Any

from neuron_migrate.validate import noise_floor
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
MODULE_ROWS = 12  # module rows shown around the first difference


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


def ran_line(ran: dict[str, Any]) -> str:
    """One side's "what ran": where it computed, through what, in how many processes."""
    devices = ", ".join(ran.get("devices") or []) or "no tensor recorded"
    group = ", ".join(ran.get("process_group_backends") or []) or "none"
    compiled = ", ".join(ran.get("compile_backends") or []) or "none"
    n, world = ran.get("processes", 0), ran.get("world_size", 0)
    processes = f"{n} process{'es' if n != 1 else ''} recorded" + (
        f" of world size {world}" if world and world != n else ""
    )
    collectives = [f"{k} x{v}" for k, v in (ran.get("collectives") or {}).items()]
    if ran.get("ddp_models"):
        collectives.append(f"DistributedDataParallel x{ran['ddp_models']}")
    return (
        f"ran on {devices}; process group {group}; torch.compile {compiled}; {processes}; "
        f"collectives {', '.join(collectives) or 'none'}; python {ran.get('python')}"
    )


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


def short_rule(item: Item | dict[str, Any], precision: str) -> str:
    """The rule column of the table: which rule judged the row, in a few characters."""
    rule = item.rule if isinstance(item, Item) else item.get("rule", "")
    if rule.startswith("noise floor"):
        return "floor R"
    if "or float64 noise floor" in rule:
        return f"{precision.split(' ')[0]} tol|f64 R"
    if "or perturbation noise floor" in rule:
        return f"{precision.split(' ')[0]} tol|ptb R"
    if rule.startswith("teacher forcing: noise"):
        return "forced, floor"
    if rule.startswith("teacher forcing"):
        return "forced, top-k"
    if rule.startswith("tokens"):
        return "tokens"
    if rule.startswith("same dtypes"):
        return "dtypes"
    return f"{precision.split(' ')[0]} tol" if rule else ""


def _all_runs(result) -> list[Run]:
    return [*result.runs, *([result.floor_run] if result.floor_run else []), *result.perturbed_runs]


def format_table(result) -> str:
    """The terminal view of a `pipeline.Result`."""
    comparison: Comparison | None = result.comparison
    lines = []
    for run in _all_runs(result):
        lines.append(describe_run(run))
        if run.captures:
            lines.append(f"          {ran_line(run.what_ran())}")
    if len(result.passes) > 1:
        lines.append("passes: " + "; ".join(result.passes))
    if comparison is not None:
        p = comparison.precision
        line = (
            f"tolerances: {p.name}; losses {_tolerance(p.loss, '|ref|')} per step; "
            f"tensors {_tolerance(p.tensor, 'max|ref|')}"
        )
        if comparison.floor:
            line += "\n" + _floor_line(comparison.floor, "||", "-")
        lines += [line, ""]
        width = max([len("item"), *(len(item.title) for item in comparison.items)])
        header = f"{'item':<{width}}  {'verdict':<8}{'rule':<15}{'R':>8}" + "".join(
            f"{c:>10}" for c in COLUMNS
        )
        lines += [header, "-" * len(header)]
        for item in comparison.items:
            cells = "".join(f"{c:>10}" for c in _stats_cells(item.stats))
            ratio = f"{item.ratio.value:.3g}" if item.ratio else ""
            rule = short_rule(item, p.name)
            lines.append(
                f"{item.title:<{width}}  {item.verdict:<8}{rule:<15}{ratio:>8}{cells}".rstrip()
            )
            if item.detail and not (
                item.stats and item.stats.max_abs == 0 and item.detail.startswith("worst:")
            ):
                lines.append(f"    {item.detail}")
        first = comparison.first_diverging_rank
        if first is not None:
            others = [r for r in comparison.ranks if r.rank != first.rank]
            rest = "; ".join(
                f"rank {r.rank} " + (f"from step {r.step}" if r.step is not None else "matches")
                for r in others
            )
            lines.append(
                f"ranks: rank {first.rank} diverges first, at step {first.step} ({first.item})"
                + (f"; {rest}" if rest else "")
            )
        for found in result.localizations:
            lines.append(f"localized [rank {found.rank}, step {found.step}]: {found.headline}")
            for note in found.notes:
                lines.append(f"    note: {note}")
        lines.append("")
        lines += [f"note: {note}" for note in comparison.notes]
    lines += [f"warning: {w}" for w in capture_warnings(_all_runs(result))]
    lines += [f"error: {error}" for error in result.errors]
    counts = ""
    if comparison is not None:
        diverged = sum(item.verdict == DIVERGE for item in comparison.items)
        matched = sum(item.verdict == MATCH for item in comparison.items)
        counts = f" ({matched} items match, {diverged} diverge)"
    judged = f", judged by the {comparison.judged_by}" if comparison is not None else ""
    lines.append(f"result: {VERDICT_WORDS[result.verdict]}{counts}{judged}")
    return "\n".join(lines)


def _item_json(item: Item) -> dict[str, Any]:
    return {
        "key": item.key,
        "title": item.title,
        "verdict": item.verdict,
        "detail": item.detail,
        "rule": item.rule,
        "ratio": item.ratio.as_dict() if item.ratio else None,
        "first_step": item.first_step,
        "rank": item.rank,
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
                "ratio": e.ratio.as_dict() if e.ratio else None,
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
        "what_ran": run.what_ran(),
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
                    "host_random",
                    "upcast",
                    "xla_metrics",
                    "compile",
                    "ran_on",
                    "exception",
                    "notes",
                )
            }
            for c in run.captures
        ],
    }


def document(result) -> dict[str, Any]:
    """The JSON document of a `pipeline.Result`: what `--json` writes and the reports are drawn from."""
    out: dict[str, Any] = {
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "errors": result.errors,
        "runs": [run_json(run) for run in result.runs],
        "passes": result.passes,
    }
    if result.floor_run is not None:
        out["floor_run"] = run_json(result.floor_run)
    if result.perturbed_runs:
        out["perturbed_runs"] = [run_json(run) for run in result.perturbed_runs]
    if result.reruns:
        out["reruns"] = [run_json(run) for run in result.reruns]
    comparison = result.comparison
    if comparison is not None:
        p = comparison.precision
        out["precision"] = {
            "name": p.name,
            "loss": {"rtol": p.loss.rtol, "atol": p.loss.atol},
            "tensor": {"rtol": p.tensor.rtol, "atol": p.tensor.atol},
            "near_tie": {"rtol": p.tie.rtol, "atol": p.tie.atol},
        }
        out["noise_floor"] = (
            dict(
                comparison.floor,
                run_threshold=noise_floor.RUN_THRESHOLD,
                module_threshold=noise_floor.COMPONENT_THRESHOLD,
            )
            if comparison.floor
            else None
        )
        out["judged_by"] = comparison.judged_by
        out["items"] = [_item_json(item) for item in comparison.items]
        out["ranks"] = [r.as_dict() for r in comparison.ranks]
        first = comparison.first_diverging_rank
        out["first_diverging_rank"] = first.as_dict() if first else None
        out["notes"] = comparison.notes
    out["localization"] = [found.as_dict() for found in result.localizations]
    return out


def as_json(result) -> str:
    return json.dumps(document(result), indent=1)


# -- plots ---------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    _pyplot().close(figure)
    return buffer.getvalue()


def loss_figure(doc: dict[str, Any]) -> bytes | None:
    """Losses of both programs (and the float32 floor), with their difference underneath."""
    losses = [i for i in doc.get("items", []) if i["key"].startswith("losses") and i.get("series")]
    if not losses:
        return None
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    floored = False
    for item in losses:
        series = item["series"]
        tag = f" [rank {item['rank']}]" if item.get("rank") is not None else ""
        top.plot(series["original"], "o-", label=f"original{tag}")
        top.plot(series["migrated"], "x--", label=f"migrated{tag}")
        for k, curve in enumerate(series.get("perturbed", []), 1):
            top.plot(curve, ":", color="grey", label=f"perturbed {k}{tag}")
        if series.get("floor"):
            width = (doc.get("noise_floor") or {}).get("width", "float32")
            top.plot(series["floor"], ":", color="grey", label=f"{width} floor{tag}")
        if series.get("r_prefix"):
            floored = True
            bottom.semilogy(
                [max(v, 1e-6) for v in series["r_prefix"]], "s-", label=f"R up to step{tag}"
            )
        else:
            rel = [max(v, 1e-12) if isinstance(v, float) else 1e-12 for v in series["rel_diff"]]
            bottom.semilogy(rel, "s-", label=f"|Δ|/|original|{tag}")
    if floored:
        bottom.axhline(noise_floor.RUN_THRESHOLD, color="red", linestyle=":", label="R mark")
        bottom.set_ylabel("R (noise floor)")
    else:
        tolerance = losses[0].get("tolerance")
        if tolerance:
            bottom.axhline(
                tolerance["rtol"], color="red", linestyle=":", label=f"rtol {tolerance['rtol']:g}"
            )
        bottom.set_ylabel("relative difference")
    top.set_ylabel("loss")
    top.set_title(f"losses: {VERDICT_WORDS.get(doc.get('verdict', 'error'), '?')}")
    top.legend(fontsize=8)
    bottom.set_xlabel("step (backward call)")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def localization_figure(found: dict[str, Any]) -> bytes | None:
    """The error of every module's output at the localized step, in the order the calls finished."""
    rows = [r for r in found.get("modules", []) if r.get("stats")]
    if not rows:
        return None
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(9, 4))
    floored = any(r.get("ratio") for r in rows)
    values = [
        float(r["ratio"]["r"]) if floored and r.get("ratio") else float(r["stats"]["norm_rel"])
        for r in rows
    ]
    colours = ["tab:red" if r["verdict"] == DIVERGE else "tab:blue" for r in rows]
    axis.bar(range(len(rows)), [max(v, 1e-12) for v in values], color=colours)
    axis.set_yscale("log")
    axis.set_ylabel("R (noise floor)" if floored else "max |Δ| / max |original|")
    if floored:
        axis.axhline(noise_floor.COMPONENT_THRESHOLD, color="red", linestyle=":")
    step = max(1, len(rows) // 30)
    axis.set_xticks(range(0, len(rows), step))
    axis.set_xticklabels(
        [rows[i]["name"] for i in range(0, len(rows), step)], rotation=70, fontsize=7
    )
    where = found.get("where") or "nothing"
    axis.set_title(f"step {found['step']}, rank {found['rank']}: first difference at {where}")
    fig.tight_layout()
    return _png(fig)


def generation_figure(item: dict[str, Any]) -> bytes | None:
    """Teacher-forced logit errors per position (top-k), the original's top-2 gap, where tokens part."""
    series = item.get("series") or {}
    if "position" not in series:
        return None
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for label in ("top5", "top50", "top1000", "all"):
        values = series.get(f"error_{label}")
        if values:
            top.semilogy(series["position"], [max(v, 1e-9) for v in values], ".-", label=label)
    tolerance = series.get("tolerance_top5")
    if tolerance:
        top.axhline(tolerance[0], color="red", linestyle=":", label="top-5 tolerance")
    top.set_ylabel("logit error / max |logit|")
    top.legend(fontsize=8)
    bottom.plot(series["position"], series["gap"], "o-", label="original top-1 − top-2")
    for x in series.get("parting", []):
        for axis in (top, bottom):
            axis.axvline(x, color="orange", alpha=0.6)
    bottom.set_ylabel("logit gap")
    bottom.set_xlabel("generated position")
    bottom.legend(fontsize=8)
    top.set_title(item["title"])
    fig.tight_layout()
    return _png(fig)


def figures(doc: dict[str, Any]) -> dict[str, bytes]:
    """Every plot the document supports, as PNG bytes, by title."""
    found: dict[str, bytes | None] = {"Losses": loss_figure(doc)}
    for loc in doc.get("localization", []):
        found[f"Module outputs at step {loc['step']} (rank {loc['rank']})"] = localization_figure(
            loc
        )
    for item in doc.get("items", []):
        if item["key"].startswith("generate/"):
            found[item["title"]] = generation_figure(item)
    return {title: png for title, png in found.items() if png}


def plot(comparison: Comparison, path: Path) -> None:
    """The loss curves, as a PNG file (`--plot`)."""
    png = loss_figure(
        {"items": [_item_json(i) for i in comparison.items], "verdict": comparison.verdict}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    if png is None:
        plt = _pyplot()
        fig, axis = plt.subplots(figsize=(8, 3))
        axis.text(
            0.5, 0.5, "no losses recorded", ha="center", va="center", transform=axis.transAxes
        )
        png = _png(fig)
    path.write_bytes(png)


# -- Markdown and HTML -----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value if value is not None else "")


def _sections(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """The report as (kind, content) blocks, for both renderings: text, table, list, image."""
    verdict = VERDICT_WORDS.get(doc.get("verdict", "error"), "ERROR")
    blocks: list[tuple[str, Any]] = [("title", f"validate: {verdict}")]
    runs = [
        *doc.get("runs", []),
        *([doc["floor_run"]] if doc.get("floor_run") else []),
        *doc.get("perturbed_runs", []),
    ]
    blocks.append(
        (
            "list",
            [
                f"**{r['label']}** `{r['script']}`: "
                + ", ".join(
                    f"{k} {v}"
                    for k, v in ((r.get("ranks") or [{}])[0].get("versions") or {}).items()
                    if k in ("torch", "torch_xla")
                )
                + f"; {max(len(r.get('ranks') or []), 1)} process(es); {r.get('seconds', 0):.1f} s"
                + (f"; {ran_line(r['what_ran'])}" if r.get("what_ran") else "")
                for r in runs
            ],
        )
    )
    if doc.get("passes"):
        blocks += [("heading", "Passes"), ("list", doc["passes"])]
    precision = doc.get("precision")
    if precision:
        text = f"Precision: **{precision['name']}**; judged by the {doc.get('judged_by', 'tolerances')}."
        floor = doc.get("noise_floor")
        if floor:
            text += " " + _floor_line(floor, "‖", "−", markdown=True)
        blocks.append(("text", text))
    items = doc.get("items", [])
    if items:
        rows = [
            [
                i["title"],
                i["verdict"].upper(),
                i.get("rule", ""),
                _cell((i.get("ratio") or {}).get("r")),
                _cell((i.get("stats") or {}).get("max_abs")),
                _cell((i.get("stats") or {}).get("norm_rel")),
                _cell((i.get("stats") or {}).get("cosine")),
                i.get("detail", ""),
            ]
            for i in items
        ]
        blocks += [
            ("heading", "Comparison"),
            (
                "table",
                (["item", "verdict", "rule", "R", "max abs", "norm rel", "cosine", "detail"], rows),
            ),
        ]
    first = doc.get("first_diverging_rank")
    if first:
        blocks.append(
            (
                "text",
                f"**Rank {first['rank']} diverges first**, at step {first['step']} ({first['item']}).",
            )
        )
    for loc in doc.get("localization", []):
        blocks += [
            ("heading", f"Localized: rank {loc['rank']}, step {loc['step']}"),
            ("text", f"**{loc['headline']}**. Judged by {loc['rule']}."),
        ]
        modules = loc.get("modules", [])
        at = next((k for k, r in enumerate(modules) if r["verdict"] == DIVERGE), 0)
        shown = modules[max(0, at - 3) : max(0, at - 3) + MODULE_ROWS]
        if shown:
            blocks.append(
                (
                    "table",
                    (
                        ["module", "class", "verdict", "R", "max abs", "norm rel", "cosine"],
                        [
                            [
                                r["name"], r["kind"], r["verdict"].upper(),
                                _cell((r.get("ratio") or {}).get("r")),
                                _cell((r.get("stats") or {}).get("max_abs")),
                                _cell((r.get("stats") or {}).get("norm_rel")),
                                _cell((r.get("stats") or {}).get("cosine")),
                            ]
                            for r in shown
                        ],
                    ),
                )
            )  # fmt: skip
        if loc.get("notes"):
            blocks.append(("list", loc["notes"]))
    for title, png in figures(doc).items():
        blocks += [("heading", title), ("image", (title, png))]
    if doc.get("notes") or doc.get("errors"):
        blocks += [("heading", "Notes"), ("list", [*doc.get("notes", []), *doc.get("errors", [])])]
    return blocks


def markdown(doc: dict[str, Any]) -> str:
    """The report in Markdown, plots inline as data URIs (Jupyter and most viewers show them)."""
    out = []
    for kind, content in _sections(doc):
        if kind == "title":
            out.append(f"# {content}")
        elif kind == "heading":
            out.append(f"## {content}")
        elif kind == "text":
            out.append(content)
        elif kind == "list":
            out.append("\n".join(f"* {line}" for line in content))
        elif kind == "table":
            header, rows = content
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += [
                "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows
            ]
            out.append("\n".join(lines))
        elif kind == "image":
            title, png = content
            out.append(f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})")
    return "\n\n".join(out) + "\n"


def _inline(text: str) -> str:
    """`code` and **bold** of the Markdown text, as HTML."""
    escaped = html_escape.escape(text)
    parts = escaped.split("`")
    escaped = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = escaped.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def html(doc: dict[str, Any]) -> str:
    """The report as one self-contained HTML fragment (plots inline)."""
    out = ['<div class="nm-validate-report">']
    for kind, content in _sections(doc):
        if kind == "title":
            out.append(f"<h2>{_inline(content)}</h2>")
        elif kind == "heading":
            out.append(f"<h3>{_inline(content)}</h3>")
        elif kind == "text":
            out.append(f"<p>{_inline(content)}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline(line)}</li>" for line in content) + "</ul>")
        elif kind == "table":
            header, rows = content
            head = "".join(f"<th>{html_escape.escape(h)}</th>" for h in header)
            body = "".join(
                f'<tr class="nm-{html_escape.escape(str(row[2] if header[1] == "class" else row[1]).lower())}">'
                + "".join(f"<td>{html_escape.escape(str(c))}</td>" for c in row)
                + "</tr>"
                for row in rows
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "image":
            title, png = content
            data = base64.b64encode(png).decode()
            out.append(
                f'<img alt="{html_escape.escape(title)}" src="data:image/png;base64,{data}"/>'
            )
    out.append("</div>")
    return "\n".join(out)


class Report:
    """A document a notebook displays as the HTML report (or Markdown where HTML is not shown)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.document = doc

    @classmethod
    def from_json(cls, path: str | Path) -> Report:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def _repr_html_(self) -> str:
        return html(self.document)

    def _repr_markdown_(self) -> str:
        return markdown(self.document)


def write(doc: dict[str, Any], path: Path) -> None:
    """`--report`: HTML for a .html/.htm path, Markdown otherwise."""
    text = html(doc) if path.suffix.lower() in (".html", ".htm") else markdown(doc)
    if path.suffix.lower() in (".html", ".htm"):
        text = f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>validate</title></head><body>\n{text}\n</body></html>\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _floor_line(floor: dict, bar: str, minus: str, markdown: bool = False) -> str:
    """What measured the noise floor and how R is read: float32 under bf16, float64 under float32,
    or perturbed float32 runs under float32."""
    program = f"`{floor['program']}`" if markdown else floor["program"]
    marks = f"≤ {noise_floor.RUN_THRESHOLD:g} (≤ {noise_floor.COMPONENT_THRESHOLD:g} per module)"
    if floor.get("name") == noise_floor.PERTURBATION:
        r = (
            f"R = {bar}migrated {minus} original{bar} / {bar}perturbed {minus} original{bar}, "
            "against the farther perturbed run"
        )
        return (
            f"{'Perturbation' if markdown else 'perturbation'} floor: {program} {floor.get('runs', 2)} more "
            f"times in float32, every module output moved by one ulp at every call; {r} passes "
            f"at {marks} for what the float32 tolerances did not settle" + ("." if markdown else "")
        )
    width = floor.get("width", "float32")
    ref = "fp32" if width == "float32" else "fp64"
    changed = ", ".join(sorted(floor["changed"])) or "nothing"
    what = f"{changed} turned off" if width == "float32" else f"{changed}"
    r = f"R = {bar}migrated {minus} {ref}{bar} / {bar}original {minus} {ref}{bar}"
    scope = "" if width == "float32" else " for what the float32 tolerances did not settle"
    return (
        f"{'Noise' if markdown else 'noise'} floor: {program} again in {width} ({what}); {r} passes at "
        f"{marks}{scope}"
        + ("." if markdown else "")
    )

