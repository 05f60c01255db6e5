"""neuron-migrate: move Trainium code off PyTorch/XLA and onto native PyTorch."""

from neuron_migrate.jupyter import load_ipython_extension, unload_ipython_extension

__version__ = "0.1.0"
__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the JupyterLab extension is in the package, for `jupyter labextension develop
    --overwrite .`, which links it from a checkout (an install, editable or not, copies it into
    share/jupyter/labextensions)."""
    return [{"src": "jupyter/labextension", "dest": "neuron-migrate"}]
