"""The rule registry: one module per rule, `nmNNN_<name>.py`, found by name; codes are stable.

Renamed or merged codes are redirected in `neuron_migrate.core.selection`, never reused.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import cache

from neuron_migrate.checks.rules.base import Rule
from neuron_migrate.core import selection
from neuron_migrate.core.selection import REDIRECTS

__all__ = ["REDIRECTS", "all_rules", "by_code", "known_codes", "resolve_selection", "unknown_prefixes"]

_MODULE = re.compile(r"nm\d{3}_\w+")


@cache
def all_rules() -> tuple[type[Rule], ...]:
    rules: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        if not _MODULE.fullmatch(info.name):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Rule)
            and value is not Rule
            and value.__module__ == module.__name__
        ]
        if len(found) != 1:
            raise RuntimeError(
                f"{module.__name__} must define exactly one rule, found {len(found)}"
            )
        rules.append(found[0])
    return tuple(sorted(rules, key=lambda r: r.code))


@cache
def by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in all_rules()}


@cache
def known_codes() -> frozenset[str]:
    return frozenset(by_code())


def resolve_selection(
    select: tuple[str, ...] | None, ignore: tuple[str, ...], base: frozenset[str] | None = None
) -> frozenset[str]:
    """Check codes enabled by selectors (`NM1`, `NM101`, `ALL`); `select=None` keeps `base` (default all)."""
    return _resolve(None if select is None else tuple(select), tuple(ignore), base)


@cache  # once per configuration, not once per file
def _resolve(
    select: tuple[str, ...] | None, ignore: tuple[str, ...], base: frozenset[str] | None
) -> frozenset[str]:
    return selection.resolve(known_codes(), select, ignore, base)


def unknown_prefixes(prefixes: tuple[str, ...]) -> list[str]:
    return selection.unknown(prefixes, known_codes())
