"""The noise-floor runs: the same program with its low precision turned off, float32 throughout
(`Upcast`), a float32 program in float64 (`Widen`), or a program in its own precision with its
rounding moved (`Perturb`).

A bf16 run differs from its float32 twin by rounding alone; that difference is the noise floor
against which `validate` judges the migrated program. This module turns a program's ways of
asking for 16-bit floats into float32, without editing it:

* `XLA_USE_BF16` / `XLA_DOWNCAST_BF16` stay visible to the program's own code (it may choose
  behaviour from them) but never reach the XLA runtime, which reads them from the C environment;
* autocast regions run disabled;
* `Module.to(torch.bfloat16)`, `.bfloat16()`, `.half()`, the same on tensors,
  `torch.set_default_dtype(torch.bfloat16)` and transformers' `from_pretrained(dtype=...)` give
  float32 instead.

What it changed is counted, so that a floor run that changed nothing (a precision this module
does not see) is known for what it is. Only the standard library and torch.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from typing import Any

SWITCHES = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
LOW_PRECISION = ("bfloat16", "float16", "half")


class Upcast:
    def __init__(self) -> None:
        self.changed: Counter[str] = Counter()
        self.torch: Any = None
        self._hide_switches()

    def summary(self) -> dict[str, int]:
        return dict(self.changed)

    def _hide_switches(self) -> None:
        environ: Any = os.environ
        for name in SWITCHES:
            if environ.get(name, "0") not in ("", "0"):
                os.unsetenv(name)  # os.environ keeps its copy: the program still reads it
                self.changed[name] += 1
        environ_type = type(environ)
        original = environ_type.__setitem__
        upcast = self

        @functools.wraps(original)
        def __setitem__(mapping: Any, key, value):
            if mapping is environ and key in SWITCHES:
                mapping._data[mapping.encodekey(key)] = mapping.encodevalue(value)
                if value not in ("", "0"):
                    upcast.changed[key] += 1
                return
            original(mapping, key, value)

        environ_type.__setitem__ = __setitem__

    # -- torch -------------------------------------------------------------------------------

    def on_torch(self, torch) -> None:
        self.torch = torch
        for owner, label in ((torch.nn.Module, "Module"), (torch.Tensor, "Tensor")):
            owner.to = self._to(owner.to, f"{label}.to")
            for name in ("bfloat16", "half"):
                setattr(owner, name, self._full(owner, name, label))
        torch.set_default_dtype = self._default_dtype(torch.set_default_dtype)
        autocast = torch.amp.autocast_mode.autocast
        enter = autocast.__enter__
        upcast = self

        @functools.wraps(enter)
        def __enter__(region):
            if getattr(region, "_enabled", False):
                upcast.changed["autocast"] += 1
                region._enabled = False
            return enter(region)

        autocast.__enter__ = __enter__

    def _low(self, value) -> bool:
        torch = self.torch
        return isinstance(value, torch.dtype) and value in (torch.bfloat16, torch.float16)

    def _to(self, original, label: str):
        upcast = self

        @functools.wraps(original)
        def to(obj, *args, **kwargs):
            torch = upcast.torch
            if any(upcast._low(a) for a in args) or upcast._low(kwargs.get("dtype")):
                upcast.changed[label] += 1
                args = tuple(torch.float32 if upcast._low(a) else a for a in args)
                if upcast._low(kwargs.get("dtype")):
                    kwargs["dtype"] = torch.float32
            return original(obj, *args, **kwargs)

        return to

    def _full(self, owner, name: str, label: str):
        original = getattr(owner, name)
        upcast = self

        @functools.wraps(original)
        def full(obj, *args, **kwargs):
            upcast.changed[f"{label}.{name}"] += 1
            return obj.float(*args, **kwargs)

        return full

    def _default_dtype(self, original):
        upcast = self

        @functools.wraps(original)
        def set_default_dtype(dtype):
            if upcast._low(dtype):
                upcast.changed["set_default_dtype"] += 1
                dtype = upcast.torch.float32
            return original(dtype)

        return set_default_dtype

    # -- transformers ------------------------------------------------------------------------

    def on_transformers_modeling(self, modeling_utils) -> None:
        model = modeling_utils.PreTrainedModel
        for name in ("from_pretrained", "_from_config"):
            original = getattr(model, name).__func__
            setattr(model, name, classmethod(self._loader(original, name)))

    def _loader(self, original, name: str):
        upcast = self

        @functools.wraps(original)
        def load(cls, *args, **kwargs):
            for keyword in ("dtype", "torch_dtype"):
                value = kwargs.get(keyword)
                if upcast._low(value) or (isinstance(value, str) and value in LOW_PRECISION):
                    upcast.changed[f"{name}({keyword}=)"] += 1
                    kwargs[keyword] = upcast.torch.float32
            return original(cls, *args, **kwargs)

        return load


class Widen:
    """The noise floor of a float32 run: the same program in float64 from the first forward on.

    Parameters are made in float32 as the program makes them (the same random draws), and each
    module is widened to float64 at its first call, with the float32 tensors it is given
    (positional or by keyword, in lists and tuples): what float32 rounding alone costs is then the
    distance between the program's float32 run and this one. Nothing random is drawn in float64 before the first forward; draws after it may differ
    (dropout masks), which `validate` tells apart by how far this run lands from the original."""

    def __init__(self) -> None:
        self.changed: Counter[str] = Counter()
        self.torch: Any = None
        self._widened: set[int] = set()

    def summary(self) -> dict[str, int]:
        return dict(self.changed)

    def on_torch(self, torch) -> None:
        self.torch = torch
        call = torch.nn.Module.__call__
        widen = self

        @functools.wraps(call)
        def __call__(module, *args, **kwargs):  # not a forward pre-hook: those see no keywords
            widen._widen(module)
            args = tuple(widen._wide(a) for a in args)
            kwargs = {k: widen._wide(v) for k, v in kwargs.items()}
            return call(module, *args, **kwargs)

        torch.nn.Module.__call__ = __call__

    def _widen(self, module) -> None:
        torch = self.torch
        if id(module) in self._widened:
            return
        self._widened.update(id(m) for m in module.modules())
        if any(t.dtype == torch.float32 for t in (*module.parameters(), *module.buffers())):
            module.to(torch.float64)
            self.changed["module widened"] += 1

    def _wide(self, value):
        torch = self.torch
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            self.changed["input widened"] += 1
            return value.to(torch.float64)
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(self._wide(v) for v in value)
        return value


class Perturb:
    """A run of the perturbation floor: the program as it is, with the output of every leaf
    module moved by one ulp, up or down at random, at every call.

    That is the rounding a faithful migration may change (another backend's kernels sum in another
    order), made afresh at every operation of every step as such kernels make it, so that what it
    grows into over the run (BatchNorm over a small batch amplifies it) measures what rounding alone
    can cost where a float64 run cannot. The gradient passes through unchanged. The signs come
    from a generator of its own (`seed`): the program's random draws are those of the original."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.changed: Counter[str] = Counter()
        self.torch: Any = None
        self.generator: Any = None

    def summary(self) -> dict[str, int]:
        return dict(self.changed)

    def on_torch(self, torch) -> None:
        self.torch = torch
        self.generator = torch.Generator().manual_seed(self.seed)
        torch.nn.modules.module.register_module_forward_hook(self._on_forward)

    def _on_forward(self, module, inputs, output):
        if next(module.children(), None) is not None:
            return None  # a container: its leaves moved what it returns
        if isinstance(output, (list, tuple)) and type(output) in (list, tuple):
            return type(output)(self._move(v) for v in output)
        return self._move(output)

    def _move(self, value):
        torch = self.torch
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or not value.numel():
            return value
        plain = value.detach()
        up = torch.rand(plain.shape, generator=self.generator) < 0.5
        infinity = torch.tensor(float("inf"), dtype=plain.dtype)
        toward = torch.where(up, infinity, -infinity).to(plain.device)
        moved = torch.nextafter(plain, toward)
        self.changed["module outputs moved by 1 ulp"] += 1
        # Adjacent floats differ by an exact amount: `value + step` is `moved`, and differentiable.
        return value + (moved - plain) if value.requires_grad else moved
