"""Plain records that flow from the codemods to the reports."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Change:
    """One automatic edit, described in the user's words."""

    code: str
    message: str


@dataclass(frozen=True)
class ManualItem:
    """Something left for a person, marked in the code with a TODO comment."""

    code: str
    message: str
    line: int = 0  # 1-based line of the TODO marker in the migrated file (or cell)
    column: int = 0
    cell: int | None = None  # 1-based cell number, in a notebook

    @property
    def marker(self) -> str:
        return f"# TODO(neuron-migrate {self.code}): {self.message}"


@dataclass(frozen=True)
class Note:
    """Information the user must know but need not act on in the code (a launch command, a policy change)."""

    code: str
    message: str


@dataclass(frozen=True)
class Helper:
    """A module-level function or class the migration wrote, with the imports it needs on its own."""

    source: str
    imports: tuple[str, ...]

    def same_code(self, other: Helper) -> bool:
        return ast.dump(ast.parse(self.source)) == ast.dump(ast.parse(other.source))


@dataclass(frozen=True)
class Verification:
    """What checking the migrated file against the target libraries found (see `verify`)."""

    problems: int = 0  # lines that failed, each marked with a TODO
    not_installed: tuple[str, ...] = ()  # target packages the file uses that are not there
    unknown: str | None = None  # why the check could not run
    versions: dict[str, str] = field(default_factory=dict)  # what it was checked against

    @property
    def complete(self) -> bool:
        return self.unknown is None and not self.not_installed


@dataclass
class FileResult:
    """What happened to one input."""

    path: str
    original: str = ""
    migrated: str = ""
    changes: list[Change] = field(default_factory=list)
    manual: list[ManualItem] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    error: str | None = None  # one line, "path:line:col: message"
    skipped: bool = False  # the prefilter found nothing to do
    written: bool = False
    cells: list[tuple[int, str, str]] = field(default_factory=list)  # notebook: (index, old, new)
    shared_helpers: dict[str, Helper] = field(default_factory=dict)  # imported from `--helpers-module`
    verification: Verification | None = None  # None: not checked against the target libraries
    # Why the file was given back as it was, its TODOs added (a program that moves only as a whole).
    kept_as_it_was: str | None = None

    @property
    def changed(self) -> bool:
        return self.error is None and self.migrated != self.original
