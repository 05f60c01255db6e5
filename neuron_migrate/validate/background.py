"""A validate run in the background: started from a notebook (or any program) without blocking it.

`start(ORIGINAL, MIGRATED, *arguments, options=[...])` launches `neuron-migrate validate ... --json`
in a child process (the programs run in interpreters of their own anyway, never in the caller's)
and returns at once; the `Validation` it returns says which pass is running, waits, cancels,
and hands back the JSON document that `report` draws from:

    run = start("train_xla.py", "train.py", "--steps", "8", options=["--localize"])
    run.progress()          # ['capture: the original and the migrated program, side by side', ...]
    document = run.wait()   # the same document `validate --json` writes
    report.Report(document) # displayed in a notebook: verdict, table, localization, plots
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROGRESS_PREFIX = "validate: "


class Validation:
    """One background validate run."""

    def __init__(self, command: list[str], work: Path, cwd: str | None = None) -> None:
        self.command = command
        self.work = work
        self.result_path = work / "result.json"
        self.log_path = work / "validate.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=log,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=True,  # cancel() ends the programs it started too
            )
        self._document: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.process.poll() is not None

    def progress(self) -> list[str]:
        """The passes started so far (capture, noise floor, rerun), in order."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line[len(PROGRESS_PREFIX) :] for line in lines if line.startswith(PROGRESS_PREFIX)]

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Blocks until the run ends (subprocess.TimeoutExpired after `timeout` s) and returns its document."""
        self.process.wait(timeout)
        return self.document()

    def document(self) -> dict[str, Any]:
        """The JSON document of a finished run; a run that ended without one reads as an error."""
        if self._document is not None:
            return self._document
        if not self.done:
            raise RuntimeError("the validate run has not finished: wait() for it, or check done")
        try:
            self._document = json.loads(self.result_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = "\n".join(self.log_path.read_text(errors="replace").strip().splitlines()[-5:])
            self._document = {
                "verdict": "error",
                "exit_code": self.process.returncode,
                "errors": [tail or f"validate exited with status {self.process.returncode}"],
                "runs": [],
            }
        return self._document

    def cancel(self) -> None:
        """Stops the run and every program it started."""
        if not self.done:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                self.process.terminate()
            self.process.wait()


def start(
    original: str | Path,
    migrated: str | Path,
    *arguments: str,
    options: Sequence[str] = (),
    work_dir: str | Path | None = None,
    cwd: str | Path | None = None,
) -> Validation:
    """Starts `neuron-migrate validate ORIGINAL MIGRATED [options] -- ARGUMENTS` in the background.

    `options` are validate's own flags (`--localize`, `--nproc 2`, `--original-python PATH`, ...);
    `work_dir` keeps the captures and logs (default: a new temporary folder, kept for inspection).
    Two notebooks: the migrated one re-run against the original's saved outputs, `progress()`
    saying of each cell it ran `cell 3/9 SOURCE: VERDICT`.
    """
    work = (
        Path(work_dir)
        if work_dir is not None
        else Path(tempfile.mkdtemp(prefix="neuron-migrate-validate-"))
    )
    work.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "neuron_migrate.validate",
        "validate",
        str(original),
        str(migrated),
        *options,
        f"--json={work / 'result.json'}",
    ]
    if all(str(path).lower().endswith(".ipynb") for path in (original, migrated)):
        # The migrated notebook re-run against the original's saved outputs: nothing is captured,
        # and validate says that arguments do not apply.
        command += ["--", *arguments] if arguments else []
    else:
        command += [f"--work-dir={work / 'captures'}", "--", *arguments]
    return Validation(command, work, str(cwd) if cwd is not None else None)
