"""Old-stack code reached in ways the alias table does not follow still gets a migration or a TODO.

Every file that mentions the old stack must come back with an automatic change or a TODO at
the spot, and so a line in the report: module aliases (`import optimum.neuron as on`), the
package imported as a module (`from optimum import neuron`), star imports, modules imported by
name at run time (`importlib.import_module`, `__import__`), and names built in strings (`eval`,
`mock.patch` targets, `sys.modules` keys).
"""

from __future__ import annotations

import textwrap

import pytest

from neuron_migrate.rewrite.engine import rewrite_source

CASES = {
    "module alias": """
        import optimum.neuron as on

        model = on.NeuronModelForCausalLM.from_pretrained("m", export=True, sequence_length=128)
        """,
    "package imported whole": """
        import optimum.neuron

        args = optimum.neuron.NeuronTrainingArguments(output_dir="out")
        """,
    "subpackage as a name": """
        from optimum import neuron

        args = neuron.NeuronTrainingArguments(output_dir="out")
        """,
    "subpackage among other names": """
        from optimum import (
            exporters,
            neuron,
        )

        args = neuron.NeuronTrainingArguments(output_dir="out")
        """,
    "import_module and getattr": """
        import importlib

        cls = getattr(importlib.import_module("optimum.neuron"), "NeuronModelForCausalLM")
        """,
    "eval of a built name": """
        import optimum.neuron

        def load(name):
            return eval("optimum.neuron." + name)
        """,
    "f-string name": """
        import importlib

        def load(name):
            module, _, cls = f"optimum.neuron.{name}".rpartition(".")
            return getattr(importlib.import_module(module), cls)
        """,
    "star import": """
        from optimum.neuron import *

        trainer = NeuronTrainer(model=model)
        """,
    "sys.modules key": """
        import sys
        import types

        sys.modules["optimum.neuron.models.training"] = types.ModuleType("stub")
        """,
    "availability import": """
        try:
            import optimum.neuron
            HAS_NEURON = True
        except ImportError:
            HAS_NEURON = False
        """,
    "torch_neuronx by name": """
        import importlib

        neuronx = importlib.import_module("torch_neuronx")
        traced = neuronx.trace(model, example)
        """,
    "torch_neuronx star import": """
        from torch_neuronx import *

        traced = trace(model, example)
        """,
    "neuronx_distributed patch target": """
        from unittest import mock

        @mock.patch("neuronx_distributed.parallel_layers.parallel_state.get_tensor_model_parallel_size")
        def test_size(size):
            size.return_value = 2
        """,
    "transformers_neuronx by __import__": """
        sampling = __import__("transformers_neuronx.sampling")
        """,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_old_stack_file_gets_a_change_or_a_todo(case: str) -> None:
    source = textwrap.dedent(CASES[case])
    result = rewrite_source(source, "script.py")
    assert result.error is None, result.error
    assert not result.skipped
    assert result.changes or result.manual, f"{case}: no report line\n{result.migrated}"
    assert result.migrated != source


def test_strings_that_only_name_a_package_are_left_alone() -> None:
    source = textwrap.dedent(
        """
        import importlib.util
        import torch

        HAS_NEURONX = importlib.util.find_spec("torch_neuronx") is not None
        print("install torch_neuronx from the Neuron repository")
        x = torch.zeros(2)
        """
    )
    result = rewrite_source(source, "script.py")
    assert result.migrated == source and not result.manual


def test_a_fallback_import_in_except_does_not_replace_the_migrated_one() -> None:
    """`except ImportError:` ran only when optimum-neuron was missing; natively the migrated
    import in `try` must bind the name itself, or the name is never bound."""
    source = textwrap.dedent(
        """
        try:
            from optimum.neuron import NeuronTrainer as Trainer
        except ImportError:
            from transformers import Trainer

        trainer_class = Trainer
        """
    )
    result = rewrite_source(source, "script.py")
    namespace: dict[str, object] = {}
    exec(compile(result.migrated, "script.py", "exec"), namespace)
    from transformers import Trainer

    assert namespace["trainer_class"] is Trainer
    assert result.changes


def test_repeated_string_references_get_one_todo_imports_by_name_each_their_own() -> None:
    source = textwrap.dedent(
        """
        import importlib
        from unittest import mock

        @mock.patch("neuronx_distributed.parallel_layers.parallel_state.get_tensor_model_parallel_size")
        @mock.patch("neuronx_distributed.parallel_layers.parallel_state.get_data_parallel_size")
        def test_sizes(tp, dp):
            layers = importlib.import_module("neuronx_distributed.parallel_layers")

        @mock.patch("neuronx_distributed.trainer.checkpoint.save_checkpoint")
        def test_save(save):
            pass
        """
    )
    result = rewrite_source(source, "test_nxd.py")
    messages = [m.message for m in result.manual]
    assert len(messages) == 2, messages
    assert sum("stands for every `" in m for m in messages) == 1
    assert any(m.startswith("a string names `neuronx_distributed.parallel_layers`") for m in messages)
