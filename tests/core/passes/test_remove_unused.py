"""Unused nodes and weights removed."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.testing import assert_exports_match


def test_unused_weights_after_folding_are_dropped():
    weights = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)

    def f(x):
        return x + jnp.asarray(weights)[jnp.arange(3)]

    model = assert_exports_match(f, [("B", 3, 8)], sizes={"B": [2]})
    assert [int(np.prod(i.dims)) for i in model.graph.initializer] == [
        3 * 8
    ]  # the rows used, not the table
