"""Random draws made on the host, so that the old and the new stack draw the same numbers.

With the same seed the two stacks still draw different noise: the old stack draws on the XLA
device from XLA's own generator, a native program from its device's generator, and a draw in
bfloat16 gives other numbers than the same draw in float32 rounded to bfloat16. Installed by the
capture, this module makes every draw whose result lives on a device other than the CPU, or in a
16-bit float type, on the CPU from torch's default generator, in float32 (int64 for integers),
then moves and casts it. Dropout draws its mask the same way on every device, and attention with
dropout runs as its math form around that dropout. Both programs then consume the host generator
in the same order and get the same numbers, whatever their device and precision.

A draw given its own `generator=` or `out=` is left alone (counted as not routed), and so are the
draws this module does not know (alpha dropout, Poisson, ...). With `route=False` nothing is
routed and the device draws are only counted, so that a difference they explain can be named.
Only the standard library and torch.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Any

LOW_PRECISION = ("bfloat16", "float16")
# torch.X(*size, ...) that draw floats / integers.
FLOAT_FACTORIES = ("rand", "randn")
LIKE_FACTORIES = ("rand_like", "randn_like")
TENSOR_INPUT = ("bernoulli", "multinomial", "normal")  # draws from tensor arguments
IN_PLACE = (
    "uniform_",
    "normal_",
    "bernoulli_",
    "random_",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
)


class HostRandom:
    """Installs the routing and counts what was routed (and what could not be)."""

    def __init__(self, torch, route: bool = True) -> None:
        self.torch = torch
        self.route = route
        self.routed: Counter[str] = Counter()
        self.unrouted: Counter[str] = Counter()  # device draws left to the device's generator
        self.cpu = torch.device("cpu")
        self._install()

    def summary(self) -> dict[str, Any]:
        return {"route": self.route, "routed": dict(self.routed), "unrouted": dict(self.unrouted)}

    # -- when a draw is routed ----------------------------------------------------------------

    def _routes(self, name: str, kwargs: dict, device, dtype) -> bool:
        """Whether this draw is made on the host; counts it either way."""
        torch = self.torch
        device = torch.device(device) if device is not None else torch.get_default_device()
        on_device = device.type != "cpu"
        if kwargs.get("generator") is not None or kwargs.get("out") is not None or not self.route:
            if on_device:
                self.unrouted[name] += 1
            return False
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        if on_device or str(dtype).replace("torch.", "") in LOW_PRECISION:
            self.routed[name] += 1
            return True
        return False

    def _host_dtype(self, dtype):
        torch = self.torch
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        if dtype.is_floating_point:
            return torch.float64 if dtype == torch.float64 else torch.float32
        return torch.int64 if dtype != torch.bool else torch.bool

    # -- installation -------------------------------------------------------------------------

    def _install(self) -> None:
        torch = self.torch
        for name in LIKE_FACTORIES:  # before the factories they draw with
            setattr(torch, name, self._like(name, getattr(torch, name)))
        for name in FLOAT_FACTORIES:
            setattr(torch, name, self._factory(name, getattr(torch, name)))
        torch.randint = self._randint(torch.randint)
        torch.randperm = self._randperm(torch.randperm)
        torch.randint_like = self._randint_like(torch.randint_like)
        for name in TENSOR_INPUT:
            setattr(torch, name, self._from_tensors(name, getattr(torch, name)))
        for name in IN_PLACE:
            setattr(torch.Tensor, name, self._in_place(name, getattr(torch.Tensor, name)))
        functional = torch.nn.functional
        functional.dropout = self._dropout(functional.dropout)
        functional.scaled_dot_product_attention = self._attention(
            functional.scaled_dot_product_attention
        )
        for name in (
            "alpha_dropout",
            "feature_alpha_dropout",
            "dropout1d",
            "dropout2d",
            "dropout3d",
        ):
            original = getattr(functional, name, None)
            if original is not None:
                setattr(functional, name, self._counted(name, original))

    def _moved(self, tensor, device, dtype, requires_grad: bool):
        result = tensor.to(device=device, dtype=dtype)
        return result.requires_grad_() if requires_grad else result

    def _factory(self, name: str, original):
        router = self

        @functools.wraps(original)
        def factory(*size, **kwargs):
            device, dtype = kwargs.get("device"), kwargs.get("dtype")
            if not router._routes(name, kwargs, device, dtype):
                return original(*size, **kwargs)
            target = router.torch.device(device) if device is not None else None
            target = target or router.torch.get_default_device()
            wanted = dtype if dtype is not None else router.torch.get_default_dtype()
            requires_grad = bool(kwargs.pop("requires_grad", False))
            kwargs.pop("pin_memory", None)
            kwargs.update(device=router.cpu, dtype=router._host_dtype(wanted))
            return router._moved(original(*size, **kwargs), target, wanted, requires_grad)

        return factory

    def _randint(self, original):
        router = self

        @functools.wraps(original)
        def randint(*args, **kwargs):
            device, dtype = kwargs.get("device"), kwargs.get("dtype")
            torch = router.torch
            if not router._routes("randint", kwargs, device, dtype or torch.int64):
                return original(*args, **kwargs)
            target = torch.device(device) if device is not None else torch.get_default_device()
            wanted = dtype if dtype is not None else torch.int64
            requires_grad = bool(kwargs.pop("requires_grad", False))
            kwargs.pop("pin_memory", None)
            kwargs.update(device=router.cpu, dtype=torch.int64)
            return router._moved(original(*args, **kwargs), target, wanted, requires_grad)

        return randint

    def _randperm(self, original):
        router = self

        @functools.wraps(original)
        def randperm(n, **kwargs):
            device = kwargs.get("device")
            torch = router.torch
            if not router._routes("randperm", kwargs, device, torch.int64):
                return original(n, **kwargs)
            target = torch.device(device) if device is not None else torch.get_default_device()
            wanted = kwargs.get("dtype") or torch.int64
            kwargs.pop("pin_memory", None)
            kwargs.pop("requires_grad", None)
            kwargs.update(device=router.cpu, dtype=torch.int64)
            return original(n, **kwargs).to(device=target, dtype=wanted)

        return randperm

    def _like(self, name: str, original):
        router = self
        factory = getattr(self.torch, name.removesuffix("_like"))  # not yet routed: installed after

        @functools.wraps(original)
        def like(input, **kwargs):
            device = kwargs.get("device") or input.device
            dtype = kwargs.get("dtype") or input.dtype
            if not router._routes(name, kwargs, device, dtype):
                return original(input, **kwargs)
            requires_grad = bool(kwargs.pop("requires_grad", False))
            for key in ("memory_format", "layout", "pin_memory"):
                kwargs.pop(key, None)
            kwargs.update(device=router.cpu, dtype=router._host_dtype(dtype))
            return router._moved(factory(*input.shape, **kwargs), device, dtype, requires_grad)

        return like

    def _randint_like(self, original):
        router = self

        @functools.wraps(original)
        def randint_like(input, *bounds, **kwargs):
            device = kwargs.get("device") or input.device
            dtype = kwargs.get("dtype") or input.dtype
            if not router._routes("randint_like", kwargs, device, dtype):
                return original(input, *bounds, **kwargs)
            kwargs.pop("memory_format", None)
            kwargs.pop("layout", None)
            requires_grad = bool(kwargs.pop("requires_grad", False))
            kwargs.update(device=router.cpu, dtype=router.torch.int64)
            host = router.torch.randint(*bounds, tuple(input.shape), **kwargs)
            return router._moved(host, device, dtype, requires_grad)

        return randint_like

    def _from_tensors(self, name: str, original):
        """bernoulli(p), multinomial(probs, n), normal(mean, std): arguments on the host, result back."""
        router = self

        @functools.wraps(original)
        def draw(*args, **kwargs):
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, router.torch.Tensor)]
            if not tensors:
                return original(*args, **kwargs)  # normal(mean, std, size, ...): a factory
            first = tensors[0]
            if not router._routes(name, kwargs, first.device, first.dtype):
                return original(*args, **kwargs)
            result = original(*router._to_host(args), **router._to_host(kwargs))
            dtype = first.dtype if result.is_floating_point() else result.dtype
            return result.to(device=first.device, dtype=dtype)

        return draw

    def _to_host(self, value):
        torch = self.torch
        if isinstance(value, torch.Tensor):
            return value.detach().to(device=self.cpu, dtype=self._host_dtype(value.dtype))
        if isinstance(value, dict):
            return {k: self._to_host(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._to_host(v) for v in value)
        return value

    def _in_place(self, name: str, original):
        router = self

        @functools.wraps(original)
        def fill(tensor, *args, **kwargs):
            if not router._routes(name, kwargs, tensor.device, tensor.dtype):
                return original(tensor, *args, **kwargs)
            host = router.torch.empty(
                tuple(tensor.shape), dtype=router._host_dtype(tensor.dtype), device=router.cpu
            )
            original(host, *router._to_host(args), **router._to_host(kwargs))
            with router.torch.no_grad():
                tensor.copy_(host)
            return tensor

        return fill

    def _counted(self, name: str, original):
        """Draws this module cannot route: left to the device, counted where they are on one."""
        router = self

        @functools.wraps(original)
        def draw(input, *args, **kwargs):
            training = kwargs.get("training", args[1] if len(args) > 1 else True)
            if training and input.device.type != "cpu":
                router.unrouted[name] += 1
            return original(input, *args, **kwargs)

        return draw

    def _dropout(self, original):
        router = self

        @functools.wraps(original)
        def dropout(input, p=0.5, training=True, inplace=False):
            if not training or p == 0 or p == 1:
                return original(input, p, training, inplace)
            if not router.route:
                if input.device.type != "cpu":
                    router.unrouted["dropout"] += 1
                return original(input, p, training, inplace)
            router.routed["dropout"] += 1
            torch = router.torch
            keep = torch.empty(tuple(input.shape), dtype=torch.float32, device=router.cpu)
            keep.bernoulli_(1 - p)  # the host generator, whatever the device
            mask = keep.div_(1 - p).to(device=input.device, dtype=input.dtype)
            return input.mul_(mask) if inplace else input * mask

        return dropout

    def _attention(self, original):
        """Attention with dropout, as its math form: softmax(q k^T * scale + mask), dropout, @ v."""
        router = self

        @functools.wraps(original)
        def scaled_dot_product_attention(
            query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs
        ):
            if not dropout_p or kwargs.get("enable_gqa") or not router.route:
                if dropout_p and query.device.type != "cpu":
                    router.unrouted["scaled_dot_product_attention"] += 1
                return original(
                    query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **kwargs
                )
            torch = router.torch
            scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
            scores = (query @ key.transpose(-2, -1)) * scale
            length, source = query.shape[-2], key.shape[-2]
            if is_causal:
                causal = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
                scores = scores.masked_fill(~causal, float("-inf"))
            if attn_mask is not None:
                if attn_mask.dtype == torch.bool:
                    scores = scores.masked_fill(~attn_mask, float("-inf"))
                else:
                    scores = scores + attn_mask
            weights = torch.softmax(scores, dim=-1)
            weights = torch.nn.functional.dropout(weights, dropout_p, True)  # routed above
            return weights @ value

        return scaled_dot_product_attention
