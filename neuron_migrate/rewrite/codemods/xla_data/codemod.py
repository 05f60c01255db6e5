"""NM004: `MpDeviceLoader` and `ParallelLoader` become a plain loader that moves batches."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from neuron_migrate.rewrite.codemods.base import Codemod, arg_value, code_of, dotted_name, expr
from neuron_migrate.rewrite.codemods.xla_data.moved_batches import loaders_moved_by_their_loops

MP_DEVICE_LOADER = ("torch_xla.distributed.parallel_loader.MpDeviceLoader",)
PARALLEL_LOADER = ("torch_xla.distributed.parallel_loader.ParallelLoader",)

DEVICE_LOADER = '''\
class {name}:
    """Iterates `loader` and moves each batch to `device`, as `MpDeviceLoader` did; `next()`
    draws from one pass, as from `ParallelLoader`'s `per_device_loader()`."""

    def __init__(self, loader, device):
        self.loader = loader
        self.device = device
        self._batches = None

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield self._move(batch)

    def __next__(self):
        if self._batches is None:
            self._batches = iter(self.loader)
        return self._move(next(self._batches))

    def _move(self, batch):
        if isinstance(batch, {torch}.Tensor):
            return batch.to(self.device, non_blocking=True)
        if isinstance(batch, dict):
            return {{key: self._move(value) for key, value in batch.items()}}
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*(self._move(value) for value in batch))
        if isinstance(batch, (list, tuple)):
            return type(batch)(self._move(value) for value in batch)
        return batch
'''


class XlaData(Codemod):
    """Replaces the XLA device loaders with a loader that moves each batch to the device.

    ## What it does
    `pl.MpDeviceLoader(loader, device)` and
    `pl.ParallelLoader(loader, [device]).per_device_loader(device)` become
    `DeviceLoader(loader, device)`, a short class added to the file that yields each batch
    (tensors, tuples, lists, dicts, named tuples) moved with `.to(device, non_blocking=True)`.
    It keeps `len()` and `next()` working, as the XLA loaders did. Where every use of the loader
    is `len()` or a loop that moves each name it unpacks to the same device itself
    (`x, y = x.to(device), y.to(device)`), the loader it wraps is used as it is.

    ## Why
    The XLA loaders overlap host-to-device copies with the lazy graph; native PyTorch moves
    batches eagerly, and `torch_xla` is gone.

    ## Example
    ```python
    train_device_loader = pl.MpDeviceLoader(train_loader, device)
    for data, target in train_device_loader:
        ...
    ```

    ## Use instead
    ```python
    train_device_loader = DeviceLoader(train_loader, device)
    for data, target in train_device_loader:
        ...
    ```

    ## Fix safety
    Safe. Prefetch settings (`loader_prefetch_size`, `device_prefetch_size`,
    `host_to_device_transfer_threads`, `batches_per_execution`) are dropped: use the
    `DataLoader`'s `num_workers`, `pin_memory` and `prefetch_factor`. `input_sharding=` (SPMD)
    gets a TODO. Static shapes still matter on Trainium: keep `drop_last=True` and fixed-length
    padding (see `neuron-migrate check`).
    """

    code = "NM004"
    name = "xla-device-loader"
    summary = "`MpDeviceLoader`/`ParallelLoader` -> a `DeviceLoader` that moves batches"
    triggers = (*MP_DEVICE_LOADER, *PARALLEL_LOADER)
    manual: ClassVar[dict[str, str]] = {
        "torch_xla.distributed.parallel_loader.PerDeviceLoader": "build a `DeviceLoader(loader, device)` instead",
    }

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.parallel_loaders: set[tuple[object, str]] = set()  # binding keys of `ParallelLoader`s
        # `ParallelLoader(...)` calls already rewritten: `.per_device_loader(d)` on one is the loader.
        self.rewritten: dict[int, cst.CSTNode] = {}
        self.moved_by_loops: set[int] = set()  # `MpDeviceLoader(...)` calls whose loops move batches

    def visit_Module(self, node: cst.Module) -> None:
        def is_loader(call: cst.Call) -> bool:
            return (dotted_name(call.func) or "").rpartition(".")[2] == "MpDeviceLoader"

        scopes = _Functions()
        node.visit(scopes)
        scopes_of_file: list[cst.Module | cst.FunctionDef] = [node, *scopes.found]
        for scope in scopes_of_file:
            self.moved_by_loops |= loaders_moved_by_their_loops(scope, is_loader)

    def _loader(self, loader: cst.BaseExpression, device: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression:
        if arg_value(call, None, "input_sharding") is not None:
            self.todo("`input_sharding=` sharded batches over an SPMD mesh; use DTensor `distribute_tensor` on each batch")
        name = self.ctx.unused_name("DeviceLoader")
        self.ctx.need_helper(name, DEVICE_LOADER.format(name=name, torch=self.ctx.torch()))
        return expr(f"{name}({code_of(loader)}, {code_of(device)})")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        name = self.qualify(updated_node.func)
        if name in MP_DEVICE_LOADER:
            loader, device = arg_value(updated_node, 0, "loader"), arg_value(updated_node, 1, "device")
            if loader is None or device is None:
                return updated_node
            if id(original_node) in self.moved_by_loops and arg_value(updated_node, None, "input_sharding") is None:
                self.changed("`MpDeviceLoader(loader, device)` -> `loader`: the loop moves each batch to the device itself")
                return loader.value
            self.changed("`MpDeviceLoader(loader, device)` -> `DeviceLoader(loader, device)`")
            return self._loader(loader.value, device.value, updated_node)
        func = updated_node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "per_device_loader":
            receiver = func.value
            if id(receiver) in self.rewritten:
                # The receiver already moves batches to the device `ParallelLoader` was given.
                return receiver
            if isinstance(receiver, cst.Name) and self.ctx.binding_key(receiver.value) in self.parallel_loaders:
                self.changed("`.per_device_loader(device)` -> the `DeviceLoader` itself")
                return receiver
        if name in PARALLEL_LOADER:
            loader, devices = arg_value(updated_node, 0, "loader"), arg_value(updated_node, 1, "devices")
            if loader is None or devices is None:
                return updated_node
            value = devices.value
            first: cst.BaseExpression
            if isinstance(value, cst.List | cst.Tuple) and len(value.elements) == 1:
                first = value.elements[0].value
            else:
                first = expr(f"{code_of(value)}[0]")
            self.changed("`ParallelLoader(loader, [device])` -> `DeviceLoader(loader, device)`")
            new = self._loader(loader.value, first, updated_node)
            self.rewritten[id(new)] = new
            return new
        return updated_node

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self.qualify(node.value.func) in PARALLEL_LOADER:
            for target in node.targets:
                key = self.ctx.binding_key(target.target.value) if isinstance(target.target, cst.Name) else None
                if key is not None:
                    self.parallel_loaders.add(key)


class _Functions(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.found.append(node)
