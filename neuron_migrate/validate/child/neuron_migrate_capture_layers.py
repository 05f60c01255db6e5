"""What one training step computes, module by module: for localizing the first difference.

Asked for step S (the S-th `backward()` call, counted from 0), it records

* the output of every module that runs between backward S-1 and backward S, by qualified module
  name, in the order the calls finish (a module called again gets `#2`, `#3`), with its class;
* the parameters as the forward of step S used them, the gradients as backward S leaves them and
  as the optimizer step after it sees them (all-reduced, clipped, scaled), and the parameters after
  that step;
* for every step before S the gradients the optimizer saw and the parameters after its update, so
  that an update that differs (the learning rate, the optimizer) is told apart from a forward or
  backward that differs, wherever in the steps before S it started.

Phases are named `step<t>/<what>`: `grad`, `after` for every step, and `before`, `backward_grad`
for step S.

Names are qualified from the root module that holds them, with the wrappers DDP and
torch.compile add (`module.`, `_orig_mod.`) taken off; a root other than the one holding most
parameters is prefixed with its class name. Only the standard library and torch.
"""

from __future__ import annotations

import gc

WRAPPER_PREFIXES = ("module.", "_orig_mod.")
# Enough for the models a localization is run on; past it, outputs are no longer kept (and the
# manifest says so) rather than exhausting memory.
MAX_ELEMENTS = 200_000_000


WRAPPERS = frozenset({"DistributedDataParallel", "OptimizedModule", "FullyShardedDataParallel"})


def strip_wrappers(name: str) -> str:
    """`module._orig_mod.fc1` -> `fc1`; a wrapper's own name -> `(root)`."""
    parts = [part for part in name.split(".") if part not in ("module", "_orig_mod")]
    return ".".join(parts) or "(root)"


class StepLayers:
    def __init__(self, torch, step: int) -> None:
        self.torch = torch
        self.step = step
        self.backward_calls = 0
        self.outputs: list[tuple[str, str, object]] = []  # (key, module class, tensor)
        self.calls: dict[str, int] = {}
        self.names: dict[int, str] = {}
        self.main_root: int | None = None
        self.params: dict[str, dict[str, object]] = {}  # phase -> name -> tensor
        self.waiting_for: list[
            int
        ] = []  # steps whose gradients are kept at the next optimizer step
        self.updating: list[int] = []  # steps whose parameters are kept once that step is done
        self.elements = 0
        self.truncated = False
        self.window = step == 0
        torch.nn.modules.module.register_module_forward_hook(self.on_forward)

    # -- events from the recorder --------------------------------------------------------------

    def on_backward(self) -> None:
        """Called as backward() is entered."""
        step = self.backward_calls
        if step == self.step:
            self.window = False
            self._keep(f"step{step}/before", self._named_params(), grads=False)
        if step <= self.step:
            self.waiting_for.append(step)
        self.backward_calls += 1
        if self.backward_calls == self.step:
            self.window = True

    def on_backward_done(self) -> None:
        """Called as backward() returns: the gradients backward itself produced, at step S."""
        if self.backward_calls == self.step + 1:
            self._keep(f"step{self.step}/backward_grad", self._named_params(), grads=True)

    def on_step_pre(self) -> None:
        # With gradient accumulation several backward calls share an optimizer step: the last.
        if self.waiting_for:
            step = self.waiting_for[-1]
            self._keep(f"step{step}/grad", self._named_params(), grads=True)
            self.updating.append(step)
        self.waiting_for = []

    def on_step_post(self) -> None:
        for step in self.updating:
            self._keep(f"step{step}/after", self._named_params(), grads=False)
        self.updating = []

    def on_exit(self) -> None:
        """No optimizer step followed (an inference or a step-less program): gradients as they are."""
        if self.waiting_for:
            self._keep(f"step{self.waiting_for[-1]}/grad", self._named_params(), grads=True)
        self.waiting_for = []

    # -- recording ----------------------------------------------------------------------------

    def on_forward(self, module, inputs, output) -> None:
        if not self.window or self.truncated or type(module).__name__ in WRAPPERS:
            return
        name = self._name(module)
        count = self.calls.get(name, 0) + 1
        self.calls[name] = count
        key = name if count == 1 else f"{name}#{count}"
        tensors = list(_tensors(output, ""))
        for suffix, tensor in tensors:
            if not tensor.is_floating_point():
                continue
            self.elements += tensor.numel()
            if self.elements > MAX_ELEMENTS:
                self.truncated = True
                return
            self.outputs.append(
                (
                    key + suffix if len(tensors) > 1 else key,
                    type(module).__name__,
                    tensor.detach().clone(),
                )
            )

    def _keep(self, phase: str, named, grads: bool) -> None:
        if self.truncated:
            return
        kept = {}
        for name, param in named:
            tensor = param.grad if grads else param
            if tensor is not None:
                self.elements += tensor.numel()
                kept[name] = tensor.detach().clone()
        if self.elements > MAX_ELEMENTS:
            self.truncated = True
            return
        self.params[phase] = kept

    def _roots(self):
        module_type = self.torch.nn.Module
        modules = [o for o in gc.get_objects() if issubclass(type(o), module_type)]
        children = {id(c) for m in modules for c in m._modules.values() if c is not None}
        roots = [m for m in modules if id(m) not in children]
        return sorted(roots, key=lambda m: -sum(p.numel() for p in m.parameters()))

    def _index(self) -> None:
        roots = self._roots()
        if roots and self.main_root is None:
            self.main_root = id(roots[0])
        for root in roots:
            prefix = "" if id(root) == self.main_root else f"{type(root).__name__}."
            for name, module in root.named_modules(remove_duplicate=False):
                self.names.setdefault(id(module), strip_wrappers(prefix + name))

    def _name(self, module) -> str:
        if id(module) not in self.names:
            self._index()
        return self.names.get(id(module), f"{type(module).__name__}@{id(module):x}")

    def _named_params(self):
        roots = self._roots()
        if not roots:
            return []
        if self.main_root is None:
            self.main_root = id(roots[0])
        named, seen = [], set()
        for root in roots:
            prefix = "" if id(root) == self.main_root else f"{type(root).__name__}."
            for name, param in root.named_parameters():
                if id(param) not in seen:
                    seen.add(id(param))
                    named.append((strip_wrappers(prefix + name), param))
        return named

    def tensors(self) -> dict[str, object]:
        """What goes into the capture's tensor file, under `layers/`."""
        result = {}
        for index, (key, _, tensor) in enumerate(self.outputs):
            result[f"layers/out/{index:05d}/{key}"] = tensor
        for phase, kept in self.params.items():
            for name, tensor in kept.items():
                result[f"layers/{phase}/{name}"] = tensor
        return result

    def manifest(self) -> dict:
        return {
            "step": self.step,
            "backward_calls": self.backward_calls,
            "modules": [[key, kind] for key, kind, _ in self.outputs],
            "truncated": self.truncated,
            "phases": sorted(self.params),
        }


def _tensors(value, key):
    import torch

    if isinstance(value, torch.Tensor):
        yield key, value
    elif isinstance(value, dict) or hasattr(value, "items"):
        for k, v in value.items():
            yield from _tensors(v, f"{key}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{key}.{i}")
