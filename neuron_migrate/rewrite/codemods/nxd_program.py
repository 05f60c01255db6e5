"""neuronx-distributed programs that span several files of one folder, migrated together.

NxD keeps its process groups in module globals, so a training script calls
`initialize_model_parallel` and the model file next to it builds parallel layers and asks
`get_tensor_model_parallel_size()` on its own. Natively both need the one `DeviceMesh` the script
builds: it goes into a small module of the folder (`parallel_mesh.py`), which the script sets and
the model code reads. Such files move together or not at all: one left to a person leaves them all.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.core.names import ImportTable, ast_dotted_name, unconditional_calls

MESH_MODULE = "parallel_mesh"
MESH_MODULE_TEXT = (
    '"""The device mesh of this folder\'s tensor-parallel program: built once by the launched script,\n'
    'read by its model code (written by `neuron-migrate rewrite`)."""\n'
    "\n"
    "mesh = None\n"
)
NXD = "neuronx_distributed"


@dataclass(frozen=True)
class MeshProgram:
    """One file's part in a program of several files: where the mesh lives, whether this file
    builds it, why the program is left to a person (None when it is migrated), and whether one of
    its files all-reduces the sequence-parallel gradients another file's norms make."""

    module: str = MESH_MODULE
    builds_mesh: bool = False
    blocked: str | None = None
    reduces_sequence_gradients: bool = False
    strided: bool = False  # one of its files has a `stride=` layer


def sibling_modules(tree: ast.Module, folder: Path) -> list[tuple[str, Path]]:
    """The modules of the user's own that `tree` imports from `folder`: (name, file)."""
    found = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module] if node.module else [alias.name for alias in node.names]
        for module in modules:
            relative = Path(*module.split("."))
            for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
                if candidate.is_file():
                    found.append((module, candidate))
                    break
    return found


@dataclass
class _File:
    path: Path
    tree: ast.Module
    builds_mesh: bool
    imports: list[Path]


def programs(paths: Sequence[Path]) -> dict[Path, MeshProgram]:
    """For each given file that belongs to an NxD program of several of the given files, its part.

    Files that use NxD and import one another (directly or not) form a program; at least one of
    them must build the mesh, and none that does may import another that does (several scripts
    may share one model file: each runs in processes of its own). A file outside every program
    is migrated on its own, as before.
    """
    from neuron_migrate.rewrite.codemods.nxd_state import INITIALIZE
    from neuron_migrate.rewrite.codemods.nxd_tensor_parallel import plan
    from neuron_migrate.rewrite.codemods.nxd_trainer import CONFIG

    builders = {INITIALIZE, *CONFIG}  # what sets NxD's groups up, and so builds the mesh natively

    files: dict[Path, _File] = {}
    given = {path.resolve(): path for path in paths if path.suffix == ".py"}
    for resolved, path in given.items():
        tree = _nxd_tree(path)
        if tree is None:
            continue
        table = ImportTable.from_ast(tree)
        builds = any(
            isinstance(node, ast.Call) and table.resolve_dotted(ast_dotted_name(node.func) or "") in builders
            for node in ast.walk(tree)
        )
        imports = [p.resolve() for _, p in sibling_modules(tree, path.parent)]
        files[resolved] = _File(path, tree, builds, [p for p in imports if p in given])
    found: dict[Path, MeshProgram] = {}
    for component in _components(files):
        if len(component) < 2:
            continue
        owners = [f for f in component if files[f].builds_mesh]
        reasons: dict[Path, str] = {}
        strided = reduces = False
        nested = [f for f in owners if set(_reached(files, f)) & (set(owners) - {f})]
        if not owners:
            shared = f"none of the files {_names(files, component)} builds the mesh they share"
            reasons = dict.fromkeys(component, shared)
        elif nested:
            # Scripts run one per process, each building the mesh; one that imports another's
            # set-up could build it twice.
            shared = f"`{files[nested[0]].path.name}` builds the mesh and imports another file that does"
            reasons = dict.fromkeys(component, shared)
        for resolved in component:
            file = files[resolved]
            if resolved in reasons:
                continue
            source = file.path.read_text(encoding="utf-8", errors="replace")
            table = ImportTable.from_ast(file.tree)
            planned = plan(
                source,
                table.resolve_dotted,
                unconditional_calls(file.tree, table),
                str(file.path),
                MeshProgram(builds_mesh=file.builds_mesh),
            )
            if planned.blocked is not None:
                reasons[resolved] = planned.blocked
            strided |= bool(planned.strided)
            reduces |= planned.reduces_sequence_gradients
        for resolved in component:
            file = files[resolved]
            blocked = reasons.get(resolved)
            if blocked is None and reasons:
                other = next(iter(reasons))
                blocked = f"`{files[other].path.name}`, which shares its mesh, is left to a person ({reasons[other]})"
            found[file.path] = MeshProgram(
                builds_mesh=file.builds_mesh, blocked=blocked, reduces_sequence_gradients=reduces, strided=strided
            )
    return found


def _reached(files: dict[Path, _File], start: Path) -> list[Path]:
    """The files `start` imports, directly or not."""
    seen: list[Path] = []
    stack = list(files[start].imports)
    while stack:
        current = stack.pop()
        if current in seen or current == start or current not in files:
            continue
        seen.append(current)
        stack.extend(files[current].imports)
    return seen


def _nxd_tree(path: Path) -> ast.Module | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if NXD not in text:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _components(files: dict[Path, _File]) -> Iterable[list[Path]]:
    """The groups of files joined by imports, either way, in a stable order."""
    neighbours: dict[Path, set[Path]] = {f: set() for f in files}
    for resolved, file in files.items():
        for other in file.imports:
            if other in files and other != resolved:
                neighbours[resolved].add(other)
                neighbours[other].add(resolved)
    seen: set[Path] = set()
    for start in sorted(files):
        if start in seen:
            continue
        component, stack = [], [start]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            component.append(current)
            stack.extend(sorted(neighbours[current] - seen))
        yield sorted(component)


def _names(files: dict[Path, _File], component: list[Path]) -> str:
    return ", ".join(f"`{files[f].path.name}`" for f in component)
