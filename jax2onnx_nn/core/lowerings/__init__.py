"""Lowering families; importing this package registers all built-in rules."""

from jax2onnx_nn.core.lowerings import (  # noqa: F401
    bits,
    complex,
    control_flow,
    decompositions,
    eigen,
    elementwise,
    fft,
    indexing,
    linalg,
    pallas,
    random,
    reductions,
    shapes,
    sharding,
    solves,
    special,
    svd,
    windows,
)
