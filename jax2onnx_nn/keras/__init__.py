"""Keras 3 (JAX backend) support: :func:`export_onnx` exports a model as Keras's
``model.export(format="onnx")`` does, with every option of ``to_onnx``; weights of the models an
export reaches are named by their Keras variable paths (``dense.kernel``)."""

import os

# Keras picks its backend when it is first imported (tensorflow unless told): importing this
# package before keras means the JAX backend, the one it exports (a backend already chosen, by
# KERAS_BACKEND or an earlier import of keras, is left as it is)
os.environ.setdefault("KERAS_BACKEND", "jax")

from jax2onnx_nn.keras.export import export_onnx  # noqa: E402

__all__ = ["export_onnx"]
