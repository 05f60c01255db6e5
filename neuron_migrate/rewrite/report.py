"""What a rewrite run tells its user: a terminal summary, and Markdown or JSON migration reports."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuron_migrate import __version__
from neuron_migrate.core import oldstack
from neuron_migrate.core.notebook_cells import PYTHON_CELL_MAGICS, cell_magic, mask
from neuron_migrate.core.source import file_diff
from neuron_migrate.core.wording import plural
from neuron_migrate.rewrite.results import FileResult, ManualItem
from neuron_migrate.rewrite.verify.siblings import LEVELS

RULES_URL = "docs/rules.md#{code}"  # in the neuron-migrate repository

# A file that still imports the old stack fails at start-up on TorchNeuron (ImportError).
_PACKAGES = "|".join(re.escape(p) for p in (*oldstack.PACKAGES, oldstack.OPTIMUM_NEURON))
_OLD_IMPORT = re.compile(
    rf"^[ \t]*(?:import|from)[ \t]+(?:{_PACKAGES})\b|^[ \t]*from[ \t]+optimum[ \t]+import[ \t]+neuron\b",
    re.MULTILINE,
)

# No static tool knows that a program runs: a status says only what was checked.
CHECKED = "migrated; imports and calls match the target libraries"
UNCHECKED = "migrated; not checked against the target libraries"
AFTER_TODOS = "needs review: TODOs left"
START_UP = "fails at start-up: still imports the old stack"
KEPT = "left as it was: its TODOs name what holds it back"
REFUSED = "refused, left unchanged"
UNTOUCHED = "nothing to migrate"

# What a person on TorchNeuron needs to know whatever the files held (see the rule docs).
PLATFORM_FACTS = (
    "TorchNeuron runs on Trn2 and Trn3 instances; Trn1 and Inf2 are not supported by it, so their "
    "users stay on the old stack for now.",
    "On Trainium, compile with `torch.compile(model, backend=\"neuron\", fullgraph=True)`: "
    "`fullgraph=True` raises on a graph break instead of silently splitting the model.",
    "Shapes must be static there: `dynamic=True` is rejected at compile time, and every new input "
    "shape compiles anew (pad to a few fixed sizes); a `mode=` other than `\"default\"` is ignored "
    "with a warning.",
)


def unified_diff(result: FileResult) -> str:
    """The change as a unified diff; for a notebook, one diff per changed cell (`nb.ipynb:cell 4`)."""
    if result.cells:
        return "".join(file_diff(f"{result.path}:cell {index + 1}", old, new) for index, old, new in result.cells)
    return file_diff(result.path, result.original, result.migrated)


def location(result: FileResult, line: int, column: int, cell: int | None) -> str:
    where = f"{result.path}:cell {cell}" if cell is not None else result.path
    return f"{where}:{line}:{column}"


def manual_lines(result: FileResult) -> list[str]:
    return [f"{location(result, m.line, m.column, m.cell)}: {m.code} {m.message}" for m in result.manual]


def summary(results: Sequence[FileResult], *, applied: bool) -> str:
    """The closing lines of a run, for stderr."""
    changed = [r for r in results if r.changed and not r.kept_as_it_was]
    kept = sum(bool(r.kept_as_it_was) for r in results)
    errors = [r for r in results if r.error]
    manual = sum(len(r.manual) for r in results)
    edits = sum(len(r.changes) for r in results)
    verb = "Migrated" if applied else "Would migrate"
    parts = [f"{verb} {len(changed)} of {plural(len(results), 'file')} ({plural(edits, 'change')})"]
    if kept:
        parts.append(f"{plural(kept, 'file')} left as {'it was' if kept == 1 else 'they were'} (NM025)")
    if manual:
        parts.append(f"{plural(manual, 'manual item')} to review (TODO(neuron-migrate ...) comments)")
    if errors:
        parts.append(plural(len(errors), "error"))
    return "; ".join(parts) + "."


def _codes(result: FileResult) -> str:
    counts = Counter(change.code for change in result.changes)
    return ", ".join(f"{code} x{n}" if n > 1 else code for code, n in sorted(counts.items()))


def file_status(result: FileResult) -> str:
    """Where a file stands after the rewrite, from what the rewrite produced."""
    return standings([result])[id(result)][0]


def standings(results: Sequence[FileResult]) -> dict[int, tuple[str, str]]:
    """Each result's status and why, by `id`: a file that imports a module of the same run that
    fails at start-up (a sibling that still imports the old stack) fails at start-up too."""
    found: dict[int, tuple[str, str]] = {}
    for r in results:
        if r.error:
            found[id(r)] = (REFUSED, r.error)
        elif r.kept_as_it_was:
            found[id(r)] = (KEPT, r.kept_as_it_was)
        elif _imports_old_stack_at_start(r.migrated):
            found[id(r)] = (START_UP, "old-stack imports stay until the TODOs that use them are done")
        elif r.manual:
            found[id(r)] = (AFTER_TODOS, "")
        elif not r.changed:
            found[id(r)] = (UNTOUCHED, "")
        elif r.verification is not None and r.verification.complete:
            versions = _checked_against(r)
            found[id(r)] = (CHECKED, f"checked against {versions}" if versions else "")
        else:
            found[id(r)] = (UNCHECKED, _why_unchecked(r))
    # A file that imports one that fails fails too, through any number of such imports.
    failing = {Path(r.path).with_suffix(""): r for r in results if found[id(r)][0] == START_UP}
    while failing:
        added = {}
        for r in results:
            if found[id(r)][0] in (START_UP, REFUSED):
                continue
            for module, candidates in _modules_imported_at_start(r.migrated, Path(r.path)):
                if any(candidate in failing for candidate in candidates):
                    found[id(r)] = (START_UP, f"imports `{module}`, which still imports the old stack")
                    added[Path(r.path).with_suffix("")] = r
                    break
        failing = added
    return found


def _cell_python(source: str) -> str | None:
    """A code cell as the Python the kernel runs (its commands masked); None for a cell in
    another language (`%%bash`, `%%writefile`)."""
    magic = cell_magic(source)
    return mask(source).text if magic is None or magic[0] in PYTHON_CELL_MAGICS else None


def _start_statements(text: str) -> list[ast.stmt] | None:
    """The statements that run when the file is started or imported and whose failure to import
    stops it: not those in functions, nor those of a `try` that catches `ImportError` (its
    handler runs instead). None for text that is not Python (a notebook cell with magics)."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return None
    found: list[ast.stmt] = []
    while body:
        statement, *body = body
        found.append(statement)
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            guarded = isinstance(statement, ast.Try) and any(map(_catches_import_errors, statement.handlers))
            for field in ("finalbody", "handlers") if guarded else ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list):
                    body = [*(s for h in inner for s in (h.body if isinstance(h, ast.ExceptHandler) else [h])), *body]
    return found


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        kind is None or (isinstance(kind, ast.Name) and kind.id in IMPORT_ERROR_CATCHERS) for kind in kinds
    )


IMPORT_ERROR_CATCHERS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


def _notebook_code(text: str) -> list[str] | None:
    """A notebook's code cells, or None for a script."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return None
    sources = [c.get("source", "") for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]
    return ["".join(s) if isinstance(s, list) else str(s) for s in sources]


def _imports_old_stack_at_start(text: str) -> bool:
    cells = _notebook_code(text)
    if cells is not None:  # every Python cell runs at start-up, its magics and shell lines aside
        return any(_imports_old_stack_at_start(python) for cell in cells if (python := _cell_python(cell)) is not None)
    statements = _start_statements(text)
    if statements is None:
        return bool(_OLD_IMPORT.search(text))
    roots = (*oldstack.PACKAGES, oldstack.OPTIMUM_NEURON)
    for statement in statements:
        if isinstance(statement, ast.Import):
            names = [a.name for a in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
            names = [statement.module, *(f"{statement.module}.{a.name}" for a in statement.names)]
        elif isinstance(statement, ast.Assign | ast.Expr):
            names = _imported_by_call(statement)
        else:
            continue
        if any(n == root or n.startswith(f"{root}.") for n in names for root in roots):
            return True
    return False


def _imported_by_call(statement: ast.stmt) -> list[str]:
    """The modules a statement imports by name (`importlib.import_module("torch_neuronx")`)."""
    return [
        node.args[0].value
        for node in ast.walk(statement)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in ("import_module", "__import__")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def _modules_imported_at_start(text: str, path: Path) -> list[tuple[str, list[Path]]]:
    """The modules a file imports when it starts (as written), each with the files (without
    suffix) it may be: `pkg.helper` beside the file or in a folder above; `.helper` from its
    package; a package's `__init__`."""
    found = []
    for statement in _start_statements(text) or []:
        if isinstance(statement, ast.Import):
            names = [(a.name, a.name) for a in statement.names]
            folders = [path.parent, *path.parent.parents][:LEVELS]
        elif isinstance(statement, ast.ImportFrom) and (statement.module or statement.level):
            written = "." * statement.level + (statement.module or "")
            module = statement.module or ""
            # `from pkg import helper` may import the module `pkg.helper`.
            names = [(written, module), *((written, f"{module}.{a.name}".lstrip(".")) for a in statement.names)]
            if statement.level:
                folders = [path.parents[statement.level - 1]] if statement.level <= len(path.parents) else []
            else:
                folders = [path.parent, *path.parent.parents][:LEVELS]
        else:
            continue
        for written, module in names:
            if not module:
                continue
            relative = Path(*module.split("."))
            found.append((written, [c for folder in folders for c in (folder / relative, folder / relative / "__init__")]))
    return found


def _why_unchecked(result: FileResult) -> str:
    checked = result.verification
    if checked is None:
        return "the check did not run (NM091 ignored)"
    if checked.unknown:
        return checked.unknown
    return "not installed where it was checked: " + ", ".join(checked.not_installed)


def _checked_against(result: FileResult) -> str:
    checked = result.verification
    return ", ".join(f"{name} {version}" for name, version in checked.versions.items()) if checked else ""


def as_json(results: Sequence[FileResult], target: str) -> str:
    standing = standings(results)
    files: list[dict[str, Any]] = []
    for r in results:
        files.append(
            {
                "path": r.path,
                "status": standing[id(r)][0],
                "why": standing[id(r)][1],
                "changed": r.changed,
                "error": r.error,
                "changes": [{"code": c.code, "message": c.message} for c in r.changes],
                "manual": [
                    {
                        "code": m.code,
                        "message": m.message,
                        "location": {"row": m.line, "column": m.column},
                        **({"cell": m.cell} if m.cell is not None else {}),
                    }
                    for m in r.manual
                ],
                "notes": [{"code": n.code, "message": n.message} for n in r.notes],
                "checked_against": dict(r.verification.versions) if r.verification else None,
            }
        )
    payload = {
        "tool": "neuron-migrate",
        "version": __version__,
        "target": target,
        "summary": {
            "files": len(results),
            "changed": sum(r.changed for r in results),
            "changes": sum(len(r.changes) for r in results),
            "manual": sum(len(r.manual) for r in results),
            "errors": sum(bool(r.error) for r in results),
            "status": dict(Counter(status for status, _ in standing.values())),
        },
        "files": files,
    }
    return json.dumps(payload, indent=2) + "\n"


def as_markdown(results: Sequence[FileResult], target: str) -> str:
    """The migration report: where each file stands, what to do first, the TODOs by kind."""
    out = [f"# Migration report ({target} target)", "", summary(results, applied=True), ""]
    out += _status_table(results)
    out += _do_first(results)
    out += _todos_by_kind(results)
    out += ["## Running on TorchNeuron", "", *(f"- {fact}" for fact in PLATFORM_FACTS), ""]
    changed = [r for r in results if r.changes]
    if changed:
        out += ["## Changes made", ""]
        for r in changed:
            out += [f"### `{r.path}` ({_codes(r)})", "", *(f"- {c.code}: {c.message}" for c in r.changes), ""]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _status_table(results: Sequence[FileResult]) -> list[str]:
    order = (START_UP, KEPT, REFUSED, AFTER_TODOS, UNCHECKED, CHECKED, UNTOUCHED)
    standing = standings(results)
    rows = sorted(results, key=lambda r: (order.index(standing[id(r)][0]), r.path))
    out = ["## Where each file stands", "", "| file | status | TODOs | why |", "|---|---|---|---|"]
    for r in rows:
        status, why = standing[id(r)]
        if status == UNTOUCHED:
            continue
        out.append(f"| `{r.path}` | {status} | {len(r.manual)} | {_cell(why)} |")
    untouched = sum(status == UNTOUCHED for status, _ in standing.values())
    if untouched:
        out.append(f"| ({untouched} more) | {UNTOUCHED} | 0 | |")
    out += [
        "",
        "Checked means that every import of a target library resolves and every call to one fits "
        "its installed signature; whether a program computes what the original did is for "
        "`neuron-migrate validate OLD NEW` to show.",
    ]
    return [*out, ""]


def _do_first(results: Sequence[FileResult]) -> list[str]:
    """Ranked by impact: what stops a program from starting, then what changes its numbers."""
    out: list[str] = []
    standing = standings(results)
    blocked = [r for r in results if standing[id(r)][0] == START_UP]
    if blocked:
        out += ["1. **What breaks at start-up.** These files still import the old stack, or a module "
                "that does; do their TODOs on old-stack calls first, then delete the imports:"]
        out += [f"   - `{r.path}` ({len(r.manual)} TODOs)" for r in blocked]
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        for n in r.notes:
            notes[(n.code, n.message)].append(r.path)
    if notes:
        number = 2 if out else 1
        out.append(f"{number}. **What changes numbers, precision or launch.** The rewrite "
                   "changed behaviour here on purpose; check each against the original:")
        for (code, message), paths in notes.items():
            where = ", ".join(f"`{p}`" for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            out.append(f"   - {code}: {message} ({where})")
    if not out:
        return []
    return ["## Do first", "", *out, ""]


def _todos_by_kind(results: Sequence[FileResult]) -> list[str]:
    kinds: dict[tuple[str, str], list[tuple[FileResult, ManualItem]]] = defaultdict(list)
    for r in results:
        for m in r.manual:
            kinds[(m.code, m.message)].append((r, m))
    if not kinds:
        return []
    out = ["## TODOs by kind", "", "| code | what | count | where |", "|---|---|---|---|"]
    for (code, message), items in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        link = f"[{code}]({RULES_URL.format(code=code.lower())})"
        places = [location(r, m.line, m.column, m.cell).rsplit(":", 1)[0] for r, m in items]
        where = ", ".join(f"`{p}`" for p in places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
        out.append(f"| {link} | {_cell(message)} | {len(items)} | {where} |")
    return [*out, ""]
