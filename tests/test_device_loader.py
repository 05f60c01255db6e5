"""The `DeviceLoader` written in place of torch_xla's device loaders behaves as they did."""

from __future__ import annotations

import pytest
import torch

from neuron_migrate.rewrite.codemods.xla_data import DEVICE_LOADER


def _loader_class() -> type:
    namespace: dict = {"torch": torch}
    exec(DEVICE_LOADER.format(name="DeviceLoader", torch="torch"), namespace)
    return namespace["DeviceLoader"]


def test_next_draws_one_pass_as_per_device_loader_did() -> None:
    batches = [(torch.ones(2), torch.tensor([1, 2])), (torch.zeros(2), torch.tensor([3, 4]))]
    loader = _loader_class()(batches, torch.device("cpu"))
    first = next(loader)
    second = next(loader)
    assert torch.equal(first[0], torch.ones(2)) and torch.equal(second[1], torch.tensor([3, 4]))
    with pytest.raises(StopIteration):
        next(loader)


def test_each_for_loop_is_a_new_pass_as_with_mp_device_loader() -> None:
    loader = _loader_class()([{"x": torch.ones(1)}, {"x": torch.zeros(1)}], torch.device("cpu"))
    assert len(loader) == 2
    assert [batch["x"].item() for batch in loader] == [1.0, 0.0]
    assert [batch["x"].item() for batch in loader] == [1.0, 0.0]
