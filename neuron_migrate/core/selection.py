"""Which rule codes a `--select`/`--ignore` pair (or the configuration's) enables: the one resolver
of rewrite, check, the configuration and the magics.

A selector is a code (`NM101`), a prefix (`NM1`, `NM10`) or `ALL`. A renamed or merged code stays
in REDIRECTS (old -> new) and is never reused, so `# noqa` comments and configurations keep
working.
"""

from __future__ import annotations

from collections.abc import Iterable

ALL = "ALL"
REDIRECTS: dict[str, str] = {}


def matches(code: str, selector: str) -> bool:
    """Whether `selector` (a code, a prefix, `ALL` or a redirected code) names `code`."""
    selector = REDIRECTS.get(selector, selector)
    return selector == ALL or code.startswith(selector)


def enabled(code: str, select: Iterable[str] | None, ignore: Iterable[str]) -> bool:
    """`select=None` (or empty) means every code; `ignore` wins over `select`."""
    if any(matches(code, selector) for selector in ignore):
        return False
    select = tuple(select or ())
    return not select or any(matches(code, selector) for selector in select)


def resolve(
    known: Iterable[str],
    select: Iterable[str] | None,
    ignore: Iterable[str],
    base: Iterable[str] | None = None,
) -> frozenset[str]:
    """The codes among `known` that are enabled; `select=None` keeps `base` (default: all known)."""
    ignore = tuple(ignore)
    if select is None:
        chosen = set(known if base is None else base)
    else:
        select = tuple(select)
        chosen = {code for code in known if any(matches(code, s) for s in select)}
    return frozenset(c for c in chosen if not any(matches(c, s) for s in ignore))


def unknown(selectors: Iterable[str], known: Iterable[str]) -> list[str]:
    """The selectors that name none of `known` (to reject them with a clear message)."""
    known = tuple(known)
    return [
        s
        for s in selectors
        if s != ALL and s not in REDIRECTS and not any(c.startswith(s) for c in known)
    ]


def naming(selectors: Iterable[str] | None, known: Iterable[str]) -> tuple[str, ...] | None:
    """The selectors that name any of one tool's `known` codes; None when none do (or none given).

    rewrite (NM0xx, NM2xx) and check (NM1xx, NM3xx and up) share one configuration table, so `select = ["NM1"]`
    narrows check and leaves rewrite whole, and the other way round.
    """
    if selectors is None:
        return None
    known = tuple(known)
    mine = tuple(s for s in selectors if any(matches(c, s) for c in known))
    return mine or None
