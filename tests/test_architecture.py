"""The layout keeps its promises: check never loads LibCST, core imports no tool, no import cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "neuron_migrate"
TOOLS = ("rewrite", "checks", "validate", "jupyter", "sweep")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "child" not in p.parts}


def _top_level_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules imported when `path` is imported (function bodies are lazy and left out)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    found.add(child if child in known else base)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _top_level_imports(path, name, known) for name, path in modules.items()}


def test_no_import_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert cycles == []


def test_core_imports_no_tool() -> None:
    graph = _graph()
    for name, imports in graph.items():
        if name.startswith("neuron_migrate.core"):
            tools = {m for m in imports if m.split(".")[1:2] and m.split(".")[1] in TOOLS}
            assert tools == set(), f"{name} imports {sorted(tools)}"


def test_check_never_loads_libcst(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import torch\ndef f(:\n")
    (tmp_path / "ok.py").write_text("import torch\nx = torch.nonzero(torch.ones(3))\n")
    program = (
        "import sys\n"
        "from neuron_migrate.cli import main\n"
        f"main(['check', {str(tmp_path)!r}, '-j', '1', '-q'])\n"
        "loaded = sorted(m for m in sys.modules if m == 'libcst' or m.startswith('libcst.'))\n"
        "print('LOADED', loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in done.stdout, done.stdout + done.stderr
    assert "bad.py:2:7: SyntaxError" in done.stderr
