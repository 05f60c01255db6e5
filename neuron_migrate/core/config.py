"""`[tool.neuron-migrate]` in pyproject.toml, found from the checked path upward.

The nearest pyproject.toml that has the table wins (there is no merging across files, as in
ruff). Paths in `exclude` and `per-file-ignores` are gitignore-style patterns relative to the
folder of that pyproject.toml. Both commands read the same table; each uses what applies to it
(`select` entries that name none of a command's codes leave that command's selection whole):

```toml
[tool.neuron-migrate]
select = ["NM1", "NM3"]             # rule codes or prefixes; "ALL"; default: every rule
ignore = ["NM110"]
per-file-ignores = { "data/*.py" = ["NM1"], "tests/**" = ["NM701"] }
exclude = ["third_party/", "*_pb2.py"]
target = "neuron"                   # or "portable" (the default)
min-severity = "info"               # check only: info | warning (default) | error
```
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from neuron_migrate.core import selection

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TABLE = "neuron-migrate"
TARGETS = ("portable", "neuron")
SEVERITIES = ("info", "warning", "error")
KEYS = frozenset({"select", "ignore", "per-file-ignores", "exclude", "target", "min-severity"})
_CODE = re.compile(r"ALL|NM\d{0,3}")


class ConfigError(Exception):
    """A configuration that cannot be used; the message names the file and the key."""


def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    try:
        return pathspec.PathSpec.from_lines("gitignore", patterns)  # pathspec >= 0.12.1
    except LookupError:
        return pathspec.PathSpec.from_lines("gitwildmatch", patterns)


@dataclass(frozen=True)
class Config:
    """The settings that apply to files below `root` (everything empty: the defaults)."""

    root: Path | None = None  # folder of the pyproject.toml; None when there is none
    source: Path | None = None
    select: tuple[str, ...] | None = None  # None: every rule
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    target: str | None = None
    min_severity: str | None = None
    _exclude_spec: pathspec.PathSpec | None = field(default=None, compare=False, repr=False)
    _ignore_specs: tuple[tuple[pathspec.PathSpec, tuple[str, ...]], ...] = field(
        default=(), compare=False, repr=False
    )

    def _relative(self, path: Path) -> str | None:
        if self.root is None:
            return None
        try:
            return Path(os.path.abspath(path)).relative_to(self.root).as_posix()
        except ValueError:
            return None  # not below the configuration's folder

    def excluded(self, path: Path) -> bool:
        """Whether `exclude` matches the file or one of its folders."""
        if self._exclude_spec is None:
            return False
        relative = self._relative(path)
        return relative is not None and self._exclude_spec.match_file(relative)

    def select_for(self, codes: Iterable[str]) -> tuple[str, ...] | None:
        """The `select` entries that name any of `codes` (one tool's rules); None: all of them."""
        return selection.naming(self.select, codes)

    def ignores_for(self, path: Path) -> tuple[str, ...]:
        """The `ignore` codes plus the `per-file-ignores` that match `path`."""
        codes = list(self.ignore)
        relative = self._relative(path)
        if relative is not None:
            for spec, extra in self._ignore_specs:
                if spec.match_file(relative):
                    codes += extra
        return tuple(codes)


def find(start: Path) -> Path | None:
    """The nearest pyproject.toml with a `[tool.neuron-migrate]` table, from `start` upward."""
    folder = Path(os.path.abspath(start))
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and _has_table(pyproject):
            return pyproject
    return None


def _has_table(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return f"tool.{TABLE}" in text or f'tool."{TABLE}"' in text


def load(pyproject: Path) -> Config:
    """Read and validate the table; raises ConfigError with the file and key in the message."""
    try:
        with open(pyproject, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{pyproject}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject}: not valid TOML: {exc}") from None
    table = data.get("tool", {}).get(TABLE)
    if table is None:
        return Config(root=pyproject.parent.resolve(), source=pyproject)
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.{TABLE}] must be a table")
    where = f"{pyproject}: [tool.{TABLE}]"
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    select = _codes(table, "select", where) if "select" in table else None
    ignore = _codes(table, "ignore", where) if "ignore" in table else ()
    exclude = _strings(table, "exclude", where)
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{where}: 'per-file-ignores' must be a table of pattern = [codes]")
    per_file_ignores = tuple(
        (str(pattern), _codes(per_file, pattern, f"{where} per-file-ignores"))
        for pattern in per_file
    )
    target = _choice(table, "target", TARGETS, where)
    min_severity = _choice(table, "min-severity", SEVERITIES, where)
    return Config(
        root=pyproject.parent.resolve(),
        source=pyproject,
        select=select,
        ignore=ignore,
        per_file_ignores=per_file_ignores,
        exclude=exclude,
        target=target,
        min_severity=min_severity,
        _exclude_spec=_spec(exclude) if exclude else None,
        _ignore_specs=tuple((_spec((pattern,)), codes) for pattern, codes in per_file_ignores),
    )


def _strings(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key!r} must be a list of strings")
    return tuple(value)


def _codes(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    codes = tuple(c.strip().upper() for c in _strings(table, key, where))
    for code in codes:
        if not _CODE.fullmatch(code):
            raise ConfigError(
                f"{where}: {key!r}: {code!r} is not a rule code or prefix (such as NM101, NM1 or ALL)"
            )
    return codes


def _choice(table: dict[str, Any], key: str, choices: tuple[str, ...], where: str) -> str | None:
    if key not in table:
        return None
    value = table[key]
    if value not in choices:
        raise ConfigError(f"{where}: {key!r} must be one of {', '.join(choices)} (got {value!r})")
    return str(value)


class Configs:
    """Configuration per file, found once per folder; or one fixed configuration for all files."""

    def __init__(self, fixed: Config | None = None) -> None:
        self.fixed = fixed
        self._by_folder: dict[Path, Config] = {}
        self._loaded: dict[Path, Config] = {}

    def for_path(self, path: Path) -> Config:
        if self.fixed is not None:
            return self.fixed
        folder = Path(os.path.abspath(path))
        if not folder.is_dir():
            folder = folder.parent
        config = self._by_folder.get(folder)
        if config is None:
            pyproject = find(folder)
            if pyproject is None:
                config = Config()
            else:
                config = self._loaded.get(pyproject)
                if config is None:
                    config = self._loaded[pyproject] = load(pyproject)
            self._by_folder[folder] = config
        return config
