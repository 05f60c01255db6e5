"""`neuron-migrate sweep`: does every causal-LM architecture of transformers generate and train
with static shapes, as migrated code runs them on Trainium, and where does each one break?"""
