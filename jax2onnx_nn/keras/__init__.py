"""Keras 3 (JAX backend) support: :func:`export_onnx` exports a model as Keras's
``model.export(format="onnx")`` does, with every option of ``to_onnx``; weights of the models an
export reaches are named by their Keras variable paths (``dense.kernel``)."""

from jax2onnx_nn.keras.export import export_onnx

__all__ = ["export_onnx"]
