"""The codemods, in the order they see each node, and the lookups built from them.

Order matters where two codemods touch the same statement: metrics reports are deleted before
`master_print` would be rewritten around them, and device rewrites run before anything that
reads the device.
"""

from __future__ import annotations

from neuron_migrate.core.oldstack import LEFTOVER_CODE, PACKAGE_ADVICE, lightning_xla
from neuron_migrate.rewrite.codemods.base import Codemod
from neuron_migrate.rewrite.codemods.neuronx_distributed import NeuronxDistributed
from neuron_migrate.rewrite.codemods.neuronx_trace import NeuronxTrace
from neuron_migrate.rewrite.codemods.nxd_tensor_parallel import NxdTensorParallel
from neuron_migrate.rewrite.codemods.old_stack_strings import OldStackStrings
from neuron_migrate.rewrite.codemods.optimum.diffusion import OptimumDiffusion
from neuron_migrate.rewrite.codemods.optimum.inference import OptimumInference
from neuron_migrate.rewrite.codemods.optimum.training import OptimumTraining
from neuron_migrate.rewrite.codemods.package_probes import PackageProbes
from neuron_migrate.rewrite.codemods.upgrade.defaults import UpgradeDefaults
from neuron_migrate.rewrite.codemods.upgrade.flags import UpgradeFlags
from neuron_migrate.rewrite.codemods.upgrade.keywords import UpgradeKeywords
from neuron_migrate.rewrite.codemods.upgrade.names import UpgradeNames
from neuron_migrate.rewrite.codemods.xla_autocast import XlaAutocast
from neuron_migrate.rewrite.codemods.xla_collectives import XlaCollectives
from neuron_migrate.rewrite.codemods.xla_compile import XlaCompileBackend
from neuron_migrate.rewrite.codemods.xla_data import XlaData
from neuron_migrate.rewrite.codemods.xla_device import XlaDevice
from neuron_migrate.rewrite.codemods.xla_env import XlaEnv
from neuron_migrate.rewrite.codemods.xla_fsdp import XlaFsdp
from neuron_migrate.rewrite.codemods.xla_launch import XlaLaunch
from neuron_migrate.rewrite.codemods.xla_metrics import XlaMetrics
from neuron_migrate.rewrite.codemods.xla_optimizer import XlaOptimizer
from neuron_migrate.rewrite.codemods.xla_spmd import XlaSpmd
from neuron_migrate.rewrite.codemods.xla_sync import XlaSync
from neuron_migrate.rewrite.codemods.xla_utils import XlaUtils

CODEMODS: tuple[type[Codemod], ...] = (
    XlaMetrics,
    XlaEnv,
    XlaDevice,
    XlaSync,
    XlaOptimizer,
    XlaData,
    XlaLaunch,
    XlaCollectives,
    XlaUtils,
    XlaFsdp,
    XlaSpmd,
    XlaAutocast,
    XlaCompileBackend,
    OptimumTraining,
    OptimumInference,
    OptimumDiffusion,
    NeuronxTrace,
    NxdTensorParallel,
    NeuronxDistributed,
    PackageProbes,
    OldStackStrings,
    UpgradeNames,
    UpgradeKeywords,
    UpgradeDefaults,
    UpgradeFlags,
)

LEFTOVER_MESSAGE = "`{name}` has no automatic migration; rewrite it for native PyTorch by hand"


def manual_message(qualified: str) -> tuple[str, str]:
    """The code and TODO text for an old-stack name no codemod rewrote (longest prefix wins)."""
    best: tuple[int, str, str] | None = None
    for codemod in CODEMODS:
        for prefix, message in codemod.manual.items():
            matches = qualified == prefix or qualified.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), codemod.code, message)
    if best is None:
        advice = lightning_xla(qualified)
        if advice:
            return LEFTOVER_CODE, f"`{{name}}` is {advice}"
        package = next((p for p in PACKAGE_ADVICE if qualified == p or qualified.startswith(p + ".")), None)
        return LEFTOVER_CODE, f"`{{name}}`: {PACKAGE_ADVICE[package]}" if package else LEFTOVER_MESSAGE
    return best[1], best[2]


def by_code() -> dict[str, type[Codemod]]:
    return {codemod.code: codemod for codemod in CODEMODS}
