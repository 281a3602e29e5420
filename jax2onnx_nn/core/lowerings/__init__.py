"""Lowering families; importing this package registers all built-in rules."""

from jax2onnx_nn.core.lowerings import (  # noqa: F401
    bits,
    complex,
    control_flow,
    elementwise,
    fft,
    indexing,
    linalg,
    pallas,
    random,
    reductions,
    shapes,
    sharding,
    special,
    windows,
)
from jax2onnx_nn.core.lowerings.lapack import (  # noqa: F401
    balance,
    cholesky,
    complex_schur,
    eig,
    hessenberg,
    householder,
    lu,
    qr,
    schur,
    solves,
    steps,
    svd,
    triangular,
)
