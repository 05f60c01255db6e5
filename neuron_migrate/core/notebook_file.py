"""A notebook file as text: where each cell's `source` sits in the raw JSON, and how to replace
the sources of some cells without touching any other byte.

`rewrite`, `check --fix` and the Jupyter apps all edit notebooks this way, so that indentation,
key order, escaping, ids, outputs and metadata stay exactly as the notebook's editor wrote them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

_WS = re.compile(r"\s*")
_LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


@dataclass
class Span:
    start: int
    end: int


@dataclass
class RawCell:
    """One cell: its parsed fields, and where the value of each of its keys sits in the raw text."""

    index: int  # 0-based, counting every cell
    cell_type: str
    source: str
    span: Span  # of the `source` value
    language: str | None = None  # VS Code's per-cell language, when it is set
    fields: dict[str, Span] = field(default_factory=dict)


def _skip_ws(raw: str, i: int) -> int:
    return _WS.match(raw, i).end()  # type: ignore[union-attr]


def _scan(raw: str, i: int, want_keys: bool = False) -> tuple[int, dict[str, Span]]:
    """Skip one JSON value starting at `i`; for an object, return the spans of its values."""
    i = _skip_ws(raw, i)
    ch = raw[i]
    keys: dict[str, Span] = {}
    if ch == '"':
        return scanstring(raw, i + 1)[1], keys
    if ch == "{":
        i = _skip_ws(raw, i + 1)
        if raw[i] == "}":
            return i + 1, keys
        while True:
            key, i = scanstring(raw, _skip_ws(raw, i) + 1)
            i = _skip_ws(raw, i)
            if raw[i] != ":":
                raise ValueError(f"expected ':' at offset {i}")
            start = _skip_ws(raw, i + 1)
            i, _ = _scan(raw, start)
            if want_keys:
                keys[key] = Span(start, i)
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


def is_notebook(text: str) -> bool:
    """Whether `text` is a notebook's JSON: an object with `cells` and `nbformat`. For input that
    comes without a file name (stdin), which would otherwise be taken for Python (JSON often parses
    as Python: an expression statement, a dict)."""
    if not text.lstrip().startswith("{"):
        return False
    try:
        notebook = json.loads(text)
    except ValueError:
        return False
    return isinstance(notebook, dict) and "cells" in notebook and "nbformat" in notebook


def source_text(source: object) -> str:
    """A cell's `source` as one string (nbformat allows a list of lines)."""
    return "".join(source) if isinstance(source, list) else str(source or "")


def locate_cells(raw: str, notebook: dict[str, Any] | None = None) -> list[RawCell]:
    """The cells of a notebook's raw JSON (`notebook` is that text parsed, if already at hand).
    Raises ValueError (or KeyError, IndexError) for text whose cells cannot be located."""
    notebook = json.loads(raw) if notebook is None else notebook
    _, top = _scan(raw, 0, want_keys=True)
    cells_span = top["cells"]
    cells = []
    i = _skip_ws(raw, cells_span.start + 1)
    index = 0
    while raw[i] != "]":
        end, keys = _scan(raw, i, want_keys=True)
        data = notebook["cells"][index]
        language = ((data.get("metadata") or {}).get("vscode") or {}).get("languageId")
        cells.append(
            RawCell(
                index,
                data.get("cell_type", ""),
                source_text(data.get("source", "")),
                keys["source"],
                language,
                keys,
            )
        )
        index += 1
        i = _skip_ws(raw, end)
        if raw[i] == ",":
            i = _skip_ws(raw, i + 1)
    return cells


def _encode_source(raw: str, span: Span, text: str, ensure_ascii: bool) -> str:
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
        indent = raw[
            line_start : line_start + len(raw[line_start:]) - len(raw[line_start:].lstrip())
        ]
        step = " " if indent == " " * len(indent) and len(indent) % 2 else "  "
        lead, trail = "\n" + indent + step, "\n" + indent
    separator = "," + lead if "\n" in lead else ", "
    return (
        "["
        + lead
        + separator.join(json.dumps(line, ensure_ascii=ensure_ascii) for line in lines)
        + trail
        + "]"
    )


def replace_sources(
    raw: str,
    cells: list[RawCell],
    new_sources: dict[int, str],
    clear_outputs: bool = False,
) -> str:
    """`raw` with the `source` of each cell in `new_sources` (by index) replaced; with
    `clear_outputs`, those cells' outputs and execution counts are cleared too (they came from
    the old code), as `jupyter nbconvert --clear-output` clears them. Every other byte stays.
    Raises ValueError if the result is not valid JSON (which would be a bug)."""
    ensure_ascii = not any(ord(ch) > 127 for ch in raw)
    pieces = []
    last = 0
    for cell in cells:
        if cell.index not in new_sources:
            continue
        edits = {"source": _encode_source(raw, cell.span, new_sources[cell.index], ensure_ascii)}
        if clear_outputs:
            edits.update({"outputs": "[]", "execution_count": "null"})
        for key, span in sorted(cell.fields.items(), key=lambda kv: kv[1].start):
            if key in edits and (key != "outputs" or raw[span.start : span.end] != "[]"):
                pieces.append(raw[last : span.start])
                pieces.append(edits[key])
                last = span.end
    pieces.append(raw[last:])
    text = "".join(pieces)
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the edited notebook is not valid JSON ({exc.msg})") from None
    return text
