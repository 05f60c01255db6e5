"""The validation dashboard: run the original and the migrated program side by side (`neuron-migrate
validate`) and show the verdict, the loss curves of both, and the comparison table.

The dashboard reads the JSON document that `validate --json` writes, so it shows a run made in a
terminal or on another machine (`ValidationDashboard.from_json`) as well as one it starts itself.
`neuron-migrate validate` runs in a child process, and the programs in interpreters of their own
(the original in the reference environment when it imports torch_xla), never in the kernel:
pressing Validate leaves the kernel free, streams both programs' output into the log, shows how
far they got, and Cancel stops them; `run()` does the same and waits, for a notebook run top to
bottom (papermill). What the dashboard shows is also in its output as static HTML (see `views`).

Given two notebooks, validate re-runs the migrated one in a fresh kernel against the outputs saved
in the original (`validate.notebook_rerun`): the dashboard shows how many cells have run, and a
table of the cells (same, differs, new error, no saved output) with the first cell that differs.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import traitlets

from neuron_migrate.jupyter import render
from neuron_migrate.jupyter.views import StaticView
from neuron_migrate.validate import notebook_rerun
from neuron_migrate.validate.background import PROGRESS_PREFIX

VERDICTS = {
    "match": ("MATCH", "ok", "the migrated program computes what the original did"),
    "diverge": (
        "DIVERGE",
        "bad",
        "the migrated program computes something different from the original",
    ),
    "skipped": ("NOTHING COMPARED", "warn", "the two programs recorded nothing in common"),
    "error": ("ERROR", "bad", "the comparison could not be made"),
    "cancelled": ("CANCELLED", "warn", "the validation was stopped before it finished"),
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
    if "cells" in document:
        return notebook_summary(document)
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


# -- two notebooks: the migrated one re-run against the original's saved outputs ---------------

NOTEBOOK_VERDICTS = {"match": ("SAME", "ok"), "diverge": ("DIFFERS", "bad")}
CELL_TONES = {
    notebook_rerun.SAME: "ok",
    notebook_rerun.DIFFERS: "bad",
    notebook_rerun.NEW_ERROR: "bad",
    notebook_rerun.NO_SAVED_OUTPUT: "warn",
    notebook_rerun.ADDED: "warn",
    notebook_rerun.REMOVED: "warn",
}


def notebook_summary(document: dict[str, Any]) -> str:
    """`SAME: every code cell gives the outputs saved in the original (12 same)`, or `DIFFERS:
    first cell that differs: 4 (...): differs (10 same, 2 differs, 1 new error)`."""
    result = notebook_rerun.from_json(document)
    word, _ = NOTEBOOK_VERDICTS["diverge" if result.first_difference else "match"]
    sentence = f"{word}: {notebook_rerun.conclusion(result)}"
    if result.first_difference is None:
        return sentence
    counts = Counter(cell.verdict for cell in result.cells)
    return sentence + " (" + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()) + ")"


def notebook_table_html(document: dict[str, Any]) -> str:
    """The migrated notebook's code cells: source, verdict and what differs first; the first cell
    that differs is marked."""
    result = notebook_rerun.from_json(document)
    if not result.cells:
        return "<i>No code cell was run.</i>"
    first = result.first_difference
    cell = "padding: 2px 8px; text-align: left; vertical-align: top; border: none;"
    head = "".join(
        f'<th style="{cell}">{title}</th>'
        for title in ("cell", "source", "verdict", "first difference")
    )
    rows = []
    for row in result.cells:
        marked = row is first
        slug = row.verdict.replace(" ", "-")
        rows.append(
            f'<tr class="nm-cell nm-{slug}{" nm-first-difference" if marked else ""}"'
            + (' style="background: rgba(248, 81, 73, 0.12);"' if marked else "")
            + f'><td style="{cell} text-align: right;">{row.number}</td>'
            f'<td style="{cell}"><code>{render.escape(row.first_line)}</code></td>'
            f'<td style="{cell} white-space: nowrap;">'
            f"{render.badge(row.verdict, CELL_TONES.get(row.verdict, 'warn'))}</td>"
            f'<td style="{cell}">{render.escape(row.detail)}'
            + (" <b>(first cell that differs)</b>" if marked else "")
            + "</td></tr>"
        )
    return (
        '<table class="nm-notebook-cells" style="border-collapse: collapse; margin: 4px 0;">'
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


# -- a validation running in the background -------------------------------------------------------

LOG_LINES = 400  # of each program's output kept in the log view
POLL = 0.5  # seconds between looks at the running programs
_STEP = re.compile(r"\bstep\W{0,3}(\d+)", re.IGNORECASE)
_CELL_RUN = re.compile(re.escape(PROGRESS_PREFIX) + notebook_rerun.CELL_PROGRESS.pattern)


def is_notebook_pair(original: str | Path, migrated: str | Path) -> bool:
    """Whether validate re-runs a migrated notebook against its original (rather than comparing
    two programs)."""
    return all(str(path).lower().endswith(".ipynb") for path in (original, migrated))


def _code_cells(path: str | Path) -> int:
    """How many code cells a notebook has (0 where it cannot be read: validate will say why)."""
    try:
        return len(notebook_rerun.code_cells(notebook_rerun.read_notebook(Path(path))))
    except notebook_rerun.NotebookError:
        return 0


def _descendants(pid: int) -> list[int]:
    """The processes started, directly or not, by `pid` (psutil where it is installed, else
    Linux's /proc)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:  # gone already
            return []
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Validation:
    """One run of `neuron-migrate validate`, in a child process, watched from a thread.

    `progress()` says how far each program got (its output so far, the last step it printed),
    `cancel()` stops validate and the programs it started, `wait()` returns the JSON document
    (a document with verdict `error` or `cancelled` when there is no comparison to show)."""

    def __init__(
        self,
        original: str | Path,
        migrated: str | Path,
        arguments: Sequence[str] = (),
        options: Sequence[str] = (),
        timeout: float = 600,
    ) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="neuron-migrate-dashboard-"))
        self.notebooks = is_notebook_pair(original, migrated)
        self.command = [
            sys.executable,
            "-m",
            "neuron_migrate.validate",
            "validate",
            str(original),
            str(migrated),
            "--json",
            str(self.folder / "result.json"),
            "--timeout",
            str(timeout),
            *options,
        ]
        if self.notebooks:
            # The migrated notebook runs a cell at a time, each within `timeout`; what a program
            # comparison keeps (its captures) and passes on (`-- ARGUMENTS`) means nothing here.
            self.cells = _code_cells(migrated)
            self.command += ["--", *arguments] if arguments else []
            self.limit = timeout * max(self.cells, 1) + 60
        else:
            self.cells = 0
            self.command += ["--work-dir", str(self.folder / "work"), "--", *arguments]
            self.limit = timeout * 2 + 60  # both programs ran past validate's own timeout
        self.started = time.monotonic()
        self._cancelled = threading.Event()
        self._output = (self.folder / "validate.log").open("wb")
        self.process = subprocess.Popen(
            self.command,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # so that Cancel can end it and what it started
        )
        self.document: dict[str, Any] | None = None

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def log(self, label: str) -> str:
        """What a program (`original`, `migrated`) has printed so far, its last lines."""
        try:
            text = (self.folder / "work" / f"{label}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-LOG_LINES:])

    def progress(self) -> dict[str, dict[str, Any]]:
        """For each program: lines printed, the last step number seen, its last line."""
        sides = {}
        for label in ("original", "migrated"):
            lines = self.log(label).splitlines()
            steps = [int(m.group(1)) for line in lines for m in [_STEP.search(line)] if m]
            sides[label] = {
                "lines": len(lines),
                "step": steps[-1] if steps else None,
                "last": lines[-1] if lines else "",
            }
        return sides

    def cells_run(self) -> list[str]:
        """Two notebooks: what validate said of each cell it ran so far ("cell 3/9 ...: same")."""
        try:
            text = (self.folder / "validate.log").read_text(errors="replace")
        except OSError:
            return []
        return [line[len(PROGRESS_PREFIX) :] for line in text.splitlines() if _CELL_RUN.match(line)]

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def running(self) -> bool:
        return self.document is None

    def wait(self, on_tick: Any = None) -> dict[str, Any]:
        """Watch the run until it ends (calling `on_tick(self)` now and then); its document."""
        while self.process.poll() is None:
            if self._cancelled.is_set() or self.seconds > self.limit:
                self._stop()
                break
            if on_tick is not None:
                on_tick(self)
            time.sleep(POLL)
        self.document = self._result()
        self._output.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        return self.document

    def _stop(self) -> None:
        """End validate and every program it started (each runs in a session of its own)."""
        children = _descendants(self.process.pid)
        for pid in [self.process.pid, *children]:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                    break
                except (ProcessLookupError, PermissionError):
                    continue
        self.process.wait()

    def _result(self) -> dict[str, Any]:
        if self._cancelled.is_set():
            return {
                "verdict": "cancelled",
                "errors": [f"cancelled after {self.seconds:.1f} s"],
            }
        if self.seconds > self.limit:
            return {
                "verdict": "error",
                "errors": [f"validate did not finish within {self.limit:g} s"],
            }
        output = self.folder / "result.json"
        if output.exists():
            document: dict[str, Any] = json.loads(output.read_text(encoding="utf-8"))
            return document
        said = (self.folder / "validate.log").read_text(errors="replace")
        if self.notebooks:  # the cells run before the error say nothing of it
            said = "\n".join(line for line in said.splitlines() if not _CELL_RUN.match(line))
        message = said.strip() or f"validate exited with status {self.process.returncode}"
        return {"verdict": "error", "exit_code": self.process.returncode, "errors": [message]}


# -- the dashboard --------------------------------------------------------------------------------

PROCESSES = [
    ("one process", 0),
    ("torchrun, 2 processes", 2),
    ("torchrun, 4 processes", 4),
    ("torchrun, 8 processes", 8),
]
_SPLIT_OPTIONS = {
    "--original-python": "original_python",
    "--migrated-python": "migrated_python",
    "--precision": "precision",
    "--nproc": "processes",
}


class ValidationDashboard(StaticView, widgets.VBox):
    """Validate a migration and show the result: verdict, loss curves, comparison table.

        dashboard = ValidationDashboard()
        dashboard.run("train_xla.py", "train.py", "--steps", "8")
        dashboard                       # in a notebook: shows it

    or show an earlier `neuron-migrate validate ... --json result.json`:

        ValidationDashboard.from_json("result.json")

    The Validate button starts the run in the background (the kernel stays free); `run()` waits.
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
        owner: StaticView | None = None,
    ) -> None:
        self.owner = owner
        wide, half = widgets.Layout(width="70%"), widgets.Layout(width="48%")
        self.original = widgets.Text(
            str(original), description="Original", placeholder="train_xla.py", layout=half
        )
        self.migrated = widgets.Text(
            str(migrated), description="Migrated", placeholder="train.py", layout=half
        )
        self.arguments = widgets.Text(
            arguments,
            description="Arguments",
            placeholder="--steps 8 (passed to both)",
            layout=wide,
        )
        self.original_python = widgets.Text(
            description="Old Python",
            placeholder="the reference environment, where the original imports torch_xla",
            layout=widgets.Layout(width="48%"),  # its own: two notebooks hide it
        )
        self.migrated_python = widgets.Text(
            description="New Python", placeholder="this kernel's Python", layout=half
        )
        self.precision = widgets.Dropdown(
            options=[("auto (from the dtypes)", "auto"), ("fp32", "fp32"), ("bf16", "bf16")],
            value="auto",
            description="Tolerances",
        )
        self.processes = widgets.Dropdown(options=PROCESSES, value=0, description="Processes")
        self.run_button = widgets.Button(
            description="Validate", icon="play", button_style="primary"
        )
        self.cancel_button = widgets.Button(description="Cancel", icon="stop", disabled=True)
        self.status = widgets.HTML()
        self.progress_bar = widgets.IntProgress(
            min=0, max=1, layout=widgets.Layout(width="30%", display="none")
        )
        self.log_view = widgets.HTML()
        self.log_box = widgets.Accordion([self.log_view], layout=widgets.Layout(display="none"))
        self.log_box.set_title(0, "Log")
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
        self.options: list[str] = []
        self.validation: Validation | None = None
        self._static: dict[str, Any] = {}  # what the views show, for the static view
        self._thread: threading.Thread | None = None
        super().__init__(
            [
                widgets.HBox([self.original, self.migrated]),
                widgets.HBox([self.original_python, self.migrated_python]),
                widgets.HBox([self.arguments, self.precision, self.processes]),
                widgets.HBox([self.run_button, self.cancel_button, self.progress_bar, self.status]),
                self.log_box,
                self.headline,
                self.runs,
                self.tabs,
            ]
        )
        self.set_options(options)
        self.add_class("nm-validation-dashboard")
        self.run_button.on_click(lambda _: self.start())
        self.cancel_button.on_click(lambda _: self.cancel())
        for name in (self.original, self.migrated):
            name.observe(self._fields, names="value")
        self._fields()
        self.observe(self._render, names="result")
        self.result = result
        if result is None:
            self._render()

    def __repr__(self) -> str:
        return f"ValidationDashboard: {self.summary()}"

    @classmethod
    def from_json(cls, path: str | Path) -> ValidationDashboard:
        """A dashboard showing the document `neuron-migrate validate --json PATH` wrote."""
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def verdict(self) -> str:
        """`match`, `diverge`, `skipped`, `error` or `cancelled` ('' before anything ran)."""
        return (self.result or {}).get("verdict", "")

    def summary(self) -> str:
        return summary(self.result) if self.result else "Nothing validated yet."

    def _fields(self, _change: object = None) -> None:
        """Two notebooks are compared by the migrated one's outputs, run in this kernel's Python
        (or New Python): the fields of a program comparison go."""
        notebooks = is_notebook_pair(self.original.value, self.migrated.value)
        for field in (self.arguments, self.original_python, self.precision, self.processes):
            field.layout.display = "none" if notebooks else None

    # -- options ----------------------------------------------------------------------------------

    def set_options(self, options: Sequence[str]) -> None:
        """validate's own flags: those the dashboard has a field for fill it, the rest are kept."""
        rest, given = [], list(options)
        while given:
            flag = given.pop(0)
            name, _, value = flag.partition("=")
            if name in _SPLIT_OPTIONS and (value or given):
                value = value or given.pop(0)
                field = getattr(self, _SPLIT_OPTIONS[name])
                field.value = int(value) if name == "--nproc" else value
            else:
                rest.append(flag)
        self.options = rest

    def validate_options(self) -> list[str]:
        """The flags validate gets: the fields, then the other options."""
        flags = []
        if self.original_python.value.strip():
            flags += ["--original-python", self.original_python.value.strip()]
        if self.migrated_python.value.strip():
            flags += ["--migrated-python", self.migrated_python.value.strip()]
        if self.precision.value != "auto":
            flags += ["--precision", self.precision.value]
        if self.processes.value:
            flags += ["--nproc", str(self.processes.value)]
        return flags + self.options

    # -- running ----------------------------------------------------------------------------------

    def start(
        self,
        original: str | Path | None = None,
        migrated: str | Path | None = None,
        *arguments: str,
        options: Sequence[str] | None = None,
        timeout: float = 600,
    ) -> bool:
        """Start `neuron-migrate validate ORIGINAL MIGRATED [options] -- ARGUMENTS` in the
        background and return at once; False (saying why) when it cannot start."""
        if self.validation is not None and self.validation.running:
            self.status.value = render.badge("already running", "warn")
            return False
        if original is not None:
            self.original.value = str(original)
        if migrated is not None:
            self.migrated.value = str(migrated)
        if arguments:
            self.arguments.value = shlex.join(arguments)
        if options is not None:
            self.set_options(options)
        if not self.original.value or not self.migrated.value:
            self.status.value = render.badge("name both programs", "warn")
            return False
        try:
            script_arguments = shlex.split(self.arguments.value)
        except ValueError as exc:
            self.status.value = f"{render.badge('arguments', 'bad')} {render.escape(str(exc))}"
            return False
        self.validation = Validation(
            self.original.value,
            self.migrated.value,
            script_arguments,
            self.validate_options(),
            timeout,
        )
        steps = self.validation.cells or _steps(script_arguments)
        self.progress_bar.max, self.progress_bar.value = max(steps or 1, 1), 0
        self.progress_bar.layout.display = None if steps else "none"
        self.log_box.layout.display = None
        self.run_button.disabled, self.cancel_button.disabled = True, False
        # The last verdict goes, from the page and from the notebook, before the new run shows.
        if self.result is None:
            self._render()
        else:
            self.result = None
        self._tick(self.validation)
        self._thread = threading.Thread(target=self._watch, args=(self.validation,), daemon=True)
        self._thread.start()
        return True

    def run(
        self,
        original: str | Path | None = None,
        migrated: str | Path | None = None,
        *arguments: str,
        options: Sequence[str] | None = None,
        timeout: float = 600,
    ) -> dict[str, Any]:
        """Run `neuron-migrate validate ORIGINAL MIGRATED [options] -- ARGUMENTS` and wait for
        it; show and return its result. `options` are validate's own flags (`--no-dropout`,
        `--precision bf16`, `--nproc 2`, `--original-python PY`, ...)."""
        if self.start(original, migrated, *arguments, options=options, timeout=timeout):
            self.wait()
        return self.result or {}

    def wait(self) -> dict[str, Any]:
        """Wait for the run Validate (or `start`) began; its result."""
        if self._thread is not None:
            self._thread.join()
        return self.result or {}

    def cancel(self) -> None:
        """Stop the running validation, and the programs it started."""
        if self.validation is not None and self.validation.running:
            self.status.value = "<i>cancelling...</i>"
            self.validation.cancel()

    def _watch(self, validation: Validation) -> None:
        document = validation.wait(self._tick)
        self.run_button.disabled, self.cancel_button.disabled = False, True
        self.progress_bar.layout.display = "none"
        self.status.value = ""
        self.result = document

    def _tick(self, validation: Validation) -> None:
        """Show how far the programs got (the notebook, how many of its cells ran)."""
        if validation.notebooks:
            ran = validation.cells_run()
            last = ran[-1] if ran else "starting a fresh kernel"
            self.status.value = (
                f"<i>running for {validation.seconds:.0f} s</i> — "
                f"{len(ran)} of {render.plural(validation.cells, 'code cell')} run; "
                f"{render.escape(last)}"
            )
            self.progress_bar.value = min(len(ran), self.progress_bar.max)
            self.log_view.value = _log_html({"migrated notebook": "\n".join(ran)})
            return
        sides = validation.progress()
        parts = []
        for label, side in sides.items():
            step = f", step {side['step']}" if side["step"] is not None else ""
            parts.append(f"<b>{label}</b>: {side['lines']} lines{step}")
        self.status.value = f"<i>running for {validation.seconds:.0f} s</i> — " + "; ".join(parts)
        done = [s["step"] + 1 for s in sides.values() if s["step"] is not None]
        if done:
            self.progress_bar.value = min(min(done), self.progress_bar.max)
        self.log_view.value = _log_html({label: validation.log(label) for label in sides})

    # -- views ------------------------------------------------------------------------------------

    def _render(self, _change: object = None) -> None:
        """Show the result. Its static view goes to the open tab first, into the notebook at
        once: by the time the page shows a verdict, the notebook's next save holds it."""
        shown = self._shown(self.result)
        self._static = shown
        self.publish(now=True)
        for name in ("original", "migrated"):
            if name in shown:
                getattr(self, name).value = shown[name]
        for name in ("headline", "runs", "table", "details", "curves_note", "curves"):
            getattr(self, name).value = shown[name]
        self.curves.layout.display = None if shown["curves"] else "none"
        if self.result:
            # Open on what matters: the curves when there are any, else the table or the errors.
            table = self.result.get("items") or self.result.get("cells")
            self.tabs.selected_index = 0 if shown["curves"] else 1 if table else 2

    def _shown(self, document: dict[str, Any] | None) -> dict[str, Any]:
        """What each view shows for `document`, by the name of its widget."""
        if not document:
            running = self.validation is not None and self.validation.running
            if running and self.validation is not None and self.validation.notebooks:
                headline = (
                    "<i>Validating: the migrated notebook runs in a fresh kernel; the table "
                    "shows here when its last cell has run.</i>"
                )
            elif running:
                headline = (
                    "<i>Validating: the verdict shows here when both programs have finished.</i>"
                )
            else:
                headline = "<i>Name the original and the migrated program, then press Validate.</i>"
            empty = dict.fromkeys(("runs", "table", "details", "curves_note"), "")
            return {"headline": headline, **empty, "curves": b""}
        if "cells" in document:
            return self._shown_notebooks(document)
        # The programs compared, so that Validate runs them again.
        scripts = {run["label"]: run["script"] for run in document.get("runs", [])}
        word, tone, _ = VERDICTS.get(document.get("verdict", "error"), VERDICTS["error"])
        try:
            png, note = loss_curves_png(document), ""
        except ImportError:
            png, note = None, "<i>The loss curves need matplotlib: pip install matplotlib</i>"
        if not png and not note:
            note = "<i>No losses were recorded (the programs never called backward()).</i>"
        return {
            "original": scripts.get("original", self.original.value),
            "migrated": scripts.get("migrated", self.migrated.value),
            "headline": (
                f'<div class="nm-verdict" style="margin: 6px 0; font-size: 14px;">'
                f"{render.badge(word, tone)} {render.escape(summary(document))}</div>"
            ),
            "runs": runs_html(document),
            "table": comparison_table_html(document),
            "details": details_html(document),
            "curves_note": note,
            "curves": png or b"",
        }

    def _shown_notebooks(self, document: dict[str, Any]) -> dict[str, Any]:
        """What each view shows for the re-run of a migrated notebook."""
        word, tone = NOTEBOOK_VERDICTS.get(document.get("verdict", ""), ("ERROR", "bad"))
        return {
            "original": document.get("original", self.original.value),
            "migrated": document.get("migrated", self.migrated.value),
            "headline": (
                f'<div class="nm-verdict" style="margin: 6px 0; font-size: 14px;">'
                f"{render.badge(word, tone)} {render.escape(notebook_summary(document))}</div>"
            ),
            "runs": "",
            "table": notebook_table_html(document),
            "details": details_html(document),
            "curves_note": "<i>Notebooks are compared cell by cell: no loss curves.</i>",
            "curves": b"",
        }

    def static_html(self) -> str:
        """The verdict, the runs, the curves (an embedded PNG), the table and the details."""
        shown = self._static
        if not self.result:
            return str(shown["headline"])
        if "cells" in self.result:  # two notebooks: the verdict and the table of cells
            notes = render.items_list("Notes", map(render.prose, self.result.get("notes", [])))
            return shown["headline"] + shown["table"] + notes
        curves = ""
        if shown["curves"]:
            encoded = base64.b64encode(shown["curves"]).decode("ascii")
            curves = (
                f'<img class="nm-curves" alt="loss per step, original and migrated" '
                f'style="max-width: 820px; width: 100%;" src="data:image/png;base64,{encoded}">'
            )
        return (
            shown["headline"]
            + shown["runs"]
            + (curves or shown["curves_note"])
            + shown["table"]
            + f"<details><summary>Details</summary>{shown['details']}</details>"
        )


def _steps(arguments: Sequence[str]) -> int | None:
    """The step count the programs were given (`--steps N`, `--max_steps N`), if any."""
    for index, argument in enumerate(arguments):
        name, _, value = argument.partition("=")
        if name in ("--steps", "--max-steps", "--max_steps"):
            value = value or (arguments[index + 1] if index + 1 < len(arguments) else "")
            if value.isdigit():
                return int(value)
    return None


def _log_html(logs: dict[str, str]) -> str:
    parts = []
    for label, text in logs.items():
        body = render.escape(text) or "<i>(nothing yet)</i>"
        parts.append(
            f"<div><b>{label}</b><pre style='margin: 2px 0 6px; max-height: 240px; overflow: auto; "
            f"white-space: pre-wrap; {render.MONO}'>{body}</pre></div>"
        )
    return "".join(parts)
