"""Records what a training or inference program computes, from inside it, without editing it.

Runs in the program's own interpreter (the old stack: torch 2.9 + torch_xla; or the new one), so it
needs only the standard library and torch; safetensors is used when present. Installed by the
sitecustomize next to it, it waits for `import torch` and then:

* seeds `random`, numpy and torch;
* wraps `torch.Tensor.backward`: every scalar that has backward() called on it is a loss;
* adds global optimizer step hooks: the gradients and parameters just before the first step, and
  references to the parameters, named through the module that owns them, read at exit (the final
  parameters);
* records the first output of the module class named by `forward`, and what `generate()` returns;
* notes autocast regions and dropout, and with `no_dropout` turns dropout off;
* with `host_random` (the default), draws random numbers meant for a device or a 16-bit type on
  the host (`neuron_migrate_capture_random`), so both stacks draw the same numbers; without it,
  counts the draws made on a device;
* with `upcast`, runs the program in float32 (a bf16 run's noise floor) or float64 (a float32
  run's), and with `perturb`, with every module output moved by one ulp (a float32 run's floor
  where float64 cannot serve) (`neuron_migrate_capture_precision`);
* with `localize: S`, records every module's output and the gradients and updates around step S
  (`neuron_migrate_capture_layers`);
* with `teacher`, makes each `generate()` call follow given sequences and keeps all its logits
  (`neuron_migrate_capture_forcing`);
* with `compile_stats`, registers a stand-in `neuron` dynamo backend that rejects dynamic shapes
  like the real one and counts graphs, recompiles and graph breaks.

Lazy XLA tensors: a loss is kept as the device tensor the script computed (detached); the step's
own `mark_step`/`sync` materialises it, and it is read back only every XLA_FLUSH_EVERY steps,
right after a sync, or at exit. So the capture adds no graph, no graph output and no device wait per step. The
first step's gradients and parameters are kept as clones (later in-place updates must not change
them): outputs of the first step's graph only, which can add one compile at most.

At exit every process that recorded something writes `<out>/rank<R>/tensors.safetensors` (or
`tensors.pt` where safetensors is missing) and `manifest.json`.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib.abc
import json
import os
import platform
import random
import sys
import time
import traceback
from typing import Any

CONFIG_VAR = "NEURON_MIGRATE_CAPTURE"
FORMAT_VERSION = 1
# Pending device tensors are read back in batches: often enough to bound memory, rarely enough
# that reading (a device sync on an asynchronous device) does not show in the step time.
FLUSH_EVERY = 256
# XLA: reading back (right after a sync: a transfer, no graph) waits for the device, which stops the
# host from tracing ahead: done every step it took an XLA:CPU step from 0.85 to 1.7 ms. Each pending
# tensor is also looked at by every mark_step. Reading every 32 steps bounds both.
XLA_FLUSH_EVERY = 32
TOP_K = 5
# What a program runs its collectives through: counted per call, under these names.
DIST_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "barrier",
)
XM_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "reduce_gradients",
    "collective_permute",
    "collective_broadcast",
    "mesh_reduce",
    "send",
    "recv",
    "rendezvous",
)
WRAPPER_PREFIXES = ("module.", "_orig_mod.")

_recorder: Recorder | None = None
_PARTS: dict[str, Any] = {}  # the sibling modules, by what they do


def install() -> None:
    """Called from sitecustomize: read the config, wait for torch (and friends) to be imported.

    The sibling modules are imported now, while sitecustomize still has their folder on sys.path.
    """
    global _recorder
    import neuron_migrate_capture_forcing
    import neuron_migrate_capture_layers
    import neuron_migrate_capture_precision
    import neuron_migrate_capture_random

    _PARTS.update(
        forcing=neuron_migrate_capture_forcing,
        layers=neuron_migrate_capture_layers,
        precision=neuron_migrate_capture_precision,
        random=neuron_migrate_capture_random,
    )
    config = json.loads(os.environ[CONFIG_VAR])
    _recorder = Recorder(config)
    watcher = _ImportWatcher(
        {
            "torch": _recorder.on_torch,
            "torch_xla": _recorder.on_torch_xla,
            "torch_xla.core.xla_model": _recorder.on_xla_model,
            "transformers.generation.utils": _recorder.on_transformers_generation,
            "transformers.modeling_utils": _recorder.on_transformers_modeling,
        }
    )
    sys.meta_path.insert(0, watcher)
    for name in list(watcher.callbacks):
        if name in sys.modules:
            watcher.callbacks.pop(name)(sys.modules[name])
    # Last in, first out: this runs after the recorder's own exit handlers.
    atexit.register(_recorder.write_status)


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Calls back once a watched module has finished executing (so its API is complete).

    A callback is spent when the module executes, not when its spec is found: programs and
    libraries look modules up without importing them (transformers calls
    `importlib.util.find_spec("torch")` at import to see what is installed), and a callback spent
    on such a look-up would miss the import that follows.
    """

    def __init__(self, callbacks):
        self.callbacks = dict(callbacks)

    def find_spec(self, name, path, target=None):
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        if getattr(loader.exec_module, "_neuron_migrate_watched", False):
            return spec
        original = loader.exec_module
        watcher = self

        def exec_module(module):
            original(module)
            callback = watcher.callbacks.pop(name, None)
            if callback is None:
                return
            try:
                callback(module)
            except Exception:  # the capture must never break the program
                if _recorder is not None:
                    _recorder.notes.append(
                        f"capture hook for {name} failed: {traceback.format_exc(limit=3)}"
                    )

        exec_module._neuron_migrate_watched = True  # type: ignore[attr-defined]
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _xla_bf16_env() -> str | None:
    for var in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
        if os.environ.get(var) == "1":
            return var
    return None


class Recorder:
    def __init__(self, config: dict):
        self.config = config
        self.pid = os.getpid()
        self.started = time.time()
        self.notes: list[str] = []
        self.losses: list = []  # pending device tensors
        self.loss_values: list[float] = []
        self.loss_dtypes: list[str] = []
        self.backward_calls = 0
        self.optimizer_steps = 0
        self.steps_in_progress = 0  # > 1 while an optimizer steps inside another one's step
        self.named_optimizers: dict[int, list] = {}  # id(optimizer) -> [(name, param)]
        self.params: dict = {}  # name -> parameter (read at exit)
        self.grads: list = []  # [(name, device clone)]
        self.initial: list = []  # [(name, device clone)] of the parameters before the first step
        self.forward: list = []  # [(key, device clone)]
        self.generate: list[dict] = []
        self.autocast: set[str] = set()
        self.inference_dtypes: set[str] = set()  # of the modules behind generate() / --forward
        self.dropout_calls = 0
        self.compile: Any = None
        # What the program really ran on (a MATCH means nothing if the migrated side ran on XLA).
        self.devices: set[str] = set()  # of the losses; the other tensors' are read at exit
        self.process_group_backends: set[str] = set()
        self.compile_backends: set[str] = set()
        self.collectives: dict[str, int] = {}
        self.ddp_models = 0
        self.rank: int | None = None
        self.world_size: int | None = None
        self.exception: str | None = None
        self.written = False
        self.status_written = False
        self.torch: Any = None
        self.xla_to_cpu: Any = None  # torch_xla's read-back of many tensors in one transfer
        self.host_random: Any = None
        self.layers: Any = None
        self.teacher: dict[int, Any] = {}  # generate() call -> the sequences it must follow
        self.generate_calls = 0
        # How a noise-floor run changes the program (None: it runs as it is).
        self.floor: Any = None
        upcast = {"float32": "Upcast", "float64": "Widen"}.get(config.get("upcast") or "")
        if upcast:
            self.floor = getattr(_PARTS["precision"], upcast)()
        elif config.get("perturb"):
            self.floor = _PARTS["precision"].Perturb(int(config["perturb"]))

    # -- installation ---------------------------------------------------------------------

    def on_torch(self, torch) -> None:
        self.torch = torch
        self._register_exit()
        for step in (
            self._seed,
            self._start_floor,  # before _start_layers: the module outputs it records are moved
            self._route_random,  # before _patch_dropout, whose wrapper must stay outermost
            self._start_layers,
            self._load_teacher,
            self._patch_backward,
            self._add_step_hooks,
            self._patch_autocast,
            self._patch_dropout,
            self._add_forward_hook,
            self._watch_distributed,
            self._watch_compile,
            self._start_compile_stats,
            self._patch_excepthook,
        ):
            try:
                step(torch)
            except Exception:  # record it, keep the rest of the capture and the program going
                self.notes.append(f"{step.__name__} failed: {traceback.format_exc(limit=4)}")

    def _seed(self, torch) -> None:
        seed = int(self.config.get("seed", 0))
        random.seed(seed)
        try:
            import numpy

            numpy.random.seed(seed)
        except ImportError:
            pass
        torch.manual_seed(seed)

    def _start_floor(self, torch) -> None:
        if self.floor is not None:
            self.floor.on_torch(torch)

    def _route_random(self, torch) -> None:
        route = bool(self.config.get("host_random", True))
        self.host_random = _PARTS["random"].HostRandom(torch, route)

    def _start_layers(self, torch) -> None:
        if self.config.get("localize") is not None:
            self.layers = _PARTS["layers"].StepLayers(torch, int(self.config["localize"]))

    def _load_teacher(self, torch) -> None:
        teacher = self.config.get("teacher")
        if not teacher:
            return
        path = teacher["file"]
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            tensors = load_file(path)
        else:
            tensors = torch.load(path, map_location="cpu", weights_only=True)
        for index, prompt_length in teacher["calls"].items():
            sequences = tensors.get(f"generate/{index}/sequences")
            if sequences is not None:
                self.teacher[int(index)] = (sequences, int(prompt_length))

    def _patch_backward(self, torch) -> None:
        recorder = self
        original_backward = torch.Tensor.backward

        @functools.wraps(original_backward)
        def backward(tensor, *args, **kwargs):
            recorder.on_backward(tensor)
            if recorder.layers is None:
                return original_backward(tensor, *args, **kwargs)
            result = original_backward(tensor, *args, **kwargs)
            recorder.layers.on_backward_done()
            return result

        torch.Tensor.backward = backward

    def _add_step_hooks(self, torch) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        register_optimizer_step_pre_hook(self.on_step_pre)
        register_optimizer_step_post_hook(self.on_step_post)

    def _add_forward_hook(self, torch) -> None:
        if self.config.get("forward"):
            self._forward_hook = torch.nn.modules.module.register_module_forward_hook(
                self.on_forward
            )

    def _count_calls(self, module, names, prefix: str) -> None:
        """Counts calls of `module.<name>` (outside a torch.compile trace, which must not see it)."""
        recorder = self
        torch = self.torch
        compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        for name in names:
            original = getattr(module, name, None)
            if original is None or getattr(original, "_neuron_migrate_counted", False):
                continue

            def make(original, key):
                @functools.wraps(original)
                def counted(*args, **kwargs):
                    if not compiling():
                        recorder.collectives[key] = recorder.collectives.get(key, 0) + 1
                    return original(*args, **kwargs)

                counted._neuron_migrate_counted = True  # type: ignore[attr-defined]
                return counted

            setattr(module, name, make(original, f"{prefix}.{name}"))

    def _watch_distributed(self, torch) -> None:
        dist = torch.distributed
        if not dist.is_available():
            return
        self._count_calls(dist, DIST_COLLECTIVES, "torch.distributed")
        recorder = self
        original_init = dist.init_process_group

        @functools.wraps(original_init)
        def init_process_group(*args, **kwargs):
            result = original_init(*args, **kwargs)
            recorder._note_backend()
            return result

        dist.init_process_group = init_process_group
        ddp = torch.nn.parallel.DistributedDataParallel
        original_ddp_init = ddp.__init__

        @functools.wraps(original_ddp_init)
        def ddp_init(module, *args, **kwargs):
            original_ddp_init(module, *args, **kwargs)
            recorder.ddp_models += 1  # its gradient all-reduce runs in C++, past the counters

        ddp.__init__ = ddp_init

    def _watch_compile(self, torch) -> None:
        recorder = self
        original_compile = torch.compile

        @functools.wraps(original_compile)
        def compile(*args, **kwargs):
            backend = kwargs.get("backend", "inductor")
            name = backend if isinstance(backend, str) else getattr(backend, "__name__", None)
            recorder.compile_backends.add(str(name or type(backend).__name__))
            return original_compile(*args, **kwargs)

        torch.compile = compile

    def _note_backend(self) -> None:
        try:
            dist = self.torch.distributed
            if dist.is_available() and dist.is_initialized():
                backend = str(dist.get_backend())
                if backend == "undefined":  # one backend per device type: "cpu:gloo,cuda:nccl"
                    backend = str(dist.get_backend_config())
                self.process_group_backends.add(backend)
        except Exception as exc:  # a backend the program registered itself, half set up
            self.notes.append(f"process-group backend unreadable: {exc}")

    def _start_compile_stats(self, torch) -> None:
        if self.config.get("compile_stats"):
            self.compile = _CompileStats(torch, self)

    def _patch_excepthook(self, torch) -> None:
        recorder = self
        previous_hook = sys.excepthook

        def excepthook(kind, value, tb):
            recorder.exception = "".join(traceback.format_exception_only(kind, value)).strip()
            previous_hook(kind, value, tb)

        sys.excepthook = excepthook

    def on_torch_xla(self, torch_xla) -> None:
        # torch_xla tears its runtime down in an atexit handler registered at import: ours,
        # registered now, runs first (atexit is last-in, first-out) while tensors can still be read.
        self._register_exit()
        self.xla_to_cpu = getattr(torch_xla._XLAC, "_xla_get_cpu_tensors", None)
        original_sync = torch_xla.sync
        recorder = self

        @functools.wraps(original_sync)
        def sync(*args, **kwargs):
            result = original_sync(*args, **kwargs)
            if len(recorder.losses) >= XLA_FLUSH_EVERY:
                recorder.flush_losses()
            return result

        torch_xla.sync = sync

    def on_xla_model(self, xm) -> None:
        self._count_calls(xm, XM_COLLECTIVES, "xm")

    def on_transformers_generation(self, module) -> None:
        mixin = module.GenerationMixin
        original = mixin.generate
        recorder = self

        @functools.wraps(original)
        def generate(model, *args, **kwargs):
            call = recorder.generate_calls
            recorder.generate_calls += 1
            forced = call in recorder.teacher and _PARTS["forcing"].force(
                recorder.torch, kwargs, *recorder.teacher[call]
            )
            config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
            wants_dict = kwargs.get(
                "return_dict_in_generate", getattr(config, "return_dict_in_generate", False)
            )
            wants_logits = kwargs.get("output_logits", getattr(config, "output_logits", False))
            kwargs["return_dict_in_generate"] = True
            kwargs["output_logits"] = True
            out = original(model, *args, **kwargs)
            prompt = kwargs.get("input_ids", args[0] if args else kwargs.get("inputs"))
            recorder.on_generate(model, prompt, out, forced)
            if not wants_dict:
                return out.sequences
            if not wants_logits:
                out.logits = None
            return out

        mixin.generate = generate

    def on_transformers_modeling(self, module) -> None:
        loader = getattr(self.floor, "on_transformers_modeling", None)
        if loader is not None:
            loader(module)

    def _register_exit(self) -> None:
        atexit.register(self.write)
        # multiprocessing children (xmp.spawn, DataLoader workers) leave through os._exit, which
        # skips atexit; their finalizers still run.
        import multiprocessing.util

        multiprocessing.util.Finalize(self, self.write, exitpriority=100)
        multiprocessing.util.Finalize(self, self.write_status, exitpriority=99)

    def _patch_autocast(self, torch) -> None:
        autocast = torch.amp.autocast_mode.autocast
        original_enter = autocast.__enter__
        recorder = self

        @functools.wraps(original_enter)
        def __enter__(self):
            if getattr(self, "_enabled", False):
                recorder.autocast.add(_dtype_name(self.fast_dtype))
            return original_enter(self)

        autocast.__enter__ = __enter__

    def _patch_dropout(self, torch) -> None:
        functional = torch.nn.functional
        off = bool(self.config.get("no_dropout"))
        recorder = self
        for name in (
            "dropout",
            "dropout1d",
            "dropout2d",
            "dropout3d",
            "alpha_dropout",
            "feature_alpha_dropout",
        ):
            original = getattr(functional, name, None)
            if original is None:
                continue

            def make(original):
                @functools.wraps(original)
                def dropout(input, p=0.5, training=True, inplace=False):
                    if training and p > 0:
                        recorder.dropout_calls += 1
                        if off:
                            return input
                    return original(input, p, training, inplace)

                return dropout

            setattr(functional, name, make(original))
        sdpa = getattr(functional, "scaled_dot_product_attention", None)
        if sdpa is not None:

            @functools.wraps(sdpa)
            def scaled_dot_product_attention(*args, **kwargs):
                p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
                if p:
                    recorder.dropout_calls += 1
                    if off:
                        if len(args) > 4:
                            args = (*args[:4], 0.0, *args[5:])
                        else:
                            kwargs["dropout_p"] = 0.0
                return sdpa(*args, **kwargs)

            functional.scaled_dot_product_attention = scaled_dot_product_attention

    # -- recording ------------------------------------------------------------------------

    def on_backward(self, tensor) -> None:
        if self.layers is not None:
            self.layers.on_backward()
        self.backward_calls += 1
        if tensor.numel() != 1:
            return
        device = tensor.device
        xla = device.type == "xla"
        self.devices.add(str(device))
        if len(self.losses) >= FLUSH_EVERY and not xla:
            self.flush_losses()  # earlier steps: long computed, reading costs no graph
        self.loss_dtypes.append(self._effective_dtype(tensor))
        # Eager: a copy, so an in-place change after backward() cannot alter what was recorded.
        # XLA: the program's own tensor object, which its step's graph computes anyway (the graphs
        # run are those of the program alone); a copy would be one more output of every step's
        # graph (measured: about +0.3 ms a step on XLA:CPU), and scripts do not change their loss
        # in place.
        self.losses.append(tensor if xla else tensor.detach().clone())

    def on_step_pre(self, optimizer, args, kwargs) -> None:
        self.steps_in_progress += 1
        if self.steps_in_progress > 1:
            # Stepped by another optimizer (ZeRO's local optimizer over the outer one's params
            # or shards of them): part of that step, whose params are already recorded.
            return
        if self.layers is not None:
            self.layers.on_step_pre()
        self._note_rank()
        key = id(optimizer)
        if key in self.named_optimizers:
            return
        named = self._name_params(optimizer)
        self.named_optimizers[key] = named
        for name, param in named:
            self.params[name] = param
        if not self.grads:
            self.grads = [(n, p.grad.detach().clone()) for n, p in named if p.grad is not None]
            self.initial = [(n, p.detach().clone()) for n, p in named]

    def on_step_post(self, optimizer, args, kwargs) -> None:
        self.steps_in_progress -= 1
        if self.steps_in_progress == 0:
            self.optimizer_steps += 1
            if self.layers is not None:
                self.layers.on_step_post()

    def on_forward(self, module, inputs, output) -> None:
        if type(module).__name__ != self.config["forward"]:
            return
        self._forward_hook.remove()
        self._note_module_dtype(module)
        for key, tensor in _flatten(output, "output"):
            self.forward.append((key, tensor.detach().clone()))

    def on_generate(self, model, prompt, out, forced: bool = False) -> None:
        torch = self.torch
        self._note_module_dtype(model)
        self.devices.add(str(out.sequences.device))
        record = {"sequences": out.sequences.detach().cpu()}
        encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
        if isinstance(prompt, torch.Tensor) and not encoder_decoder:
            record["prompt_length"] = int(prompt.shape[-1])
        else:
            record["prompt_length"] = int(out.sequences.shape[-1]) - len(out.logits or ())
        if out.logits:
            stacked = torch.stack([step.detach().float().cpu() for step in out.logits])  # [T, B, V]
            values, indices = stacked.topk(min(TOP_K, stacked.shape[-1]), dim=-1)
            record["top_values"], record["top_indices"] = values, indices
            record["logits_dtype"] = _dtype_name(out.logits[0].dtype)
            if forced:
                record["logits"], record["logits_cut"] = _PARTS["forcing"].kept_logits(
                    torch, out.logits
                )
        record["forced"] = forced
        self.generate.append(record)

    def flush_losses(self) -> None:
        pending, self.losses = [t.detach() for t in self.losses], []
        if self.xla_to_cpu is not None and pending and all(map(self._is_xla, pending)):
            # One transfer for all of them: read one by one, each `.cpu()` waited for the device
            # on its own (about 0.4 ms apiece on XLA:CPU, a tenth of a small model's step).
            pending = self.xla_to_cpu(pending)
        self.loss_values.extend(float(t) for t in pending)

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def _is_xla(tensor) -> bool:
        return tensor.device.type == "xla"

    def _effective_dtype(self, tensor) -> str:
        name = _dtype_name(tensor.dtype)
        if self._is_xla(tensor) and name == "float32" and _xla_bf16_env():
            return "bfloat16"  # XLA_USE_BF16 keeps float32 tensors as bf16 on the device
        return name

    def _note_module_dtype(self, module) -> None:
        for param in module.parameters():
            self.inference_dtypes.add(self._effective_dtype(param))
            break

    def _note_rank(self) -> None:
        if self.rank is not None:
            return
        dist = self.torch.distributed
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self._note_backend()

    def _name_params(self, optimizer) -> list:
        """(name, param) for the optimizer's params, named through the module tree that holds them."""
        torch = self.torch
        params = [p for group in optimizer.param_groups for p in group["params"]]
        wanted = {id(p) for p in params}
        module_type = torch.nn.Module
        modules = [o for o in gc.get_objects() if issubclass(type(o), module_type)]
        children = {id(c) for m in modules for c in m._modules.values() if c is not None}
        roots = [m for m in modules if id(m) not in children]
        names: dict[int, str] = {}
        contributing = []
        for root in roots:
            found = [
                (n, p) for n, p in root.named_parameters(remove_duplicate=True) if id(p) in wanted
            ]
            if found:
                contributing.append((root, found))
        contributing.sort(key=lambda item: -len(item[1]))
        for root, found in contributing:
            prefix = f"{type(root).__name__}." if len(contributing) > 1 else ""
            for name, param in found:
                names.setdefault(id(param), prefix + _strip_wrappers(name))
        named = []
        for g, group in enumerate(optimizer.param_groups):
            for i, param in enumerate(group["params"]):
                named.append((names.get(id(param), f"param_group{g}.{i}"), param))
        taken = set(self.params)
        result = []
        for name, param in named:
            unique, n = name, 1
            while unique in taken:
                n += 1
                unique = f"{name}#{n}"
            taken.add(unique)
            result.append((unique, param))
        return result

    # -- writing --------------------------------------------------------------------------

    def write_status(self) -> None:
        """`<out>/processes/<pid>.json` for every process the capture started in, recorded or not:
        so that a program with no capture is told apart from one that computed nothing."""
        if self.status_written or os.getpid() != self.pid:
            return
        self.status_written = True
        status = {
            "pid": os.getpid(),
            "argv": sys.argv,
            "torch_imported": "torch" in sys.modules,
            "attached": self.torch is not None,
            "backward_calls": self.backward_calls,
            "optimizer_steps": self.optimizer_steps,
        }
        try:
            directory = os.path.join(self.config["out"], "processes")
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as handle:
                json.dump(status, handle)
        except OSError as exc:
            sys.stderr.write(f"neuron-migrate capture: could not write its status: {exc}\n")

    def write(self) -> None:
        if self.written or os.getpid() != self.pid or self.torch is None:
            return
        self.written = True
        recorded = self.losses or self.loss_values or self.params or self.forward or self.generate
        if self.layers is not None:
            self.layers.on_exit()
        compile_stats = self.compile.summary() if self.compile else None
        if not recorded and not (compile_stats and compile_stats["graphs"]):
            return
        try:
            self._write(compile_stats)
        except Exception:
            sys.stderr.write(f"neuron-migrate capture: could not write: {traceback.format_exc()}\n")

    def _write(self, compile_stats) -> None:
        torch = self.torch
        xla = _xla_metrics()  # before our own reads below, which are transfers, not graphs
        self.flush_losses()
        tensors = {}
        items: dict[str, dict] = {}

        devices = set(self.devices)
        self._note_backend()

        def put(key, tensor, effective=None, own=True):
            if own:  # the program's tensor, on the device it computed on
                devices.add(str(tensor.device))
            cpu = tensor.detach().cpu()
            items[key] = {
                "dtype": _dtype_name(cpu.dtype),
                "effective_dtype": effective or self._effective_dtype(tensor),
                "shape": list(cpu.shape),
            }
            tensors[key] = cpu.clone().contiguous()

        if self.loss_values:
            put("loss", torch.tensor(self.loss_values, dtype=torch.float64), "float64", own=False)
        for name, grad in self.grads:
            put(f"grad/{name}", grad)
        for name, param in self.initial:
            put(f"init/{name}", param)
        for name, param in self.params.items():
            put(f"param/{name}", param)
        for key, tensor in self.forward:
            put(f"forward/0/{key}", tensor)
        for i, record in enumerate(self.generate):
            for key in ("sequences", "top_values", "top_indices", "logits"):
                if key in record:
                    put(f"generate/{i}/{key}", record[key], own=False)
        if self.layers is not None:
            for key, tensor in self.layers.tensors().items():
                put(key, tensor, own=False)
        param_dtypes = sorted(
            {items[k]["effective_dtype"] for k in items if k.startswith("param/")}
        )
        param_dtypes = param_dtypes or sorted(self.inference_dtypes)
        rank = int(os.environ.get("RANK", self.rank if self.rank is not None else 0))
        world = int(os.environ.get("WORLD_SIZE", self.world_size or 1))
        root = self.config["out"]
        directory = os.path.join(root, f"rank{rank}")
        if os.path.exists(directory):
            directory = os.path.join(root, f"rank{rank}-pid{os.getpid()}")
        os.makedirs(directory, exist_ok=True)
        tensor_file = self._save(tensors, directory)
        versions = {"python": platform.python_version(), "torch": torch.__version__}
        if "torch_xla" in sys.modules:
            versions["torch_xla"] = getattr(sys.modules["torch_xla"], "__version__", "?")
        if "transformers" in sys.modules:
            versions["transformers"] = getattr(sys.modules["transformers"], "__version__", "?")
        manifest = {
            "format": FORMAT_VERSION,
            "side": self.config.get("side"),
            "argv": sys.argv,
            "pid": os.getpid(),
            "rank": rank,
            "world_size": world,
            "versions": versions,
            "seed": self.config.get("seed", 0),
            "tensor_file": tensor_file,
            "items": items,
            "loss_dtypes": sorted(set(self.loss_dtypes)),
            "backward_calls": self.backward_calls,
            "optimizer_steps": self.optimizer_steps,
            "param_dtypes": param_dtypes,
            "autocast_dtypes": sorted(self.autocast),
            "xla_bf16_env": _xla_bf16_env() if "torch_xla" in sys.modules else None,
            "dropout_calls": self.dropout_calls,
            "no_dropout": bool(self.config.get("no_dropout")),
            "generate": [
                {
                    "prompt_length": r["prompt_length"],
                    "logits_dtype": r.get("logits_dtype"),
                    "forced": r["forced"],
                    "logits_cut": r.get("logits_cut", False),
                }
                for r in self.generate
            ],
            "host_random": self.host_random.summary() if self.host_random else None,
            "upcast": self.floor.summary() if self.floor else None,  # what the floor run changed
            "layers": self.layers.manifest() if self.layers else None,
            "compile": compile_stats,
            "ran_on": {
                "devices": sorted(devices),
                "process_group_backends": sorted(self.process_group_backends),
                "compile_backends": sorted(self.compile_backends),
                "collectives": dict(sorted(self.collectives.items())),
                "ddp_models": self.ddp_models,
            },
            "xla_metrics": xla,
            "exception": self.exception,
            "notes": self.notes,
            "seconds": time.time() - self.started,
        }
        with open(os.path.join(directory, "manifest.json"), "w") as handle:
            json.dump(manifest, handle, indent=1)

    @staticmethod
    def _save(tensors: dict, directory: str) -> str:
        try:
            from safetensors.torch import save_file
        except ImportError:
            import torch

            torch.save(tensors, os.path.join(directory, "tensors.pt"))
            return "tensors.pt"
        save_file(tensors, os.path.join(directory, "tensors.safetensors"))
        return "tensors.safetensors"


def _strip_wrappers(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
    return name


def _flatten(value, key):
    import torch

    if isinstance(value, torch.Tensor):
        yield key, value
    elif isinstance(value, dict) or hasattr(value, "items"):
        for k, v in value.items():
            yield from _flatten(v, f"{key}.{k}" if key != "output" else k)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{key}.{i}")


def _xla_metrics() -> dict | None:
    if "torch_xla" not in sys.modules:
        return None
    try:
        import torch_xla.debug.metrics as met
    except ImportError:
        return None
    result = {}
    for name in ("CompileTime", "ExecuteTime"):
        data = met.metric_data(name)
        result[name] = int(data[0]) if data else 0
    for name in ("UncachedCompile", "CachedCompile"):
        result[name] = int(met.counter_value(name) or 0)
    return result


class _CompileStats:
    """A stand-in `neuron` dynamo backend: static shapes only, every compiled graph counted.

    Like the real backend it rejects a graph with any symbolic dimension, treats `dynamic=None`
    as static (each new shape recompiles) and refuses `dynamic=True`. While it is installed,
    `torch.compile` calls for inductor (the default) are sent to it, as they would be on
    Trainium, where the default backend follows the device. The graphs run eagerly.
    """

    REJECT = "Dynamic shapes detected in the model, but torch-neuronx requires static shapes"

    def __init__(self, torch, recorder: Recorder):
        import logging

        import torch._dynamo

        self.torch = torch
        self.recorder = recorder
        self.graphs: list[dict] = []
        self.recompiles: list[str] = []
        self.rejected: list[str] = []
        self.backends_replaced: set[str] = set()
        if "neuron" not in torch._dynamo.list_backends(exclude_tags=()):

            def neuron(gm, example_inputs):
                return self.backend(gm, example_inputs)

            torch._dynamo.register_backend(name="neuron")(neuron)
        original_compile = torch.compile
        stats = self

        @functools.wraps(original_compile)
        def compile(*args, **kwargs):
            backend = kwargs.get("backend", "inductor")
            if isinstance(backend, str) and backend in ("inductor", "neuron"):
                if backend != "neuron":
                    stats.backends_replaced.add(backend)
                kwargs["backend"] = "neuron"
                if kwargs.get("dynamic") is True:
                    raise RuntimeError(
                        "the neuron backend rejects dynamic=True: shapes must be static"
                    )
                kwargs["dynamic"] = False
                kwargs.pop("mode", None)  # Neuron only has mode="default"
            return original_compile(*args, **kwargs)

        torch.compile = compile

        class _Recompiles(logging.Handler):
            def emit(self, record):
                stats.recompiles.append(record.getMessage())

        try:
            torch._logging.set_logs(recompiles=True)
            logger = logging.getLogger("torch._dynamo.guards.__recompiles")
            logger.propagate = False
            logger.addHandler(_Recompiles())
        except Exception as exc:  # older torch: recompiles are still counted through the graphs
            recorder.notes.append(f"recompile reasons unavailable: {exc}")

    def backend(self, gm, example_inputs):
        from torch.fx.experimental.symbolic_shapes import free_symbols

        torch = self.torch
        symbols: set = set()
        for node in gm.graph.nodes:
            value = node.meta.get("example_value", node.meta.get("val"))
            if isinstance(value, torch.Tensor):
                symbols |= free_symbols(value)
        for value in example_inputs:
            if isinstance(value, (torch.SymInt, torch.Tensor)):
                symbols |= free_symbols(value)
        shapes = [list(v.shape) for v in example_inputs if isinstance(v, torch.Tensor)]
        if symbols:
            message = f"{self.REJECT}. Found {len(symbols)} dynamic dimension(s): {sorted(map(str, symbols))}"
            self.rejected.append(message)
            raise RuntimeError(message)
        self.graphs.append(
            {
                "ops": sum(1 for n in gm.graph.nodes if n.op == "call_function"),
                "input_shapes": shapes,
            }
        )
        return gm.forward

    def summary(self) -> dict:
        from torch._dynamo.utils import counters

        breaks = {
            reason.splitlines()[0]: count for reason, count in counters["graph_break"].items()
        }
        return {
            "backend": "neuron (stand-in)",
            "graphs": len(self.graphs),
            "graph_input_shapes": [g["input_shapes"] for g in self.graphs][:50],
            "recompiles": len(self.recompiles),
            "recompile_reasons": [_first_guard(m) for m in self.recompiles],
            "graph_breaks": sum(counters["graph_break"].values()),
            "graph_break_reasons": breaks,
            "rejected": self.rejected,
            "backends_replaced": sorted(self.backends_replaced),
        }


def _first_guard(message: str) -> str:
    """'Recompiling function f in x.py:3 ... - 0/0: tensor 'x' size mismatch ...' -> the reason."""
    lines = [line.strip() for line in message.splitlines()]
    function = lines[0].removeprefix("Recompiling function ") if lines else message
    where = function.rsplit(" in ", 1)
    if len(where) == 2:  # "forward in /long/path/train.py:15" -> "forward (train.py:15)"
        function = f"{where[0]} ({os.path.basename(where[1])})"
    guards = [line[2:].split(": ", 1)[-1] for line in lines if line.startswith("- ")]
    return f"{function}: {guards[0]}" if guards else function
