"""neuron-migrate in Jupyter: the IPython extension (`%load_ext neuron_migrate`) and the widget apps.

Importing this package costs nothing: IPython and ipywidgets are imported only when a kernel
loads the extension or a notebook builds an app, so the command line never needs them.

    %load_ext neuron_migrate
    %%neuron_migrate [--target portable|neuron] [--run] [--replace | --insert] [--view auto|side|unified]
    %neuron_migrate_check [NOTEBOOK] [--select CODES] [--ignore CODES] [--min-severity LEVEL]
    %%trainium [DEVICE_TYPE]

(`--help` on each says more.)

    from neuron_migrate.jupyter import MigrationApp, ValidationDashboard, migrate_path
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Diff",
    "MigrationApp",
    "ValidationDashboard",
    "load_ipython_extension",
    "migrate_cell",
    "migrate_path",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """Called by `%load_ext neuron_migrate`: registers the magics."""
    from neuron_migrate.jupyter.magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Called by `%unload_ext neuron_migrate`: removes the magics again."""
    from neuron_migrate.jupyter.magics import unregister

    unregister(ipython)


def __getattr__(name: str) -> Any:
    if name == "Diff":
        from neuron_migrate.jupyter.render import Diff

        return Diff
    if name in ("migrate_cell", "migrate_path"):
        from neuron_migrate.jupyter import migration

        return getattr(migration, name)
    if name == "MigrationApp":
        from neuron_migrate.jupyter.apps import MigrationApp

        return MigrationApp
    if name == "ValidationDashboard":
        from neuron_migrate.jupyter.dashboard import ValidationDashboard

        return ValidationDashboard
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
