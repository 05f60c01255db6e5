"""The fast read-only traversal sees what LibCST's own does, in the same order.

Run over every fixture input (real old-stack shapes) and a module written to hold every kind of
statement and expression Python 3.11 has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libcst as cst
import pytest

from neuron_migrate.core.cst_children import PUNCTUATION, children, transform
from neuron_migrate.rewrite.codemods.base import Visitor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rewrite"

EVERY_SYNTAX = '''\
"""Docstring."""
from __future__ import annotations
import os.path as p, sys  # two
from a.b import (c as d,  # why
    e)
from . import *
x: int = 1; y = x if x else -x  # trailing
z = [i ** 2 for i in range(3) if i] + list({k: v for k, v in {}.items()}) + [*{1, 2}]
w = (lambda a, /, b=2, *c, d, **e: a @ b)(1, d=2)
s = f"{x!r:>{y}} {'q'}" "implicit" + str(rb'\\d')
t = x[1:2, ::3, ...] ; u = not x and (x or y) is not None
v = (yield_ := 3) ; del v
x += 1; x >>= 2; x //= 3
assert x, "message"
global_name = ~x | x & x ^ x << 1


@decorator(arg)
async def f(a: int, *, b: "str" = "", **kw) -> None:
    global y
    async with open(p) as fh, other():
        async for line in fh:
            await line
    for i in range(2):
        if i:
            continue
        elif i < 0 <= 1 != 2:
            break
        else:
            pass
    else:
        raise ValueError("x") from None
    while True:
        return
    try:
        pass
    except (ValueError, TypeError) as exc:
        raise
    else:
        pass
    finally:
        pass
    try:
        pass
    except* OSError:
        pass


class C(Base, metaclass=Meta):
    attr: list[int]

    def method(self):
        nonlocal_value = 1

        def inner():
            nonlocal nonlocal_value
            yield from (g for g in ())
        match self:
            case {"k": [1, *rest]} | Point(x=0) as q if q:
                pass
            case _:
                print(
                    1,  # one
                    2,
                )
        return inner
'''


def _sources() -> list[tuple[str, str]]:
    found = [("every-syntax", EVERY_SYNTAX)]
    found += [(p.name, p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*/*.in.py"))]
    return found


SOURCES = _sources()


def _libcst_order(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    for child in node.children:
        out += _libcst_order(child)
    return out


def _fast_order(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    for child in children(node):
        out += _fast_order(child)
    return out


@pytest.mark.parametrize(("name", "source"), SOURCES, ids=[n for n, _ in SOURCES])
def test_children_match_libcst(name: str, source: str) -> None:
    module = cst.parse_module(source)
    assert [id(n) for n in _fast_order(module)] == [id(n) for n in _libcst_order(module)]


class _Log(Visitor):
    """Logs the hooks LibCST calls; does not go into lambdas or below a comment's line."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.log.append(("Name", node.value))

    def visit_Call(self, node: cst.Call) -> None:
        self.log.append(("Call", type(node.func).__name__))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.log.append(("left Call", ""))

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self.log.append(("Lambda", ""))
        return False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.log.append(("SimpleString", node.value))


class _LogComments(_Log):
    def visit_Comment(self, node: cst.Comment) -> None:
        self.log.append(("Comment", node.value))


class _LogEverything(Visitor):
    def __init__(self) -> None:
        self.log: list[Any] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.log.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.log.append(("leave", id(original_node)))


@pytest.mark.parametrize("visitor", [_Log, _LogComments, _LogEverything])
@pytest.mark.parametrize(("name", "source"), SOURCES[:12], ids=[n for n, _ in SOURCES[:12]])
def test_scan_calls_the_hooks_visit_does(name: str, source: str, visitor: type) -> None:
    module = cst.parse_module(source)
    slow, fast = visitor(), visitor()
    module.visit(slow)
    fast.scan(module)
    assert fast.log == slow.log
    if visitor is _LogComments and "#" in source:
        assert any(kind == "Comment" for kind, _ in fast.log)


class _Renamer(cst.CSTTransformer):
    """Renames `x` to `renamed`, drops `pass` lines and one argument, splits `del` in two; logs
    the nodes it is called for."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.log.append(type(node).__name__)
        return super().on_visit(node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value="renamed") if updated_node.value == "x" else updated_node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine) -> Any:
        if isinstance(updated_node.body[0], cst.Pass) and len(updated_node.body) == 1:
            return cst.RemoveFromParent()
        if isinstance(updated_node.body[0], cst.Del):
            return cst.FlattenSentinel([updated_node, updated_node.deep_clone()])
        return updated_node

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> Any:
        return cst.RemoveFromParent() if updated_node.keyword is not None and updated_node.keyword.value == "drop" else updated_node


@pytest.mark.parametrize(("name", "source"), SOURCES, ids=[n for n, _ in SOURCES])
def test_transform_prints_what_libcst_visit_does(name: str, source: str) -> None:
    module = cst.parse_module(source + "\ndef f(x):\n    pass\n    del x\n    g(x, drop=1)\n")
    slow, fast = _Renamer(), _Renamer()
    assert transform(module, fast).code == module.visit(slow).code
    assert fast.log == slow.log


def test_transform_keeps_what_it_does_not_change() -> None:
    module = cst.parse_module("a = f(b, c)  # note\nif d:\n    e()\n")
    assert transform(module, _Renamer()) is module
    skipped = _Renamer()
    transform(module, skipped, PUNCTUATION)
    assert "SimpleWhitespace" not in skipped.log and "Comma" not in skipped.log
