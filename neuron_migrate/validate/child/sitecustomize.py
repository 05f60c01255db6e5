"""Turns the capture on in every Python process of a program run by `neuron-migrate validate`.

`validate` puts this folder first on PYTHONPATH, so the user's script runs unedited, and so do
the processes it starts (torchrun workers, `xmp.spawn` children). Any sitecustomize that this
one shadows still runs afterwards.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("NEURON_MIGRATE_CAPTURE"):
    import neuron_migrate_capture

    neuron_migrate_capture.install()


def _run_shadowed_sitecustomize() -> None:
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


# Leave sys.path as the program would have it: our two module names must not shadow its own.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_run_shadowed_sitecustomize()
