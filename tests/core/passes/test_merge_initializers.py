"""Equal large weights stored once; small ones keep their names."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jax2onnx_nn import to_onnx
from jax2onnx_nn.testing import assert_exports_match


def test_equal_weights_are_stored_once():
    w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)  # 64 KiB: merged
    copy = w.copy()  # a distinct array with the same data
    other = w + 1.0

    def f(x):
        return jnp.tanh(x @ w) @ copy + x @ other

    model = assert_exports_match(f, [("B", 128)], sizes={"B": [2]})
    assert sorted(t.dims[0] * t.dims[1] for t in model.graph.initializer if len(t.dims) == 2) == [
        16384,
        16384,
    ]


def test_equal_small_weights_keep_their_names():
    """Fresh zeros of two layers are two parameters: both names stay (merging saves nothing)."""
    bias_a, bias_b = np.zeros(20, np.float32), np.zeros(20, np.float32)
    model = to_onnx(lambda x: jnp.tanh(x + bias_a) + bias_b, [("B", 20)])
    assert len([t for t in model.graph.initializer if list(t.dims)[-1:] == [20]]) == 2
