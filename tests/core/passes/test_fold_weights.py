"""Affine steps and BatchNorm folded into Conv / Gemm weights."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx
from jax2onnx_nn.testing import assert_exports_match, op_types


@given(
    channels=st.integers(1, 4),
    ops=st.lists(st.sampled_from(["mul", "add", "scalar_mul"]), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_affine_after_conv_folds_into_its_weights(channels, ops, seed):
    """Mul / Add by per-channel constants after a Conv: one Conv, values within 1e-5 (the
    folded weights are rounded once, JAX rounds each step)."""
    from jax import lax

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((channels, 2, 3, 3)).astype(np.float32)
    consts = [rng.uniform(0.5, 2.0, (channels, 1, 1)).astype(np.float32) for _ in ops]

    def f(x):
        y = lax.conv_general_dilated(x, jnp.asarray(w), (1, 1), "SAME")
        for op, c in zip(ops, consts, strict=True):
            y = y * c if op == "mul" else y + c if op == "add" else y * 0.5
        return y

    model = assert_exports_match(
        f, [("B", 2, 5, 5)], sizes={"B": [1, 2]}, rtol=1e-5, fold_weights=True
    )
    assert op_types(model) == ["Conv"], op_types(model)
    assert len(op_types(to_onnx(f, [("B", 2, 5, 5)]))) == 1 + len(
        ops
    )  # off by default: JAX's roundings


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_batchnorm_after_conv_or_linear_is_one_node(layer):
    nnx = pytest.importorskip("flax.nnx")
    from jax2onnx_nn.flax import mode_copy

    rngs = nnx.Rngs(0)
    first = nnx.Conv(3, 4, (3, 3), rngs=rngs) if layer == "conv" else nnx.Linear(3, 4, rngs=rngs)
    bn = nnx.BatchNorm(4, rngs=rngs)
    rng = np.random.default_rng(1)
    bn.mean.set_value(jnp.asarray(rng.standard_normal(4), jnp.float32))
    bn.var.set_value(jnp.asarray(rng.uniform(0.2, 3.0, 4), jnp.float32))
    bn.scale.set_value(jnp.asarray(rng.standard_normal(4), jnp.float32))
    bn.bias.set_value(jnp.asarray(rng.standard_normal(4), jnp.float32))
    model = mode_copy(nnx.Sequential(first, bn))
    shape = ("B", 6, 6, 3) if layer == "conv" else ("B", 3)
    onnx_model = assert_exports_match(
        model, [shape], sizes={"B": [1, 3]}, rtol=1e-5, fold_weights=True
    )
    assert "BatchNormalization" not in op_types(onnx_model), op_types(onnx_model)


def test_a_conv_read_twice_is_not_folded():
    from jax import lax

    w = np.ones((2, 1, 3, 3), np.float32)

    def f(x):
        y = lax.conv_general_dilated(x, jnp.asarray(w), (1, 1), "VALID")
        return y * np.float32(3.0), y

    model = assert_exports_match(f, [(1, 1, 4, 4)], fold_weights=True)
    assert op_types(model) == ["Conv", "Mul"]
