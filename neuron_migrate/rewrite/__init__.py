"""`neuron-migrate rewrite`: the engine that migrates one text, the codemods it runs, notebooks,
shell lines, and the reports of what changed."""
