"""The validation dashboard: run the original and the migrated program side by side (`neuron-migrate
validate`) and show the verdict, the loss curves of both, and the comparison table.

The dashboard reads the JSON document that `validate --json` writes, so it shows a run made in a
terminal or on another machine (`ValidationDashboard.from_json`) as well as one it starts itself
(`run`). The programs run in their own interpreters (the original in the reference environment
when it imports torch_xla), never in the notebook's kernel.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import traitlets

from neuron_migrate.jupyter import render

VERDICTS = {
    "match": ("MATCH", "ok", "the migrated program computes what the original did"),
    "diverge": (
        "DIVERGE",
        "bad",
        "the migrated program computes something different from the original",
    ),
    "skipped": ("NOTHING COMPARED", "warn", "the two programs recorded nothing in common"),
    "error": ("ERROR", "bad", "the comparison could not be made"),
}
STAT_COLUMNS = (
    ("max_abs", "max abs"),
    ("max_rel", "max rel"),
    ("norm_rel", "norm rel"),
    ("cosine", "cosine"),
    ("rel_l2", "rel L2"),
)
MAX_ENTRIES = 40  # tensors listed under an item; the rest are counted


def summary(document: dict[str, Any]) -> str:
    """The verdict in one sentence: `MATCH: the migrated program computes what the original did (...)`."""
    verdict = document.get("verdict", "error")
    word, _, meaning = VERDICTS.get(verdict, VERDICTS["error"])
    items = document.get("items", [])
    counts = []
    matched = sum(item["verdict"] == "match" for item in items)
    diverged = [item["title"] for item in items if item["verdict"] == "diverge"]
    if items:
        counts.append(f"{render.plural(matched, 'item')} match")
        if diverged:
            counts.append(f"{len(diverged)} diverge: {', '.join(diverged)}")
    precision = (document.get("precision") or {}).get("name")
    if precision:
        counts.append(f"{precision} tolerances")
    if verdict == "error" and document.get("errors"):
        counts.append(document["errors"][0].splitlines()[0])
    return f"{word}: {meaning}" + (f" ({'; '.join(counts)})" if counts else "")


def _number(key: str, value: Any) -> str:
    if not isinstance(value, (int, float)):
        return render.escape(str(value))
    return f"{value:.6f}" if key == "cosine" else f"{value:.2e}"


def loss_curves_png(document: dict[str, Any]) -> bytes | None:
    """Loss per step, original vs migrated, and their relative difference; None without losses."""
    losses = [
        item
        for item in document.get("items", [])
        if item["key"].startswith("losses") and item.get("series")
    ]
    if not losses:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5.2), dpi=96)
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    floor = 1e-12
    for item in losses:
        series = item["series"]
        tag = item["title"].split("[")[-1].rstrip("]") if "[" in item["title"] else ""
        steps = range(len(series["original"]))
        top.plot(
            steps, series["original"], "o-", label=f"original {tag}".strip(), linewidth=2, alpha=0.8
        )
        top.plot(
            range(len(series["migrated"])),
            series["migrated"],
            "x--",
            label=f"migrated {tag}".strip(),
            linewidth=1.5,
        )
        relative = [
            v if isinstance(v, (int, float)) and v == v and v > floor else floor
            for v in series.get("rel_diff", [])
        ]
        bottom.semilogy(
            range(len(relative)),
            relative,
            "s-",
            markersize=4,
            label=f"|migrated - original| / |original| {tag}".strip()
            + (" (identical steps at 1e-12)" if floor in relative else ""),
        )
    tolerance = losses[0].get("tolerance")
    if tolerance:
        bottom.axhline(
            tolerance["rtol"], color="#f85149", linestyle=":", label=f"rtol {tolerance['rtol']:g}"
        )
    word = VERDICTS.get(document.get("verdict", "error"), VERDICTS["error"])[0]
    precision = (document.get("precision") or {}).get("name", "")
    top.set_title(f"Loss per step: {word}" + (f" ({precision} tolerances)" if precision else ""))
    top.set_ylabel("loss")
    top.legend(loc="best", fontsize=8)
    top.grid(alpha=0.3)
    bottom.set_xlabel("step (backward call)")
    bottom.set_ylabel("relative difference")
    bottom.legend(loc="best", fontsize=8)
    bottom.grid(alpha=0.3, which="both")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def comparison_table_html(document: dict[str, Any]) -> str:
    items = document.get("items", [])
    if not items:
        return "<i>Nothing was compared.</i>"
    cell = "padding: 2px 8px; text-align: left; vertical-align: top; border: none;"
    number = "padding: 2px 8px; text-align: right; vertical-align: top; border: none; font-variant-numeric: tabular-nums;"
    head = (
        f'<th style="{cell}">item</th><th style="{cell}">verdict</th>'
        + "".join(f'<th style="{number}">{title}</th>' for _, title in STAT_COLUMNS)
        + f'<th style="{cell}">tolerance</th>'
    )
    rows = []
    for item in items:
        word, tone, _ = VERDICTS.get(item["verdict"], (item["verdict"].upper(), "warn", ""))
        stats = item.get("stats") or {}
        tolerance = item.get("tolerance")
        rows.append(
            f'<tr class="nm-item nm-{render.escape(item["verdict"])}">'
            f'<td style="{cell}"><b>{render.escape(item["title"])}</b></td>'
            f'<td style="{cell}">{render.badge(word, tone)}</td>'
            + "".join(
                f'<td style="{number}">{_number(key, stats[key]) if key in stats else ""}</td>'
                for key, _ in STAT_COLUMNS
            )
            + f'<td style="{cell} white-space: nowrap;">'
            + (f"atol {tolerance['atol']:g}, rtol {tolerance['rtol']:g}" if tolerance else "")
            + "</td></tr>"
        )
        extra = []
        # "worst: <tensor>" says nothing when nothing differs.
        identical = stats.get("max_abs") == 0 and item.get("detail", "").startswith("worst:")
        if item.get("detail") and not identical:
            extra.append(render.escape(item["detail"]))
        entries = item.get("entries") or []
        if entries and not item["key"].startswith("losses"):
            listed = "".join(
                f"<li>{render.escape(e['name'])}: {render.escape(e['verdict'])}"
                + (f" ({render.escape(e['detail'])})" if e.get("detail") else "")
                + "</li>"
                for e in entries[:MAX_ENTRIES]
            )
            more = (
                f"<li>... and {len(entries) - MAX_ENTRIES} more</li>"
                if len(entries) > MAX_ENTRIES
                else ""
            )
            extra.append(
                f"<details><summary>{render.plural(len(entries), 'tensor')}</summary><ul>{listed}{more}</ul></details>"
            )
        if extra:
            rows.append(
                f'<tr><td></td><td colspan="7" style="{cell} {render.MUTED}">{"".join(extra)}</td></tr>'
            )
    return (
        '<table class="nm-comparison" style="border-collapse: collapse; margin: 4px 0;">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def runs_html(document: dict[str, Any]) -> str:
    lines = []
    for run in document.get("runs", []):
        ranks = run.get("ranks") or []
        versions = (ranks[0].get("versions") or {}) if ranks else {}
        stack = ", ".join(
            f"{name} {versions[name]}" for name in ("torch", "torch_xla") if name in versions
        )
        processes = render.plural(max(len(ranks), 1), "process")
        status = "timed out" if run.get("timed_out") else f"exit {run.get('returncode')}"
        lines.append(
            f"<li><b>{render.escape(run['label'])}</b> <code>{render.escape(run['script'])}</code>: "
            f"{render.escape(stack or run.get('python', ''))}; {processes}; {run.get('seconds', 0):.1f} s; {status}</li>"
        )
    return f'<ul style="margin: 2px 0;">{"".join(lines)}</ul>' if lines else ""


def details_html(document: dict[str, Any]) -> str:
    parts = []
    precision = document.get("precision")
    if precision:
        loss, tensor = precision["loss"], precision["tensor"]
        parts.append(
            f"<p><b>Tolerances ({render.escape(precision['name'])})</b>: a loss step matches when "
            f"|Δ| ≤ {loss['atol']:g} + {loss['rtol']:g}·|original|; a tensor when "
            f"max|Δ| ≤ {tensor['atol']:g} + {tensor['rtol']:g}·max|original|.</p>"
        )
    parts.append(render.items_list("Notes", map(render.prose, document.get("notes", []))))
    warnings = [
        f"{run['label']} (rank {rank.get('rank')}): {note.strip().splitlines()[0]}"
        for run in document.get("runs", [])
        for rank in run.get("ranks") or []
        for note in rank.get("notes") or []
    ]
    parts.append(render.items_list("Capture warnings", map(render.escape, warnings)))
    parts.append(
        render.items_list(
            "Errors",
            (
                f"<pre style='white-space: pre-wrap; margin: 0;'>{render.escape(e)}</pre>"
                for e in document.get("errors", [])
            ),
        )
    )
    commands = [
        f"{run['label']}: {shlex.join(run.get('command', []))}" for run in document.get("runs", [])
    ]
    parts.append(
        render.items_list("Commands", (f"<code>{render.escape(c)}</code>" for c in commands))
    )
    return "".join(parts) or "<i>Nothing to add.</i>"


class ValidationDashboard(widgets.VBox):
    """Validate a migration and show the result: verdict, loss curves, comparison table.

        dashboard = ValidationDashboard()
        dashboard.run("train_xla.py", "train.py", "--steps", "8")
        dashboard                       # in a notebook: shows it

    or show an earlier `neuron-migrate validate ... --json result.json`:

        ValidationDashboard.from_json("result.json")
    """

    result: Any = traitlets.Dict(allow_none=True, default_value=None)

    def __init__(
        self,
        result: dict[str, Any] | None = None,
        *,
        original: str | Path = "",
        migrated: str | Path = "",
        arguments: str = "",
        options: Sequence[str] = (),
    ) -> None:
        self.options = list(options)
        self.original = widgets.Text(
            value=str(original),
            description="Original",
            placeholder="train_xla.py",
            layout=widgets.Layout(width="48%"),
        )
        self.migrated = widgets.Text(
            value=str(migrated),
            description="Migrated",
            placeholder="train.py",
            layout=widgets.Layout(width="48%"),
        )
        self.arguments = widgets.Text(
            value=arguments,
            description="Arguments",
            placeholder="--steps 8 (passed to both)",
            layout=widgets.Layout(width="70%"),
        )
        self.run_button = widgets.Button(
            description="Validate", icon="play", button_style="primary"
        )
        self.status = widgets.HTML()
        self.headline = widgets.HTML()
        self.runs = widgets.HTML()
        self.curves = widgets.Image(format="png", layout=widgets.Layout(max_width="820px"))
        self.curves_note = widgets.HTML()
        self.table = widgets.HTML()
        self.details = widgets.HTML()
        self.tabs = widgets.Tab(
            [widgets.VBox([self.curves_note, self.curves]), self.table, self.details]
        )
        for index, title in enumerate(("Loss curves", "Comparison", "Details")):
            self.tabs.set_title(index, title)
        super().__init__(
            [
                widgets.HBox([self.original, self.migrated]),
                widgets.HBox([self.arguments, self.run_button, self.status]),
                self.headline,
                self.runs,
                self.tabs,
            ]
        )
        self.add_class("nm-validation-dashboard")
        self.run_button.on_click(lambda _: self.run())
        self.observe(self._render, names="result")
        self.result = result
        self._render()

    def __repr__(self) -> str:
        return f"ValidationDashboard: {self.summary()}"

    @classmethod
    def from_json(cls, path: str | Path) -> ValidationDashboard:
        """A dashboard showing the document `neuron-migrate validate --json PATH` wrote."""
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def verdict(self) -> str:
        """`match`, `diverge`, `skipped` or `error` ('' before anything ran)."""
        return (self.result or {}).get("verdict", "")

    def summary(self) -> str:
        return summary(self.result) if self.result else "Nothing validated yet."

    def run(
        self,
        original: str | Path | None = None,
        migrated: str | Path | None = None,
        *arguments: str,
        options: Sequence[str] | None = None,
        timeout: float = 600,
    ) -> dict[str, Any]:
        """Run `neuron-migrate validate ORIGINAL MIGRATED [options] -- ARGUMENTS`, show and return its result.

        `options` are validate's own flags (`--no-dropout`, `--precision bf16`, `--nproc 2`, ...).
        """
        if original is not None:
            self.original.value = str(original)
        if migrated is not None:
            self.migrated.value = str(migrated)
        if arguments:
            self.arguments.value = shlex.join(arguments)
        if options is not None:
            self.options = list(options)
        if not self.original.value or not self.migrated.value:
            self.status.value = render.badge("name both programs", "warn")
            return {}
        self.status.value = "<i>running both programs...</i>"
        self.run_button.disabled = True
        try:
            self.result = validate(
                self.original.value,
                self.migrated.value,
                shlex.split(self.arguments.value),
                self.options,
                timeout,
            )
        finally:
            self.run_button.disabled = False
            self.status.value = ""
        return self.result or {}

    def _render(self, _change: object = None) -> None:
        document = self.result
        if not document:
            self.headline.value = (
                "<i>Name the original and the migrated program, then press Validate.</i>"
            )
            self.runs.value = self.table.value = self.details.value = self.curves_note.value = ""
            self.curves.value = b""
            return
        # The programs compared, so that Validate runs them again.
        scripts = {run["label"]: run["script"] for run in document.get("runs", [])}
        self.original.value = scripts.get("original", self.original.value)
        self.migrated.value = scripts.get("migrated", self.migrated.value)
        word, tone, _ = VERDICTS.get(document.get("verdict", "error"), VERDICTS["error"])
        self.headline.value = (
            f'<div class="nm-verdict" style="margin: 6px 0; font-size: 14px;">{render.badge(word, tone)} '
            f"{render.escape(summary(document))}</div>"
        )
        self.runs.value = runs_html(document)
        self.table.value = comparison_table_html(document)
        self.details.value = details_html(document)
        try:
            png = loss_curves_png(document)
        except ImportError:
            png, self.curves_note.value = (
                None,
                "<i>The loss curves need matplotlib: pip install matplotlib</i>",
            )
        else:
            self.curves_note.value = (
                ""
                if png
                else "<i>No losses were recorded (the programs never called backward()).</i>"
            )
        self.curves.value = png or b""
        self.curves.layout.display = None if png else "none"
        # Open on what matters: the curves when there are any, else the table or the errors.
        self.tabs.selected_index = 0 if png else 1 if document.get("items") else 2


def validate(
    original: str | Path,
    migrated: str | Path,
    arguments: Sequence[str] = (),
    options: Sequence[str] = (),
    timeout: float = 600,
) -> dict[str, Any]:
    """Run `neuron-migrate validate` in a child process and return its JSON document. An error
    that stops validate before it compares anything comes back as a document with verdict `error`."""
    with tempfile.TemporaryDirectory(prefix="neuron-migrate-dashboard-") as tmp:
        output = Path(tmp) / "result.json"
        command = [
            sys.executable,
            "-m",
            "neuron_migrate.validate",
            "validate",
            str(original),
            str(migrated),
            "--json",
            str(output),
            "--timeout",
            str(timeout),
            *options,
            "--",
            *arguments,
        ]
        try:
            completed = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout * 2 + 60
            )
        except subprocess.TimeoutExpired:
            return {
                "verdict": "error",
                "errors": [f"validate did not finish within {timeout * 2 + 60:g} s"],
            }
        if output.exists():
            return json.loads(output.read_text(encoding="utf-8"))
        message = (
            completed.stderr or completed.stdout
        ).strip() or f"validate exited with status {completed.returncode}"
        return {"verdict": "error", "exit_code": completed.returncode, "errors": [message]}
