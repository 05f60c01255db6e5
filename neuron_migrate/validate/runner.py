"""Starts each program in its own interpreter with the capture hook on, and reads back what it recorded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from neuron_migrate.validate.child.neuron_migrate_capture import CONFIG_VAR

CHILD_DIR = Path(__file__).parent / "child"
TORCH_XLA_IMPORT = re.compile(r"^\s*(import|from)\s+torch_xla\b", re.MULTILINE)


@dataclass
class Program:
    """One side of a comparison: which script, run by which Python, in how many processes."""

    label: str  # "original" | "migrated"
    script: Path
    python: Path
    args: list[str] = field(default_factory=list)
    nproc: int | None = None  # None: plain `python script`; N: torchrun with N processes
    cwd: Path | None = None  # None: validate's own working directory


@dataclass
class CaptureOptions:
    seed: int = 0
    no_dropout: bool = False
    forward: str | None = None
    compile_stats: bool = False
    host_random: bool = True  # device and 16-bit random draws made on the host, on both sides
    # The noise-floor run: "float32" turns low precision off, "float64" widens a float32 program.
    upcast: str = ""
    # The perturbation floor's runs: k > 0 moves every module output by one ulp, signs seeded by k.
    perturb: int = 0
    localize: int | None = None  # record every module's output around this step
    teacher: dict[str, Any] | None = None  # {"file": capture tensors, "calls": {i: prompt length}}


@dataclass
class Capture:
    """What one process of a program recorded: its manifest and its tensors (on the CPU)."""

    directory: Path
    manifest: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @property
    def rank(self) -> int:
        return int(self.manifest.get("rank", 0))

    @property
    def world_size(self) -> int:
        return int(self.manifest.get("world_size", 1))

    def group(self, prefix: str) -> dict[str, torch.Tensor]:
        """The tensors under `prefix/`, keyed by the rest of their name."""
        start = prefix + "/"
        return {k[len(start) :]: v for k, v in self.tensors.items() if k.startswith(start)}

    def effective_dtype(self, key: str) -> str:
        return str(self.manifest["items"].get(key, {}).get("effective_dtype", "float32"))


@dataclass
class Run:
    program: Program
    command: list[str]
    returncode: int
    seconds: float
    log: Path
    captures: list[Capture]
    timed_out: bool = False
    # One status per process the capture started in (`processes/<pid>.json`), recorded or not.
    processes: list[dict[str, Any]] = field(default_factory=list)

    def capture_problem(self) -> str | None:
        """Why this run has no capture to compare, where the capture itself is at fault."""
        if not self.processes:
            return (
                "the capture never started in it (its Python did not run validate's sitecustomize: "
                "started with -S, -I or -E, or with a PYTHONPATH of its own?)"
            )
        missed = [p for p in self.processes if p.get("torch_imported") and not p.get("attached")]
        if missed:
            return (
                f"the capture did not attach in {len(missed)} of its {len(self.processes)} "
                "process(es): torch was imported without passing through validate's import hook"
            )
        return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def what_ran(self) -> dict[str, Any]:
        """Where the program really computed, from its capture, not from what it was started with:
        the same script can train on XLA or natively depending on what its Python can import."""
        devices: set[str] = set()
        group_backends: set[str] = set()
        compile_backends: set[str] = set()
        collectives: dict[str, int] = {}
        ddp_models = 0
        for capture in self.captures:
            ran = capture.manifest.get("ran_on") or {}
            devices.update(ran.get("devices", ()))
            group_backends.update(ran.get("process_group_backends", ()))
            compile_backends.update(ran.get("compile_backends", ()))
            for name, count in (ran.get("collectives") or {}).items():
                collectives[name] = collectives.get(name, 0) + int(count)
            ddp_models += int(ran.get("ddp_models", 0))
        versions = self.captures[0].manifest.get("versions", {}) if self.captures else {}
        return {
            "python": str(self.program.python),
            "torch": versions.get("torch"),
            "torch_xla": versions.get("torch_xla"),
            "devices": sorted(devices),
            "process_group_backends": sorted(group_backends),
            "compile_backends": sorted(compile_backends),
            "processes": len(self.captures),
            "world_size": max((c.world_size for c in self.captures), default=0),
            "collectives": dict(sorted(collectives.items())),
            "ddp_models": ddp_models,
        }

    def xla_use(self) -> str | None:
        """What shows that the program computed through torch_xla, or None."""
        ran = self.what_ran()
        found = [f"tensors on {d}" for d in ran["devices"] if d.startswith("xla")]
        found += [f"process group {b}" for b in ran["process_group_backends"] if "xla" in b]
        found += [f"torch.compile backend {b}" for b in ran["compile_backends"] if "xla" in b]
        found += [f"{n} x{c}" for n, c in ran["collectives"].items() if n.startswith("xm.")]
        return ", ".join(found) or None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])


def imports_torch_xla(script: Path) -> bool:
    try:
        return bool(TORCH_XLA_IMPORT.search(script.read_text(errors="replace")))
    except OSError:
        return False


def command_for(program: Program) -> list[str]:
    if program.nproc is not None:
        launcher = [
            str(program.python),
            "-m",
            "torch.distributed.run",
            "--standalone",  # its own store on a port it binds itself: two runs never share one
            f"--nproc_per_node={program.nproc}",
        ]
        return [*launcher, str(program.script), *program.args]
    return [str(program.python), str(program.script), *program.args]


def environment(program: Program, options: CaptureOptions, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHILD_DIR), env.get("PYTHONPATH", "")) if p)
    env[CONFIG_VAR] = json.dumps(
        {
            "out": str(out),
            "side": program.label,
            "seed": options.seed,
            "no_dropout": options.no_dropout,
            "forward": options.forward,
            "compile_stats": options.compile_stats,
            "host_random": options.host_random,
            "upcast": options.upcast,
            "perturb": options.perturb,
            "localize": options.localize,
            "teacher": options.teacher,
        }
    )
    env.setdefault("PYTHONHASHSEED", str(options.seed))
    return env


def run_programs(
    programs: list[Program], options: CaptureOptions, work_dir: Path, timeout: float
) -> list[Run]:
    """Runs the programs at the same time, each with its own capture folder under `work_dir`."""
    started = []
    for program in programs:
        # Absolute: a program started in another working directory must still find it.
        out = (work_dir / program.label).absolute()
        out.mkdir(parents=True, exist_ok=True)
        log = work_dir / f"{program.label}.log"
        command = command_for(program)
        with open(log, "wb") as handle:
            process = subprocess.Popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=program.cwd,
                env=environment(program, options, out),
                start_new_session=True,  # so a timeout ends the whole process tree
            )
        started.append((program, command, process, log, out, time.monotonic()))
    deadline = time.monotonic() + timeout
    finished: dict[int, tuple[int, float, bool]] = {}
    while len(finished) < len(started):
        for i, (_, _, process, _, _, t0) in enumerate(started):
            if i in finished:
                continue
            returncode = process.poll()
            if returncode is not None:
                finished[i] = (returncode, time.monotonic() - t0, False)
            elif time.monotonic() > deadline:
                _kill_tree(process)
                finished[i] = (process.wait(), time.monotonic() - t0, True)
        time.sleep(0.05)
    runs = []
    for i, (program, command, _, log, out, _) in enumerate(started):
        returncode, seconds, timed_out = finished[i]
        captures = load_captures(out)
        runs.append(
            Run(program, command, returncode, seconds, log, captures, timed_out, load_statuses(out))
        )
    return runs


def _kill_tree(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def load_captures(out: Path) -> list[Capture]:
    captures = []
    for manifest_path in sorted(out.glob("*/manifest.json")):
        manifest = json.loads(manifest_path.read_text())
        captures.append(
            Capture(
                manifest_path.parent,
                manifest,
                _load_tensors(manifest_path.parent / manifest["tensor_file"]),
            )
        )
    captures.sort(key=lambda c: (c.rank, c.directory.name))
    return captures


def load_statuses(out: Path) -> list[dict[str, Any]]:
    statuses = []
    for path in sorted((out / "processes").glob("*.json")):
        try:
            statuses.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a process killed while writing it
    return statuses


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    # Written with torch.save where the program's environment lacks safetensors.
    return torch.load(path, map_location="cpu", weights_only=True)


def default_python() -> Path:
    return Path(sys.executable)
