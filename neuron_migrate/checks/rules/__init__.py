"""The rule registry: one module per rule, `nmNNN_<name>.py`, found by name; codes are stable.

A renamed or merged code goes into REDIRECTS (old -> new) and is never reused, so that
`# noqa: NM1xx` comments and configuration keep working.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import cache

from neuron_migrate.checks.rules.base import Rule

REDIRECTS: dict[str, str] = {}

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


def known_codes() -> frozenset[str]:
    return frozenset(by_code())


def resolve_selection(
    select: tuple[str, ...] | None, ignore: tuple[str, ...], base: frozenset[str] | None = None
) -> frozenset[str]:
    """Codes enabled by code prefixes (`NM1`, `NM101`, `ALL`); `select=None` keeps `base` (default all)."""
    codes = known_codes()
    if select is None:
        chosen = set(codes if base is None else base)
    else:
        chosen = {c for c in codes if any(_matches(c, p) for p in select)}
    return frozenset(c for c in chosen if not any(_matches(c, p) for p in ignore))


def _matches(code: str, prefix: str) -> bool:
    prefix = REDIRECTS.get(prefix, prefix)
    return prefix == "ALL" or code.startswith(prefix)


def unknown_prefixes(prefixes: tuple[str, ...]) -> list[str]:
    codes = known_codes()
    return [
        p
        for p in prefixes
        if p != "ALL" and p not in REDIRECTS and not any(c.startswith(p) for c in codes)
    ]
