"""The stand-in `neuron` dynamo backend of the package (`neuron_migrate.core.neuron_backend`),
registered on import for the dynamic tests, under the names they use."""

from __future__ import annotations

from neuron_migrate.core.neuron_backend import (
    STATE,
    NeuronRejected,
    Outcome,
    compile_and_run,
    register,
)
from neuron_migrate.core.neuron_backend import root_cause as _root

register()

__all__ = ["STATE", "NeuronRejected", "Outcome", "_root", "compile_and_run"]
