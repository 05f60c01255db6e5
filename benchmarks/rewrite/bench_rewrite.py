"""Rewrite throughput against peers, measured in one run on the same files.

    python benchmarks/rewrite/bench_rewrite.py [--copies 40] [--corpus DIR] [--jobs 2] [--rounds 3] [--torchfix PATH]

Corpus: the old-stack scripts we wrote (examples/ and the fixture inputs under
tests/fixtures/rewrite/), copied until there are a few hundred files that all need changes; or,
with `--corpus`, the `.py` files of a folder (the public old-stack corpus of
../shared/corpus/README.md: real files, larger and more varied than ours).
Peers on the same copies, each with the same number of worker processes:

- `neuron-migrate rewrite --output-dir` (migrates, checks each output against the installed
  target libraries, and writes every file);
- the same with `--ignore NM091`: without that check, whose cost is the difference;
- a no-op LibCST codemod (`NOOPCommand` through `parallel_exec_transform_with_prettyprint`),
  i.e. the floor for any LibCST-based tool: parse and print every file;
- `torchfix --fix` (a LibCST + metadata linter with autofixes), when installed.

Prefilter: files that cannot need a migration (sources of the installed torch package that
mention none of the old-stack markers) are skipped by a text scan; its cost per file is
compared with parsing the same files with LibCST.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_corpus(dest: Path, copies: int) -> list[Path]:
    sources = sorted((ROOT / "examples").glob("*.py"))
    sources += sorted((ROOT / "tests" / "fixtures" / "rewrite").glob("*/*.in.py"))
    files = []
    for i in range(copies):
        for source in sources:
            target = dest / f"c{i:03d}" / source.name.replace(".in.py", ".py")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            files.append(target)
    return files


def copy_corpus(source: Path, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    files = []
    for path in sorted(source.glob("*.py")):
        shutil.copyfile(path, dest / path.name)
        files.append(dest / path.name)
    return files


def timed(args: list[str], cwd: Path | None = None, ok: tuple[int, ...] = (0, 1)) -> float:
    """Seconds `args` ran; `ok`: the exit statuses that mean it did its job."""
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


NOOP = """
import sys
from libcst.codemod import CodemodContext, parallel_exec_transform_with_prettyprint
from libcst.codemod.commands.noop import NOOPCommand

files = sys.argv[2:]
result = parallel_exec_transform_with_prettyprint(
    NOOPCommand(CodemodContext()), files, jobs=int(sys.argv[1]), format_code=False, hide_progress=True
)
assert result.failures == 0, result
"""


def prefilter_ratio(limit: int = 400) -> dict[str, float]:
    import libcst
    import torch

    from neuron_migrate.rewrite.engine import PREFILTER

    texts = []
    for path in sorted(Path(torch.__file__).parent.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not PREFILTER.search(text):
            texts.append(text)
        if len(texts) >= limit:
            break
    start = time.perf_counter()
    for text in texts:
        PREFILTER.search(text)
        "neuron-migrate NM" in text  # noqa: B015 - the engine's second test
    scan = time.perf_counter() - start
    start = time.perf_counter()
    for text in texts:
        libcst.parse_module(text)
    parse = time.perf_counter() - start
    return {"files": len(texts), "scan_s": scan, "parse_s": parse, "ratio": parse / scan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--corpus", type=Path, help="measure on this folder's .py files instead of copies of ours")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="time both this many times, alternating; report medians")
    parser.add_argument("--torchfix", default=shutil.which("torchfix") or "/root/torchfixvenv/bin/torchfix")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nm-bench-"))
    try:
        corpus = work / "corpus"
        files = copy_corpus(args.corpus, corpus) if args.corpus else build_corpus(corpus, args.copies)
        n = len(files)
        lines = sum(f.read_text(errors="replace").count("\n") for f in files)
        print(f"corpus: {n} old-stack files, {lines} lines, {args.jobs} workers", flush=True)
        results: dict[str, object] = {"files": n, "lines": lines, "jobs": args.jobs}

        noop_copy = work / "noop"
        shutil.copytree(corpus, noop_copy)
        script = work / "noop.py"
        script.write_text(NOOP)
        out = work / "migrated"
        # Rounds alternate the two, so that a machine slower for a while slows both alike.
        t_nms, t_noops, t_unchecked = [], [], []
        rewrite = [sys.executable, "-m", "neuron_migrate", "rewrite", str(corpus), "--output-dir", str(out), "-q", "-j", str(args.jobs)]
        # A real corpus holds files that do not parse (Python 2): rewrite reports them (exit 2).
        ok = (0, 1, 2) if args.corpus else (0, 1)
        for _ in range(args.rounds):
            shutil.rmtree(out, ignore_errors=True)
            t_unchecked.append(timed([*rewrite, "--ignore", "NM091"], ok=ok))
            shutil.rmtree(out, ignore_errors=True)
            t_nms.append(timed(rewrite, ok=ok))
            t_noops.append(timed([sys.executable, str(script), str(args.jobs), *map(str, sorted(noop_copy.rglob("*.py")))]))
            if args.rounds > 1:
                print(f"  round {len(t_nms)}: rewrite {t_nms[-1]:.2f} s, no-op {t_noops[-1]:.2f} s: {t_nms[-1] / t_noops[-1]:.2f}", flush=True)
        t_nm, t_noop = statistics.median(t_nms), statistics.median(t_noops)
        ratio = statistics.median(a / b for a, b in zip(t_nms, t_noops, strict=True))
        changed = sum(
            (out / f.relative_to(corpus)).exists()
            and (out / f.relative_to(corpus)).read_bytes() != f.read_bytes()
            for f in files
        )
        results["neuron_migrate_s"] = t_nm
        results["unchecked_s"] = statistics.median(t_unchecked)
        results["check_overhead"] = statistics.median(a / b - 1 for a, b in zip(t_nms, t_unchecked, strict=True))
        results["libcst_noop_s"] = t_noop
        results["ratio"] = ratio
        rounds = f" (median of {args.rounds} rounds)" if args.rounds > 1 else ""
        print(f"neuron-migrate rewrite : {t_nm:6.2f} s  {n / t_nm:7.1f} files/s  ({changed}/{n} files changed){rounds}")
        print(f"  without NM091 checks : {results['unchecked_s']:6.2f} s: the checks add {results['check_overhead']:.0%} (target <= 25%)")
        print(f"LibCST no-op codemod   : {t_noop:6.2f} s  {n / t_noop:7.1f} files/s")

        if os.path.exists(args.torchfix):
            fix_copy = work / "torchfix"
            shutil.copytree(corpus, fix_copy)
            t_fix = timed([args.torchfix, "--fix", "--select", "ALL", str(fix_copy)])
            results["torchfix_s"] = t_fix
            print(f"torchfix --fix         : {t_fix:6.2f} s  {n / t_fix:7.1f} files/s")
        else:
            print("torchfix               : not installed (pip install torchfix into its own venv)")

        pre = prefilter_ratio()
        results["prefilter"] = pre
        print(
            f"prefilter              : {pre['files']} non-matching torch sources, scan {pre['scan_s'] * 1e3:.1f} ms "
            f"vs LibCST parse {pre['parse_s']:.2f} s: {pre['ratio']:.0f}x faster"
        )
        print(f"ratio neuron-migrate / LibCST no-op wall time: {ratio:.2f}")
        if "torchfix_s" in results:
            print(f"ratio torchfix / neuron-migrate wall time  : {results['torchfix_s'] / t_nm:.2f}")  # type: ignore[operator]
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
