"""Notebooks as input: migrate the code cells of an `.ipynb`, touch no other byte of the JSON.

The code cells are joined into one module (so an import in cell 1 and its use in cell 5 are
seen together), separated by marker comments; IPython magics and shell lines are masked with
placeholders that are valid Python and restored byte for byte. `%%writefile x.py` cells are
migrated as files of their own; cells in other languages (`%%bash`, `%%html`, ...) are left
alone. Writing replaces only the `source` values of the cells that changed, in the notebook's
own layout (indentation, key order, escaping, ids, outputs and metadata stay as they were).
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]

from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.results import Change, FileResult, ManualItem, Note
from neuron_migrate.rewrite.shell import rewrite_shell_line

PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})
_MAGIC_LINE = re.compile(r"^\s*(?:!(?!=)|%(?!=)|\w+\s*=\s*[!%](?!=))|^[^#]*\?\s*$")


class NotebookError(Exception):
    """A notebook that cannot be migrated safely; one line, with the path."""


# -- locating `source` values in the raw JSON ----------------------------------------------------

_WS = re.compile(r"\s*")
_LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


@dataclass
class _Span:
    start: int
    end: int


@dataclass
class _Cell:
    index: int
    cell_type: str
    source: str
    span: _Span
    language: str | None = None
    fields: dict[str, _Span] = field(default_factory=dict)


def _skip_ws(raw: str, i: int) -> int:
    return _WS.match(raw, i).end()  # type: ignore[union-attr]


def _scan(raw: str, i: int, want_keys: bool = False) -> tuple[int, dict[str, _Span]]:
    """Skip one JSON value starting at `i`; for an object, return the spans of its values."""
    i = _skip_ws(raw, i)
    ch = raw[i]
    keys: dict[str, _Span] = {}
    if ch == '"':
        return scanstring(raw, i + 1)[1], keys
    if ch == "{":
        i = _skip_ws(raw, i + 1)
        if raw[i] == "}":
            return i + 1, keys
        while True:
            key, i = scanstring(raw, _skip_ws(raw, i) + 1)
            i = _skip_ws(raw, i)
            assert raw[i] == ":"
            start = _skip_ws(raw, i + 1)
            i, _ = _scan(raw, start)
            if want_keys:
                keys[key] = _Span(start, i)
            i = _skip_ws(raw, i)
            if raw[i] == "}":
                return i + 1, keys
            i += 1  # ","
    if ch == "[":
        i = _skip_ws(raw, i + 1)
        if raw[i] == "]":
            return i + 1, keys
        while True:
            i, _ = _scan(raw, i)
            i = _skip_ws(raw, i)
            if raw[i] == "]":
                return i + 1, keys
            i += 1
    match = _LITERAL.match(raw, i)
    if match is None:
        raise ValueError(f"unexpected {ch!r} at offset {i}")
    return match.end(), keys


def _cells(raw: str, notebook: dict) -> list[_Cell]:
    _, top = _scan(raw, 0, want_keys=True)
    cells_span = top["cells"]
    cells = []
    i = _skip_ws(raw, cells_span.start + 1)
    index = 0
    while raw[i] != "]":
        end, keys = _scan(raw, i, want_keys=True)
        data = notebook["cells"][index]
        source = data.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        language = (data.get("metadata") or {}).get("vscode", {}).get("languageId")
        cells.append(_Cell(index, data.get("cell_type", ""), text, keys["source"], language, keys))
        index += 1
        i = _skip_ws(raw, end)
        if raw[i] == ",":
            i = _skip_ws(raw, i + 1)
    return cells


def _encode_source(raw: str, span: _Span, text: str, ensure_ascii: bool) -> str:
    """The new `source` value, laid out as the old one was (a list of lines, or one string)."""
    old = raw[span.start : span.end]
    if old.startswith('"'):
        return json.dumps(text, ensure_ascii=ensure_ascii)
    lines = text.splitlines(keepends=True)
    if not lines:
        return "[]"
    inner = old[1:-1]
    if inner.strip():
        lead = inner[: len(inner) - len(inner.lstrip())]
        trail = inner[len(inner.rstrip()) :]
    else:  # was an empty list: indent one step deeper than the key's line
        line_start = raw.rfind("\n", 0, span.start) + 1
        indent = raw[line_start : line_start + len(raw[line_start:]) - len(raw[line_start:].lstrip())]
        step = " " if indent == " " * len(indent) and len(indent) % 2 else "  "
        lead, trail = "\n" + indent + step, "\n" + indent
    separator = "," + lead if "\n" in lead else ", "
    return "[" + lead + separator.join(json.dumps(line, ensure_ascii=ensure_ascii) for line in lines) + trail + "]"


# -- masking magics ------------------------------------------------------------------------------


@dataclass
class _Masked:
    text: str
    restore: dict[str, str]


def _mask(text: str, token: str, counter: list[int]) -> _Masked:
    try:
        ast.parse(text)
        return _Masked(text, {})  # plain Python: nothing to mask
    except SyntaxError:
        pass
    except (ValueError, RecursionError):
        return _Masked(text, {})
    lines = text.split("\n")
    restore: dict[str, str] = {}
    out = []
    continued = False
    for line in lines:
        if continued or _MAGIC_LINE.search(line):
            counter[0] += 1
            indent = line[: len(line) - len(line.lstrip())]
            placeholder = f"_nm_magic_{token}_{counter[0]}"
            restore[placeholder] = line.strip("\r")[len(indent) :]
            out.append(f"{indent}{placeholder}" + ("\r" if line.endswith("\r") else ""))
            continued = line.rstrip("\r").endswith("\\")
        else:
            out.append(line)
            continued = False
    return _Masked("\n".join(out), restore)


def _unmask(text: str, restore: dict[str, str]) -> str:
    if not restore:
        return text
    pattern = re.compile("|".join(re.escape(k) for k in sorted(restore, key=len, reverse=True)))
    return pattern.sub(lambda m: restore[m.group(0)], text)


def _cell_magic(source: str) -> tuple[str, str] | None:
    """`(name, rest of the first line)` when the cell starts with a `%%` magic."""
    for line in source.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("%%"):
            name, _, rest = stripped[2:].partition(" ")
            return name, rest.strip()
        return None
    return None


# -- the rewrite ---------------------------------------------------------------------------------


@dataclass
class NotebookResult:
    result: FileResult
    cells: list[tuple[int, str, str]] = field(default_factory=list)  # (index, old, new) changed cells


def rewrite_notebook(raw: str, path: str, options: Options, clear_outputs: bool = False) -> NotebookResult:
    """Migrate the Python in a notebook; errors come back in the result, never as exceptions."""
    result = FileResult(path=path, original=raw, migrated=raw)
    try:
        notebook = json.loads(raw)
    except json.JSONDecodeError as exc:
        result.error = f"{path}:{exc.lineno}:{exc.colno}: not a valid notebook (invalid JSON: {exc.msg})"
        return NotebookResult(result)
    if not isinstance(notebook, dict) or "cells" not in notebook:
        result.error = f"{path}:1:1: not a notebook (no 'cells')"
        return NotebookResult(result)
    if notebook.get("nbformat") != 4:
        result.error = f"{path}:1:1: nbformat {notebook.get('nbformat')} is not supported (only nbformat 4); convert it with `jupyter nbconvert --to notebook`"
        return NotebookResult(result)
    language = ((notebook.get("metadata") or {}).get("kernelspec") or {}).get("language", "python")
    if str(language).lower() != "python":
        result.skipped = True
        return NotebookResult(result)
    try:
        cells = _cells(raw, notebook)
    except (ValueError, KeyError, IndexError, AssertionError) as exc:
        result.error = f"{path}:1:1: cannot locate the cell sources: {exc}"
        return NotebookResult(result)

    token = secrets.token_hex(4)
    while token in raw:
        token = secrets.token_hex(4)
    counter = [0]
    joined: list[tuple[_Cell, _Masked]] = []
    new_sources: dict[int, str] = {}
    for cell in cells:
        if cell.cell_type != "code" or (cell.language not in (None, "python")):
            continue
        magic = _cell_magic(cell.source)
        if magic is None or magic[0] in PYTHON_CELL_MAGICS:
            joined.append((cell, _mask(cell.source, token, counter)))
        elif magic[0] == "writefile" and magic[1].split()[-1:] and magic[1].split()[-1].endswith(".py"):
            _writefile_cell(cell, path, options, result, new_sources)

    if joined:
        marker = f"# neuron-migrate-cell-{token}"
        module = "".join(f"{marker}\n{masked.text}\n" for _, masked in joined)
        sub = rewrite_source(module, path, options)
        if sub.error:
            result.error = _cell_position(sub.error, path, module, marker, joined)
            return NotebookResult(result)
        parts = sub.migrated.split(f"{marker}\n")
        if len(parts) != len(joined) + 1 or parts[0].strip():
            result.error = f"{path}:1:1: internal error: cell boundaries were not preserved; notebook left unchanged"
            return NotebookResult(result)
        restore = {k: v for _, masked in joined for k, v in masked.restore.items()}
        _rewrite_shell_lines(restore, options, result)
        for (cell, _masked), text in zip(joined, parts[1:], strict=True):
            text = text[:-1] if text.endswith("\n") else text
            new = _unmask(text, restore)
            if new != cell.source:
                new_sources[cell.index] = new
        result.changes.extend(sub.changes)
        result.notes.extend(sub.notes)
        result.manual.extend(_locate(sub.manual, sub.migrated, marker, joined))

    if not new_sources:
        return NotebookResult(result)
    ensure_ascii = not any(ord(ch) > 127 for ch in raw)
    pieces = []
    last = 0
    changed = []
    for cell in cells:
        if cell.index not in new_sources:
            continue
        edits = {"source": _encode_source(raw, cell.span, new_sources[cell.index], ensure_ascii)}
        if clear_outputs:
            # The outputs came from the old code: drop them, as `jupyter nbconvert --clear-output`.
            edits.update({"outputs": "[]", "execution_count": "null"})
        for key, span in sorted(cell.fields.items(), key=lambda kv: kv[1].start):
            if key in edits and (key != "outputs" or raw[span.start : span.end] != "[]"):
                pieces.append(raw[last : span.start])
                pieces.append(edits[key])
                last = span.end
        changed.append((cell.index, cell.source, new_sources[cell.index]))
    pieces.append(raw[last:])
    result.migrated = "".join(pieces)
    try:
        json.loads(result.migrated)
    except json.JSONDecodeError as exc:
        result.error = f"{path}:1:1: internal error: migrated notebook is not valid JSON ({exc.msg}); left unchanged"
        result.migrated = raw
        return NotebookResult(result)
    return NotebookResult(result, changed)


def _rewrite_shell_lines(restore: dict[str, str], options: Options, result: FileResult) -> None:
    """`!`/`%env` lines that configure or launch old-stack work (see neuron_migrate.rewrite.shell)."""
    for placeholder, line in restore.items():
        rewrite = rewrite_shell_line(line)
        if rewrite is None:
            continue
        if not options.enabled(rewrite.code):
            continue
        restore[placeholder] = rewrite.line
        result.changes.append(Change(rewrite.code, rewrite.message))
        if rewrite.precision:
            note = Note(
                "NM009",
                "precision policy changed: an XLA bf16 switch was removed from a shell line; "
                "set the dtype in the training code (`torch.set_default_dtype` or `torch.autocast`)",
            )
            if note not in result.notes:
                result.notes.append(note)


def _writefile_cell(cell: _Cell, path: str, options: Options, result: FileResult, out: dict[int, str]) -> None:
    header, _, body = cell.source.partition("\n")
    sub = rewrite_source(body, f"{path}:cell {cell.index + 1}", options)
    if sub.error:
        result.error = sub.error
        return
    if sub.migrated != body:
        out[cell.index] = f"{header}\n{sub.migrated}"
    result.changes.extend(sub.changes)
    result.notes.extend(sub.notes)
    result.manual.extend(
        ManualItem(m.code, m.message, m.line + 1, m.column, cell=cell.index + 1) for m in sub.manual
    )


def _cell_lines(text: str, marker: str) -> list[tuple[int, int]]:
    """For each line of the joined module: (position of its cell among the joined ones, line in cell)."""
    mapping: list[tuple[int, int]] = []
    cell, line = -1, 0
    for row in text.split("\n"):
        if row == marker:
            cell, line = cell + 1, 0
            mapping.append((cell, 0))
            continue
        line += 1
        mapping.append((cell, line))
    return mapping


def _locate(items: list[ManualItem], text: str, marker: str, joined: list[tuple[_Cell, _Masked]]) -> list[ManualItem]:
    mapping = _cell_lines(text, marker)
    located = []
    for item in items:
        position, line = mapping[item.line - 1] if 0 < item.line <= len(mapping) else (0, item.line)
        index = joined[max(position, 0)][0].index
        located.append(ManualItem(item.code, item.message, line, item.column, cell=index + 1))
    return located


def _cell_position(error: str, path: str, module: str, marker: str, joined: list[tuple[_Cell, _Masked]]) -> str:
    """Turn `path:LINE:COL: msg` in the joined module into `path:cell N:LINE:COL: msg`."""
    match = re.match(re.escape(path) + r":(\d+):(\d+): (.*)$", error)
    if not match:
        return error
    mapping = _cell_lines(module, marker)
    row = int(match.group(1))
    if not 0 < row <= len(mapping):
        return error
    position, line = mapping[row - 1]
    index = joined[max(position, 0)][0].index
    return f"{path}:cell {index + 1}:{line}:{match.group(2)}: {match.group(3)}"
