"""Lowering families; importing this package registers all built-in rules."""

from jax2onnx_nn.core.lowerings import elementwise, linalg, reductions, shapes  # noqa: F401
