"""Names resolved per scope: the `ast` scope table, its agreement with the LibCST traversal, how
the migration spells a module at one place, and that scoped rewrites leave no undefined names."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

from neuron_migrate.core.scopes import Scope, ScopeTable
from neuron_migrate.rewrite.codemods.base import PORTABLE, Codemod, FileFacts, MigrationContext
from neuron_migrate.rewrite.dispatch import Dispatcher, ScopeMismatch
from neuron_migrate.rewrite.engine import Options, rewrite_source
from neuron_migrate.rewrite.spelling import State, renamed, state

SCOPES = Path(__file__).parent / "fixtures" / "rewrite" / "scopes"


def table(source: str) -> ScopeTable:
    source = textwrap.dedent(source)
    return ScopeTable.from_ast(ast.parse(source), source)


def scope_named(found: ScopeTable, kind: str, number: int = 0) -> Scope:
    return [s for s in found.scopes if s.kind == kind][number]


# -- the scope table ------------------------------------------------------------------------------


def test_a_parameter_hides_the_import() -> None:
    found = table(
        """
        import torch_xla.core.xla_model as xm
        def step(xm):
            xm.mark_step()
        def sync():
            xm.mark_step()
        """
    )
    step, sync = found.scopes
    assert step.resolve_dotted("xm.mark_step") is None
    assert sync.resolve_dotted("xm.mark_step") == "torch_xla.core.xla_model.mark_step"


@pytest.mark.parametrize(
    "binding",
    [
        "xm = object()",
        "for xm in []: pass",
        "with open('f') as xm: pass",
        "try:\n    pass\nexcept ValueError as xm:\n    pass",
        "def xm(): pass",
        "class xm: pass",
        "import numpy as xm",
        "[(xm := 1)]",
        "xm: object",
    ],
)
def test_any_local_binding_hides_the_import(binding: str) -> None:
    body = textwrap.indent(binding, "    ")
    found = table(f"import torch_xla.core.xla_model as xm\ndef f():\n{body}\n    xm.mark_step()\n")
    function = scope_named(found, "FunctionDef")
    assert function.resolve_dotted("xm.mark_step") != "torch_xla.core.xla_model.mark_step"


def test_a_second_binding_in_the_same_scope_makes_the_name_unknown() -> None:
    found = table(
        """
        import torch.distributed as dist
        dist = torch.cdist(a, b)
        """
    )
    assert found.module.meaning("dist") is None


def test_none_as_the_stand_in_for_a_failed_import_keeps_the_import() -> None:
    found = table(
        """
        try:
            import torch_xla.core.xla_model as xm
        except ImportError:
            xm = None
        """
    )
    assert found.module.meaning("xm") == "torch_xla.core.xla_model"


def test_a_class_body_does_not_enclose_its_methods() -> None:
    found = table(
        """
        import torch_xla.core.xla_model as xm
        class Trainer:
            xm = None
            def step(self):
                xm.mark_step()
            setting = xm
        """
    )
    body, method = scope_named(found, "ClassDef"), scope_named(found, "FunctionDef")
    assert method.meaning("xm") == "torch_xla.core.xla_model"
    assert body.lookup("xm") is body


def test_comprehension_variables_are_local_to_the_comprehension() -> None:
    found = table(
        """
        import torch_xla.core.xla_model as xm
        values = [xm.mark_step() for xm in models]
        after = xm
        """
    )
    comprehension = scope_named(found, "ListComp")
    assert comprehension.meaning("xm") is None
    assert found.module.meaning("xm") == "torch_xla.core.xla_model"


def test_global_and_nonlocal_bind_in_the_scope_they_name() -> None:
    found = table(
        """
        def setup():
            global xm
            import torch_xla.core.xla_model as xm
        def outer():
            dist = None
            def inner():
                nonlocal dist
                dist = compute()
            return dist
        def use():
            xm.mark_step()
        """
    )
    setup, outer, inner, use = found.scopes
    assert use.meaning("xm") == "torch_xla.core.xla_model"
    assert "xm" not in setup.bound
    assert outer.bound["dist"].others == 1 and "dist" not in inner.bound


def test_assignments_are_counted() -> None:
    found = table(
        """
        def f():
            device = a()
            device = b()
        def g():
            device = a()
        """
    )
    f, g = found.scopes
    assert f.bound["device"].count == 2
    assert g.bound["device"].count == 1


TRICKY = """\
import os; import torch_xla.core.xla_model as xm
@decorate(lambda xm: xm)
def f(a=lambda: xm, *, b: int = 0) -> int:
    if a: xm.mark_step(); xm.mark_step()
    elif b:
        return [x for x in (lambda: y for y in range(2))]
    else:
        pass
    g = {k: v for k, v in {}.items() if k}
    try:
        pass
    except* ValueError:
        pass
    match a:
        case [xm, *rest]:
            xm.mark_step()
        case {"k": v, **others}:
            pass
    return (yield xm)
class C(Base, metaclass=M):
    x = [i for i in range(3)]
    def m(self): return {i for i in self.x}
async def h():
    async with a as b:
        async for c in b: xm.mark_step()
"""


class _Recorder(Codemod):
    """Records, for every `xm` read, what it names there."""

    code = "NM999"
    name = "recorder"
    summary = "test"

    def __init__(self, ctx: MigrationContext) -> None:
        super().__init__(ctx)
        self.seen: list[str | None] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == "xm":
            self.seen.append(self.qualify(node))


def _follow(source: str) -> list[str | None]:
    tree = ast.parse(source)
    ctx = MigrationContext(
        target=PORTABLE, imports=None, facts=FileFacts(), source=source, scopes=ScopeTable.from_ast(tree, source)  # type: ignore[arg-type]
    )
    recorder = _Recorder(ctx)
    cst.parse_module(source).visit(Dispatcher(ctx, [recorder], (), lambda qualified: None))
    return recorder.seen


def test_the_traversal_meets_scopes_and_statements_as_the_table_numbers_them() -> None:
    mark = "torch_xla.core.xla_model.mark_step"
    # The `xm` of the `case` pattern is a local variable of `f`, which makes `xm` local to all of it.
    assert _follow(TRICKY) == [None, None, None, mark]


def test_a_disagreement_between_table_and_tree_is_an_error_not_a_guess() -> None:
    source = "def f():\n    pass\n"
    ctx = MigrationContext(
        target=PORTABLE,
        imports=None,  # type: ignore[arg-type]
        facts=FileFacts(),
        source=source,
        scopes=ScopeTable.from_ast(ast.parse("x = 1\n"), "x = 1\n"),
    )
    with pytest.raises(ScopeMismatch):
        cst.parse_module(source).visit(Dispatcher(ctx, [], (), lambda qualified: None))


# -- spelling a module at one place ---------------------------------------------------------------


def test_states_of_a_name() -> None:
    found = table(
        """
        import torch
        def late():
            x = 1
            import torch.distributed as dist
        def local():
            dist = 2
        def free():
            pass
        """
    )
    late, local, free = found.scopes
    qualified = "torch.distributed"
    assert state(late, 1, "dist", qualified, found) is State.LATE
    assert state(late, 4, "dist", qualified, found) is State.USABLE
    assert state(local, 5, "dist", qualified, found) is State.TAKEN
    assert state(free, 6, "dist", qualified, found) is State.FREE
    assert state(free, 6, "torch", "torch", found) is State.USABLE


def test_renamed_touches_names_only() -> None:
    source = "def f(dist):\n    return dist.all_reduce(x, dist=dist) + other.dist\n"
    assert renamed(source, {"dist": "dist_2"}) == "def f(dist):\n    return dist_2.all_reduce(x, dist=dist_2) + other.dist\n"


# -- whole files ----------------------------------------------------------------------------------

# pyflakes messages that mean the program is wrong, not merely untidy.
ERRORS = (
    pyflakes_messages.UndefinedName,
    pyflakes_messages.UndefinedLocal,
    pyflakes_messages.RedefinedWhileUnused,
    pyflakes_messages.ImportShadowedByLoopVar,
)


def pyflakes_errors(source: str) -> set[str]:
    found = pyflakes_checker.Checker(ast.parse(source), "<migrated>")
    return {m.message % m.message_args for m in found.messages if isinstance(m, ERRORS)}


@pytest.mark.parametrize("source", sorted(SCOPES.glob("*.in.py")), ids=lambda p: p.name)
@pytest.mark.parametrize("target", ["portable", "neuron"])
def test_migrated_scope_cases_have_no_new_pyflakes_errors(source: Path, target: str) -> None:
    from neuron_migrate.rewrite.codemods.base import TARGETS

    text = source.read_text()
    result = rewrite_source(text, source.name, Options(target=TARGETS[target]))
    assert result.error is None
    assert pyflakes_errors(result.migrated) <= pyflakes_errors(text)


def test_a_local_named_like_the_process_group_module_gets_another_spelling() -> None:
    source = textwrap.dedent(
        """\
        import torch
        import torch_xla.core.xla_model as xm
        def pairwise(a, b):
            dist = torch.cdist(a, b)
            return dist[xm.get_ordinal()]
        """
    )
    migrated = rewrite_source(source, "pairwise.py").migrated
    assert "dist.get_rank" not in migrated.replace("torch.distributed.get_rank", "")
    assert "torch.distributed.get_rank()" in migrated


def test_a_module_level_helper_gets_a_module_level_import() -> None:
    source = textwrap.dedent(
        """\
        def main(loader):
            import torch
            import torch_xla.distributed.parallel_loader as pl
            for batch in pl.MpDeviceLoader(loader, torch.device("cpu")):
                pass
        """
    )
    migrated = rewrite_source(source, "main.py").migrated
    assert migrated.startswith("import torch\n")
    assert not pyflakes_errors(migrated)


def test_a_users_own_helper_name_is_left_to_the_user() -> None:
    source = textwrap.dedent(
        """\
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.xla_multiprocessing as xmp
        def average_gradients(model):
            return sum(p.grad.mean() for p in model.parameters())
        def _mp_fn(index, model, optimizer):
            print(average_gradients(model))
            xm.optimizer_step(optimizer)
        if __name__ == "__main__":
            xmp.spawn(_mp_fn, args=(model, optimizer))
        """
    )
    migrated = rewrite_source(source, "train.py").migrated
    assert "def average_gradients(model):\n    return sum(" in migrated
    assert "print(average_gradients(model))" in migrated
    assert "average_gradients_2(optimizer" in migrated
    assert "def average_gradients_2(optimizer" in migrated
    assert pyflakes_errors(migrated) <= pyflakes_errors(source)


def test_an_import_under_if_serves_the_rest_of_its_block_only() -> None:
    found = table(
        """
        def f(flag):
            if flag:
                import torch.distributed as dist
                x = 1
            y = 2
        """
    )
    function = found.scopes[0]
    assert state(function, 3, "dist", "torch.distributed", found) is State.USABLE
    assert state(function, 4, "dist", "torch.distributed", found) is State.LATE


# -- names carried from one statement to another stay with their variable ----------------------


def _no_new_errors(source: str) -> str:
    source = textwrap.dedent(source)
    result = rewrite_source(source, "script.py")
    assert result.error is None
    assert pyflakes_errors(result.migrated) <= pyflakes_errors(source)
    return result.migrated


def test_a_neuron_config_of_one_function_is_not_folded_into_another() -> None:
    migrated = _no_new_errors(
        """\
        from optimum.neuron import NeuronModelForCausalLM, NeuronModelForImageTextToText
        def causal(model_id):
            neuron_config = NeuronModelForCausalLM.get_neuron_config(model_name_or_path=model_id, batch_size=1, sequence_length=128)
            return NeuronModelForCausalLM.export(model_id=model_id, neuron_config=neuron_config)
        def vision(model_id):
            neuron_config = NeuronModelForImageTextToText.get_neuron_config(model_name_or_path=model_id, batch_size=1)
            return NeuronModelForImageTextToText.export(model_id=model_id, neuron_config=neuron_config)
        """
    )
    assert "neuron_config = NeuronModelForImageTextToText.get_neuron_config(" in migrated


def test_training_arguments_of_one_function_say_nothing_about_a_parameter_elsewhere() -> None:
    migrated = _no_new_errors(
        """\
        from optimum.neuron import NeuronTrainingArguments
        def run(tp_size):
            training_args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=tp_size)
            return load(training_args)
        def load(training_args):
            return training_args.trn_config
        """
    )
    run, load = migrated.split("def load")
    assert "TODO(neuron-migrate NM020): `tensor_parallel_size=tp_size` no longer shard" in run
    assert "tp_size" not in load


def test_a_deleted_model_is_not_saved_after_its_del() -> None:
    migrated = _no_new_errors(
        """\
        import torch
        import torch_neuronx
        encoder = build()
        traced = torch_neuronx.trace(encoder, example)
        del encoder
        torch.jit.save(traced, "encoder.pt")
        """
    )
    assert "encoder.state_dict()" not in migrated
