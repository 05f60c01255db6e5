"""A stand-in for TorchNeuron's `neuron` torch.compile backend, so that what Neuron's compiler
would refuse is refused on any machine, and what it would compile is counted.

`register()` makes `torch.compile(..., backend="neuron")` mean this backend where no real one is
installed. Like TorchNeuron's it

* refuses a graph in which any dimension is symbolic (`dynamic=True`, automatic dynamic shapes,
  unbacked sizes of data-dependent ops), with TorchNeuron's own message; with `dynamic=False`
  each new input shape is a new static graph, as on Trainium;
* refuses boolean-mask `index_put` (`x[mask] = v`), which needs `nonzero`;
* runs each graph through AOT Autograd with the graph itself as the compiled code (aot_eager), so
  forward and backward run eagerly, in fp32 where the model is fp32.

While `recording()` is open it counts the graphs it was given, Dynamo's recompilations and their
guard failures, and Dynamo's graph breaks with the `file:line` of the user code that broke.

It does not model: the Neuron compiler itself (lowering to StableHLO, neuronx-cc, NEFF caching,
compile time), the downcast of 64-bit dtypes, the decomposition of complex numbers, ops that
fall back to the CPU, numerics of the device, memory limits, collectives, or `mode=` (Neuron
ignores every mode but "default"). A graph it accepts may still fail on Trainium for those.

torch is imported only when a function here is called, so that importing the module costs
nothing to the tools that do not compile.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

NAME = "neuron"
REJECTED = "Dynamic shapes detected in the model, but torch-neuronx requires static shapes"
BOOLEAN_INDEX_PUT = "Boolean index_put is not supported in torch.compile on Neuron."
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')
_GRAPH_BREAK = re.compile(
    r"Graph break (?:\(user stack suppressed[^)]*\) )?in user code at (?P<where>\S+:\d+)\n"
    r"Graph Break Reason: (?P<reason>[^\n]*)"
)


class NeuronRejected(RuntimeError):
    """What the stand-in raises where the Neuron backend would refuse the graph."""

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where  # "file:line" of the first operation with a symbolic size, if known


@dataclass
class GraphBreak:
    where: str  # "file:line" of the user code Dynamo stopped at
    reason: str


@dataclass
class CompileLog:
    """What the stand-in saw since it was last cleared."""

    graphs: int = 0
    symbolic: list[str] = field(default_factory=list)  # the symbols of each refused dynamic graph
    rejected: list[str] = field(default_factory=list)  # every refusal, with its message
    input_shapes: list[list[tuple[int, ...]]] = field(default_factory=list)  # per graph
    traced: set[tuple[str, int]] = field(default_factory=set)  # (file, line) of each traced op
    recompiles: list[str] = field(default_factory=list)  # "function (file:line): guard failure"
    graph_breaks: list[GraphBreak] = field(default_factory=list)

    def clear(self) -> None:
        self.__dict__.update(CompileLog().__dict__)


STATE = CompileLog()


def register() -> bool:
    """Make `backend="neuron"` mean the stand-in, unless a real backend of that name is installed
    (TorchNeuron registers one through the `torch_dynamo_backends` entry point). True when
    `backend="neuron"` is the stand-in."""
    import torch._dynamo

    if NAME in torch._dynamo.list_backends(exclude_tags=()):
        return torch._dynamo.lookup_backend(NAME) is neuron
    torch._dynamo.register_backend(name=NAME)(neuron)
    return True


def neuron(gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
    """The backend: refuse symbolic shapes, count the graph, run it through AOT Autograd."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    symbols, where = _symbolic_sizes(gm, example_inputs)
    if symbols:
        STATE.symbolic.append(str(symbols))
        message = f"{REJECTED}. Found {len(symbols)} dynamic dimension(s): {symbols}"
        STATE.rejected.append(message)
        raise NeuronRejected(message, where)
    STATE.graphs += 1
    STATE.input_shapes.append([tuple(v.shape) for v in example_inputs if hasattr(v, "shape")])
    STATE.traced |= _traced_lines(gm)

    def forward_compiler(graph: Any, inputs: list[Any]) -> Callable[..., Any]:
        _refuse_boolean_index_put(graph)
        return make_boxed_func(graph.forward)

    return aot_autograd(fw_compiler=forward_compiler)(gm, example_inputs)


def _symbolic_sizes(gm: Any, example_inputs: list[Any]) -> tuple[list[str], str | None]:
    """The free symbols of the graph's inputs and values, and where the first one appears."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_symbols

    found: set[Any] = set()
    for value in example_inputs:
        if isinstance(value, torch.SymInt | torch.Tensor):
            found |= free_symbols(value)
    where = None
    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        if value is None:
            continue
        with contextlib.suppress(Exception):  # values that are neither tensors nor symbols
            symbols = free_symbols(value)
            if symbols and where is None and node.op != "placeholder":
                where = _innermost(node.meta.get("stack_trace"))
            found |= symbols
    return sorted(map(str, found)), where


def _refuse_boolean_index_put(graph: Any) -> None:
    import torch

    for node in graph.graph.nodes:
        if node.target in (torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default):
            for index in node.args[1]:
                if index is not None and index.meta["val"].dtype == torch.bool:
                    STATE.rejected.append(BOOLEAN_INDEX_PUT)
                    raise NeuronRejected(BOOLEAN_INDEX_PUT, _innermost(node.meta.get("stack_trace")))


def _traced_lines(gm: Any) -> set[tuple[str, int]]:
    lines = set()
    for node in gm.graph.nodes:
        for frame in _FRAME.finditer(node.meta.get("stack_trace") or ""):
            lines.add((frame["file"], int(frame["line"])))
    return lines


def _innermost(stack_trace: str | None) -> str | None:
    frames = list(_FRAME.finditer(stack_trace or ""))
    return f"{frames[-1]['file']}:{frames[-1]['line']}" if frames else None


class _Collect(logging.Handler):
    def __init__(self, sink: Callable[[str], None]) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink(record.getMessage())


@contextlib.contextmanager
def recording() -> Iterator[CompileLog]:
    """A fresh Dynamo and a cleared `STATE` that counts recompilations and graph breaks too."""
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    STATE.clear()
    handlers = {
        "torch._dynamo.guards.__recompiles": _Collect(lambda m: STATE.recompiles.append(_recompile(m))),
        "torch._dynamo.symbolic_convert.__graph_breaks": _Collect(_graph_break),
        "torch._dynamo.convert_frame.__graph_breaks": _Collect(_graph_break),
    }
    # Dynamo's own warnings (the recompile limit reached, ...) are about what is counted here.
    torch._logging.set_logs(dynamo=logging.ERROR, recompiles=True, graph_breaks=True)
    propagated = {}
    for name, handler in handlers.items():
        logger = logging.getLogger(name)
        propagated[name], logger.propagate = logger.propagate, False  # counted here, not printed
        logger.addHandler(handler)
    try:
        yield STATE
    finally:
        for name, handler in handlers.items():
            logger = logging.getLogger(name)
            logger.removeHandler(handler)
            logger.propagate = propagated[name]
        torch._logging.set_logs()


def _graph_break(message: str) -> None:
    found = _GRAPH_BREAK.search(message)
    if found:
        STATE.graph_breaks.append(GraphBreak(found["where"], found["reason"].strip()))
    elif message.startswith("Graph break"):  # a frame Dynamo cannot resume, skipped whole
        STATE.graph_breaks.append(GraphBreak(_innermost(message) or "?", message.splitlines()[0]))


def _recompile(message: str) -> str:
    """'Recompiling function f in /x/y.py:3 ... - 0/0: tensor 'x' size mismatch' -> the reason.

    Dynamo lists the guard that failed for each graph already compiled; a size that differs
    from another bucket's graph says less than the guard of the graph of the same shapes."""
    lines = [line.strip() for line in message.splitlines()]
    function = lines[0].removeprefix("Recompiling function ") if lines else message
    guards = [line[2:].split(": ", 1)[-1] for line in lines if line.startswith("- ")]
    telling = [g for g in guards if "size mismatch" not in g] or guards
    return f"{function}: {telling[0]}" if telling else function


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception behind Dynamo's wrappers (BackendCompilerFailed and the like)."""
    while getattr(error, "inner_exception", None) is not None or error.__cause__ is not None:
        error = getattr(error, "inner_exception", None) or error.__cause__  # type: ignore[assignment]
    return error


@dataclass
class Outcome:
    graphs: int
    graph_breaks: set[str]  # "GB0036"-style ids seen in Dynamo's graph-break and unsupported counters
    error: BaseException | None

    @property
    def rejected(self) -> bool:
        return self.error is not None and isinstance(root_cause(self.error), NeuronRejected)

    @property
    def unsupported(self) -> bool:
        import torch._dynamo.exc

        return isinstance(self.error, torch._dynamo.exc.Unsupported)


def compile_and_run(fn: Any, inputs: tuple[Any, ...], *, fullgraph: bool) -> Outcome:
    """Compile `fn` as Neuron users must (`dynamic=False`) and call it once."""
    import torch
    from torch._dynamo.utils import counters

    register()
    with recording() as log:
        compiled = torch.compile(fn, backend=NAME, dynamic=False, fullgraph=fullgraph)
        error = None
        try:
            compiled(*inputs)
        except Exception as exc:  # the outcome under test
            error = exc
        messages = [*counters["graph_break"], *counters["unimplemented"]]
    breaks = {f"GB{m}" for text in messages for m in re.findall(r"gb(\d{4})\.html", text)}
    return Outcome(log.graphs, breaks, error)
