"""Runs the probes: each architecture in a process of its own, at most `jobs` at a time. A probe
that overruns is stopped and one that dies is recorded as a crash, in the stage it was in, and
the sweep goes on. Every finished probe leaves its record in the results folder, so an
interrupted sweep resumes where it stopped.

The limit is CPU time (`RLIMIT_CPU` in the probe), not wall time: on a machine shared with other
work the same probe takes ten times longer some hours than others, and a wall-clock limit would
turn load into timeouts. A probe that waits without computing is stopped after
`WALL_FACTOR` times its CPU limit.

The probes are forked from a server process that imported torch, transformers and TRL once
(multiprocessing's forkserver with a preload), which saves each probe several seconds of imports
and shares their memory; what a probe changes in its own process (Dynamo's caches, patched
modules, the default dtype) dies with it.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.core.files import write_atomic
from neuron_migrate.sweep import causes
from neuron_migrate.sweep.tiny import Architecture

PROBE_MODULE = "neuron_migrate.sweep.probe"
STAGES = ("build", "generate", "train")
POLL_SECONDS = 0.2
WALL_FACTOR = 10


@dataclass
class Progress:
    done: int
    total: int
    record: dict[str, Any]
    reused: bool


def versions() -> dict[str, str]:
    """The libraries a record was made with: a record of other versions is not reused."""
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "trl")}


def result_path(results: Path, architecture: Architecture) -> Path:
    return results / f"{architecture.model_type}.json"


def load_record(path: Path, versions: dict[str, str] | None) -> dict[str, Any] | None:
    """A record left by an earlier run, if it was made with the same libraries."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if versions is not None and record.get("versions") != versions:
        return None
    return record


def finished(record: dict[str, Any]) -> bool:
    """Whether a record is a probe's last word: every stage judged, or a model that did not build
    (a probe stopped from outside, with the sweep, leaves a record without its last stages)."""
    return all(stage in record for stage in STAGES) or (record.get("build") or {}).get("ok") is False


def run_probes(
    architectures: list[Architecture],
    results: Path,
    *,
    jobs: int,
    cpu_seconds: int,
    reuse: bool,
    versions: dict[str, str],
    report: Callable[[Progress], None],
) -> list[dict[str, Any]]:
    """The record of every architecture, in the order given."""
    results.mkdir(parents=True, exist_ok=True)
    sweep = _Sweep(results, jobs, cpu_seconds, versions, report, len(architectures))
    for architecture in architectures:
        earlier = load_record(result_path(results, architecture), versions) if reuse else None
        if earlier is not None and finished(earlier):
            sweep.done(architecture, earlier, reused=True)
        else:
            sweep.pending.append(architecture)
    try:
        sweep.run()
    except KeyboardInterrupt:
        sweep.stop()
        raise
    return [sweep.records[a.model_type] for a in architectures]


def recorded(architectures: list[Architecture], results: Path, versions: dict[str, str]) -> list[dict[str, Any]]:
    """The finished record of each architecture in the results folder; one without is listed
    with no stage at all (not run), so that a table of a stopped sweep still has every row."""
    records = []
    for architecture in architectures:
        record = load_record(result_path(results, architecture), versions)
        if record is None or not finished(record):
            record = {"architecture": architecture.model_type, "class": architecture.class_name, "versions": versions}
        records.append(record)
    return records


@dataclass
class _Running:
    architecture: Architecture
    process: Any
    started: float


@dataclass
class _Sweep:
    results: Path
    jobs: int
    cpu_seconds: int
    versions: dict[str, str]
    report: Callable[[Progress], None]
    total: int
    pending: list[Architecture] = field(default_factory=list)
    running: list[_Running] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([PROBE_MODULE])
        while self.pending or self.running:
            while self.pending and len(self.running) < self.jobs:
                architecture = self.pending.pop(0)
                out = result_path(self.results, architecture)
                out.unlink(missing_ok=True)
                process = context.Process(
                    target=_probe, args=(architecture, out, self.cpu_seconds), daemon=True
                )
                process.start()
                self.running.append(_Running(architecture, process, time.monotonic()))
            time.sleep(POLL_SECONDS)
            for probe in list(self.running):
                seconds = time.monotonic() - probe.started
                stalled = seconds > self.cpu_seconds * WALL_FACTOR
                if probe.process.is_alive() and not stalled:
                    continue
                if stalled:
                    probe.process.kill()
                probe.process.join()
                self.running.remove(probe)
                record = self._record_of(probe, seconds, stalled)
                self.done(probe.architecture, record, reused=False)

    def stop(self) -> None:
        for probe in self.running:
            probe.process.kill()
            probe.process.join()

    def done(self, architecture: Architecture, record: dict[str, Any], *, reused: bool) -> None:
        self.records[architecture.model_type] = record
        self.report(Progress(len(self.records), self.total, record, reused))

    def _record_of(self, probe: _Running, seconds: float, stalled: bool) -> dict[str, Any]:
        """The probe's record; one that was stopped or died gets the cause in the stage it was in."""
        out = result_path(self.results, probe.architecture)
        record = {
            "architecture": probe.architecture.model_type,
            "class": probe.architecture.class_name,
            "versions": self.versions,
            **(load_record(out, None) or {}),
        }
        error = record.pop("error", None)
        if error is None and not stalled and finished(record):
            return record
        exitcode = probe.process.exitcode
        if stalled:
            why = f"no result after {seconds:.0f} s of wall time: stopped"
            failure = causes.Failure(causes.TIMEOUT, why)
        elif exitcode == -signal.SIGXCPU:
            failure = causes.Failure(causes.TIMEOUT, f"more than {self.cpu_seconds} s of CPU time: stopped")
        else:
            why = error or f"exit status {exitcode}"
            failure = causes.Failure(causes.CRASH, f"the probe process died: {why}")
        stage = next((s for s in STAGES if s not in record), STAGES[-1])
        record[stage] = {"ok": False, "cause": failure.cause, "reason": failure.reason}
        record["seconds"] = round(seconds, 1)
        write_atomic(out, (json.dumps(record, indent=1) + "\n").encode())
        return record


def _probe(architecture: Architecture, out: Path, cpu_seconds: int) -> None:
    """The probe process: already holds the preloaded modules."""
    from neuron_migrate.sweep import probe

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 10))
    probe.main(architecture, out)
