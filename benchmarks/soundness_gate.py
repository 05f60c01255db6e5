"""Soundness gate: `neuron-migrate rewrite` over the public old-stack corpus.

    python benchmarks/soundness_gate.py [CORPUS] [--json out.json] [-j N]

The corpus (real scripts and notebooks written for torch_xla, torch_neuronx, neuronx_distributed
and optimum-neuron) is copied to a temporary folder and migrated in place there, once per target,
through the command line only. A migration is sound when, for every file:

- refusal: input that parses (a notebook: nbformat-4 JSON) is never refused;
- gained: the output has no pyflakes-class error (undefined name, use before assignment,
  redefinition, ...) that the original did not have, compared as (class, name) multisets since
  line numbers shift;
- gained_type: on the lines the rewrite changed or added, the output has no type-checker error
  (pyrefly, run once per target over all the originals and outputs, against the packages of the
  environment that runs the gate) that the original did not have, compared as (error kind,
  message without positions) multisets. A missing import of a module that is not installed
  here (the corpus files' own sibling modules, the old stack) does not count, nor do the
  checker's blind spots on correct native code (`BLIND_SPOTS`). Without pyrefly
  this count is reported as not measured and does not fail the gate;
- non-idempotent: migrating the output again changes nothing;
- crash: no output line says "internal error".

Reported without failing the gate: silent skips (old-stack code that got neither a change, a TODO
nor a report line) and lines far from any old-stack code that the rewrite lost.
Exit status 1 if any of the five counts above is nonzero; 0 when they are all zero or when the
corpus is absent (then it says how to extract it).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import warnings
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

DEFAULT_CORPUS = Path.home() / ".cache" / "neuron-migrate" / "corpus"
EXTRACT_HINT = (
    "python3 ../shared/corpus/extract.py <fetch root> ~/.cache/neuron-migrate/corpus "
    "(see ../shared/corpus/README.md), or point NEURON_MIGRATE_CORPUS at an extracted copy"
)
TARGETS = ("portable", "neuron")
GATING = ("refusal", "gained", "gained_type", "non_idempotent", "crash")
INFORMATIONAL = ("silent_skip", "untouched")

# pyflakes messages that mean the program is wrong, not merely untidy (no unused imports etc.).
ERROR_CLASSES: frozenset[str] = frozenset(
    cls.__name__
    for cls in (
        pyflakes_messages.UndefinedName,
        pyflakes_messages.UndefinedLocal,
        pyflakes_messages.UndefinedExport,
        pyflakes_messages.RedefinedWhileUnused,
        pyflakes_messages.ImportShadowedByLoopVar,
        pyflakes_messages.ImportStarUsage,
        pyflakes_messages.ImportStarNotPermitted,
        pyflakes_messages.ReturnOutsideFunction,
        pyflakes_messages.YieldOutsideFunction,
        pyflakes_messages.ContinueOutsideLoop,
        pyflakes_messages.BreakOutsideLoop,
        pyflakes_messages.DuplicateArgument,
        pyflakes_messages.TwoStarredExpressions,
        pyflakes_messages.TooManyExpressionsInStarredAssignment,
        pyflakes_messages.LateFutureImport,
        pyflakes_messages.FutureFeatureNotDefined,
        pyflakes_messages.DefaultExceptNotLast,
        pyflakes_messages.ForwardAnnotationSyntaxError,
    )
) | {"SyntaxError"}

# Names an IPython kernel defines for every cell.
NOTEBOOK_BUILTINS = ("get_ipython", "display", "In", "Out", "exit", "quit")
# Cell magics whose body is Python run in the kernel; any other `%%` cell is not kernel Python.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3"})
WRITEFILE = re.compile(r"%%writefile(?:\s+-a)?\s+(\S+\.py)\s*$")

# Old-stack use in code, matched on the code tokens only (comments and strings dropped).
OLD_STACK_CODE = re.compile(
    r"torch_xla|optimum\s*\.\s*neuron|optimum\s+import\s+neuron|torch_neuronx"
    r"|neuronx_distributed|transformers_neuronx"
)
# A line a rewrite may legitimately touch: it mentions the old stack or its usual aliases.
OLD_STACK_LINE = re.compile(
    r"torch_xla|neuron|xla|pjrt|\b(?:xm|xmp|xr|xs|xp|xu|pl|met)\.", re.IGNORECASE
)
MANUAL_LINE = re.compile(r"^(?:cell \d+:)?\d+:\d+: NM\d+ ")


# --- comparison logic ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One pyflakes message: its class, the name it is about, and where (for the report)."""

    cls: str
    name: str
    where: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.cls, self.name)


def pyflakes_findings(text: str, builtins: Iterable[str] = (), where: str = "") -> list[Finding]:
    """The error-class pyflakes messages of `text`; a module that does not parse is one finding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None) or 0
            return [Finding("SyntaxError", "", f"{where}{line}", str(exc))]
        found = pyflakes_checker.Checker(tree, builtins=set(builtins)).messages
    return [
        Finding(
            type(message).__name__,
            str(message.message_args[0]) if message.message_args else "",
            f"{where}{message.lineno}",
            message.message % message.message_args,
        )
        for message in found
        if type(message).__name__ in ERROR_CLASSES
    ]


def pyflakes_errors(text: str, builtins: Iterable[str] = ()) -> Counter[tuple[str, str]]:
    """(message class, name) multiset of the error-class pyflakes messages of a module."""
    return Counter(finding.key for finding in pyflakes_findings(text, builtins))


def gained(
    before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]
) -> Counter[tuple[str, str]]:
    """Pairs the migrated file has more often than the original: errors the rewrite introduced."""
    return after - before


def _ipython_transform(source: str) -> str:
    """Magics and shell escapes as the equivalent `get_ipython()` calls, the way the kernel does."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: the same lines as `pass`, which is all pyflakes needs
        return _replace_magics(source)
    return TransformerManager().transform_cell(source)


def _replace_magics(source: str) -> str:
    """Fallback for `_ipython_transform`: each `!`, `%`, `x = !cmd` or `obj?` line becomes `pass`."""
    out = []
    for line in source.splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if (
            stripped.startswith(("!", "%"))
            or re.match(r"^[\w.]+\s*=\s*[!%]", stripped)
            or (stripped.endswith("?") and not stripped.startswith("#"))
        ):
            out.append(f"{indent}pass")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@dataclass
class Module:
    """One Python module inside a notebook: the kernel's code cells, or one `%%writefile x.py`."""

    name: str
    text: str
    lines: list[tuple[int, int]] = field(default_factory=list)  # (first line, cell number)
    bad_cells: list[int] = field(default_factory=list)

    def where(self, line: int) -> str:
        """`cell N:L` for a line of the module (L counted from the cell's first line)."""
        first, cell = next(((f, n) for f, n in reversed(self.lines) if f <= line), (1, 0))
        if self.name:  # a `%%writefile` body starts on the cell's second line
            return f"cell {cell}:{line + 1} ({self.name})"
        return f"cell {cell}:{line - first + 1}"


def _cell_source(cell: dict[str, object]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def notebook_modules(raw: str) -> list[Module]:
    """The kernel module (code cells joined, magics made Python) and each `%%writefile x.py` script.

    A cell that is not Python even after the IPython transforms is left out and recorded, so
    that a rewrite that breaks a cell still shows up as an error.
    """
    kernel = Module("", "")
    scripts: list[Module] = []
    chunks: list[str] = []
    line = 1
    for number, cell in enumerate(json.loads(raw).get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = _cell_source(cell)
        first, _, body = source.partition("\n")
        if first.startswith("%%"):
            written = WRITEFILE.match(first.strip())
            if written:
                scripts.append(Module(written.group(1), body, [(1, number)]))
                continue
            magic = first[2:].split(maxsplit=1)
            if not magic or magic[0] not in PYTHON_CELL_MAGICS:
                continue
            source = body
        python = _ipython_transform(source)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ast.parse(python)
            except (SyntaxError, ValueError):
                kernel.bad_cells.append(number)
                continue
        python = python if python.endswith("\n") else python + "\n"
        kernel.lines.append((line, number))
        chunks.append(python)
        line += python.count("\n")
    kernel.text = "".join(chunks)
    return [kernel, *scripts]


def notebook_python(raw: str) -> str:
    """The notebook's code cells as one module pyflakes can read (see `notebook_modules`)."""
    return notebook_modules(raw)[0].text


def file_findings(name: str, text: str) -> list[Finding]:
    """Error-class findings of a script or a notebook (every module in it, every broken cell)."""
    if not name.endswith(".ipynb"):
        return pyflakes_findings(text)
    try:
        modules = notebook_modules(text)
    except (ValueError, AttributeError):
        return [Finding("SyntaxError", "notebook", "", "not notebook JSON")]
    findings = []
    for module in modules:
        builtins = NOTEBOOK_BUILTINS if not module.name else ()
        for finding in pyflakes_findings(module.text, builtins):
            where = module.where(int(finding.where or 0))
            findings.append(Finding(finding.cls, finding.name, where, finding.text))
        findings += [
            Finding("SyntaxError", "cell", f"cell {cell}", "cell is not Python")
            for cell in module.bad_cells
        ]
    return findings


def python_texts(name: str, text: str) -> list[str]:
    """The Python a file holds: itself, or each module of a notebook."""
    if not name.endswith(".ipynb"):
        return [text]
    try:
        return [module.text for module in notebook_modules(text)]
    except (ValueError, AttributeError):
        return []


def is_valid_input(name: str, text: str) -> bool:
    """What a migration must accept: a script that parses, a notebook in nbformat 4."""
    if name.endswith(".ipynb"):
        try:
            notebook = json.loads(text)
        except ValueError:
            return False
        return (
            isinstance(notebook, dict)
            and notebook.get("nbformat") == 4
            and isinstance(notebook.get("cells"), list)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            return False
    return True


_NOT_CODE = {tokenize.COMMENT, tokenize.STRING}
_NOT_CODE |= {
    getattr(tokenize, n)
    for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
    if hasattr(tokenize, n)
}


def mentions_old_stack(python: str) -> bool:
    """Whether old-stack names appear in code, not only in comments or strings."""
    try:
        tokens = [
            token.string
            for token in tokenize.generate_tokens(io.StringIO(python).readline)
            if token.type not in _NOT_CODE
        ]
    except (tokenize.TokenError, SyntaxError):
        return bool(OLD_STACK_CODE.search(python))
    return bool(OLD_STACK_CODE.search(" ".join(tokens)))


@dataclass
class _Layout:
    """What the untouched-lines check needs to know about the original module."""

    spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    import_lines: set[int] = field(default_factory=set)
    old_names: set[str] = field(default_factory=set)


def _layout(text: str) -> _Layout:
    """Statement spans, import lines and the names that hold old-stack objects.

    A span is a line's innermost simple statement or compound-statement header. Old-stack names
    are those bound by old-stack imports, plus (one step) the targets of assignments from them.
    """
    layout = _Layout()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return layout
    assignments = []
    for node in ast.walk(tree):  # outer statements first, so inner ones overwrite them
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        body = getattr(node, "body", None)
        last = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno or first
        for line in range(first, max(first, last) + 1):
            layout.spans[line] = (first, max(first, last))
        if isinstance(node, ast.Import | ast.ImportFrom):
            layout.import_lines.update(range(first, (node.end_lineno or first) + 1))
            for alias in node.names:
                if isinstance(node, ast.ImportFrom):
                    spelled, bound = f"{node.module or ''} import {alias.name}", alias.name
                else:
                    spelled, bound = alias.name, alias.name.split(".")[0]
                if OLD_STACK_CODE.match(spelled):
                    layout.old_names.add(alias.asname or bound)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value:
            assignments.append(node)
    for node in assignments:
        if any(isinstance(n, ast.Name) and n.id in layout.old_names for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            layout.old_names.update(
                n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)
            )
    return layout


def untouched_violations(original: str, migrated: str) -> list[str]:
    """Original lines far from any old-stack code that are gone from the output.

    A changed region is excused when the statements it touches, or the line on either side,
    mention the old stack (its modules, usual aliases, or names bound from it); a line that still
    appears anywhere in the output is not lost. Import lines are left to pyflakes: the rewrite
    owns them, and a wrong one shows up as an undefined name.
    """
    before, after = original.splitlines(), migrated.splitlines()
    kept = set(after)
    layout = _layout(original)

    def old_stack(line: str) -> bool:
        return bool(OLD_STACK_LINE.search(line)) or not layout.old_names.isdisjoint(
            re.findall(r"\w+", line)
        )

    lost = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("equal", "insert"):
            continue
        first, last = i1 + 1, i2  # 1-based, inclusive
        for line in range(i1 + 1, i2 + 1):
            span = layout.spans.get(line, (line, line))
            first, last = min(first, span[0]), max(last, span[1])
        if any(old_stack(line) for line in before[max(0, first - 2) : last + 1]):
            continue
        lost += [
            line
            for number, line in enumerate(before[i1:i2], start=i1 + 1)
            if line.strip() and line not in kept and number not in layout.import_lines
        ]
    return lost


# --- the type checker ---------------------------------------------------------------------------

TYPE_CHECKER = "pyrefly"
# Checked files see the environment's packages and nothing else: not each other (the two folders
# hold the same names), not the temporary folder, not a config or a module above it.
TYPE_CHECKER_CONFIG = """\
search-path = []
disable-search-path-heuristics = true
"""
# What the kernel defines for a notebook's code, as the first line of its kernel module.
NOTEBOOK_PRELUDE = (
    "from typing import Any as _Any; "
    + "; ".join(f"{name}: _Any = None" for name in ("get_ipython", "display", "In", "Out"))
    + "\n"
)
# Positions in a message: `line 12`, `column 3`, `12:3`.
_POSITION = re.compile(r"\b(?:line|column|col)s?\s+\d+|\b\d+:\d+(?::\d+)?\b")
# The module a missing-import or missing-module-attribute error is about.
_IMPORT_MESSAGE = re.compile(
    r"^(?:Cannot find module|Could not resolve relative import) `([^`]*)`"
    r"|^Could not import `[^`]*` from `([^`]*)`"
)


@dataclass(frozen=True)
class TypeFinding:
    """One type-checker error: its kind, its message without positions, and its line."""

    name: str
    description: str
    line: int
    text: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.description)


def type_checker_command() -> str | None:
    """The `pyrefly` next to this interpreter, else the one on PATH, else None."""
    here = Path(sys.executable).parent / TYPE_CHECKER
    return str(here) if here.exists() else shutil.which(TYPE_CHECKER)


def type_checker_version(command: str) -> str:
    done = subprocess.run([command, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or TYPE_CHECKER


def strip_positions(description: str, root: str = "") -> str:
    """A message without what depends on where the code is: line and column numbers, paths."""
    if root:
        description = re.sub(re.escape(root) + r"[^\s`'\"]*", "<file>", description)
    return " ".join(_POSITION.sub("", description).split())


def _lines(text: str) -> list[str]:
    """A module's lines as Python (and the type checker) number them."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def changed_lines(original: str, migrated: str) -> set[int]:
    """Lines (1-based) of `migrated` that the rewrite changed or added: not equal in alignment."""
    matcher = difflib.SequenceMatcher(None, _lines(original), _lines(migrated), autojunk=False)
    return {
        line + 1
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
        for line in range(j1, j2)
    }


def gained_types(
    original: str, migrated: str, before: list[TypeFinding], after: list[TypeFinding]
) -> list[TypeFinding]:
    """The errors of `migrated` on changed lines that no error of `original` accounts for.

    Errors on unchanged lines match the original's first (they are the same code); each error on
    a changed line then takes one remaining original error of the same key, or is gained.
    """
    changed = changed_lines(original, migrated)
    remaining = Counter(finding.key for finding in before)
    for finding in after:
        if finding.line not in changed and remaining[finding.key] > 0:
            remaining[finding.key] -= 1
    found = []
    for finding in sorted(after, key=lambda f: f.line):
        if finding.line not in changed:
            continue
        if remaining[finding.key] > 0:
            remaining[finding.key] -= 1
        else:
            found.append(finding)
    return found


def installed_modules(modules: Iterable[str]) -> set[str]:
    """Which of these modules have a top-level package the native environment (this interpreter,
    without the gate's own folder or the working directory on its path) can import."""
    modules = list(modules)
    tops = sorted({m.split(".")[0] for m in modules if m and not m.startswith(".")})
    if not tops:
        return set()
    probe = (
        "import importlib.util, json, sys\n"
        "def found(name):\n"
        "    try:\n"
        "        return importlib.util.find_spec(name) is not None\n"
        "    except (ImportError, ValueError):\n"
        "        return False\n"
        "print(json.dumps([n for n in json.load(sys.stdin) if found(n)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        input=json.dumps(tops),
        capture_output=True,
        text=True,
        check=True,
    )
    installed = set(json.loads(done.stdout))
    return {m for m in modules if m.split(".")[0] in installed}


def _not_installed_import(error: dict[str, object], installed: set[str]) -> bool:
    """An unresolved import of a module that is not installed: a sibling module, the old stack."""
    if error.get("name") not in ("missing-import", "missing-module-attribute"):
        return False
    match = _IMPORT_MESSAGE.match(str(error.get("concise_description", "")))
    if not match:
        return False
    module = match.group(1) if match.group(1) is not None else match.group(2)
    return module not in installed


# What the type checker gets wrong on correct native code, checked by hand on the corpus outputs:
# transformers' `PreTrainedModel.to` is wrapped (`functools.wraps`), so `model.to(device)` reads
# as a call of the wrapper with `device` as `self`; and `torch.compile(module)` is typed as
# returning a function, so the compiled module's `.to()` or `._orig_mod` read as missing.
BLIND_SPOTS = (
    ("bad-argument-type", re.compile(r"to parameter `self` with type `\w+` in function `functools\._Wrapped\.__call__`")),
    ("missing-attribute", re.compile(r"^Object of class `FunctionType` has no attribute `(?:to|_orig_mod|eval|train)`")),
)


def checker_blind_spot(error: dict[str, object]) -> bool:
    """An error the type checker reports on correct code (`BLIND_SPOTS`)."""
    text = str(error.get("concise_description", ""))
    return any(error.get("name") == name and pattern.search(text) for name, pattern in BLIND_SPOTS)


def _file_name(label: str, used: set[str]) -> str:
    """A file name for a module: the script's or notebook's stem, made unique."""
    stem = re.sub(r"\.(?:py|ipynb)$", "", label.replace(":", "__"))
    stem = re.sub(r"[^\w-]", "_", stem) or "module"
    name, number = f"{stem}.py", 1
    while name in used:
        number += 1
        name = f"{stem}__{number}.py"
    used.add(name)
    return name


def type_check(texts: dict[str, str], command: str, jobs: int = 2) -> dict[str, list[TypeFinding]]:
    """One type-checker run over every module (relative path -> text): its errors, per path.

    Only errors, not warnings; an unresolved import of a module that is not installed is dropped.
    """
    root = Path(tempfile.mkdtemp(prefix="soundness-types-"))
    try:
        (root / "pyrefly.toml").write_text(TYPE_CHECKER_CONFIG)
        for path, text in texts.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text, encoding="utf-8")
        args = ["--config", "pyrefly.toml", "--python-interpreter-path", sys.executable]
        args += ["--output-format", "json", "--summary=none", "--threads", str(max(1, jobs))]
        done = subprocess.run(
            [command, "check", *sorted(texts), *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            errors = json.loads(done.stdout)["errors"] if done.returncode in (0, 1) else None
        except (ValueError, KeyError):
            errors = None
        if errors is None:
            raise RuntimeError(
                f"{command} check failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
            )
        errors = [e for e in errors if e.get("severity") == "error"]
        imports = [_IMPORT_MESSAGE.match(str(e.get("concise_description", ""))) for e in errors]
        installed = installed_modules(
            m.group(1) if m.group(1) is not None else m.group(2) for m in imports if m
        )
        found: dict[str, list[TypeFinding]] = {path: [] for path in texts}
        for error in errors:
            if _not_installed_import(error, installed) or checker_blind_spot(error):
                continue
            path = os.path.relpath(root / str(error["path"]), root)
            text = str(error.get("concise_description") or error.get("description", ""))
            finding = TypeFinding(
                str(error["name"]), strip_positions(text, str(root)), int(error["line"]), text
            )
            found.setdefault(path, []).append(finding)
        return found
    finally:
        shutil.rmtree(root, ignore_errors=True)


def type_check_pairs(
    pairs: dict[str, tuple[str, str]], command: str, jobs: int = 2
) -> dict[str, list[TypeFinding]]:
    """Per label, the type errors the migrated text gained over the original (`gained_types`).

    The originals and the outputs go to two folders, `original/` and `migrated/`, under the same
    names, and are checked in one run.
    """
    used: set[str] = set()
    files = {label: _file_name(label, used) for label in pairs}
    texts = {f"original/{files[label]}": pair[0] for label, pair in pairs.items()}
    texts |= {f"migrated/{files[label]}": pair[1] for label, pair in pairs.items()}
    found = type_check(texts, command, jobs)
    return {
        label: gained_types(
            original,
            migrated,
            found.get(f"original/{files[label]}", []),
            found.get(f"migrated/{files[label]}", []),
        )
        for label, (original, migrated) in pairs.items()
    }


def _typed_modules(name: str, text: str) -> list[tuple[str, str, Module | None]]:
    """A file's modules as the type checker reads them: (label, text, the notebook module)."""
    if not name.endswith(".ipynb"):
        return [(name, text, None)]
    try:
        modules = notebook_modules(text)
    except (ValueError, AttributeError):
        return []
    return [
        (
            f"{name}:{module.name}" if module.name else name,
            module.text if module.name else NOTEBOOK_PRELUDE + module.text,
            module,
        )
        for module in modules
    ]


def type_gains(
    originals: dict[str, bytes], outputs: dict[str, bytes], command: str, jobs: int = 2
) -> dict[str, list[str]]:
    """Per corpus file of one target, the type errors its output gained, as report lines."""
    pairs: dict[str, tuple[str, str]] = {}
    modules: dict[str, tuple[str, Module | None]] = {}
    for name, original in originals.items():
        text = _decode(original)
        if outputs[name] == original or not is_valid_input(name, text):
            continue
        before = _typed_modules(name, text)
        after = _typed_modules(name, _decode(outputs[name]))
        if len(before) != len(after):  # a rewrite that broke the notebook: pyflakes says so
            continue
        for (label, old, _), (_, new, module) in zip(before, after, strict=True):
            pairs[label] = (old, new)
            modules[label] = (name, module)
    gains: dict[str, list[str]] = {}
    for label, found in type_check_pairs(pairs, command, jobs).items():
        name, module = modules[label]
        for finding in found:
            if module is None:
                where = str(finding.line)
            else:
                offset = 0 if module.name else NOTEBOOK_PRELUDE.count("\n")
                where = module.where(finding.line - offset)
            gains.setdefault(name, []).append(f"{finding.name} at {where}: {finding.text}")
    return gains


# --- running the command line -------------------------------------------------------------------


@dataclass
class RunLog:
    """What one `rewrite` run said, per file."""

    returncode: int
    seconds: float
    errors: dict[str, list[str]] = field(default_factory=dict)
    manual: Counter[str] = field(default_factory=Counter)
    diffs: dict[str, list[str]] = field(default_factory=dict)
    crashes: list[str] = field(default_factory=list)  # lines with "internal error" and no file


def _file_of(rest: str, names: frozenset[str]) -> tuple[str, str] | None:
    """Split `NAME:message` (NAME one of the corpus files) into its two parts."""
    name, sep, message = rest.partition(":")
    if sep and name in names:
        return name, message
    for candidate in sorted(names, key=len, reverse=True):
        if rest.startswith(candidate + ":"):
            return candidate, rest[len(candidate) + 1 :]
    return None


def parse_output(stdout: str, stderr: str, names: frozenset[str], folder: str) -> RunLog:
    """Sort a run's lines into per-file errors, TODO/report lines and diffs."""
    log = RunLog(0, 0.0)
    prefix = folder + "/"
    records: list[str] = []
    for line in stderr.splitlines():
        if (
            line.startswith((prefix, f"note: {prefix}", "Migrated ", "Would migrate "))
            or not records
        ):
            records.append(line)
        else:  # a message that spans lines (an internal error quoting code)
            records[-1] += "\n" + line
    for record in records:
        note = record.startswith("note: ")
        rest = record.removeprefix("note: ")
        located = _file_of(rest[len(prefix) :], names) if rest.startswith(prefix) else None
        if located is None:
            if "internal error" in record:
                log.crashes.append(record)
            continue
        name, message = located
        if note or MANUAL_LINE.match(message.lstrip()):
            log.manual[name] += 1
        else:
            log.errors.setdefault(name, []).append(message.strip())
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith(f"--- a/{prefix}"):
            located = _file_of(line[len(f"--- a/{prefix}") :] + ":", names)
            current = log.diffs.setdefault(located[0], []) if located else None
        elif current is not None:
            current.append(line)
        elif "internal error" in line:
            log.crashes.append(line)
    return log


def rewrite_command() -> list[str]:
    """The `neuron-migrate` next to this interpreter, else the one on PATH."""
    here = Path(sys.executable).parent / "neuron-migrate"
    found = str(here) if here.exists() else shutil.which("neuron-migrate")
    if not found:
        raise SystemExit("neuron-migrate is not installed in this environment")
    return [found, "rewrite"]


def run_rewrite(workdir: Path, args: list[str], names: frozenset[str]) -> RunLog:
    """One `neuron-migrate rewrite corpus ...` in `workdir`, its output parsed."""
    start = time.perf_counter()
    done = subprocess.run(
        [*rewrite_command(), "corpus", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    log = parse_output(done.stdout, done.stderr, names, "corpus")
    log.returncode, log.seconds = done.returncode, time.perf_counter() - start
    return log


def migrate(
    corpus: Path, target: str, jobs: int, names: frozenset[str]
) -> tuple[dict[str, bytes], RunLog, RunLog]:
    """Migrate a copy of the corpus in place, then diff a second run: outputs and both logs."""
    workdir = Path(tempfile.mkdtemp(prefix=f"soundness-{target}-"))
    try:
        shutil.copytree(corpus, workdir / "corpus")
        flags = ["-j", str(jobs), "--target", target]
        first = run_rewrite(workdir, flags, names)
        outputs = {name: (workdir / "corpus" / name).read_bytes() for name in names}
        second = run_rewrite(workdir, [*flags, "--diff"], names)
        return outputs, first, second
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- judging ------------------------------------------------------------------------------------


@dataclass
class Failure:
    """One file failing one check for one target."""

    target: str
    category: str
    file: str
    details: list[str]


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass
class FileResult:
    """What the analysis of one file found for one target."""

    valid: bool
    uses_old_stack: bool
    changed: bool
    gained: list[str] = field(default_factory=list)
    untouched: list[str] = field(default_factory=list)


def analyze(name: str, original: bytes, migrated: dict[str, bytes]) -> dict[str, FileResult]:
    """Per target: the pyflakes errors gained and the unrelated lines lost by the rewrite."""
    text = _decode(original)
    valid = is_valid_input(name, text)
    before = Counter(finding.key for finding in file_findings(name, text)) if valid else Counter()
    before_python = python_texts(name, text) if valid else []
    uses_old_stack = any(mentions_old_stack(python) for python in before_python)
    results = {}
    for target, data in migrated.items():
        result = FileResult(valid, uses_old_stack, data != original)
        results[target] = result
        if not (valid and result.changed):
            continue
        after_text = _decode(data)
        after_findings = file_findings(name, after_text)
        extra = gained(before, Counter(finding.key for finding in after_findings))
        for finding in after_findings:
            if extra[finding.key] > 0:
                extra[finding.key] -= 1
                result.gained.append(
                    f"{finding.cls} {finding.name!r} at {finding.where}: {finding.text}"
                )
        after_python = python_texts(name, after_text)
        if len(after_python) == len(before_python):
            for old, new in zip(before_python, after_python, strict=True):
                result.untouched += untouched_violations(old, new)
    return results


def _analyze_item(item: tuple[str, bytes, dict[str, bytes]]) -> tuple[str, dict[str, FileResult]]:
    return item[0], analyze(*item)


def _diff_summary(lines: list[str], limit: int = 4) -> str:
    changed = [line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return " | ".join(line[:160] for line in changed[:limit])


def judge(
    target: str,
    analysis: dict[str, dict[str, FileResult]],
    first: RunLog,
    second: RunLog,
    typed: dict[str, list[str]] | None = None,
) -> list[Failure]:
    """Every failure of one target, from the file analyses, the two runs' logs and the type
    errors its outputs gained (`type_gains`; None when not measured)."""
    failures = []
    for name in sorted(analysis):
        entry = analysis[name][target]
        errors = first.errors.get(name, [])
        crashed = [e for e in errors if "internal error" in e]
        if not errors:  # a file the first run refused is refused again: say it once
            crashed += [e for e in second.errors.get(name, []) if "internal error" in e]
        if crashed:
            failures.append(
                Failure(target, "crash", name, [e.splitlines()[0][:300] for e in crashed])
            )
        refused = [e for e in errors if "internal error" not in e]
        if refused and entry.valid:
            failures.append(Failure(target, "refusal", name, refused))
        if entry.gained:
            failures.append(Failure(target, "gained", name, list(entry.gained)))
        if typed and typed.get(name):
            failures.append(Failure(target, "gained_type", name, list(typed[name])))
        if not errors:
            again = [e for e in second.errors.get(name, []) if "internal error" not in e]
            if name in second.diffs or again:
                details = [f"second run refused the output: {e}" for e in again]
                if name in second.diffs:
                    details.append("second run changes: " + _diff_summary(second.diffs[name]))
                failures.append(Failure(target, "non_idempotent", name, details))
        if (
            entry.valid
            and entry.uses_old_stack
            and not errors
            and not entry.changed
            and not first.manual[name]
        ):
            failures.append(
                Failure(target, "silent_skip", name, ["old-stack code, no change, no TODO"])
            )
        if entry.untouched:
            lost = [repr(line.strip())[:120] for line in entry.untouched]
            failures.append(
                Failure(
                    target, "untouched", name, [f"{len(lost)} lines lost: " + ", ".join(lost[:3])]
                )
            )
    failures += [
        Failure(target, "crash", "?", [line.splitlines()[0][:300]])
        for line in first.crashes + second.crashes
    ]
    return failures


@dataclass
class Report:
    corpus: str
    files: int
    seconds: float
    counts: dict[str, dict[str, int | None]]  # None: not measured (no type checker)
    runs: dict[str, dict[str, float]]
    failures: list[Failure]
    type_checker: str | None = None  # its name and version; None when it is not installed


def run_gate(corpus: Path, jobs: int = 2, targets: tuple[str, ...] = TARGETS) -> Report:
    """Migrate the corpus for each target (concurrently), analyze every file, collect failures."""
    start = time.perf_counter()
    files = sorted(p for p in corpus.iterdir() if p.is_file() and p.suffix in (".py", ".ipynb"))
    names = frozenset(p.name for p in files)
    per_run = max(1, jobs // len(targets))
    with ThreadPoolExecutor(len(targets)) as threads:
        runs = dict(
            zip(
                targets,
                threads.map(lambda t: migrate(corpus, t, per_run, names), targets),
                strict=True,
            )
        )
    originals = {p.name: p.read_bytes() for p in files}
    items = [(p.name, originals[p.name], {t: runs[t][0][p.name] for t in targets}) for p in files]
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        analysis = dict(pool.map(_analyze_item, items, chunksize=8))
    timing = {
        t: {"rewrite_s": round(runs[t][1].seconds, 1), "second_run_s": round(runs[t][2].seconds, 1)}
        for t in targets
    }
    checker = type_checker_command()
    typed: dict[str, dict[str, list[str]] | None] = dict.fromkeys(targets)
    for t in targets:
        if checker:
            started = time.perf_counter()
            typed[t] = type_gains(originals, runs[t][0], checker, jobs)
            timing[t]["type_check_s"] = round(time.perf_counter() - started, 1)
    failures = [f for t in targets for f in judge(t, analysis, runs[t][1], runs[t][2], typed[t])]
    counts: dict[str, dict[str, int | None]] = {
        t: {
            c: len({f.file for f in failures if f.target == t and f.category == c})
            if c != "gained_type" or typed[t] is not None
            else None
            for c in GATING + INFORMATIONAL
        }
        for t in targets
    }
    return Report(
        str(corpus),
        len(files),
        round(time.perf_counter() - start, 1),
        counts,
        timing,
        failures,
        type_checker_version(checker) if checker else None,
    )


def format_report(report: Report) -> str:
    """Counts per target and category, then one line per failing file."""
    out = [f"soundness gate: {report.files} files of {report.corpus} in {report.seconds:.0f} s"]
    if report.type_checker:
        out.append(f"type checker: {report.type_checker}")
    for target, counts in report.counts.items():
        times = report.runs[target]
        typing = (
            f", {TYPE_CHECKER} {times['type_check_s']:.0f} s" if "type_check_s" in times else ""
        )
        out.append(
            f"target {target} (rewrite {times['rewrite_s']:.0f} s, second run "
            f"{times['second_run_s']:.0f} s{typing}):"
        )
        out += [
            f"  {c:15} {counts[c]}"
            if counts[c] is not None
            else f"  {c:15} not measured ({TYPE_CHECKER} is not installed)"
            for c in GATING
        ]
        out += [f"  {c:15} {counts[c]}  (informational)" for c in INFORMATIONAL]
    order = {c: i for i, c in enumerate(GATING + INFORMATIONAL)}
    for failure in sorted(report.failures, key=lambda f: (order[f.category], f.file, f.target)):
        detail = "; ".join(d.replace("\n", " ") for d in failure.details[:5])
        more = f" (+{len(failure.details) - 5} more)" if len(failure.details) > 5 else ""
        out.append(f"{failure.category} [{failure.target}] {failure.file}: {detail}{more}")
    return "\n".join(out)


def corpus_path(arg: Path | None) -> Path:
    if arg is not None:
        return arg
    env = os.environ.get("NEURON_MIGRATE_CORPUS")
    return Path(env).expanduser() if env else DEFAULT_CORPUS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "corpus",
        nargs="?",
        type=Path,
        help="default: $NEURON_MIGRATE_CORPUS or " + str(DEFAULT_CORPUS),
    )
    parser.add_argument("-j", "--jobs", type=int, default=2, help="processes in all (default 2)")
    parser.add_argument("--target", choices=(*TARGETS, "both"), default="both")
    parser.add_argument("--json", type=Path, help="write the counts and failures here")
    args = parser.parse_args(argv)
    corpus = corpus_path(args.corpus)
    if not corpus.is_dir() or not any(corpus.iterdir()):
        print(f"soundness gate skipped: no corpus at {corpus}. Extract it with {EXTRACT_HINT}.")
        return 0
    targets = TARGETS if args.target == "both" else (args.target,)
    report = run_gate(corpus, args.jobs, targets)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    return 1 if any(report.counts[t][c] for t in targets for c in GATING) else 0


if __name__ == "__main__":
    sys.exit(main())
