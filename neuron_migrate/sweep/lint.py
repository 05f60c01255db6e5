"""Static lint against dynamic truth: for each failure, does `neuron-migrate check` flag the line
Dynamo named; for each architecture, what `check` reports in the code the compiled graphs ran.

`check` runs as a command (`python -m neuron_migrate check`), so the figures are those of the
check installed beside this interpreter; running this again after `check` changes re-measures
them from the stored records, without running a model.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

STAGES = ("generate", "train")
COUNTED = ("warning", "error")  # the severities counted in compiled code (info is outside hot code)


def transformers_root() -> Path:
    spec = importlib.util.find_spec("transformers")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def measure(records: list[dict[str, Any]]) -> None:
    """Add each record's `lint`: its failures with the findings at Dynamo's line, and the
    warning and error findings inside the functions its compiled graphs ran."""
    files = {f for r in records for f in _files_of(r)}
    findings = _check(sorted(files))
    for record in records:
        failures = []
        for stage in STAGES:
            result = record.get(stage) or {}
            where = result.get("where")
            if result.get("ok") is False and where:
                file, _, line = where.rpartition(":")
                at_line = [f for f in findings.get(file, []) if f["line"] == int(line)]
                failures.append(
                    {
                        "stage": stage,
                        "cause": result.get("cause"),
                        "where": where,
                        "reason": result.get("reason"),
                        "findings": [{"code": f["code"], "severity": f["severity"]} for f in at_line],
                        "flagged": bool(at_line) if file in findings else None,
                    }
                )
        compiled = [
            {"code": f["code"], "severity": f["severity"], "where": f"{file}:{f['line']}"}
            for file, spans in (record.get("compiled_code") or {}).items()
            for f in findings.get(file, [])
            if f["severity"] in COUNTED and any(start <= f["line"] <= end for start, end in spans)
        ]
        record["lint"] = {"failures": failures, "compiled_code_findings": compiled}


def _files_of(record: dict[str, Any]) -> set[str]:
    files = set(record.get("compiled_code") or {})
    for stage in STAGES:
        where = (record.get(stage) or {}).get("where")
        if where and where.startswith("transformers/"):
            files.add(where.rpartition(":")[0])
    return files


def _check(files: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every finding of `check` in these files (paths as the records write them), by file;
    a file `check` could not read has no entry."""
    root = transformers_root().parent
    paths = [root / f for f in files if (root / f).is_file()]
    if not paths:
        return {}
    done = subprocess.run(
        [sys.executable, "-m", "neuron_migrate", "check", "--output-format", "json",
         "--min-severity", "info", "--isolated", "--exit-zero", "-q", *map(str, paths)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"neuron-migrate check failed: {done.stderr.strip()}")
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in paths:
        found[path.relative_to(root).as_posix()] = []
    for finding in json.loads(done.stdout or "[]"):
        name = Path(finding["filename"]).resolve().relative_to(root.resolve()).as_posix()
        found[name].append(
            {"code": finding["code"], "severity": finding["severity"], "line": finding["location"]["row"]}
        )
    return dict(found)
