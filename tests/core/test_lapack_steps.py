"""The lapack step helpers' memo of reference jaxprs (``steps._bare``): one ``make_jaxpr`` per
(helper, shapes, dtypes, params, closure), never a jaxpr of another dtype or shape."""

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx_nn.core.lowerings.lapack import steps


def _out_dtypes(fn, *specs) -> list:
    return [v.aval.dtype for v in jax.make_jaxpr(fn)(*specs).jaxpr.outvars]


def test_exact_cast_memo_keeps_each_dtype() -> None:
    x = jax.ShapeDtypeStruct((2, 3), np.float32)
    assert _out_dtypes(lambda a: steps.exact_cast(a, jnp.int32), x) == [np.int32]
    assert _out_dtypes(lambda a: steps.exact_cast(a, jnp.int16), x) == [np.int16]
    assert _out_dtypes(lambda a: steps.exact_cast(a, jnp.int32), x) == [np.int32]


def test_where_memo_reuses_and_separates_shapes() -> None:
    def pick(a):
        return steps.where(a > 0, a, 2 * a)

    small = jax.ShapeDtypeStruct((2, 3), np.float32)
    big = jax.ShapeDtypeStruct((4, 3), np.float32)
    steps._BARE_BODIES.clear()  # a full run may have filled the bounded memo: count from empty
    jax.make_jaxpr(pick)(small)
    stored = len(steps._BARE_BODIES)
    jax.make_jaxpr(pick)(small)
    assert len(steps._BARE_BODIES) == stored  # the same key: no new trace
    jaxpr = jax.make_jaxpr(pick)(big)
    assert jaxpr.jaxpr.outvars[0].aval.shape == (4, 3)
    assert len(steps._BARE_BODIES) == stored + 1
    a = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(jax.jit(pick)(a), np.where(a > 0, a, 2 * a))
