"""MatMul(Transpose(x), v) as MatMul(v, x)."""

from __future__ import annotations

import jax.numpy as jnp
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn.testing import assert_exports_match, op_types, sizes_for


@given(batch=st.sampled_from([(), (2,), ("B",)]), k=st.integers(1, 40), n=st.integers(1, 9))
def test_transposed_matrix_times_vector_matches_jax(batch, k, n):
    """``a.T @ v`` (and its batched form): onnxruntime's Transpose+MatMul fusion got this wrong
    (off by ~10 at 32x7); the export is one MatMul of the vector and the untransposed matrix."""
    specs = [(*batch, k, n), (k,)]
    model = assert_exports_match(
        lambda a, v: jnp.swapaxes(a, -1, -2) @ v, specs, sizes=sizes_for(specs, {"B": [1, 3]})
    )
    assert op_types(model) == ["MatMul"]
