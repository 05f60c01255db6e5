"""The printer that keeps each top-level statement's text prints what LibCST prints, and a
rewrite hands back, as the very nodes they were, the top-level statements it did not change."""

from __future__ import annotations

import ast

import libcst as cst

from neuron_migrate.core.names import ImportTable
from neuron_migrate.core.scopes import ScopeTable
from neuron_migrate.rewrite.codemods import CODEMODS
from neuron_migrate.rewrite.codemods.base import PORTABLE, FileFacts, MigrationContext
from neuron_migrate.rewrite.dispatch import Dispatcher
from neuron_migrate.rewrite.printing import ModulePrinter

SOURCE = """\
# header comment

import torch_xla.core.xla_model as xm


def train(model):  # trailing
    xm.mark_step()


class Kept:
    value = 1
# footer comment
"""


def test_prints_what_libcst_prints_across_versions() -> None:
    module = cst.parse_module(SOURCE)
    printer = ModulePrinter()
    assert printer.code(module) == module.code == SOURCE
    # A new version sharing all but one statement with the first: the shared ones come from the
    # cache, the changed one is printed.
    changed = module.with_changes(body=[module.body[0], cst.parse_statement("x = 1\n"), *module.body[2:]])
    assert printer.code(changed) == changed.code
    emptied = module.with_changes(body=[], header=[], footer=[])
    assert printer.code(emptied) == emptied.code


def test_without_a_trailing_newline() -> None:
    module = cst.parse_module("x = 1\ny = 2")
    assert not module.has_trailing_newline
    assert ModulePrinter().code(module) == module.code == "x = 1\ny = 2"


def test_a_statement_that_changed_is_printed_again() -> None:
    module = cst.parse_module("a = 1\nb = 2\n")
    printer = ModulePrinter()
    printer.code(module)
    renamed = module.with_changes(body=[module.body[0].with_changes(body=[cst.parse_statement("a = 3\n").body[0]]), module.body[1]])
    assert printer.code(renamed) == "a = 3\nb = 2\n"


def test_a_rewrite_keeps_the_statements_it_did_not_change() -> None:
    tree = ast.parse(SOURCE)
    table = ImportTable.from_ast(tree)
    ctx = MigrationContext(
        target=PORTABLE, imports=table, facts=FileFacts(), path="t.py", source=SOURCE,
        old_stack_file=True, scopes=ScopeTable.from_ast(tree, SOURCE),
    )
    module = cst.parse_module(SOURCE)
    migrated = module.visit(Dispatcher(ctx, [c(ctx) for c in CODEMODS], {"xm"}, lambda q: None))
    assert migrated.body[-1] is module.body[-1]  # the class: nothing in it changed
    assert migrated.body[1] is not module.body[1]  # the function: its `xm.mark_step()` did
    assert "xm.mark_step" not in migrated.code
