"""The records a check produces: a diagnostic, its fix and the edits of that fix, per-file results."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Severity(enum.IntEnum):
    """How much a finding matters where it was found (the threshold for showing it is `--min-severity`)."""

    INFO = 0  # harmless where it is, or a hint
    WARNING = 1  # recompiles, graph breaks or host syncs where it is
    ERROR = 2  # fails on Trainium where it is

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str) -> Severity:
        try:
            return cls[value.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {value!r} (info, warning, error)") from None


SAFE, UNSAFE = "safe", "unsafe"


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] (character offsets) with `content`; rows and columns (1-based) are
    the same range, for reports that outlive the text."""

    start: int
    end: int
    content: str
    row: int = 0
    column: int = 0
    end_row: int = 0
    end_column: int = 0

    def located(self, location: Callable[[int], tuple[int, int]]) -> Edit:
        row, column = location(self.start)
        end_row, end_column = location(self.end)
        return Edit(self.start, self.end, self.content, row, column, end_row, end_column)


@dataclass(frozen=True)
class Fix:
    edits: tuple[Edit, ...]
    applicability: str  # SAFE | UNSAFE
    message: str

    @property
    def safe(self) -> bool:
        return self.applicability == SAFE


@dataclass
class Diagnostic:
    """One finding. Lines are 1-based, columns 1-based characters (as ruff prints them)."""

    code: str
    message: str
    line: int
    column: int
    end_line: int
    end_column: int
    severity: Severity = Severity.WARNING
    fix: Fix | None = None
    where: str = ""  # why it was raised here ("in `forward` of `Net`")
    statement_end: int = 0  # last line of the simple statement holding it (a `# noqa` may sit there)
    cell: int | None = None  # in a notebook: the cell (1-based); lines then count within it
    frame: str = ""  # for `--output-format full`: the code frame and fix preview, made where the text is

    @property
    def text(self) -> str:
        """The message as shown, with the place that decided its severity."""
        return f"{self.message} ({self.where})" if self.where else self.message


@dataclass
class FileReport:
    """What `check` found in one file, and what `--fix` did to it."""

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None  # one line, "path:line:col: message"
    original: str = ""  # dropped once a worker is done with it
    fixed: str | None = None  # the text after fixes, when any fix was applied
    changed: bool = False  # the fixes changed the text
    fixes_applied: int = 0
    fixed_codes: dict[str, int] = field(default_factory=dict)  # fixes applied, per rule
    noqa_added: int = 0  # with --add-noqa: the directives written
    diff: str = ""  # with --diff: the unified diff of the fixes
    skipped: bool = False  # the prefilter ruled the file out without parsing it
    written: bool = False


class RuleIdentity(Protocol):
    """What a finding needs to know of the rule that made it (rules/base.py's `Rule` has it)."""

    @property
    def code(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def contextual(self) -> bool: ...
    @property
    def eager_severity(self) -> Severity: ...
