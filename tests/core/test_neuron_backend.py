"""The stand-in `neuron` backend refuses what Neuron refuses and counts what it compiles."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from neuron_migrate.core import neuron_backend  # noqa: E402


@pytest.fixture(autouse=True)
def registered() -> None:
    assert neuron_backend.register()
    assert neuron_backend.register()  # a second time changes nothing


def test_importing_the_module_does_not_import_torch() -> None:
    program = "import sys, neuron_migrate.core.neuron_backend; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_each_new_shape_is_a_new_static_graph() -> None:
    with neuron_backend.recording() as log:
        double = torch.compile(lambda x: x * 2, backend="neuron", dynamic=False)
        for length in (4, 8, 4):
            double(torch.ones(length))
    assert log.graphs == 2
    assert log.input_shapes == [[(4,)], [(8,)]]
    assert len(log.recompiles) == 1 and "size mismatch at index 0. expected 4, actual 8" in log.recompiles[0]


def test_dynamic_shapes_are_refused_with_torchneurons_message() -> None:
    with neuron_backend.recording() as log:
        double = torch.compile(lambda x: x * 2, backend="neuron", dynamic=True)
        with pytest.raises(Exception) as caught:
            double(torch.ones(4))
    refused = neuron_backend.root_cause(caught.value)
    assert isinstance(refused, neuron_backend.NeuronRejected)
    assert str(refused).startswith(neuron_backend.REJECTED)
    assert log.graphs == 0 and log.symbolic


def test_data_dependent_sizes_are_refused_where_they_arise() -> None:
    def positives(x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]  # the line the refusal names

    with neuron_backend.recording(), torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        compiled = torch.compile(positives, backend="neuron", dynamic=False, fullgraph=True)
        with pytest.raises(Exception) as caught:
            compiled(torch.randn(8))
    refused = neuron_backend.root_cause(caught.value)
    assert isinstance(refused, neuron_backend.NeuronRejected)
    assert refused.where == f"{__file__}:{positives.__code__.co_firstlineno + 1}"


def test_boolean_index_put_is_refused() -> None:
    def clamp(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[x < 0] = 0
        return x

    outcome = neuron_backend.compile_and_run(clamp, (torch.randn(8),), fullgraph=True)
    assert outcome.rejected and str(neuron_backend.root_cause(outcome.error)) == neuron_backend.BOOLEAN_INDEX_PUT  # type: ignore[arg-type]


def test_graph_breaks_are_counted_with_their_line() -> None:
    def noisy(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        print("between the graphs")  # the break
        return y * 2

    with neuron_backend.recording() as log:
        torch.compile(noisy, backend="neuron", dynamic=False)(torch.ones(3))
    assert log.graphs == 2
    [where] = {b.where for b in log.graph_breaks}
    assert where == f"{__file__}:{noisy.__code__.co_firstlineno + 2}"


def _scaled(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x) * 3  # a line of code the graph inlines


def test_forward_and_backward_run_and_the_traced_lines_are_kept() -> None:
    model = torch.nn.Linear(3, 2)
    with neuron_backend.recording() as log:
        compiled = torch.compile(lambda x: _scaled(model, x), backend="neuron", dynamic=False)
        compiled(torch.ones(4, 3)).sum().backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0
    assert log.graphs == 1
    assert (__file__, _scaled.__code__.co_firstlineno + 1) in log.traced
