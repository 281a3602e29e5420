"""Equinox adapter: coarse ONNX ops for eqx.nn layers, ``export_onnx``, ONNX functions.

>>> from jax2onnx_nn.equinox import export_onnx
>>> onnx_model = export_onnx(model, [(784,)], batch=True)   # jax.vmap(model), input ("B", 784)

``jax2onnx_nn.to_onnx`` accepts Equinox modules directly too: their arrays are weights
(initializers named by pytree path, ``layers.0.weight``), everything else is static config,
and the export runs on an ``eqx.nn.inference_mode`` copy.
"""

from jax2onnx_nn.core.registry import builtin_rules

with builtin_rules():  # our rules: below plugins and user registrations
    from jax2onnx_nn.core.functions import onnx_function
    from jax2onnx_nn.equinox.mixin import OnnxExportable, batched_spec, export_onnx

__all__ = ["OnnxExportable", "batched_spec", "export_onnx", "onnx_function"]
