"""The SPMD family: a torch_xla program that shards one process's work over every device
(`xr.use_spmd()`, `xs.Mesh`, `xs.mark_sharding`) becomes a DTensor program run by torchrun with
one process per device, a `DeviceMesh` of the same shape and axis names, and the layouts its
partition specs meant.

XLA SPMD keeps a global view: a marked tensor holds the same values as an unmarked one, the mark
only says where its pieces live. So a mark that has no sound DTensor layout can go without
changing a single number; what is lost is the memory and the parallel work, which its TODO names.
"""

from neuron_migrate.rewrite.codemods.xla_spmd.codemod import XlaSpmd

__all__ = ["XlaSpmd"]
