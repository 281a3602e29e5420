"""Flax NNX adapter: coarse ONNX ops for nnx layers, ``export_onnx``, ONNX functions.

>>> from jax2onnx_nn.flax import export_onnx
>>> onnx_model = export_onnx(model, [("B", 30)])      # any nnx.Module
"""

from jax2onnx_nn.core.registry import builtin_rules

with builtin_rules():  # our rules: below plugins and user registrations
    from jax2onnx_nn.core.functions import onnx_function
    from jax2onnx_nn.flax.adapter import mode_copy
    from jax2onnx_nn.flax.mixin import OnnxExportable, export_onnx

__all__ = ["OnnxExportable", "export_onnx", "mode_copy", "onnx_function"]
