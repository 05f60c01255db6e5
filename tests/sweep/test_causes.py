"""Each failure of a compiled run gets one cause and the line of user code it points at."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from neuron_migrate.core import neuron_backend  # noqa: E402
from neuron_migrate.sweep import causes  # noqa: E402


def _failure_of(fn, *inputs: torch.Tensor) -> causes.Failure:
    neuron_backend.register()
    with neuron_backend.recording():
        compiled = torch.compile(fn, backend="neuron", dynamic=False, fullgraph=True)
        with pytest.raises(Exception) as caught:
            compiled(*inputs)
    return causes.classify(caught.value)


def test_a_graph_break_says_what_dynamo_could_not_trace() -> None:
    def noisy(x: torch.Tensor) -> torch.Tensor:
        print("not in a graph")
        return x * 2

    failure = _failure_of(noisy, torch.ones(2))
    assert failure.cause == causes.GRAPH_BREAK
    assert failure.reason.startswith("Failed to trace builtin operator: ")
    assert "`print`" in failure.reason
    assert failure.where is None  # only lines of transformers are named: this is a test


def test_a_data_dependent_size_is_its_own_cause() -> None:
    def positives(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0)

    assert _failure_of(positives, torch.randn(6)).cause == causes.DATA_DEPENDENT


def test_a_data_dependent_branch_is_a_data_dependent_cause() -> None:
    def branchy(x: torch.Tensor) -> torch.Tensor:
        if (x > 0).any():
            return x
        return -x

    assert _failure_of(branchy, torch.randn(6)).cause == causes.DATA_DEPENDENT


def test_boolean_index_put_is_an_unsupported_op() -> None:
    def clamp(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[x < 0] = 0
        return x

    failure = _failure_of(clamp, torch.randn(6))
    assert failure.cause == causes.UNSUPPORTED
    assert failure.reason == neuron_backend.BOOLEAN_INDEX_PUT


def test_recompiles_beyond_the_buckets_name_the_guard_and_its_line() -> None:
    recompiles = [
        "wrapper in transformers/utils/generic.py:937: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 16, actual 1",
        "wrapper in transformers/utils/generic.py:937: kwargs['past_key_values'].layers[0].cumulative_length_int == 17  # is_full = current_length >= self.max_cache_len  # transformers/cache_utils.py:550 in update",
    ]
    failure = causes.recompile_failure(recompiles, graphs=4)
    assert failure.cause == causes.RECOMPILE_VALUE
    assert failure.where == "transformers/cache_utils.py:550"
    assert failure.reason == (
        "guard `kwargs['past_key_values'].layers[0].cumulative_length_int == 17` failed "
        "(`is_full = current_length >= self.max_cache_len`)"
    )


def test_errors_in_the_cache_set_up_mean_no_static_cache() -> None:
    def _prepare_cache_for_generation() -> None:
        raise AttributeError("'MambaConfig' object has no attribute 'num_attention_heads'")

    with pytest.raises(AttributeError) as caught:
        _prepare_cache_for_generation()
    failure = causes.cache_failure(caught.value)
    assert failure is not None and failure.cause == causes.NO_STATIC_CACHE
    assert causes.cache_failure(ValueError("elsewhere")) is None


def test_every_cause_is_listed_once() -> None:
    assert len(set(causes.CAUSES)) == len(causes.CAUSES)


def test_a_guard_on_a_size_is_a_recompile_per_shape() -> None:
    recompiles = [
        "forward in model.py:10: tensor 'x' size mismatch at index 1. expected 16, actual 24  # h = self.proj(x)  # model.py:12 in forward",
    ]
    failure = causes.recompile_failure(recompiles, graphs=3)
    assert failure.cause == causes.RECOMPILE
    assert failure.where == "model.py:12"


LAZY_INIT = (
    "wrapper in transformers/utils/generic.py:937: kwargs['past_key_values'].layers[0].is_initialized == False"
    "  # if not self.is_initialized:  # transformers/cache_utils.py:475 in update"
)


def test_one_graph_more_on_the_first_prompt_only_is_its_own_cause() -> None:
    from neuron_migrate.sweep.generation import GenerationResult, _judge

    once = GenerationResult(True, graphs=3, buckets=2, graphs_after_first=3, recompiles=[LAZY_INIT])
    _judge(once, model=None, padded=[])
    assert (once.ok, once.cause, once.where) == (False, causes.RECOMPILE_ONCE, "transformers/cache_utils.py:475")
    assert once.reason.endswith("on the first prompt only, none for the later ones")
    later = GenerationResult(True, graphs=3, buckets=2, graphs_after_first=2, recompiles=[LAZY_INIT])
    _judge(later, model=None, padded=[])
    assert later.cause == causes.RECOMPILE_VALUE  # a later prompt compiled again: not a one-off
