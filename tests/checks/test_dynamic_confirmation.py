"""Dynamic confirmation: what each rule predicts statically, a compile shows.

For every rule with a `CONFIRM` pair, the bad snippet is compiled with `dynamic=False` and the
stand-in `neuron` backend (which rejects symbolic shapes and boolean `index_put` as the real one
does): the predicted graph breaks or rejections must happen, and the good snippet must compile
to one static graph. Both snippets are also run through the checker, so prediction and
measurement cannot drift apart. NM116 (dynamic shapes switched on) gets its own test, since the
hazard is in how `torch.compile` is called.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from neuron_migrate.checks.checker import CheckOptions, check_source  # noqa: E402
from neuron_migrate.checks.model import Severity  # noqa: E402
from neuron_migrate.checks.rules import all_rules  # noqa: E402
from neuron_migrate.checks.rules.base import Rule  # noqa: E402
from neuron_migrate.core import neuron_backend  # noqa: E402

neuron_backend.register()  # `backend="neuron"` below is the stand-in

CONFIRMED = [pytest.param(r, id=r.code) for r in all_rules() if r.CONFIRM is not None]
ALL = CheckOptions(min_severity=Severity.INFO)


def _forward(source: str):
    namespace: dict[str, object] = {}
    exec(compile(source, "<example>", "exec"), namespace)  # the rule's own example
    return namespace["forward"]


@pytest.fixture
def dynamo_config():
    """Examples may switch Dynamo flags on (NM115); put them back afterwards."""
    with torch._dynamo.config.patch(
        capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False
    ):
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize("rule", CONFIRMED)
def test_bad_example_breaks_or_is_rejected(rule: type[Rule], dynamo_config: None) -> None:
    confirm = rule.CONFIRM
    assert confirm is not None
    assert rule.code in {d.code for d in check_source(confirm.bad, "bad.py", ALL).diagnostics}
    inputs = eval(f"({confirm.inputs},)", {"torch": torch})

    partial = neuron_backend.compile_and_run(_forward(confirm.bad), inputs, fullgraph=False)
    if confirm.partial == "rejected":
        assert partial.rejected, partial
    else:
        assert partial.error is None, partial.error
        if confirm.breaks:
            assert set(confirm.breaks) <= partial.graph_breaks, partial.graph_breaks
            assert set(confirm.breaks) <= set(rule.graph_breaks)
        else:
            assert partial.graphs > 1

    full = neuron_backend.compile_and_run(_forward(confirm.bad), inputs, fullgraph=True)
    assert full.error is not None, f"{rule.code}: fullgraph=True compiled the bad example"
    if confirm.fullgraph == "rejected":
        assert full.rejected, full.error
    else:
        assert full.unsupported, full.error


@pytest.mark.parametrize("rule", CONFIRMED)
def test_good_example_is_one_static_graph(rule: type[Rule], dynamo_config: None) -> None:
    confirm = rule.CONFIRM
    assert confirm is not None
    assert rule.code not in {d.code for d in check_source(confirm.good, "good.py", ALL).diagnostics}
    inputs = eval(f"({confirm.inputs},)", {"torch": torch})
    for fullgraph in (False, True):
        outcome = neuron_backend.compile_and_run(
            _forward(confirm.good), inputs, fullgraph=fullgraph
        )
        assert outcome.error is None, outcome.error
        assert outcome.graphs == 1 and not outcome.graph_breaks


def test_nm116_automatic_dynamic_shapes_are_rejected(dynamo_config: None) -> None:
    """`torch.compile` without `dynamic=False` turns a dimension symbolic on the second shape."""
    source = "import torch\n\ndef forward(x):\n    return x * 2\n\ncompiled = torch.compile(forward, backend='neuron')\n"
    assert "NM116" in {d.code for d in check_source(source, "m.py", ALL).diagnostics}
    with neuron_backend.recording():
        compiled = torch.compile(_forward(source), backend="neuron")
        compiled(torch.randn(8))
        with pytest.raises(Exception) as caught:
            compiled(torch.randn(16))
    assert isinstance(neuron_backend.root_cause(caught.value), neuron_backend.NeuronRejected)

    fixed = check_source(source, "m.py", CheckOptions(codes=frozenset({"NM116"}), fix=True)).fixed
    assert fixed is not None and "dynamic=False" in fixed
    with neuron_backend.recording() as log:
        static = torch.compile(_forward(source), backend="neuron", dynamic=False)
        static(torch.randn(8))
        static(torch.randn(16))
    assert log.graphs == 2 and not log.rejected  # one static graph per shape


def test_nm113_varying_python_scalars_recompile(dynamo_config: None) -> None:
    """A loop counter passed to compiled code is a new static graph per value; a tensor is not."""
    source = "import torch\n\ndef run(fn, x):\n    cfn = torch.compile(fn)\n    for step in range(3):\n        cfn(x, step)\n"
    assert "NM113" in {d.code for d in check_source(source, "m.py", ALL).diagnostics}

    def scaled(x: torch.Tensor, step: object) -> torch.Tensor:
        return x * step

    for steps, graphs in (
        ([0, 1, 2], 3),
        ([torch.tensor(0.0), torch.tensor(1.0), torch.tensor(2.0)], 1),
    ):
        with neuron_backend.recording() as log:
            compiled = torch.compile(scaled, backend="neuron", dynamic=False)
            for step in steps:
                compiled(torch.randn(4), step)
        assert log.graphs == graphs


def test_nm117_python_state_changed_by_compiled_code_recompiles(dynamo_config: None) -> None:
    """A cache's Python count, changed by the compiled `update` and compared there, is a new graph
    per call (Dynamo guards on `cache.seen == 0`, then `== 1`...); kept in a 0-d tensor, one graph."""
    from neuron_migrate.checks.rules.nm117_mutated_python_state import COUNTER

    found = [d for d in check_source(COUNTER, "m.py", ALL).diagnostics if d.code == "NM117"]
    assert [(d.line, d.severity.label) for d in found] == [(14, "warning")]
    namespace: dict[str, object] = {}
    exec(compile(COUNTER, "<example>", "exec"), namespace)  # the rule's own example

    class TensorRing:
        def __init__(self, window: int) -> None:
            self.window = window
            self.seen = torch.tensor(0)
            self.keys = torch.zeros(1, window, 8)

        def update(self, k: torch.Tensor) -> torch.Tensor:
            full = self.seen >= self.window
            self.seen.add_(k.shape[1])
            self.keys.copy_(torch.where(full, torch.roll(self.keys, -1, 1), self.keys))
            return self.keys

    for make, graphs in ((namespace["RingCache"], 4), (TensorRing, 1)):
        cache = make(2)  # type: ignore[operator]

        def step(k: torch.Tensor, cache: object = cache) -> torch.Tensor:
            return cache.update(k) * 2  # type: ignore[attr-defined]

        with neuron_backend.recording() as log:
            compiled = torch.compile(step, backend="neuron", dynamic=False)
            for _ in range(4):
                compiled(torch.randn(1, 1, 8))
        assert log.graphs == graphs, log.recompiles


def test_nm103_write_under_a_trace_time_guard_is_compiled_only_when_it_holds(dynamo_config: None) -> None:
    """`if self.config.image_token_id >= self.vocab_size:` (Gemma 3) is decided when tracing: with an
    id inside the vocabulary the boolean write is never compiled; outside, the backend refuses it."""
    source = (
        "class Model:\n    def forward(self, input_ids):\n"
        "        if input_ids is not None and self.config.image_token_id >= self.vocab_size:\n"
        "            ids = input_ids.clone()\n            ids[input_ids == self.config.image_token_id] = 0\n"
        "            return ids\n        return input_ids\n"
    )
    found = [d for d in check_source(source, "m.py", ALL).diagnostics if d.code == "NM103"]
    assert [d.severity for d in found] == [Severity.INFO]
    namespace: dict[str, object] = {}
    exec(compile(source, "<example>", "exec"), namespace)
    for image_token_id, rejected in ((5, False), (80, True)):
        model = namespace["Model"]()  # type: ignore[operator]
        model.config = type("Config", (), {"image_token_id": image_token_id})()
        model.vocab_size = 64
        outcome = neuron_backend.compile_and_run(model.forward, (torch.randint(0, 64, (2, 8)),), fullgraph=True)
        assert outcome.rejected is rejected, outcome.error
        if not rejected:
            assert outcome.graphs == 1
