"""Corpus gate: `rewrite` and `check` over every Python file of the installed packages.

    python benchmarks/corpus_gate.py [SITE_PACKAGES] [--json out.json]

For each file: the rewrite must not crash, its output must parse, a file that uses none of the
old stack (no old-stack import, XLA runtime variable or `openxla` backend; a `"xla"` device
string, a docstring or a comment is only a mention) must come back byte-identical, and rewriting the output again must change nothing. `check --fix
--unsafe-fixes` must not crash either, and whatever it fixes must still parse. Every file that
`check --fix` (the safe fixes alone) changes is then imported twice in a fresh interpreter, as
installed and as fixed (a finder serves the fixed text under the module's own name): a file that
imports as installed must import once fixed. Exit status 1 if any of that fails, with the
offending files listed.
"""

from __future__ import annotations

import argparse
import ast
import functools
import io
import json
import re
import sys
import sysconfig
import time
import tokenize
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from neuron_migrate.checks.checker import CheckOptions, check_source
from neuron_migrate.core.files import SourceError, read_source
from neuron_migrate.core.names import ImportTable
from neuron_migrate.core.oldstack import PACKAGES as OLD_STACK_PACKAGES
from neuron_migrate.rewrite.engine import Options, rewrite_source


@dataclass
class Outcome:
    path: str
    status: str  # skipped | unchanged | changed | error (input) | crash | invalid | changed-unrelated | unstable
    detail: str = ""
    check: str = "ok"  # ok | crash | invalid-fix | import-broken
    findings: int = 0
    safe_fixed: str | None = None  # the text after the safe fixes, when they change it


# Old-stack use without an import: XLA runtime variables and `"xla"` device strings.
OLD_STACK_TEXT = re.compile(r"\b(?:XLA_\w+|PT_XLA_\w+|PJRT_\w+)\b|['\"]xla(?::\d+)?['\"]|openxla")


# What configures or calls the old stack without importing it: a runtime variable's name, the
# dynamo backend's name. A `"xla"` device string is only a mention (`device_type != "xla"`).
OLD_STACK_WORD = re.compile(r"(?:XLA_\w+|PT_XLA_\w+|PJRT_\w+|openxla)")


def _uses_old_stack(text: str) -> bool:
    """An old-stack import, or an old-stack word as a name or a whole string (`XLA_USE_BF16 = 1`,
    `env["XLA_USE_BF16"] = "1"`, `backend="openxla"`).

    A file whose only mentions are device strings, longer strings or comments (`device_type !=
    "xla"` in torch, a docstring) is no migration target: a change there breaks code far from the
    old stack."""
    try:
        table = ImportTable.from_ast(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError):
        return False
    if table.names_under(OLD_STACK_PACKAGES):
        return True
    if not OLD_STACK_TEXT.search(text):
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return True
    for token in tokens:
        word = token.string
        if token.type == tokenize.STRING:
            word = word.lstrip("rRbBuU")[1:-1].strip("'\"") if word[-1:] in "'\"" else ""
        if token.type in (tokenize.NAME, tokenize.STRING) and OLD_STACK_WORD.fullmatch(word):
            return True
    return False


def judge(path: Path, rewrite: bool = True) -> Outcome:
    try:
        source = read_source(path)
    except SourceError as exc:
        return Outcome(str(path), "error", str(exc))
    outcome = _judge_rewrite(path, source.text) if rewrite else Outcome(str(path), "not-rewritten")
    try:
        report = check_source(source.text, str(path), CheckOptions(fix=True, unsafe_fixes=True))
    except Exception:
        outcome.check = "crash"
        outcome.detail += traceback.format_exc(limit=3)
        return outcome
    if report.error and "internal error" in report.error:  # caught, but a crash all the same
        outcome.check = "crash"
        outcome.detail += report.error
        return outcome
    outcome.findings = len(report.diagnostics)
    safe = check_source(source.text, str(path), CheckOptions(fix=True))
    if safe.changed and safe.fixed is not None:
        outcome.safe_fixed = safe.fixed
    if report.fixed is not None:
        try:
            ast.parse(report.fixed)
        except SyntaxError as exc:
            outcome.check = "invalid-fix"
            outcome.detail += f"check --fix: {exc.lineno}: {exc.msg}"
    return outcome


def _judge_rewrite(path: Path, text: str) -> Outcome:
    try:
        result = rewrite_source(text, str(path), Options())
    except Exception:
        return Outcome(str(path), "crash", traceback.format_exc(limit=3))
    if result.error:
        status = "crash" if "internal error" in result.error else "error"  # caught, still a crash
        return Outcome(str(path), status, result.error)
    if result.skipped:
        return Outcome(str(path), "skipped")
    if not result.changed:
        return Outcome(str(path), "unchanged")
    try:
        ast.parse(result.migrated)
    except SyntaxError as exc:
        return Outcome(str(path), "invalid", f"{exc.lineno}: {exc.msg}")
    if not _uses_old_stack(text):
        return Outcome(str(path), "changed-unrelated", "; ".join(f"{c.code} {c.message}" for c in result.changes[:5]))
    again = rewrite_source(result.migrated, str(path), Options())
    if again.migrated != result.migrated:
        return Outcome(str(path), "unstable", "a second rewrite changed the output")
    return Outcome(str(path), "changed")


@dataclass
class Summary:
    files: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    findings: int = 0
    failures: list[Outcome] = field(default_factory=list)
    safe_fixed: int = 0  # files the safe fixes change
    imports: dict[str, int] = field(default_factory=dict)  # both | neither | fixed-only | broken


# Imports modules twice each, as installed and with the fixed text in their place; one verdict
# (a JSON line) per module. Torch and friends are imported once for a whole batch. With
# `fixed-first`, only the fixed text is imported: a module that registers itself in a global
# table (a Dynamo backend, a TORCH_LIBRARY namespace) cannot run twice in one interpreter.
_IMPORT_BOTH = r"""
import importlib, importlib.abc, importlib.util, json, sys
pairs = json.load(open(sys.argv[1], encoding="utf-8"))
def load(name):
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
        return None
    except BaseException as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
class Fixed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    name, text = "", ""
    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path[1:]:
            find = getattr(finder, "find_spec", None)
            original = find(fullname, path) if find else None
            if original is not None:
                break
        else:
            return None
        return importlib.util.spec_from_file_location(
            fullname, original.origin, loader=self,
            submodule_search_locations=original.submodule_search_locations,
        )
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(self.text, module.__spec__.origin, "exec"), module.__dict__)
fixed = Fixed()
for name, path in pairs:
    fixed.name = ""
    before = load(name) if sys.argv[2:] != ["fixed-first"] else None
    fixed.name, fixed.text = name, open(path, encoding="utf-8").read()
    sys.meta_path.insert(0, fixed)
    after = load(name)
    sys.meta_path.remove(fixed)
    print(json.dumps({"name": name, "before": before, "after": after}), flush=True)
"""


def _module_name(path: Path, root: Path) -> str | None:
    try:
        parts = path.relative_to(root).with_suffix("").parts
    except ValueError:
        return None
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def _import_fixed_alone(name: str, text: str, scratch: Path) -> str | None:
    """The fixed module imported first and only, in a fresh interpreter: None when it imports."""
    import os
    import subprocess

    fixed = scratch / "alone.py"
    fixed.write_text(text, encoding="utf-8")
    listing = scratch / "alone.json"
    listing.write_text(json.dumps([(name, str(fixed))]), encoding="utf-8")
    try:
        result = subprocess.run(
            [sys.executable, "-c", _IMPORT_BOTH, str(listing), "fixed-first"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        )
    except subprocess.TimeoutExpired:
        return "did not finish"
    for line in result.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("name") == name:
            return record["after"]
    return "did not finish"


def import_fixed(outcomes: list[Outcome], root: Path, summary: Summary, batch: int = 40) -> None:
    """Import each safely fixed module as installed and as fixed, a batch per fresh interpreter."""
    import os
    import subprocess
    import tempfile

    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    todo: list[tuple[str, Outcome]] = []
    for outcome in outcomes:
        if outcome.safe_fixed is None:
            continue
        summary.safe_fixed += 1
        path = Path(outcome.path).resolve()
        name = _module_name(path, purelib) or _module_name(path, root.resolve())
        if name is not None:
            todo.append((name, outcome))
    with tempfile.TemporaryDirectory() as scratch:
        for first in range(0, len(todo), batch):
            chunk = todo[first : first + batch]
            pairs = []
            for index, (name, outcome) in enumerate(chunk):
                fixed = Path(scratch) / f"{first + index}.py"
                fixed.write_text(outcome.safe_fixed or "", encoding="utf-8")
                pairs.append((name, str(fixed)))
            listing = Path(scratch) / "pairs.json"
            listing.write_text(json.dumps(pairs), encoding="utf-8")
            try:
                result = subprocess.run(
                    [sys.executable, "-c", _IMPORT_BOTH, str(listing)],
                    capture_output=True,
                    text=True,
                    timeout=1200,
                    env={**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                )
                lines = result.stdout.splitlines()
            except subprocess.TimeoutExpired:
                lines = []
            verdicts = {}
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a module's own print
                if isinstance(record, dict) and "name" in record:
                    verdicts[record["name"]] = record
            for name, outcome in chunk:
                verdict = verdicts.get(name, {"before": "did not finish", "after": "did not finish"})
                before, after = verdict["before"], verdict["after"]
                if before is None and after is not None:  # the second import of the module may be what failed
                    after = _import_fixed_alone(name, outcome.safe_fixed or "", Path(scratch))
                kind = (
                    "both" if before is None and after is None
                    else "broken" if before is None
                    else "fixed-only" if after is None
                    else "neither"
                )
                summary.imports[kind] = summary.imports.get(kind, 0) + 1
                if kind == "broken":
                    outcome.check = "import-broken"
                    outcome.detail += f"imports as installed, not once fixed: {after}"
                    summary.failures.append(outcome)


FAILING = ("crash", "invalid", "changed-unrelated", "unstable")


def run(root: Path, jobs: int = 2, imports: bool = True, rewrite: bool = True) -> Summary:
    files = sorted(p for p in root.rglob("*.py") if p.is_file())
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        outcomes = list(pool.map(functools.partial(judge, rewrite=rewrite), files, chunksize=64))
    summary = Summary(files=len(files), seconds=time.perf_counter() - start)
    for outcome in outcomes:
        summary.counts[outcome.status] = summary.counts.get(outcome.status, 0) + 1
        check_key = f"check {outcome.check}"
        summary.counts[check_key] = summary.counts.get(check_key, 0) + 1
        summary.findings += outcome.findings
        if outcome.status in FAILING or outcome.check != "ok":
            summary.failures.append(outcome)
    if imports:
        import_fixed(outcomes, root, summary)
    for outcome in outcomes:
        outcome.safe_fixed = None  # not for the JSON report
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--no-imports", action="store_true", help="skip importing the files the safe fixes change"
    )
    parser.add_argument("--check-only", action="store_true", help="skip the rewrite half")
    args = parser.parse_args()
    summary = run(args.root, args.jobs, imports=not args.no_imports, rewrite=not args.check_only)
    print(f"{summary.files} files under {args.root} in {summary.seconds:.1f} s")
    for status, count in sorted(summary.counts.items()):
        print(f"  {status:18} {count}")
    print(f"  check findings     {summary.findings}")
    print(f"  safe fixes change  {summary.safe_fixed} files; imports: {summary.imports}")
    for failure in summary.failures[:50]:
        print(f"FAIL {failure.status}/check {failure.check}: {failure.path}: {failure.detail}")
    if args.json:
        args.json.write_text(json.dumps({**asdict(summary), "failures": [asdict(f) for f in summary.failures]}, indent=2))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
