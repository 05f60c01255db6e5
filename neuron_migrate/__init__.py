"""neuron-migrate: move Trainium code off PyTorch/XLA and onto native PyTorch."""

__version__ = "0.1.0"
