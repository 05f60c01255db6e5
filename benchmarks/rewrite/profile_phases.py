"""Where `rewrite` spends its time: a per-phase profile, in one process, against a bare LibCST round trip.

    python benchmarks/rewrite/profile_phases.py [--corpus DIR] [--rounds 1] [--no-notebooks]
    python benchmarks/rewrite/profile_phases.py --scale [--scales 1,4,16] [--large 2500,5000,10000,20000]

Runs `rewrite_source` over the `.py` files of the public old-stack corpus (default
~/.cache/neuron-migrate/corpus) file by file, the way a worker of `rewrite --diff` does (read the
file, migrate it, diff it), and in the same run the peer: a bare LibCST parse and print of the
same files (read included). Then:

- the same passes without cProfile (CPU time of this process): the ratio rewrite / bare LibCST,
  with and without the NM091 check against the installed libraries (`Options(verify_in=...)`,
  whose probe runs in a child process: its CPU time is reported apart);
- the passes under cProfile: the cumulative time of each phase of `engine._rewrite_source`
  (prefilter, `ast` parse and facts, scope table, LibCST parse, round-trip print, codemod
  dispatch, the module-level pass and its import tidying, compile check, verify, diff), taken from
  the caller -> callee edges out of `_rewrite_source` and `_module_level`, so that a function
  called in several places (`ast.parse`, the printer) is counted where it is called;
- the notebooks of the corpus (`rewrite_notebook`), if any: what the notebook layer adds;
- peak RSS of the process.

`--scale` runs, each in a fresh process (its own peak RSS): the corpus 1x, 4x and 16x (the file
list repeated) and generated single files of 2,500 to 20,000 lines (a torch_xla training script
repeated with renamed definitions), rewrite (without NM091) and the bare round trip of each; it
reports time per file and per line, and the ratio to the bare round trip at each size.

The machine this runs on is shared: compare the ratios within one run, not absolute seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import libcst as cst  # noqa: E402

from neuron_migrate.core.files import read_source  # noqa: E402
from neuron_migrate.rewrite.engine import Options, rewrite_source  # noqa: E402
from neuron_migrate.rewrite.notebook import rewrite_notebook  # noqa: E402
from neuron_migrate.rewrite.report import unified_diff  # noqa: E402
from neuron_migrate.rewrite.results import FileResult  # noqa: E402
from neuron_migrate.rewrite.verify import target as verify_target  # noqa: E402

CORPUS = Path.home() / ".cache" / "neuron-migrate" / "corpus"


# -- the work being measured ---------------------------------------------------------------------


def migrate_one(path: Path, options: Options) -> FileResult:
    """What a `rewrite --diff` worker does with one file (`command.process`, then the diff)."""
    source = read_source(path)
    if path.suffix == ".ipynb":
        notebook = rewrite_notebook(source.text, str(path), options)
        result = notebook.result
        result.cells = notebook.cells
    else:
        result = rewrite_source(source.text, str(path), options)
    if result.changed and not result.error:
        unified_diff(result)
    return result


def bare_one(path: Path) -> None:
    """The peer: read the file, parse it with LibCST and print it back."""
    source = read_source(path)
    with contextlib.suppress(cst.ParserSyntaxError, RecursionError):
        cst.parse_module(source.text).code  # noqa: B018 - printing is the work


def migrate_all(paths: Iterable[Path], options: Options) -> dict[str, int]:
    counts = {"files": 0, "changed": 0, "skipped": 0, "errors": 0}
    for path in paths:
        result = migrate_one(path, options)
        counts["files"] += 1
        counts["changed"] += bool(result.changed and not result.error)
        counts["skipped"] += bool(result.skipped)
        counts["errors"] += bool(result.error)
    return counts


def bare_all(paths: Iterable[Path]) -> None:
    for path in paths:
        bare_one(path)


def fresh_probe() -> None:
    """Stop this process's NM091 probe: the next verified file starts one, as in a new worker."""
    verify_target._close_all()
    verify_target._ENVIRONMENTS.clear()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def timed(work: Callable[[], object]) -> tuple[float, float, object]:
    """(CPU seconds of this process, wall seconds, what `work` returned)."""
    cpu, wall = time.process_time(), time.perf_counter()
    value = work()
    return time.process_time() - cpu, time.perf_counter() - wall, value


# -- phases out of a profile ---------------------------------------------------------------------

Key = tuple[str, int, str]


def _matches(key: Key, where: str, name: str) -> bool:
    return key[2] == name and key[0].replace("\\", "/").endswith(where)


class Profile:
    def __init__(self, stats: pstats.Stats) -> None:
        self.raw: dict[Key, tuple] = stats.stats  # type: ignore[attr-defined]

    def cum(self, where: str, name: str) -> float:
        """Cumulative seconds of the functions `name` defined in a file ending with `where`."""
        return sum(value[3] for key, value in self.raw.items() if _matches(key, where, name))

    def edge(self, where: str, name: str, caller: tuple[str, str]) -> float:
        """Cumulative seconds of `name` when called directly by `caller` (file suffix, function)."""
        total = 0.0
        for key, value in self.raw.items():
            if _matches(key, where, name):
                total += sum(c[3] for k, c in value[4].items() if _matches(k, *caller))
        return total


ENGINE = "neuron_migrate/rewrite/engine.py"
REWRITE = (ENGINE, "_rewrite_source")
MODULE_LEVEL = (ENGINE, "_module_level")
BUILTIN = "~"


def phases(p: Profile) -> tuple[list[tuple[str, float]], float]:
    """[(phase, seconds)] in the order a file meets them, and the total of the pass."""
    read = p.cum("neuron_migrate/core/files.py", "read_source")
    module_print = p.edge("neuron_migrate/rewrite/printing.py", "code", MODULE_LEVEL)
    module_parse = p.edge("ast.py", "parse", MODULE_LEVEL)
    dead_imports = p.edge("neuron_migrate/rewrite/imports.py", "remove_dead_imports", MODULE_LEVEL)
    device_once = p.edge(ENGINE, "_device_once", MODULE_LEVEL)
    add_level = p.edge("neuron_migrate/rewrite/imports.py", "add_module_level", MODULE_LEVEL)
    module_rest = p.edge(ENGINE, "_module_level", REWRITE) - module_print - module_parse - dead_imports - device_once - add_level
    verify_file = "neuron_migrate/rewrite/verify/__init__.py"
    verify = p.edge(verify_file, "verify", REWRITE)
    verify_parse = p.edge("ast.py", "parse", (verify_file, "verify"))
    verify_scopes = p.edge("neuron_migrate/core/scopes.py", "from_ast", ("neuron_migrate/rewrite/verify/checks.py", "check"))
    verify_beside = p.edge(verify_file, "_beside", (verify_file, "verify"))
    probe = min(verify, p.cum(BUILTIN, "<built-in method select.select>") + p.cum("subprocess.py", "__init__"))
    engine = [
        ("prefilter (regex scan)", p.edge(BUILTIN, "<method 'search' of 're.Pattern' objects>", REWRITE) + p.edge(ENGINE, "_alone", REWRITE)),
        ("`ast` parse", p.edge("ast.py", "parse", REWRITE)),
        (
            "`ast` facts (ImportTable, qualified names, calls)",
            p.edge("neuron_migrate/core/names.py", "from_ast", REWRITE)
            + sum(p.edge("neuron_migrate/core/names.py", f, REWRITE) for f in ("qualified_names_used", "unconditional_calls", "surely_called_by", "names_under"))
            + p.edge(ENGINE, "_old_stack_star_imports", REWRITE)
            + p.edge("neuron_migrate/rewrite/suites.py", "has_one_line_bodies", REWRITE),
        ),
        ("applicability (each codemod's `applies`)", p.edge(ENGINE, "_applicable", REWRITE)),
        ("LibCST parse", p.edge("libcst/_parser/entrypoints.py", "parse_module", REWRITE)),
        ("round-trip print check", p.edge("neuron_migrate/rewrite/printing.py", "code", REWRITE)),
        ("scope table (`ScopeTable.from_ast`)", p.edge("neuron_migrate/core/scopes.py", "from_ast", REWRITE)),
        ("codemod dispatch (`Dispatcher.rewrite`)", p.edge("neuron_migrate/rewrite/dispatch.py", "rewrite", REWRITE)),
        ("module level: print the migrated module", module_print),
        ("module level: `ast` re-parse of the output (and helpers)", module_parse),
        ("import tidying (`remove_dead_imports`)", dead_imports),
        ("module level: one `DEVICE` constant (`_device_once`)", device_once),
        ("module level: add imports and helpers (`add_module_level`)", add_level),
        ("module level: the rest (helpers used, own copies)", module_rest),
        ("compile check of the output", p.edge(ENGINE, "_check_compiles", REWRITE)),
        ("TODO scan (`manual_items`)", p.edge(ENGINE, "manual_items", REWRITE)),
        ("verify (NM091): `ast` re-parse of the output", verify_parse),
        ("verify (NM091): scope table of the output", verify_scopes),
        ("verify (NM091): list the folders around the file (`_beside`)", verify_beside),
        ("verify (NM091): start the probe, wait for its answers", probe),
        ("verify (NM091): the checks, TODO marking", verify - verify_parse - verify_scopes - verify_beside - probe),
    ]
    in_engine = p.cum(ENGINE, "rewrite_source")
    notebooks = p.cum("neuron_migrate/rewrite/notebook.py", "rewrite_notebook")
    in_notebooks = sum(
        c[3]
        for key, value in p.raw.items()
        if _matches(key, ENGINE, "rewrite_source")
        for k, c in value[4].items()
        if k[0].replace("\\", "/").endswith("neuron_migrate/rewrite/notebook.py")
    )
    rows = [("read (`read_source`)", read), *engine]
    rows.append(("rest of the engine (contexts, codemod set-up, suites)", in_engine - sum(s for _, s in engine)))
    if notebooks:
        rows.append(("notebook layer (cells, masks, JSON)", notebooks - in_notebooks))
    rows.append(("diff (`unified_diff`)", p.cum("neuron_migrate/rewrite/report.py", "unified_diff")))
    total = p.cum(Path(__file__).name, "migrate_one")
    rows.append(("rest (the loop)", total - sum(s for _, s in rows)))
    return rows, total


def profiled(work: Callable[[], object]) -> tuple[Profile, object]:
    profiler = cProfile.Profile()
    value = profiler.runcall(work)
    return Profile(pstats.Stats(profiler)), value


# -- the main measurement ------------------------------------------------------------------------


def line_count(paths: Iterable[Path]) -> int:
    return sum(path.read_bytes().count(b"\n") for path in paths)


def measure(
    corpus: Path,
    rounds: int,
    notebooks: bool,
    json_out: Path | None,
    limit: int | None = None,
    generated: int = 0,
    every: int = 1,
    files: list[Path] | None = None,
) -> None:
    books = sorted(corpus.glob("*.ipynb"))[::every][:limit] if notebooks else []
    if generated:
        with tempfile.TemporaryDirectory(prefix="nm-phases-") as work:
            path = Path(work) / f"generated_{generated}.py"
            path.write_text(generated_file(generated), encoding="utf-8")
            measure(corpus, rounds, False, json_out, generated=0, files=[path])
        return
    files = files or sorted(corpus.glob("*.py"))[::every][:limit]
    lines = line_count(files)
    print(f"input: {len(files)} .py files, {lines} lines ({files[0].parent}); {len(books)} notebooks", flush=True)
    plain, checked = Options(), Options(verify_in=sys.executable)

    # Imports, caches keyed by class and the like are paid once per process, as in a worker.
    warm = sorted(corpus.glob("*.py"))[:10]
    migrate_all(warm, plain)
    bare_all(warm)

    results: dict[str, object] = {"files": len(files), "lines": lines}
    runs: dict[str, list[float]] = {"bare": [], "rewrite": [], "verified": [], "probe_cpu": [], "verified_wall": []}
    counts: dict[str, int] = {}
    for n in range(rounds):
        cpu, _, _ = timed(lambda: bare_all(files))
        runs["bare"].append(cpu)
        cpu, _, counts = timed(lambda: migrate_all(files, plain))  # type: ignore[assignment]
        runs["rewrite"].append(cpu)
        fresh_probe()
        before = children_cpu()
        cpu, wall, _ = timed(lambda: migrate_all(files, checked))
        fresh_probe()
        runs["verified"].append(cpu)
        runs["verified_wall"].append(wall)
        runs["probe_cpu"].append(children_cpu() - before)
        print(
            f"  round {n + 1}: bare LibCST {runs['bare'][-1]:.2f} s CPU, rewrite {runs['rewrite'][-1]:.2f} s "
            f"({runs['rewrite'][-1] / runs['bare'][-1]:.2f}x), with NM091 {runs['verified'][-1]:.2f} s "
            f"+ probe {runs['probe_cpu'][-1]:.2f} s ({(runs['verified'][-1] + runs['probe_cpu'][-1]) / runs['bare'][-1]:.2f}x)",
            flush=True,
        )
    print(f"  files: {counts}")
    med = {k: statistics.median(v) for k, v in runs.items()}
    ratio = statistics.median(r / b for r, b in zip(runs["rewrite"], runs["bare"], strict=True))
    ratio_checked = statistics.median(
        (v + c) / b for v, c, b in zip(runs["verified"], runs["probe_cpu"], runs["bare"], strict=True)
    )
    results.update({"unprofiled_cpu_s": med, "ratio": ratio, "ratio_verified": ratio_checked, "counts": counts})

    # Under cProfile (wall clock: the probe's answers are waited for).
    bare_profile, _ = profiled(lambda: bare_all(files))
    bare_total = bare_profile.cum(Path(__file__).name, "bare_one")
    plain_profile, _ = profiled(lambda: migrate_all(files, plain))
    fresh_probe()
    checked_profile, _ = profiled(lambda: migrate_all(files, checked))
    fresh_probe()
    plain_rows, plain_total = phases(plain_profile)
    checked_rows, checked_total = phases(checked_profile)
    checked_by_name = dict(checked_rows)

    print()
    print(f"Phases of `rewrite_source` over {len(files)} files ({lines} lines), one process, under cProfile:")
    print()
    print("| phase | s, no NM091 | share | s, with NM091 | share |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds in plain_rows:
        other = checked_by_name.get(name, 0.0)
        print(f"| {name} | {seconds:.2f} | {seconds / plain_total:.1%} | {other:.2f} | {other / checked_total:.1%} |")
    print(f"| **total** | **{plain_total:.2f}** | 100% | **{checked_total:.2f}** | 100% |")
    print(f"| bare LibCST parse + print, same files (read included) | {bare_total:.2f} | | {bare_total:.2f} | |")
    print(f"| **ratio total / bare LibCST** (profiled) | **{plain_total / bare_total:.2f}** | | **{checked_total / bare_total:.2f}** | |")
    print(
        f"| **ratio total / bare LibCST** (not profiled, CPU, median of {rounds}) | **{ratio:.2f}** | | **{ratio_checked:.2f}** | |"
    )
    print()
    print(
        f"Not profiled (CPU, median of {rounds}): bare {med['bare']:.2f} s, rewrite {med['rewrite']:.2f} s, "
        f"with NM091 {med['verified']:.2f} s in this process + {med['probe_cpu']:.2f} s in the probe "
        f"({med['verified_wall']:.2f} s wall)"
    )
    results["profile"] = {"bare_s": bare_total, "plain": plain_rows, "verified": checked_rows}

    if books:
        migrate_all(books[:3], plain)
        book_lines = line_count(books)
        cpu, _, book_counts = timed(lambda: migrate_all(books, plain))
        book_profile, _ = profiled(lambda: migrate_all(books, plain))
        rows, total = phases(book_profile)
        layer = dict(rows).get("notebook layer (cells, masks, JSON)", 0.0)
        inside = book_profile.cum(ENGINE, "rewrite_source")
        print(
            f"Notebooks: {len(books)} ({book_lines} lines of JSON), {cpu:.2f} s CPU not profiled, {book_counts}; "
            f"profiled {total:.2f} s: rewrite_source on the joined cells {inside / total:.0%}, "
            f"the notebook layer {layer / total:.0%}"
        )
        results["notebooks"] = {"files": len(books), "cpu_s": cpu, "profiled_s": total, "engine_share": inside / total, "layer_share": layer / total}

    print(f"Peak RSS of this process: {peak_rss_mib():.0f} MiB")
    results["peak_rss_mib"] = peak_rss_mib()
    if json_out:
        json_out.write_text(json.dumps(results, indent=2) + "\n")


# -- scaling ---------------------------------------------------------------------------------------

# One block of a generated large file: a torch_xla training script's definitions, renamed per copy.
_HEADER = '''"""Generated: many copies of one torch_xla training script's definitions (profile_phases.py)."""
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr
'''

_BLOCK = '''

class Net_N(nn.Module):
    def __init__(self, in_dim=16, hidden=32, num_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def get_dataset_N(n, in_dim=16, num_classes=3):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(n, in_dim, generator=g)
    y = (x[:, :num_classes] * 2.0).argmax(1)
    return TensorDataset(x, y)


def train_N(index, flags):
    device = xm.xla_device()
    world_size = xm.xrt_world_size()
    rank = xm.get_ordinal()
    dataset = get_dataset_N(flags.steps * flags.batch_size * world_size)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=flags.batch_size, sampler=sampler, drop_last=True)
    device_loader = pl.MpDeviceLoader(loader, device)
    model = Net_N().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=flags.lr)
    loss_fn = nn.CrossEntropyLoss()
    xm.rendezvous("init")
    xm.master_print(f"world_size={world_size} index={index} device={device}")
    model.train()
    for step, (x, y) in enumerate(device_loader):
        if step >= flags.steps:
            break
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
        if step % 10 == 0:
            xm.master_print(f"step {step} loss {loss.item():.6f}")
    if xm.is_master_ordinal():
        print(f"[ordinal {rank}] saving to {flags.ckpt}", flush=True)
    xm.save(model.state_dict(), flags.ckpt)


def evaluate_N(model, loader):
    device = xm.xla_device()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in pl.MpDeviceLoader(loader, device):
            correct += (model(x).argmax(1) == y).sum()
            total += y.numel()
    accuracy = xm.mesh_reduce("accuracy", (correct / total).item(), sum) / xr.world_size()
    xm.master_print(f"accuracy {accuracy:.3f}")
    return accuracy
'''

_FOOTER = '''

def parse_flags():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--ckpt", default=os.path.join("/tmp", "generated.pt"))
    return parser.parse_args()


if __name__ == "__main__":
    os.environ["XLA_USE_BF16"] = "1"
    xmp.spawn(train_0, args=(parse_flags(),))
'''


def generated_file(lines: int) -> str:
    """A torch_xla script of about `lines` lines: the block repeated with renamed definitions."""
    parts, count, n = [_HEADER], _HEADER.count("\n") + _FOOTER.count("\n"), 0
    while count < lines:
        block = re.sub(r"\b(Net|get_dataset|train|evaluate)_N\b", rf"\g<1>_{n}", _BLOCK)
        parts.append(block)
        count += block.count("\n")
        n += 1
    parts.append(_FOOTER)
    return "".join(parts)


def scale_worker(spec: str, corpus: Path, work: Path) -> dict[str, float]:
    """One scale in this (fresh) process: `corpus:K` or `large:LINES`."""
    kind, size, *base = spec.split(":")
    if kind == "corpus":
        files = sorted(corpus.glob("*.py"))[:: int(base[0]) if base else 1] * int(size)
    else:
        path = work / f"generated_{size}.py"
        path.write_text(generated_file(int(size)), encoding="utf-8")
        files = [path]
    lines = line_count(files)
    plain = Options()
    warm = sorted(corpus.glob("*.py"))[:10]
    migrate_all(warm, plain)
    bare_all(warm)
    cpu, wall, counts = timed(lambda: migrate_all(files, plain))
    rss = peak_rss_mib()
    bare_cpu, _, _ = timed(lambda: bare_all(files))
    return {
        "files": len(files),
        "lines": lines,
        "rewrite_cpu_s": cpu,
        "rewrite_wall_s": wall,
        "bare_cpu_s": bare_cpu,
        "peak_rss_mib": rss,
        "changed": counts["changed"],  # type: ignore[index]
        "errors": counts["errors"],  # type: ignore[index]
    }


def scale(corpus: Path, scales: list[int], large: list[int], json_out: Path | None, base: int | None = None) -> None:
    specs = [f"corpus:{k}" + (f":{base}" if base else "") for k in scales] + [f"large:{n}" for n in large]
    rows = []
    with tempfile.TemporaryDirectory(prefix="nm-scale-") as work:
        for spec in specs:
            proc = subprocess.run(
                [sys.executable, __file__, "--corpus", str(corpus), "--scale-worker", spec, "--work", work],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{spec} failed:\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["spec"] = spec
            rows.append(row)
            print(f"  {spec}: {row}", flush=True)
    print()
    print("| input | files | lines | rewrite s (CPU) | ms / file | µs / line | bare LibCST µs / line | rewrite / bare | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        kind, size, *first = row["spec"].split(":")
        of = f"every {first[0]}th corpus file" if first else "corpus"
        name = f"{of} x{size}" if kind == "corpus" else f"one generated file, {int(size):,} lines"
        print(
            f"| {name} | {row['files']} | {row['lines']} | {row['rewrite_cpu_s']:.2f} | "
            f"{row['rewrite_cpu_s'] / row['files'] * 1e3:.1f} | {row['rewrite_cpu_s'] / row['lines'] * 1e6:.0f} | "
            f"{row['bare_cpu_s'] / row['lines'] * 1e6:.0f} | {row['rewrite_cpu_s'] / row['bare_cpu_s']:.2f} | {row['peak_rss_mib']:.0f} |"
        )
    if json_out:
        json_out.write_text(json.dumps(rows, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--rounds", type=int, default=1, help="unprofiled passes (medians reported)")
    parser.add_argument("--no-notebooks", action="store_true")
    parser.add_argument("--limit", type=int, help="only the first N files of the corpus (a quick look)")
    parser.add_argument("--every", type=int, default=1, metavar="K", help="only every K-th file of the corpus (a sample across it)")
    parser.add_argument("--generated", type=int, default=0, metavar="LINES", help="profile one generated file of this many lines instead")
    parser.add_argument("--scale-every", type=int, metavar="K", help="--scale: every K-th corpus file makes the 1x (default: all)")
    parser.add_argument("--scale", action="store_true", help="the scaling runs instead of the phase profile")
    parser.add_argument("--scales", default="1,4,16", help="corpus multiples for --scale")
    parser.add_argument("--large", default="2500,5000,10000,20000", help="generated file sizes (lines) for --scale; empty for none")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--scale-worker", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if not args.corpus.is_dir() or not any(args.corpus.glob("*.py")):
        print(f"skipped: no corpus at {args.corpus} (../shared/corpus/README.md says how to extract it)")
        return
    if args.scale_worker:
        print(json.dumps(scale_worker(args.scale_worker, args.corpus, args.work)))
        return
    if args.scale:
        scales = [int(k) for k in args.scales.split(",") if k]
        large = [int(n) for n in args.large.split(",") if n]
        scale(args.corpus, scales, large, args.json, args.scale_every)
    else:
        measure(args.corpus, args.rounds, not args.no_notebooks, args.json, args.limit, args.generated, args.every)


if __name__ == "__main__":
    main()
