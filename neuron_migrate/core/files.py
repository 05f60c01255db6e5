"""Finding, reading and writing source files without losing a byte we did not mean to change.

Reading records everything a faithful write needs (encoding, BOM, mode, a fingerprint of the
bytes); writing goes through a temporary file in the same directory and `os.replace`, and refuses
when the file changed since it was read.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import io
import os
import stat
import tempfile
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

SOURCE_SUFFIXES = (".py",)

# Folders nobody wants rewritten, as ruff excludes them by default.
DEFAULT_EXCLUDES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        ".env",
        "env",
        ".tox",
        ".nox",
        ".eggs",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".ipynb_checkpoints",
        "__pycache__",
        "__pypackages__",
        "build",
        "dist",
        "node_modules",
        "site-packages",
    }
)


class SourceError(Exception):
    """A file that cannot be read or written safely; the message is one line with the path."""


@dataclass(frozen=True)
class SourceFile:
    """A decoded source file and what is needed to write it back faithfully."""

    path: Path
    text: str
    encoding: str
    bom: bool
    mode: int
    fingerprint: str  # sha256 of the bytes as read

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def _fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode_source(data: bytes, name: str) -> tuple[str, str, bool]:
    """Decode Python source as the interpreter would (BOM, coding cookie); keep newlines as they are."""
    if b"\x00" in data:
        raise SourceError(f"{name}: not a text file (contains NUL bytes)")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"{name}:1:1: {exc.msg}") from None
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    try:
        text = body.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = body[: getattr(exc, "start", 0)].count(b"\n") + 1
        raise SourceError(f"{name}:{line}:1: cannot decode as {encoding}: {exc}") from None
    return text, encoding, bom


def read_source(path: Path) -> SourceFile:
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    text, encoding, bom = decode_source(data, str(path))
    return SourceFile(
        path=path,
        text=text,
        encoding=encoding,
        bom=bom,
        mode=stat.S_IMODE(st.st_mode),
        fingerprint=_fingerprint(data),
    )


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one."""
    target = Path(os.path.realpath(path))  # write through a symlink, never replace the link
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".nm-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_back(source: SourceFile, text: str) -> None:
    """Replace `source` on disk with `text`, unless the file changed since it was read."""
    try:
        with open(source.path, "rb") as fh:
            current = fh.read()
    except OSError as exc:
        raise SourceError(f"{source.path}: cannot re-read before writing: {exc.strerror}") from None
    if _fingerprint(current) != source.fingerprint:
        raise SourceError(f"{source.path}: changed on disk while being migrated; not overwritten")
    try:
        write_atomic(source.path, source.encode(text), source.mode)
    except UnicodeEncodeError as exc:
        raise SourceError(
            f"{source.path}: migrated text cannot be encoded as {source.encoding}: {exc.reason}"
        ) from None
    except OSError as exc:
        raise SourceError(f"{source.path}: cannot write: {exc.strerror or exc}") from None


class _Ignores:
    """The .gitignore files met on the way down, each applying below its own folder."""

    def __init__(self) -> None:
        self._specs: list[tuple[Path, pathspec.PathSpec]] = []

    def push(self, folder: Path) -> bool:
        ignore = folder / ".gitignore"
        if not ignore.is_file():
            return False
        try:
            lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return False
        spec = pathspec.PathSpec.from_lines("gitignore", lines)
        self._specs.append((Path(os.path.abspath(folder)), spec))
        return True

    def pop(self) -> None:
        self._specs.pop()

    def ignored(self, path: Path, is_dir: bool) -> bool:
        absolute = Path(os.path.abspath(path))
        for folder, spec in self._specs:
            rel = absolute.relative_to(folder).as_posix() + ("/" if is_dir else "")
            if spec.match_file(rel):
                return True
        return False


def _walk(folder: Path, suffixes: tuple[str, ...], ignores: _Ignores) -> Iterator[Path]:
    pushed = ignores.push(folder)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if entry.name in DEFAULT_EXCLUDES or entry.name.endswith(".egg-info"):
                continue
            if ignores.ignored(path, True):
                continue
            yield from _walk(path, suffixes, ignores)
        elif entry.is_file() and path.suffix in suffixes and not ignores.ignored(path, False):
            yield path
    if pushed:
        ignores.pop()


def _enclosing_gitignores(folder: Path, ignores: _Ignores) -> None:
    """Honour .gitignore files above the folder the user named, up to the repository root."""
    chain = []
    for parent in Path(os.path.abspath(folder)).parents:
        chain.append(parent)
        if (parent / ".git").exists():
            break
    else:
        return
    for parent in reversed(chain):
        ignores.push(parent)


def discover(paths: Iterable[Path], suffixes: tuple[str, ...] = SOURCE_SUFFIXES) -> list[Path]:
    """Files named explicitly are always taken; folders are walked, gitignore-aware."""
    found: dict[Path, None] = {}
    for path in paths:
        if path.is_dir():
            ignores = _Ignores()
            _enclosing_gitignores(path, ignores)
            for file in _walk(path, suffixes, ignores):
                found.setdefault(file)
        else:
            found.setdefault(path)
    return list(found)
