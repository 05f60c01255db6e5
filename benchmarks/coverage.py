"""Coverage on real code: how much of the old stack `rewrite` leaves outside TODOs, per family.

    python benchmarks/coverage.py [CORPUS] [--json out.json] [-j N] [--target portable|neuron]

The public old-stack corpus (../shared/corpus/README.md says how to extract it; default
~/.cache/neuron-migrate/corpus, or $NEURON_MIGRATE_CORPUS) is copied to a temporary folder and
migrated there in place with `neuron-migrate rewrite`. For each file it then asks one question:
is every old-stack name the migrated code still uses (a `torch_xla`, `torch_neuronx`,
`neuronx_distributed` or optimum-neuron import, and what it binds) on a statement that carries a
`TODO(neuron-migrate ...)`? Such a file is *covered*: what is left is marked for a person.

With `--folders FETCH_ROOT --repos REPOS_TSV` (the snapshots the corpus was extracted from, and
the list of their commits) each file is migrated where it lives in its repository, beside the
Python files of its folder: a neuronx-distributed program spans a script and the model files it
imports, which the flat corpus keeps apart, and `rewrite` migrates such files together or not at
all. The counts are still of the corpus files alone.

Families follow the original's imports: NxD (neuronx-distributed, its inference library or
transformers-neuronx) first, then optimum-neuron or torch_neuronx, then torch_xla. Per family it
prints the files, the covered share, and the TODOs the migration wrote. Notebooks count as one
module of their code cells. Without a corpus it says how to get one and exits 0.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from neuron_migrate.core.names import ImportTable
from neuron_migrate.core.notebook_cells import cell_magic, mask
from neuron_migrate.core.oldstack import OPTIMUM_NEURON
from neuron_migrate.rewrite.codemods.nxd_left_whole import WHY as KEPT_WHOLE
from neuron_migrate.rewrite.verify.leftovers import uses_without_todo as leftover_uses

DEFAULT_CORPUS = Path(os.environ.get("NEURON_MIGRATE_CORPUS", Path.home() / ".cache" / "neuron-migrate" / "corpus"))
NXD = ("neuronx_distributed", "neuronx_distributed_inference", "transformers_neuronx")
TODO = "TODO(neuron-migrate "
FAMILIES = ("torch_xla", "optimum-neuron / torch_neuronx", "NxD")


@dataclass
class FileCoverage:
    name: str
    family: str | None  # None: the file imports none of the old stack
    covered: bool
    todos: int
    left: list[str]  # `line: name` of old-stack uses without a TODO


def python_of(path: Path) -> str | None:
    """The file's Python: a script as it is, a notebook's code cells joined (commands masked)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".ipynb":
        return text
    try:
        cells = json.loads(text).get("cells", [])
    except (json.JSONDecodeError, AttributeError):
        return None
    sources = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        magic = cell_magic(source)
        if magic is not None and magic[0] not in ("time", "timeit", "capture", "prun"):
            continue
        sources.append(mask(source).text)
    return "\n".join(sources)


def parse(source: str) -> ast.Module | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError):
            return None


def family(table: ImportTable) -> str | None:
    targets = set(table.bindings.values()) | {b.qualified for b in table.all_bindings}

    def under(*roots: str) -> bool:
        return any(t == r or t.startswith(r + ".") for t in targets for r in roots)

    if under(*NXD):
        return "NxD"
    if under(OPTIMUM_NEURON, "torch_neuronx", "libneuronxla"):
        return "optimum-neuron / torch_neuronx"
    if under("torch_xla"):
        return "torch_xla"
    return None


def uses_without_todo(source: str, tree: ast.Module) -> list[str]:
    """`line: name` of the old-stack names used on statements that carry no TODO."""
    return [f"{node.lineno}: {node.id}" for node, _, _, _ in leftover_uses(source, tree)]


def measure(original: Path, migrated: Path) -> FileCoverage | None:
    before, after = python_of(original), python_of(migrated)
    if before is None or after is None:
        return None
    old_tree, new_tree = parse(before), parse(after)
    if old_tree is None or new_tree is None:
        return None
    kind = family(ImportTable.from_ast(old_tree))
    # A file left as it was says so at its top: all its old-stack code stays, deliberately.
    left = uses_without_todo(after, new_tree) if kind and KEPT_WHOLE not in after else []
    todos = after.count(TODO) - before.count(TODO)
    return FileCoverage(original.name, kind, not left, todos, left)


def folder_layout(corpus: Path, fetch_root: Path, repos: Path, into: Path) -> dict[str, Path]:
    """Each corpus file at its path in its repository under `into`, beside the Python files of its
    folder at the same commit: the flat name -> where it now lies."""
    names = {p.name for p in corpus.iterdir()}
    placed: dict[str, Path] = {}
    for line in repos.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        repo, commit = line.split("\t")[:2]
        git = ["git", "-C", str(fetch_root / repo.replace("/", "+") / "repo")]
        listed = subprocess.run([*git, "ls-tree", "-r", "--name-only", commit], capture_output=True, text=True, check=True)
        paths = listed.stdout.splitlines()
        short = repo.split("/")[1]
        flat = {path: f"{short}__{path.replace('/', '__')}" for path in paths}
        folders = {str(Path(path).parent) for path in paths if flat[path] in names}
        for path in paths:
            if str(Path(path).parent) not in folders:
                continue
            target = into / short / path
            if flat[path] in names:  # the corpus file itself, byte for byte
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(corpus / flat[path], target)
                placed[flat[path]] = target
            elif path.endswith(".py"):
                shown = subprocess.run([*git, "show", f"{commit}:{path}"], capture_output=True, check=True)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(shown.stdout)
    return placed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", type=Path, help="write every file's outcome here too")
    parser.add_argument("-j", type=int, default=os.cpu_count() or 1, help="rewrite jobs")
    parser.add_argument("--target", choices=("portable", "neuron"), default="portable")
    parser.add_argument("--folders", type=Path, metavar="FETCH_ROOT", help="migrate each file in its repository folder")
    parser.add_argument("--repos", type=Path, metavar="REPOS_TSV", help="the repositories and commits (with --folders)")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: extract it (../shared/corpus/README.md)", file=sys.stderr)
        return 0
    if (args.folders is None) != (args.repos is None):
        parser.error("--folders and --repos go together")
    files = sorted(p for p in args.corpus.iterdir() if p.suffix in (".py", ".ipynb"))
    command = Path(sys.executable).parent / "neuron-migrate"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "corpus"
        if args.folders is not None:
            placed = folder_layout(args.corpus, args.folders, args.repos, work)
        else:
            shutil.copytree(args.corpus, work)
            placed = {p.name: work / p.name for p in files}
        subprocess.run(
            [str(command), "rewrite", str(work), "-q", "-j", str(args.j), "--target", args.target],
            capture_output=True,
            check=False,
        )
        results = [r for p in files if p.name in placed and (r := measure(p, placed[p.name])) is not None]
    layout = "in their repository folders" if args.folders is not None else "flat"
    print(f"coverage: {len(files)} files of {args.corpus}, {layout} (target {args.target})")
    print(f"{'family':32} {'files':>6} {'covered':>8} {'share':>7} {'TODOs':>6}")
    for name in FAMILIES:
        group = [r for r in results if r.family == name]
        if not group:
            continue
        covered = sum(r.covered for r in group)
        todos = sum(r.todos for r in group)
        print(f"{name:32} {len(group):6} {covered:8} {covered / len(group):7.0%} {todos:6}")
    left = Counter(re.sub(r"^\d+: ", "", use) for r in results for use in r.left)
    if left:
        print("old-stack names most often left outside TODOs: " + ", ".join(f"{n} x{c}" for n, c in left.most_common(8)))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
