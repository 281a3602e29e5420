"""The float32 twin of a low-precision program (core/widened.py): what verify reports as the
error "vs JAX in float32"."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx_nn.core.precision import LOW_FLOATS
from jax2onnx_nn.core.widened import eval_widened


def test_arithmetic_of_bfloat16_values_is_computed_in_float32():
    x = jnp.asarray([1.0, 1.0 / 3.0, 300.5], jnp.bfloat16)
    (out,) = eval_widened(lambda v: v * 3 + 1e-3, [x], LOW_FLOATS)
    assert out.dtype == np.float32
    expected = np.asarray(x, np.float32) * 3 + np.float32(1e-3)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)


def test_a_scan_body_runs_in_its_own_dtype_and_its_results_are_widened():
    # the body is bound through its primitive's bind params (on JAX 0.10 one dict, no
    # sub-functions): unpacked as a pair it raised "too many values to unpack", and verify's
    # float32 reference was silently missing for every bfloat16 model with a scan
    def cumulative(v: jax.Array) -> jax.Array:
        return lax.scan(lambda c, y: (c + y, c * y), v[0], v)[1]

    x = jnp.asarray([0.5, 1.25, 2.0, 3.0], jnp.bfloat16)
    (out,) = eval_widened(cumulative, [x], LOW_FLOATS)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out), np.asarray(cumulative(x), np.float32))
