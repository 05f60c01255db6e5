"""A test-only stand-in for the `neuron` dynamo backend: it rejects symbolic shapes and boolean
`index_put`, as TorchNeuron's backend does, and records what it compiled.

Registered through `torch._dynamo.register_backend(name="neuron")` (torchneuron-facts.md
§2.6a). Importing this module imports torch, so only the dynamic tests do.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # never autoload a real torch_neuronx

import torch
from torch._dynamo.backends.common import aot_autograd
from torch.fx.experimental.symbolic_shapes import free_symbols


class NeuronRejected(RuntimeError):
    """What the stand-in raises where the Neuron backend would refuse the graph."""


@dataclass
class Compiled:
    graphs: int = 0
    symbolic: list[str] = field(default_factory=list)


STATE = Compiled()


def _symbols(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> set[Any]:
    found: set[Any] = set()
    for value in example_inputs:
        if isinstance(value, torch.SymInt | torch.Tensor):
            found |= free_symbols(value)
    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        if value is not None:
            with contextlib.suppress(Exception):  # values that are not tensors or symbols
                found |= free_symbols(value)
    return found


def _forward_compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    for node in gm.graph.nodes:
        if node.target in (torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default):
            for index in node.args[1]:
                if index is not None and index.meta["val"].dtype == torch.bool:
                    raise NeuronRejected(
                        "Boolean index_put is not supported in torch.compile on Neuron."
                    )
    return gm.forward


_AOT = aot_autograd(fw_compiler=_forward_compiler)


def neuron(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    symbols = _symbols(gm, example_inputs)
    if symbols:
        STATE.symbolic.append(str(sorted(map(str, symbols))))
        raise NeuronRejected(
            "Dynamic shapes detected in the model, but torch-neuronx requires static shapes. "
            f"Found {len(symbols)} dynamic dimension(s): {sorted(map(str, symbols))}"
        )
    STATE.graphs += 1
    return _AOT(gm, example_inputs)


if "neuron" not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(name="neuron")(neuron)


@dataclass
class Outcome:
    graphs: int
    graph_breaks: set[
        str
    ]  # "GB0036"-style ids seen in Dynamo's graph-break and unsupported counters
    error: BaseException | None

    @property
    def rejected(self) -> bool:
        return self.error is not None and isinstance(_root(self.error), NeuronRejected)

    @property
    def unsupported(self) -> bool:
        return isinstance(self.error, torch._dynamo.exc.Unsupported)


def _root(error: BaseException) -> BaseException:
    while getattr(error, "inner_exception", None) is not None or error.__cause__ is not None:
        error = getattr(error, "inner_exception", None) or error.__cause__  # type: ignore[assignment]
    return error


def compile_and_run(fn: Any, inputs: tuple[Any, ...], *, fullgraph: bool) -> Outcome:
    """Compile `fn` as Neuron users must (`dynamic=False`) and call it once."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    STATE.graphs, STATE.symbolic = 0, []
    compiled = torch.compile(fn, backend="neuron", dynamic=False, fullgraph=fullgraph)
    error = None
    try:
        compiled(*inputs)
    except Exception as exc:  # the outcome under test
        error = exc
    messages = [*counters["graph_break"], *counters["unimplemented"]]
    breaks = {f"GB{m}" for text in messages for m in re.findall(r"gb(\d{4})\.html", text)}
    return Outcome(STATE.graphs, breaks, error)
