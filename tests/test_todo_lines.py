"""TODO comments are one line a reviewer reads at a glance: at most 160 characters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from neuron_migrate.rewrite.codemods import CODEMODS, LEFTOVER_MESSAGE
from neuron_migrate.rewrite.dispatch import todo_line

LIMIT = 160
FIXTURES = Path(__file__).parent / "fixtures" / "rewrite"
TODO = re.compile(r"#\s*TODO\(neuron-migrate NM\d+\):.*")


def _todo_lines(path: Path) -> list[tuple[int, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(number, match.group(0)) for number, line in enumerate(lines, 1) if (match := TODO.search(line))]


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.out.py")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_todos_fit_one_line(path: Path) -> None:
    long = [f"{path.name}:{n}: {len(text)} characters" for n, text in _todo_lines(path) if len(text) > LIMIT]
    assert not long, "\n".join(long)


def _written(codemod: type, prefix: str, message: str) -> str:
    """The TODO a leftover use of `prefix` gets, with the name as a file would write it."""
    name = prefix.rsplit(".", 1)[-1]
    text = message.replace("{name}", name) if "{name}" in message else f"`{name}`: {message}"
    return todo_line(codemod.code, text).comment.value  # type: ignore[union-attr]


@pytest.mark.parametrize("codemod", CODEMODS, ids=lambda c: c.code)
def test_manual_messages_fit_one_line(codemod: type) -> None:
    long = [
        f"{prefix}: {len(line)} characters"
        for prefix, message in codemod.manual.items()
        if len(line := _written(codemod, prefix, message)) > LIMIT
    ]
    assert not long, "\n".join(long)


def test_leftover_message_fits_one_line() -> None:
    line = todo_line("NM099", LEFTOVER_MESSAGE.replace("{name}", "xm.some_long_function_name"))
    assert len(line.comment.value) <= LIMIT  # type: ignore[union-attr]


# Message templates in the codemods' source: their literal text, each interpolated value counted
# as a short name, must leave room for the values a file gives them.
SOURCES = Path(__file__).parent.parent / "neuron_migrate" / "rewrite"
PREFIX = len("# TODO(neuron-migrate NM000): ")
PLACEHOLDER = 6  # a short name or literal quoted from the user's file


def _templates() -> list[tuple[str, str, int]]:
    import ast

    found = []
    for path in sorted(SOURCES.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "todo"):
                continue
            owner = ast.unparse(node.func.value)
            args = node.args[1:] if owner.endswith("ctx") else node.args[:1]
            if not args or not isinstance(args[0], ast.Constant | ast.JoinedStr):
                continue
            message = args[0]
            if isinstance(message, ast.Constant):
                text, values = str(message.value), 0
            else:
                parts = [v for v in message.values if isinstance(v, ast.Constant)]
                text, values = "".join(str(v.value) for v in parts), len(message.values) - len(parts)
            found.append((f"{path.relative_to(SOURCES)}:{node.lineno}", text, values))
    return found


@pytest.mark.parametrize(("where", "text", "values"), [pytest.param(*t, id=t[0]) for t in _templates()])
def test_todo_templates_fit_one_line(where: str, text: str, values: int) -> None:
    assert PREFIX + len(text) + PLACEHOLDER * values <= LIMIT, f"{where}: {text}"
