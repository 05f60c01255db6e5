"""Facts of the old stack that several tools act on: its packages, the environment variables of the
XLA runtime, and the steps of its workflow that have no native counterpart."""

from __future__ import annotations

import re

# Import roots of the old stack: their imports go once unused, and any use left behind gets a TODO.
PACKAGES: tuple[str, ...] = (
    "torch_xla",
    "torch_xla_py",  # torch_xla's name before 1.0 (`torch_xla_py.xla_model`)
    "torch_neuronx",
    "torch_neuron",  # Inf1: Inferentia 1, which TorchNeuron does not run on
    "libneuronxla",
    "neuronx_distributed",
    "neuronx_distributed_inference",
    "transformers_neuronx",
    "neuronperf",  # benchmarks the artifacts of torch_neuronx.trace
    "neuronxcc",  # the Neuron compiler; its own NKI namespace, `neuronxcc.nki`, the standalone `nki` package replaced
    "optimum.tpu",  # Hugging Face's models and FSDP for TPUs, built on torch_xla
)
# Inf1's `torch-neuron` also installs itself as `torch.neuron`: `import torch.neuron` is old stack.
INF1_IMPORT = re.compile(r"^[ \t]*(?:import[ \t]+torch\.neuron\b|from[ \t]+torch\.neuron\b|from[ \t]+torch[ \t]+import[ \t]+neuron\b)", re.MULTILINE)

# What replaces a whole old-stack package, where its names get no advice of their own.
PACKAGE_ADVICE = {
    "optimum.tpu": "optimum-tpu runs on torch_xla: use transformers' own classes and `DistributedConfig` or FSDP2",
}
# Old-stack imports that register what other code reaches by another name: kept while it is used.
REGISTERS: dict[str, str] = {"torch_neuron": "torch.neuron."}
# torch_xla modules imported only to register something for `init_process_group` (the `xla`
# backend, the `xla://` init method): an import of one goes when nothing reads the module itself,
# whatever else of torch_xla the file still uses.
REGISTRATION_ONLY = frozenset({"torch_xla.distributed.xla_backend", "torch_xla.experimental.pjrt_backend"})
# Parts of an old-stack package that move with the code around them: the language of a
# `neuronxcc.nki` kernel is ported with its kernel, which the TODO at `@nki.jit` is about.
MOVES_WITH_ITS_KERNEL: tuple[str, ...] = ("neuronxcc.nki.language", "neuronxcc.nki.isa")


def old_stack_module(module: str) -> bool:
    """`module` is part of an old-stack package (a kernel's own language aside)."""

    def under(prefixes: tuple[str, ...]) -> bool:
        return any(module == p or module.startswith(p + ".") for p in prefixes)

    return under(PACKAGES) and not under(MOVES_WITH_ITS_KERNEL)


OPTIMUM_NEURON = "optimum.neuron"
# The names scripts and tutorials bind old-stack modules to: code that uses one of them without
# importing it (a notebook cell whose imports sit in a cell not run) most likely means that module.
CONVENTIONAL_ALIASES = {
    "xm": "torch_xla.core.xla_model",
    "xr": "torch_xla.runtime",
    "pl": "torch_xla.distributed.parallel_loader",
    "xmp": "torch_xla.distributed.xla_multiprocessing",
    "met": "torch_xla.debug.metrics",
    "xu": "torch_xla.utils.utils",
    "xser": "torch_xla.utils.serialization",
    "xp": "torch_xla.debug.profiler",
    "xs": "torch_xla.distributed.spmd",
    "nxd": "neuronx_distributed",
    **{package: package for package in PACKAGES},
}
# The model types optimum-neuron 0.4.5 exports for text generation (`NeuronModelForCausalLM`,
# the registrations of `optimum/neuron/models/inference/auto_models.py`): all a migrated
# generation script can hold.
OPTIMUM_NEURON_GENERATION: tuple[str, ...] = (
    "granite", "llama", "llama4_text", "mixtral", "phi3", "qwen2", "qwen3", "qwen3_moe", "smollm3",
)

# Variables that only steer the XLA runtime and mean nothing natively.
_XLA_NAMES = r"XLA_\w+|PT_XLA_\w+|PJRT_\w+|TPU_NUM_DEVICES|CPU_NUM_DEVICES|XRT_\w+"
XLA_VARIABLE = re.compile(rf"^({_XLA_NAMES})$")
# Of those, the ones JAX and TensorFlow read too: PyTorch/XLA's only in a file that uses it.
SHARED_XLA_VARIABLE = re.compile(r"^(XLA_FLAGS|XLA_PYTHON_CLIENT_\w+)$")
# The switches that changed the precision of every float tensor, and the dtype they meant.
PRECISION = {
    "XLA_USE_BF16": "bfloat16",
    "XLA_DOWNCAST_BF16": "bfloat16",
    "XLA_USE_FP16": "float16",
    "XLA_DOWNCAST_FP16": "float16",
}

_OLD_STACK_IMPORT = re.compile(
    rf"^[ \t]*(?:import|from)[ \t]+(?:{'|'.join(re.escape(p) for p in (*PACKAGES, OPTIMUM_NEURON))})\b",
    re.MULTILINE,
)
_OTHER_XLA_FRONTEND = re.compile(r"^[ \t]*(?:import|from)[ \t]+(?:jax|jaxlib|flax|tensorflow|keras)\b", re.MULTILINE)
_XLA_NAME = re.compile(rf"\b(?:{_XLA_NAMES})\b")


def imports_old_stack(text: str) -> bool:
    """Does this file import a package of the old stack (optimum-neuron included)?"""
    return _OLD_STACK_IMPORT.search(text) is not None


_ROOTS = "|".join(re.escape(p) for p in (*PACKAGES, OPTIMUM_NEURON))
# An import statement anywhere in a text, not only at a line's start: a program held in a string
# (`python -c "import torch, neuronx_distributed as nxd"`, a script written from a template).
_IMPORT_IN_TEXT = re.compile(
    rf"\bimport[ \t]+(?:[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*,[ \t]*)*({_ROOTS})(?![\w])"
    rf"|\bfrom[ \t]+({_ROOTS})(?:\.[\w.]+)?[ \t]+import\b"
    r"|\bfrom[ \t]+optimum[ \t]+import[ \t]+(neuron)\b"
)


def old_stack_imported_in(text: str) -> str | None:
    """The old-stack package an import statement in `text` names, wherever it stands in it
    (a program in a string or a command line); None if there is none."""
    match = _IMPORT_IN_TEXT.search(text)
    if match is None:
        return None
    package = next(group for group in match.groups() if group)
    return OPTIMUM_NEURON if package == "neuron" else package


def uses_pytorch_xla(text: str) -> bool:
    """Does this file use PyTorch/XLA: import its stack, or name a variable only it reads?

    `XLA_FLAGS` in a JAX or TensorFlow program is theirs, and stays.
    """
    if _OLD_STACK_IMPORT.search(text):
        return True
    if _OTHER_XLA_FRONTEND.search(text):
        return False
    return any(not SHARED_XLA_VARIABLE.match(m.group()) for m in _XLA_NAME.finditer(text))


def is_xla_variable(name: str, pytorch_xla_file: bool) -> bool:
    """Is `name` a variable of the PyTorch/XLA runtime, in a file that does (or does not) use it?"""
    return bool(XLA_VARIABLE.match(name)) and (pytorch_xla_file or not SHARED_XLA_VARIABLE.match(name))


# Workflow steps of the old stack, with why they are gone natively.
REMOVED_STEPS = {
    "neuron_parallel_compile": "neuron_parallel_compile pre-compilation: native PyTorch compiles on the first run, no separate pass",
    "optimum-cli export neuron": "ahead-of-time `optimum-cli export neuron`: load the model with `from_pretrained` and compile at run time",
    "optimum-cli neuron cache": "the Neuron compile cache of the XLA stack: TorchNeuron keeps its own cache",
}

# Command-line programs that only the old stack installs, and whose they are.
OLD_STACK_COMMANDS = {
    "inference_demo": "neuronx-distributed-inference's command line",
}

# Old-stack modules that launch a program (`python -m torch_xla.distributed.xla_dist ... -- python
# train.py`), and how a native program is launched instead.
OLD_STACK_LAUNCHERS = {
    "torch_xla.distributed.xla_dist": (
        "`torch_xla.distributed.xla_dist` started the program on every TPU VM with XLA's settings: "
        "run it with `torchrun` on each host instead"
    ),
    # transformers' examples/pytorch/xla_spawn.py: `python xla_spawn.py --num_cores 8 run_glue.py ...`
    "xla_spawn.py": "`xla_spawn.py` started the script on each TPU core with `xmp.spawn`: run it with `torchrun --nproc_per_node=<cores>` instead",
}

# Strings that name an artifact or a step of the old stack, which a migrated program meets no
# more, and what happened to each: what a program does with such a string (a path it tests, a
# variable it sets for a child run) silently stops doing anything.
OLD_STACK_STRINGS = {
    "NEURON_EXTRACT_GRAPHS_ONLY": (
        "`NEURON_EXTRACT_GRAPHS_ONLY` made a run only extract graphs for precompiling; natively it trains for real: drop that run"
    ),
    "adapter_default": (
        "optimum-neuron saved the LoRA adapter in `adapter_default/`; PEFT's `save_pretrained` writes it in the folder itself"
    ),
    "optimum/neuron/": "a file of optimum-neuron, which the migrated code no longer imports: drop or port what this does with it",
    "optimum.commands.optimum_cli": "`optimum-cli`'s `neuron` commands need optimum-neuron: checkpoints are standard now (`save_pretrained`)",
}

# Lightning's classes that run on torch_xla, whatever module they are imported from
# (`lightning.fabric.accelerators.XLAAccelerator`, `pytorch_lightning.strategies.XLAStrategy`),
# and what replaces each natively: without torch_xla they count no devices or refuse to start.
LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")
LIGHTNING_XLA = {
    "XLAAccelerator": 'Lightning\'s torch_xla accelerator: use `accelerator="auto"`',
    "TPUAccelerator": 'Lightning\'s torch_xla accelerator: use `accelerator="auto"`',
    "XLAStrategy": 'Lightning\'s torch_xla data parallelism: use `strategy="ddp"`',
    "SingleDeviceXLAStrategy": 'Lightning\'s torch_xla strategy: use `strategy="auto"` on one device',
    "XLAFSDPStrategy": 'Lightning\'s torch_xla FSDP: use `strategy="fsdp"` (or `ModelParallelStrategy` for FSDP2)',
    "XLAPrecision": 'Lightning\'s torch_xla precision: use `precision="bf16-mixed"` or `"bf16-true"`',
    "XLABf16Precision": 'Lightning\'s torch_xla precision: use `precision="bf16-true"`',
    "XLACheckpointIO": "Lightning's torch_xla checkpoint I/O: drop it (the default saves with `torch.save`)",
    "XLAEnvironment": "Lightning's torch_xla cluster environment: drop it (torchrun's variables are read by default)",
}


def lightning_xla(qualified: str) -> str | None:
    """The advice for a Lightning class that runs on torch_xla, or None for anything else."""
    root, *parts = qualified.split(".")
    if root not in LIGHTNING_ROOTS:
        return None
    return next((LIGHTNING_XLA[part] for part in parts if part in LIGHTNING_XLA), None)


# The code of TODOs left on old-stack names that no codemod rewrote.
LEFTOVER_CODE = "NM090"
