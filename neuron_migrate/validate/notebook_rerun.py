"""`validate ORIGINAL.ipynb MIGRATED.ipynb`: the migrated notebook re-run against the original.

The original is not executed: it needs the old stack (and often a Trainium host), and what its
author saw when it ran is already in the file. The migrated notebook runs in a fresh kernel of
this Python (nbclient), and each code cell's fresh outputs are compared with the outputs saved in
the original's matching cell. Text is compared with its numbers parsed (floats within a tolerance,
integers exactly) and the rest after normalising what differs between runs and stacks by design:
whitespace, object addresses, device names, the version of the torch build, the banner of the
launcher the migration writes, clock and elapsed times. Images are compared by size.
"""

from __future__ import annotations

import base64
import difflib
import json
import math
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SAME, DIFFERS, NEW_ERROR, NO_SAVED_OUTPUT = "same", "differs", "new error", "no saved output"
# Only where the code cells cannot pair one to one: a cell without a partner.
ADDED, REMOVED = "added", "removed"

DEFAULT_RTOL, DEFAULT_ATOL = 1e-4, 1e-6

# Code cells paired by their sources when the two notebooks do not have as many: a pair needs at
# least this similarity (difflib's ratio), else the cell counts as added or removed.
PAIR_SIMILARITY = 0.3


# How `rerun` reports each cell it ran to its `log` (validate's stderr): "cell 3/9 SOURCE: VERDICT".
CELL_PROGRESS = re.compile(r"cell (\d+)/(\d+) ")


class NotebookError(Exception):
    """A notebook that cannot be read or run; the message names the file and the cell."""


# --- text normalisation and comparison ---------------------------------------------------------

_NUMBER = r"[-+]?(?:(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf)"
# A number on its own: not a piece of a name (conv1), of a version (2.9.0) or of a word (inference).
_NUMBER_RE = re.compile(rf"(?<![\w.])(?:{_NUMBER})(?!\w|\.\w)")
_ADDRESS_RE = re.compile(r"\bat 0x[0-9a-fA-F]+")
# A tensor on the CPU prints without `device=`; one on XLA, Neuron or CUDA prints it.
_DEVICE_ARG_RE = re.compile(r",\s*device=(?:'[^']*'|\"[^\"]*\"|device\([^)]*\))")
_DEVICE_OBJECT_RE = re.compile(r"device\(type=['\"][^'\"]*['\"](?:,\s*index=\d+)?\)")
_DEVICE_NAME_RE = re.compile(r"\b(?:xla|neuron|cuda|mps|xpu|hpu|cpu|privateuseone)(?::\d+)?\b")
# Clock times, elapsed times and rates (`%time`, "took 1.2 s") differ from run to run.
_TIMESTAMP_RE = re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?")
_DURATION_RE = re.compile(
    rf"(?<![\w.]){_NUMBER}\s*(?:ns|us|µs|μs|ms|s|sec|secs|seconds?|min|minutes?|it/s|s/it)(?![\w/])"
)
_SPACE_RE = re.compile(r"\s+")
# The torch build itself (`torch.__version__`): the migration moves to another one by design. Its
# build label (+cu128, +cpu, +libtpu) tells it from other versions, which stay text.
_TORCH_BUILD_RE = re.compile(
    r"(?<![\w.])\d+\.\d+\.\d+(?:\.?[a-z]+\d*)*\+(?:cpu|cu\d+|rocm[\d.]*|xpu|libtpu|neuron)\b"
)
# What accelerate's `notebook_launcher` (written for `xmp.spawn`) prints before it starts.
_LAUNCHER_BANNER_RE = re.compile(r"^Launching (?:a )?training on [^\n]*\.[ \t]*$", re.M)


def normalise(text: str) -> str:
    """`text` with what differs between runs and stacks by design made equal; numbers are kept."""
    text = _LAUNCHER_BANNER_RE.sub("", text)
    text = _TORCH_BUILD_RE.sub("<torch build>", text)
    text = _ADDRESS_RE.sub("at 0x…", text)
    text = _DEVICE_ARG_RE.sub("", text)
    text = _DEVICE_OBJECT_RE.sub("device(<device>)", text)
    text = _DEVICE_NAME_RE.sub("<device>", text)
    text = _TIMESTAMP_RE.sub("<time>", text)
    text = _DURATION_RE.sub("<duration>", text)
    return _SPACE_RE.sub(" ", text).strip()


def numbers_close(saved: str, fresh: str, rtol: float, atol: float) -> bool:
    """Integers must be equal; anything else within atol + rtol*|saved| (nan equals nan)."""
    if _is_integer(saved) and _is_integer(fresh):
        return int(saved) == int(fresh)
    a, b = float(saved), float(fresh)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(b - a) <= atol + rtol * abs(a)


def _is_integer(number: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", number) is not None


def first_text_difference(saved: str, fresh: str, rtol: float, atol: float) -> str | None:
    """None where the texts agree; else the first value that differs, saved then fresh."""
    a, b = normalise(saved), normalise(fresh)
    words_a, words_b = _NUMBER_RE.split(a), _NUMBER_RE.split(b)
    numbers_a, numbers_b = list(_NUMBER_RE.finditer(a)), list(_NUMBER_RE.finditer(b))
    for index in range(max(len(words_a), len(words_b))):
        if _at(words_a, index) != _at(words_b, index):
            return _word_difference(_at(words_a, index), _at(words_b, index))
        if index >= max(len(numbers_a), len(numbers_b)):
            continue
        na = numbers_a[index] if index < len(numbers_a) else None
        nb = numbers_b[index] if index < len(numbers_b) else None
        if na is not None and nb is not None and numbers_close(na[0], nb[0], rtol, atol):
            continue
        before = a[: na.start()] if na is not None else b[: nb.start()] if nb is not None else ""
        return (
            f"{na[0] if na else 'nothing'} saved, {nb[0] if nb else 'nothing'} now, "
            f"after {_tail(before)!r}"
        )
    return None


def _at(items: list[str], index: int) -> str:
    return items[index] if index < len(items) else ""


def _tail(words: str, width: int = 30) -> str:
    return words if len(words) <= width else "…" + words[-width:]


def _word_difference(a: str, b: str, width: int = 30) -> str:
    start = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    start = max(0, start - 10)

    def clip(text: str) -> str:
        piece = text[start : start + width]
        return ("…" if start else "") + piece + ("…" if len(text) > start + width else "")

    return f"{clip(a)!r} saved, {clip(b)!r} now"


# --- outputs of one cell -----------------------------------------------------------------------


@dataclass(frozen=True)
class Outputs:
    """What is compared of a cell's outputs.

    Only stdout of the streams: stderr carries warnings and progress bars, which differ between the
    stacks and from run to run.
    """

    text: str = ""
    images: tuple[str, ...] = ()  # "image/png 640x480", or the mime type where no size is read
    errors: tuple[str, ...] = ()  # "ZeroDivisionError: division by zero"

    @property
    def empty(self) -> bool:
        return not (self.text.strip() or self.images or self.errors)


_IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")


def outputs_of(cell: Any) -> Outputs:
    pieces: list[str] = []
    images: list[str] = []
    errors: list[str] = []
    previous_stdout = False
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            if output.get("name") == "stdout":
                text = _joined(output.get("text", ""))
                if previous_stdout:
                    pieces[-1] += text
                else:
                    pieces.append(text)
                previous_stdout = True
            continue
        previous_stdout = False
        if kind in ("execute_result", "display_data"):
            data = output.get("data", {})
            image = next((mime for mime in _IMAGE_TYPES if mime in data), None)
            if image is not None:  # its text/plain is the figure's repr
                images.append(_image_label(image, data[image]))
            elif "text/plain" in data:
                pieces.append(_joined(data["text/plain"]))
        elif kind == "error":
            errors.append(f"{output.get('ename', '')}: {output.get('evalue', '')}")
    return Outputs("\n".join(pieces), tuple(images), tuple(errors))


def _joined(text: str | list[str]) -> str:
    return text if isinstance(text, str) else "".join(text)


def _image_label(mime: str, data: str | list[str]) -> str:
    if mime == "image/png":
        size = png_size(_joined(data))
        if size is not None:
            return f"image/png {size[0]}x{size[1]}"
    return mime


def png_size(encoded: str) -> tuple[int, int] | None:
    """Width and height from a base64 PNG's header, or None where it is not one."""
    try:
        head = base64.b64decode("".join(encoded.split())[:44])
    except ValueError:
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def compare_outputs(saved: Outputs, fresh: Outputs, rtol: float, atol: float) -> tuple[str, str]:
    """The verdict for one cell and, where it is not the same, what differs first."""
    saved_names = [e.split(":", 1)[0] for e in saved.errors]
    fresh_names = [e.split(":", 1)[0] for e in fresh.errors]
    if fresh.errors and fresh_names != saved_names:
        return NEW_ERROR, fresh.errors[-1]
    if saved.errors and not fresh.errors:
        return DIFFERS, f"the saved outputs end in {saved.errors[-1]}; the fresh run raised nothing"
    difference = first_text_difference(saved.text, fresh.text, rtol, atol)
    if difference is not None:
        return DIFFERS, difference
    if saved.images != fresh.images:
        return DIFFERS, (
            f"images {', '.join(saved.images) or 'none'} saved, "
            f"{', '.join(fresh.images) or 'none'} now"
        )
    return SAME, ""


# --- pairing the code cells --------------------------------------------------------------------


def pair_cells(
    original: Sequence[str], migrated: Sequence[str]
) -> list[tuple[int | None, int | None]]:
    """Pairs of code-cell positions (original, migrated); None on the side that lacks the cell.

    The migration keeps cells one to one, so equal counts pair by position. Otherwise the pairing
    keeps the order and maximises the summed source similarity.
    """
    if len(original) == len(migrated):
        return [(i, i) for i in range(len(original))]
    n, m = len(original), len(migrated)
    similarity = [
        [difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() for b in migrated]
        for a in original
    ]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best[i][j] = max(best[i - 1][j], best[i][j - 1])
            if similarity[i - 1][j - 1] >= PAIR_SIMILARITY:
                best[i][j] = max(best[i][j], best[i - 1][j - 1] + similarity[i - 1][j - 1])
    pairs: list[tuple[int | None, int | None]] = []
    i, j = n, m
    while i or j:
        if (
            i
            and j
            and similarity[i - 1][j - 1] >= PAIR_SIMILARITY
            and best[i][j] == best[i - 1][j - 1] + similarity[i - 1][j - 1]
        ):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif j and (not i or best[i][j] == best[i][j - 1]):
            pairs.append((None, j - 1))
            j -= 1
        else:
            pairs.append((i - 1, None))
            i -= 1
    return pairs[::-1]


# --- running and reporting ---------------------------------------------------------------------


@dataclass
class CellResult:
    """One row of the table: `number` counts the migrated notebook's code cells from 1 (the
    original's, for a cell the migrated notebook lacks)."""

    number: int
    first_line: str
    verdict: str
    detail: str = ""


@dataclass
class RerunResult:
    cells: list[CellResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def first_difference(self) -> CellResult | None:
        return next((c for c in self.cells if c.verdict in (DIFFERS, NEW_ERROR)), None)

    @property
    def exit_code(self) -> int:
        from neuron_migrate.validate.command import EXIT_DIVERGE, EXIT_MATCH

        return EXIT_DIVERGE if self.first_difference else EXIT_MATCH


def read_notebook(path: Path) -> Any:
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise NotebookError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:  # nbformat's reader errors derive from ValueError
        raise NotebookError(f"{path}: not a readable notebook ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def code_cells(notebook: Any) -> list[Any]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def first_line(source: str, width: int = 40) -> str:
    line = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def _kernel_manager_class(python: str | None) -> type:
    """An AsyncKernelManager whose `python3` kernel runs in `python` (default: this one), whatever
    kernel specs are installed (a user's `python3` spec may name another environment)."""
    import zmq
    from ipykernel.kernelspec import get_kernel_dict, make_ipkernel_cmd
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager

    if python is None:  # ipykernel's own spec, with what this ipykernel supports (encryption)
        spec = KernelSpec(**get_kernel_dict())
    else:
        spec = KernelSpec(argv=make_ipkernel_cmd(executable=python), language="python")

    class ThisPython(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            # Encrypted where both sides can (jupyter_client 8.7+, a spec that declares curve):
            # the kernel warns on stderr about plain TCP otherwise.
            if self.has_trait("transport_encryption") and zmq.has("curve"):
                self.transport_encryption = "auto"

        @property
        def kernel_spec(self) -> KernelSpec:
            return spec

    return ThisPython


def rerun(
    original_path: Path,
    migrated_path: Path,
    *,
    cwd: Path | None = None,
    python: str | None = None,
    cell_timeout: float = 600,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    log: Callable[[str], None] = lambda message: None,
) -> RerunResult:
    """Runs the migrated notebook in a fresh kernel and compares each code cell with the original.

    Raises NotebookError for a notebook that cannot be read or run (the kernel does not start, a
    cell runs past `cell_timeout`); KeyboardInterrupt after shutting the kernel down.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    original, migrated = read_notebook(original_path), read_notebook(migrated_path)
    saved_cells, fresh_cells = code_cells(original), code_cells(migrated)
    if not any(cell.get("outputs") for cell in saved_cells):
        raise NotebookError(
            f"{original_path}: no saved outputs to compare with (run it and save it with its outputs)"
        )
    result = RerunResult()
    pairs = pair_cells([c.source for c in saved_cells], [c.source for c in fresh_cells])
    if len(saved_cells) != len(fresh_cells):
        result.notes.append(
            f"{len(saved_cells)} code cells in {original_path}, {len(fresh_cells)} in "
            f"{migrated_path}: cells paired by their sources"
        )
    partner = {j: i for i, j in pairs if j is not None}
    client = NotebookClient(
        migrated,
        timeout=cell_timeout,
        allow_errors=True,
        kernel_name="python3",
        kernel_manager_class=_kernel_manager_class(python),
        resources={"metadata": {"path": str(cwd or migrated_path.parent)}},
    )
    done: dict[int, CellResult] = {}
    try:
        with client.setup_kernel():
            try:
                positions = [i for i, c in enumerate(migrated.cells) if c.cell_type == "code"]
                for number, (index, cell) in enumerate(zip(positions, fresh_cells, strict=True), 1):
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        raise NotebookError(
                            f"{migrated_path}: code cell {number} ran past the timeout "
                            f"({cell_timeout:g} s per cell, --timeout)"
                        ) from None
                    except DeadKernelError:
                        raise NotebookError(
                            f"{migrated_path}: the kernel died in code cell {number}"
                        ) from None
                    row = _row(number, cell, saved_cells, partner.get(number - 1), rtol, atol)
                    done[number - 1] = row
                    log(f"cell {number}/{len(fresh_cells)} {row.first_line}: {row.verdict}")
            except BaseException:
                # A kernel still busy with a cell answers a polite shutdown with tracebacks, and
                # the cell's polling tasks would report the kernel's death when the loop next runs.
                client.shutdown_kernel = "immediate"
                _cancel_tasks()
                raise
    except NotebookError:
        raise
    except KeyboardInterrupt:
        _kill_kernel(client)  # interrupted while it started: nbclient has not cleaned up yet
        raise
    except Exception as exc:  # the kernel did not start, or its client failed
        hint = " (does that Python have ipykernel?)" if python else ""
        raise NotebookError(
            f"{migrated_path}: the kernel ({python or sys.executable}) failed: "
            f"{_one_line(exc)}{hint}"
        ) from None
    for i, j in pairs:
        if j is not None:
            result.cells.append(done[j])
        elif i is not None:  # outputs the migrated notebook no longer makes are a difference
            verdict = DIFFERS if saved_cells[i].get("outputs") else REMOVED
            line = first_line(saved_cells[i].source)
            result.cells.append(CellResult(i + 1, line, verdict, "not in the migrated notebook"))
    return result


def _cancel_tasks() -> None:
    """Cancels what an interrupted cell left on the event loop nbclient's sync calls run on."""
    import asyncio

    from jupyter_core.utils import ensure_event_loop

    loop = ensure_event_loop()
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:  # let them end, their errors taken (else each is logged as never retrieved)
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def _kill_kernel(client: Any) -> None:
    from jupyter_core.utils import run_sync

    _cancel_tasks()
    km = client.km
    if km is not None and km.has_kernel:
        run_sync(km.shutdown_kernel)(now=True)


def _row(
    number: int, cell: Any, saved_cells: list[Any], partner: int | None, rtol: float, atol: float
) -> CellResult:
    line = first_line(cell.source)
    fresh = outputs_of(cell)
    if partner is None:
        return CellResult(number, line, ADDED, "not in the original")
    saved_cell = saved_cells[partner]
    saved = outputs_of(saved_cell)
    if not saved_cell.get("outputs") and saved_cell.get("execution_count") is None:
        if fresh.errors:
            return CellResult(number, line, NEW_ERROR, fresh.errors[-1])
        return CellResult(number, line, SAME if fresh.empty else NO_SAVED_OUTPUT)
    verdict, detail = compare_outputs(saved, fresh, rtol, atol)
    return CellResult(number, line, verdict, detail)


def format_table(result: RerunResult) -> str:
    rows = [("cell", "source", "verdict", "first difference")]
    rows += [(str(c.number), c.first_line, c.verdict, c.detail) for c in result.cells]
    widths = [max(len(row[k]) for row in rows) for k in range(3)]
    lines = [
        f"{row[0]:>{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}".rstrip()
        for row in rows
    ]
    lines += result.notes
    lines.append(conclusion(result))
    return "\n".join(lines)


def conclusion(result: RerunResult) -> str:
    """The table's last line: the first cell that differs, or that none does."""
    first = result.first_difference
    if first is not None:
        return f"first cell that differs: {first.number} ({first.first_line}): {first.verdict}"
    unsaved = sum(c.verdict == NO_SAVED_OUTPUT for c in result.cells)
    compared = sum(c.verdict == SAME for c in result.cells)
    return (
        f"every code cell gives the outputs saved in the original ({compared} same"
        + (f", {unsaved} without saved output" if unsaved else "")
        + ")"
    )


# Options of the program comparison that mean nothing here: the original notebook is not run, and
# the migrated one runs as it is, without the capture hook.
_SCRIPT_ONLY_OPTIONS = {
    "original_python": "--original-python",
    "original_cwd": "--original-cwd",
    "nproc": "--nproc",
    "original_nproc": "--original-nproc",
    "no_dropout": "--no-dropout",
    "native_random": "--native-random",
    "localize": "--localize",
    "forward": "--forward",
    "plot": "--plot",
    "report": "--report",
    "compile_stats": "--compile-stats",
    "work_dir": "--work-dir",
}


def run_command(args: Any) -> int:
    """`neuron-migrate validate ORIGINAL.ipynb MIGRATED.ipynb`: the table on stdout, progress on
    stderr; validate's exit status."""
    from neuron_migrate.validate.command import EXIT_ERROR

    def error(message: str) -> int:
        print(f"neuron-migrate validate: {message}", file=sys.stderr)
        return EXIT_ERROR

    given = [flag for name, flag in _SCRIPT_ONLY_OPTIONS.items() if getattr(args, name, None)]
    if given:
        return error(
            f"{given[0]} does not apply to notebooks (the original's saved outputs are the reference)"
        )
    if getattr(args, "script_args", None):
        return error("arguments after `--` do not apply to notebooks")
    if args.migrated_cwd is not None and not args.migrated_cwd.is_dir():
        return error(f"{args.migrated_cwd}: no such directory")
    if args.migrated_python is not None and not args.migrated_python.exists():
        return error(f"{args.migrated_python}: no such interpreter")
    original, migrated = (Path(p) for p in args.programs)
    # Stopped as a background run is (SIGTERM), the kernel goes too: it runs in a session of its
    # own, which the signal to validate's process group does not reach.
    main = threading.current_thread() is threading.main_thread()  # where Python takes signals
    stopped = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        result = rerun(
            original,
            migrated,
            cwd=args.migrated_cwd,
            python=str(args.migrated_python) if args.migrated_python else None,
            cell_timeout=args.timeout,
            rtol=DEFAULT_RTOL if args.rtol is None else args.rtol,
            atol=DEFAULT_ATOL if args.atol is None else args.atol,
            log=lambda message: print(f"validate: {message}", file=sys.stderr, flush=True),
        )
    except NotebookError as exc:
        return error(str(exc))
    except KeyboardInterrupt:
        return error("interrupted; the kernel was shut down")
    finally:
        if main:
            signal.signal(signal.SIGTERM, stopped)
    if args.json != "-":
        print(format_table(result))
    if args.json:
        from neuron_migrate.validate.command import _emit

        _emit(json.dumps(as_json(result, original, migrated), indent=1), args.json)
    return result.exit_code


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def as_json(result: RerunResult, original: Path, migrated: Path) -> dict[str, Any]:
    first = result.first_difference
    return {
        "original": str(original),
        "migrated": str(migrated),
        # The word a comparison of two programs uses, for readers of either document.
        "verdict": "diverge" if first else "match",
        "exit_code": result.exit_code,
        "cells": [asdict(cell) for cell in result.cells],
        "notes": result.notes,
        "first_difference": None if first is None else first.number,
    }


def from_json(document: dict[str, Any]) -> RerunResult:
    """The result `as_json` wrote, back (a notebook app reads the document a child process wrote)."""
    cells = [CellResult(**cell) for cell in document.get("cells", [])]
    return RerunResult(cells, list(document.get("notes", [])))
