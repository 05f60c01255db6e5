"""The upgrade family: code written for transformers 4, TRL 0.x and peft/diffusers of
optimum-neuron's time, moved to the versions the native stack runs (transformers 5, TRL 1.x).

A migrated script crosses both at once: the Neuron classes become transformers' own, and the
transformers-4 API around them must keep working. `table` holds the facts; the codemods apply them.
"""
