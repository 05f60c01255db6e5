"""neuron-migrate: move Trainium code off PyTorch/XLA and onto native PyTorch."""

from neuron_migrate.jupyter import load_ipython_extension, unload_ipython_extension

__version__ = "0.1.0"
__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]
