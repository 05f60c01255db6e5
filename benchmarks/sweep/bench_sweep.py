"""Time and memory of `neuron-migrate sweep`: wall time, CPU time of the whole process tree,
peak memory of the tree (sampled), and the machine's load while it ran.

    python benchmarks/sweep/bench_sweep.py -j 2                 # every architecture (fresh)
    python benchmarks/sweep/bench_sweep.py --subset -j 2        # the ten of the test run
    python benchmarks/sweep/bench_sweep.py --records docs/architectures.json   # per-probe figures only

The target (issue: "well under an hour on 2 CPU cores") is absolute, so it is judged on CPU
time, which load does not change: CPU time / 2 is the wall time on two idle cores. Wall time is
reported with the load average beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any

TARGET_SECONDS = 30 * 60  # "well under an hour": half of one, on two cores


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):  # a probe that ended meanwhile
            total += process.memory_info().rss
    return total


def run_sweep(arguments: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "records.json"
        command = [sys.executable, "-m", "neuron_migrate", "sweep", "--fresh", "-q",
                   "--results", str(Path(folder) / "results"), "--json", str(out), *arguments]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env)
        peak, loads = 0, []
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(1.0):
                peak = max(peak, _tree_rss(process.pid))
                loads.append(os.getloadavg()[0])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        process.wait()
        done.set()
        sampler.join()
        wall = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        records = json.loads(out.read_text())
    return {
        "command": " ".join(["neuron-migrate", "sweep", *arguments]),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_tree_rss_mb": round(peak / 2**20),
        "load_average": {"min": min(loads, default=0), "median": median(loads) if loads else 0, "max": max(loads, default=0)},
        **per_probe(records),
    }


def per_probe(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the records say of each probe: its CPU time, wall time and peak RSS."""
    cpu = [r["cpu_seconds"] for r in records if "cpu_seconds" in r]
    rss = [r["peak_rss_mb"] for r in records if "peak_rss_mb" in r]
    slowest = sorted(records, key=lambda r: -r.get("cpu_seconds", 0))[:5]
    wall = [r["seconds"] for r in records if "cpu_seconds" in r]
    return {
        "architectures": len(records),
        "probed": len(cpu),  # the others were not reached (`neuron-migrate sweep --recorded`)
        "probe_wall_seconds_sum": round(sum(wall), 1),
        "probe_cpu_seconds": {"sum": round(sum(cpu), 1), "median": median(cpu) if cpu else 0, "max": max(cpu, default=0)},
        "probe_peak_rss_mb": {"median": median(rss) if rss else 0, "max": max(rss, default=0)},
        "slowest": {r["architecture"]: r.get("cpu_seconds") for r in slowest},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, help="summarise the per-probe figures of a --json written earlier; run nothing")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args, sweep_arguments = parser.parse_known_args(argv)
    if args.records is not None:
        figures = per_probe(json.loads(args.records.read_text()))
    else:
        figures = run_sweep(sweep_arguments)
        figures["target_met"] = figures["cpu_seconds"] / 2 < TARGET_SECONDS
    print(json.dumps(figures, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
