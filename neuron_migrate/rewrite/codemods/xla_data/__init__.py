"""The device-loader family: torch_xla's `MpDeviceLoader` and `ParallelLoader`, which moved each
batch to the device ahead of the step, become a plain loader whose batches are moved eagerly."""

from neuron_migrate.rewrite.codemods.xla_data.codemod import DEVICE_LOADER, XlaData

__all__ = ["DEVICE_LOADER", "XlaData"]
