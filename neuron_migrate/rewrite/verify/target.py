"""The libraries a migrated file will run on, asked in the interpreter that will run it.

A probe process in that interpreter (`--target-python`, by default the one running `rewrite`)
imports what is asked and answers from the real objects: does this module exist, does this
name, what is this callable's signature. Nothing is taken from a table written here, so the
answers follow the installed versions. One probe per process, started on the first question;
answers are kept for the process's lifetime.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

# Run in the target interpreter: one JSON question a line in, one JSON answer a line out. What
# the libraries print while importing goes to stderr, never into the answers.
_PROBE = r"""
import importlib, importlib.metadata, importlib.util, inspect, json, os, sys
answers = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

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
        answer = find(json.loads(line))
    except BaseException as exc:
        answer = {"installed": True, "error": f"{type(exc).__name__}: {exc}"[:200]}
    answers.write(json.dumps(answer) + "\n")
    answers.flush()
"""

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

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable
        self._process: subprocess.Popen[str] | None = None
        self._answers: dict[str, Answer] = {}
        self.broken: str | None = None  # why the probe could not answer: nothing is verified

    def find(self, name: str) -> Answer | None:
        """The answer for `name`; None when the probe cannot answer (it died or hung)."""
        if name in self._answers:
            return self._answers[name]
        if self.broken is not None:
            return None
        raw = self._ask(name)
        if raw is None:
            return None
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

    def _ask(self, name: str) -> dict[str, Any] | None:
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
            why = f"the probe in {self.python} gave no answer for `{name}`"
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
