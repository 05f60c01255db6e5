"""The libraries a migrated file will run on, asked in the interpreter that will run it.

A probe process in that interpreter (`--target-python`, by default the one running `rewrite`)
imports what is asked and answers from the real objects: does this module exist, does this
name, what is this callable's signature. Nothing is taken from a table written here, so the
answers follow the installed versions. One probe per process, started on the first question;
answers are kept for the process's lifetime and, on disk, for every later run against the same
interpreter with the same distributions installed (its fingerprint names the file).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_migrate.core.files import write_atomic

# Run in the target interpreter: one JSON question a line in, one JSON answer a line out. What
# the libraries print while importing goes to stderr, never into the answers.
_PROBE = r"""
import hashlib, importlib, importlib.metadata, importlib.util, inspect, json, os, sys
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # the libraries, not the folder

def fingerprint():
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    return hashlib.sha256("\n".join([sys.version, *sys.path, *installed]).encode()).hexdigest()[:24]

def version(top):
    try:
        return importlib.metadata.version(top)
    except Exception:
        return getattr(sys.modules.get(top), "__version__", "")

def find(name):
    parts = name.split(".")
    try:
        if importlib.util.find_spec(parts[0]) is None:
            return {"installed": False}
    except Exception:
        return {"installed": False}
    obj, depth = None, 0
    for depth in range(len(parts), 0, -1):
        module = ".".join(parts[:depth])
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module.startswith(exc.name):
                return {"installed": True, "version": version(parts[0]), "error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        except BaseException as exc:
            return {"installed": True, "version": version(parts[0]), "error": f"{type(exc).__name__}: {exc}"[:200]}
    if obj is None:
        return {"installed": True, "version": version(parts[0]), "missing": parts[0]}
    for index in range(depth, len(parts)):
        try:
            obj = getattr(obj, parts[index])
        except AttributeError:
            return {"installed": True, "version": version(parts[0]), "missing": ".".join(parts[: index + 1])}
        except BaseException as exc:
            return {"installed": True, "version": version(parts[0]), "error": f"{type(exc).__name__}: {exc}"[:200]}
    answer = {"installed": True, "version": version(parts[0]), "module": inspect.ismodule(obj)}
    # A decorated callable's wrapper may take what its signature does not name (a deprecated
    # keyword it renames): only an undecorated signature says what a call may pass.
    if callable(obj) and not inspect.ismodule(obj) and not hasattr(obj, "__wrapped__"):
        try:
            signature = inspect.signature(obj)
            answer["parameters"] = [
                [p.name, int(p.kind), p.default is not inspect.Parameter.empty]
                for p in signature.parameters.values()
            ]
        except (TypeError, ValueError):
            pass
    return answer

for line in sys.stdin:
    try:
        name = json.loads(line)
        if name is None:
            answer = {"fingerprint": fingerprint()}
        elif name.startswith("installed:"):  # is the package there, asked without importing it
            answer = {"installed": importlib.util.find_spec(name.split(":", 1)[1]) is not None}
        else:
            answer = find(name)
    except BaseException as exc:
        answer = {"installed": True, "error": f"{type(exc).__name__}: {exc}"[:200]}
    answers.write(json.dumps(answer) + "\n")
    answers.flush()
"""

CACHE = Path.home() / ".cache" / "neuron-migrate" / "target-libraries"
TIMEOUT = 180.0  # seconds for one answer: the first import of a large library included


@dataclass(frozen=True)
class Answer:
    """What the target environment says of a dotted name (`transformers.TrainingArguments`)."""

    installed: bool  # its top-level package imports there
    version: str = ""
    missing: str | None = None  # the longest prefix that does not exist (`transformers.is_torch_tpu_available`)
    error: str | None = None  # importing it failed for another reason: nothing can be said
    module: bool = False
    parameters: tuple[tuple[str, int, bool], ...] | None = None  # (name, inspect kind, has default)


class TargetEnvironment:
    """Questions to one interpreter's installed libraries, answered by a probe process in it."""

    def __init__(self, python: str | None = None, cache: Path | None = CACHE) -> None:
        self.python = python or sys.executable
        self._process: subprocess.Popen[str] | None = None
        self._answers: dict[str, Answer] = {}
        self.broken: str | None = None  # why the probe could not answer: nothing is verified
        self._cache_folder = cache
        self._cache_file: Path | None = None
        self._stored: dict[str, dict[str, Any]] | None = None  # answers on disk, by name
        self._new: dict[str, dict[str, Any]] = {}  # answers this process asked the probe for

    def find(self, name: str) -> Answer | None:
        """The answer for `name`; None when the probe cannot answer (it died or hung)."""
        if name in self._answers:
            return self._answers[name]
        if self.broken is not None:
            return None
        stored = self._load()
        raw = stored.get(name) if stored is not None else None
        if raw is None:
            raw = self._ask(name)
            if raw is None:
                return None
            self._new[name] = raw
        answer = Answer(
            installed=bool(raw.get("installed")),
            version=raw.get("version", ""),
            missing=raw.get("missing"),
            error=raw.get("error"),
            module=bool(raw.get("module")),
            parameters=tuple(tuple(p) for p in raw["parameters"]) if "parameters" in raw else None,
        )
        self._answers[name] = answer
        return answer

    def installed(self, top: str) -> bool | None:
        """Is the top-level package `top` there (found, not imported)? None when the probe cannot say."""
        answer = self.find(f"installed:{top}")
        return None if answer is None else answer.installed

    def _load(self) -> dict[str, dict[str, Any]] | None:
        """The answers stored for this environment (asked for its fingerprint once)."""
        if self._stored is None and self._cache_folder is not None:
            answer = self._ask(None)
            if answer is None or "fingerprint" not in answer:
                return None
            self._cache_file = self._cache_folder / f"{answer['fingerprint']}.json"
            try:
                self._stored = json.loads(self._cache_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self._stored = {}
        return self._stored

    def save(self) -> None:
        """Add this process's new answers to the stored ones (another process's included)."""
        if not self._new or self._cache_file is None:
            return
        try:
            stored = json.loads(self._cache_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = {}
        try:
            write_atomic(self._cache_file, json.dumps({**stored, **self._new}).encode("utf-8"))
        except OSError:
            return  # a cache that cannot be written costs time, never an answer
        self._new = {}

    def _ask(self, name: str | None) -> dict[str, Any] | None:
        try:
            process = self._start()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(name) + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
            line = process.stdout.readline() if ready else ""
        except OSError as exc:
            line, why = "", f"the probe in {self.python} failed: {exc}"
        else:
            why = f"the probe in {self.python} gave no answer" + (f" for `{name}`" if name else "")
        if not line:
            self.broken = why
            self.close()
            return None
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _start(self) -> subprocess.Popen[str]:
        if self._process is None:
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
            self._process = subprocess.Popen(
                [self.python, "-c", _PROBE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
        return self._process

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


_ENVIRONMENTS: dict[str, TargetEnvironment] = {}


def environment(python: str | None = None) -> TargetEnvironment:
    """This process's probe of `python` (started once, on its first question)."""
    key = python or sys.executable
    if key not in _ENVIRONMENTS:
        if not _ENVIRONMENTS:
            atexit.register(_close_all)
        _ENVIRONMENTS[key] = TargetEnvironment(key)
    return _ENVIRONMENTS[key]


def _close_all() -> None:
    for target in _ENVIRONMENTS.values():
        target.close()
