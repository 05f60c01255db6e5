"""`neuron-migrate check` against `ruff check` (and optionally torchfix) on one source tree.

Default tree: a copy of the installed `transformers` package (about 2,900 files, 1.2 M lines)
in a temporary folder, so that no `.gitignore` of a checkout above the virtualenv hides it from
either tool. The peer is `ruff check --select E,F,B`, run alternately with `check` so that both
meet the same load, and the figure is the median ratio of those pairs. Also measures,
for each tool, the wall time, the CPU time of the whole process tree and the peak memory of the
process tree (RSS summed over the process and its workers, sampled every 20 ms). Then the time
`check` needs for a single file of about 1,000 lines, the findings per rule, and a seeded sample
of findings written to `sample.md` for reading by hand.

    python benchmarks/check/run.py                      # check + ruff, 3 runs each
    python benchmarks/check/run.py --torchfix /root/torchfixvenv/bin/torchfix   # + torchfix, once
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

try:
    import psutil
except ImportError:  # the peak then comes from getrusage: the largest single process
    psutil = None


def _tree_rss(process: psutil.Process) -> int:
    total = 0
    for p in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def measure(command: list[str], cwd: Path | None = None) -> dict[str, float]:
    """Wall seconds, CPU seconds (user + sys of the process tree) and peak tree RSS in MB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL)
        peak = 0
        if psutil is not None:
            watched = psutil.Process(process.pid)
            while process.poll() is None:
                with contextlib.suppress(psutil.Error):
                    peak = max(peak, _tree_rss(watched))
                time.sleep(0.02)
        process.wait()
        wall = time.perf_counter() - start
        out.seek(0)
        output = out.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if psutil is None:
        peak = after.ru_maxrss * 1024
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mb": peak / 2**20,
        "output": output.decode("utf-8", "replace"),
    }


def paired(first: list[str], second: list[str], runs: int) -> dict[str, object]:
    """Run the two commands alternately; the ratios of wall and CPU time, pair by pair."""
    a_runs, b_runs = [], []
    for _ in range(runs):
        a_runs.append(measure(first))
        b_runs.append(measure(second))
    wall = [a["wall_s"] / b["wall_s"] for a, b in zip(a_runs, b_runs, strict=True)]
    cpu = [a["cpu_s"] / b["cpu_s"] for a, b in zip(a_runs, b_runs, strict=True) if b["cpu_s"]]
    return {
        "runs": runs,
        "first_wall_s": [round(float(a["wall_s"]), 2) for a in a_runs],
        "second_wall_s": [round(float(b["wall_s"]), 2) for b in b_runs],
        "wall_ratio_median": statistics.median(wall),
        "cpu_ratio_median": statistics.median(cpu) if cpu else None,
        "first_output": a_runs[-1]["output"],
    }


def single_file(tree: Path) -> dict[str, object]:
    """`check_source` on the file closest to 1,000 lines, in process (best and median of 20),
    against `ast.parse` of the same text measured alongside."""
    import ast
    import gc

    from neuron_migrate.checks.checker import CheckOptions, check_source

    files = sorted(tree.rglob("*.py"))
    path = min(files, key=lambda p: (abs(p.read_text(encoding="utf-8").count("\n") - 1000), str(p)))
    text = path.read_text(encoding="utf-8")
    times, parses = [], []
    for _ in range(20):
        start = time.perf_counter()
        check_source(text, str(path), CheckOptions())
        times.append(time.perf_counter() - start)
        gc.disable()
        start = time.perf_counter()
        ast.parse(text)
        parses.append(time.perf_counter() - start)
        gc.enable()
    cli = measure([sys.executable, "-m", "neuron_migrate", "check", str(path), "--exit-zero", "-q"])
    return {
        "file": str(path.relative_to(tree)),
        "lines": text.count("\n"),
        "check_ms_best": 1000 * min(times),
        "check_ms_median": 1000 * statistics.median(times),
        "ast_parse_ms_median": 1000 * statistics.median(parses),
        "check_over_parse_median": statistics.median(t / p for t, p in zip(times, parses, strict=True)),
        "cli_ms_end_to_end": 1000 * cli["wall_s"],
    }


def sample(findings: list[dict[str, object]], tree: Path, size: int, seed: int) -> str:
    """Markdown: `size` findings drawn with `seed`, each with three lines of context either side."""
    chosen = random.Random(seed).sample(findings, min(size, len(findings)))
    chosen.sort(key=lambda f: (str(f["filename"]), f["location"]["row"]))  # type: ignore[index]
    parts = [f"# {len(chosen)} findings drawn at random (seed {seed}) for reading by hand", ""]
    for number, finding in enumerate(chosen, 1):
        path = Path(str(finding["filename"]))
        row = finding["location"]["row"]  # type: ignore[index]
        lines = path.read_text(encoding="utf-8").splitlines()
        context = "\n".join(
            f"{'>' if i == row else ' '}{i:5} {lines[i - 1]}"
            for i in range(max(1, row - 3), min(len(lines), row + 3) + 1)
        )
        where = f" ({finding['context']})" if finding.get("context") else ""
        parts += [
            f"## {number}. {finding['code']} {path.relative_to(tree)}:{row}",
            "",
            f"{finding['message']}{where}",
            "",
            "```python",
            context,
            "```",
            "",
        ]
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree", type=Path, help="source tree (default: the installed transformers package)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--torchfix", metavar="EXE", help="also run this torchfix executable (once)"
    )
    parser.add_argument("--sample", type=int, default=50, help="findings to draw for sample.md (0: keep sample.md)")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()

    scratch = None
    if args.tree is None:
        import transformers

        scratch = tempfile.mkdtemp(prefix="nm-check-bench-")
        args.tree = Path(scratch) / "transformers"
        shutil.copytree(
            Path(transformers.__file__).parent, args.tree, ignore=shutil.ignore_patterns("__pycache__")
        )
    tree = args.tree.resolve()
    files = sorted(tree.rglob("*.py"))
    lines = sum(p.read_text(encoding="utf-8", errors="replace").count("\n") for p in files)
    report: dict[str, object] = {
        "tree": str(tree),
        "files": len(files),
        "lines": lines,
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
    }

    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    check_command = [
        sys.executable,
        "-m",
        "neuron_migrate",
        "check",
        str(tree),
        "--exit-zero",
        "-q",
        "-j",
        str(args.jobs),
        "--output-format",
        "json",
    ]
    ruff_efb = [ruff, "check", str(tree), "--select", "E,F,B", "--exit-zero", "--no-cache", "--isolated", "-q"]
    pairs = paired(check_command, ruff_efb, args.runs)
    check = {
        "command": " ".join(check_command),
        "wall_s_median": statistics.median(pairs["first_wall_s"]),  # type: ignore[arg-type]
        "last_output": pairs.pop("first_output"),
    }
    report["check_vs_ruff_select_E_F_B"] = pairs
    findings = json.loads(str(check.pop("last_output")))
    report["check"] = check
    report["findings"] = len(findings)
    report["findings_per_rule"] = dict(sorted(Counter(str(f["code"]) for f in findings).items()))
    info = measure(
        [
            sys.executable,
            "-m",
            "neuron_migrate",
            "check",
            str(tree),
            "--exit-zero",
            "-q",
            "-j",
            str(args.jobs),
            "--output-format",
            "json",
            "--min-severity",
            "info",
        ]
    )
    info_findings = json.loads(str(info.pop("output")))
    report["check_min_severity_info"] = {
        **info,
        "findings": len(info_findings),
        "findings_per_rule": dict(sorted(Counter(str(f["code"]) for f in info_findings).items())),
    }

    for name, extra in (("ruff_default", []), ("ruff_select_all", ["--select", "ALL"])):
        result = measure([ruff, "check", str(tree), "--exit-zero", "--no-cache", "--isolated", "-q", *extra])
        result.pop("output")
        report[name] = result

    report["single_file"] = single_file(tree)
    if args.torchfix:
        result = measure([args.torchfix, "--select", "ALL", str(tree)])
        result.pop("output")
        report["torchfix"] = result
    report["load_average_after"] = os.getloadavg()

    (HERE / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.sample:
        (HERE / "sample.md").write_text(sample(findings, tree, args.sample, args.seed))
    print(
        json.dumps({k: v for k, v in report.items() if k not in ("findings_per_rule",)}, indent=2)
    )
    print(
        f"check / ruff --select E,F,B: {pairs['wall_ratio_median']:.2f}x wall, "
        f"{pairs['cpu_ratio_median']:.2f}x CPU (median of {args.runs} alternating pairs)"
    )
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
