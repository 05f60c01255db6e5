"""Facts of the old stack that several tools act on: its packages, the environment variables of the
XLA runtime, and the steps of its workflow that have no native counterpart."""

from __future__ import annotations

import re

# Import roots of the old stack: their imports go once unused, and any use left behind gets a TODO.
PACKAGES: tuple[str, ...] = (
    "torch_xla",
    "torch_neuronx",
    "libneuronxla",
    "neuronx_distributed",
    "neuronx_distributed_inference",
    "transformers_neuronx",
)
OPTIMUM_NEURON = "optimum.neuron"

# Variables that only steer the XLA runtime and mean nothing natively.
XLA_VARIABLE = re.compile(r"^(XLA_\w+|PT_XLA_\w+|PJRT_\w+|TPU_NUM_DEVICES|CPU_NUM_DEVICES|XRT_\w+)$")
# The switches that changed the precision of every float tensor, and the dtype they meant.
PRECISION = {
    "XLA_USE_BF16": "bfloat16",
    "XLA_DOWNCAST_BF16": "bfloat16",
    "XLA_USE_FP16": "float16",
    "XLA_DOWNCAST_FP16": "float16",
}

# Workflow steps of the old stack, with why they are gone natively.
REMOVED_STEPS = {
    "neuron_parallel_compile": "neuron_parallel_compile pre-compilation: native PyTorch compiles on the first run, no separate pass",
    "optimum-cli export neuron": "ahead-of-time `optimum-cli export neuron`: load the model with `from_pretrained` and compile at run time",
    "optimum-cli neuron cache": "the Neuron compile cache of the XLA stack: TorchNeuron keeps its own cache",
}

# The code of TODOs left on old-stack names that no codemod rewrote.
LEFTOVER_CODE = "NM090"
