"""Keras 3 (JAX backend) support: weights of the models an export reaches are named by their
Keras variable paths (``dense.kernel``). Layers are exported from their JAX ops."""
