"""The optimum-neuron family: training (NeuronTrainer and its arguments), inference (Neuron models,
static-cache generation) and diffusion pipelines, with what they share in `support`."""
