"""Recall of `check` on the lines where real code fails to compile for Neuron.

Takes a JSON list of `{"file", "line", "reason"}` records (the dynamic truth: `dynamo_truth.py`
writes one, an architecture sweep another; a `{"truth": [...]}` object is read too), runs `check`
at its default severity on every file named, and counts a line as found when a finding starts,
ends or spans it. Files are resolved against `--root` (default: the installed packages).

    python benchmarks/check/recall.py benchmarks/check/truth.json
    python benchmarks/check/recall.py sweep.json --root /path/to/site-packages --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.checks.model import Diagnostic


def load_truth(path: Path) -> list[dict[str, object]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    records = data["truth"] if isinstance(data, dict) else data
    for record in records:
        if not {"file", "line"} <= set(record):
            raise SystemExit(f"{path}: every record needs `file` and `line`: {record}")
    return records


def covering(diagnostics: list[Diagnostic], line: int) -> list[Diagnostic]:
    return [d for d in diagnostics if d.line <= line <= max(d.end_line, d.line)]


def score(records: list[dict[str, object]], root: Path) -> dict[str, object]:
    reports: dict[str, list[Diagnostic]] = {}
    rows = []
    for record in records:
        name = str(record["file"])
        path = Path(name) if Path(name).is_absolute() else root / name
        if name not in reports:
            text = path.read_text(encoding="utf-8")
            reports[name] = check_source(text, str(path), CheckOptions()).diagnostics
        line = int(str(record["line"]))
        hits = covering(reports[name], line)
        rows.append(
            {
                "file": name,
                "line": line,
                "reason": record.get("reason", ""),
                "found": bool(hits),
                "codes": sorted({d.code for d in hits}),
            }
        )
    found = sum(1 for r in rows if r["found"])
    return {"lines": len(rows), "found": found, "recall": found / len(rows) if rows else 0.0, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("truth", type=Path, help="JSON list of {file, line, reason}")
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    parser.add_argument("--json", type=Path, help="write the scored rows here")
    args = parser.parse_args()
    result = score(load_truth(args.truth), args.root)
    for row in result["rows"]:  # type: ignore[attr-defined]
        mark = "found " + ",".join(row["codes"]) if row["found"] else "MISSED"
        print(f"{row['file']}:{row['line']}: {mark}  ({row['reason']})")
    print(f"recall: {result['found']}/{result['lines']} = {result['recall']:.0%}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
