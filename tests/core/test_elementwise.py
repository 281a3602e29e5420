"""Elementwise primitives: onnxruntime vs JAX on hypothesis-drawn shapes, dtypes and values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on

FLOATS = [np.float32, np.float64]
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def _arrays(dtype, shape, *, finite=False, elements=None):
    # XLA on CPU flushes subnormals to zero; onnxruntime does not: draw normal floats only
    if elements is None and np.dtype(dtype).kind == "f":
        width = np.finfo(dtype).bits
        elements = (
            st.floats(-1e3, 1e3, width=width, allow_subnormal=False)
            if finite
            else st.floats(width=width, allow_subnormal=False)
        )
    return hnp.arrays(dtype, shape, elements=elements)


UNARY_ANY = {
    "exp": jnp.exp,
    "log": jnp.log,
    "tanh": jnp.tanh,
    "abs": jnp.abs,
    "neg": jnp.negative,
    "sqrt": jnp.sqrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "sign": jnp.sign,
    "logistic": jax.nn.sigmoid,
    "rsqrt": jax.lax.rsqrt,
    "is_finite": jnp.isfinite,
    "round_even": jnp.round,
    "round_away": lambda x: jax.lax.round(x, jax.lax.RoundingMethod.AWAY_FROM_ZERO),
    "square": jnp.square,
    "erf": jax.scipy.special.erf,
    "erfc": jax.scipy.special.erfc,
    "expm1": jnp.expm1,
    "log1p": jnp.log1p,
    "exp2": jnp.exp2,
    "log2": jnp.log2,
}
# bounded domains keep these away from overflow where JAX and ONNX legitimately differ
UNARY_BOUNDED = {
    "tan": (jnp.tan, -1.5, 1.5),
    "asin": (jnp.arcsin, -1, 1),
    "acos": (jnp.arccos, -1, 1),
    "atan": (jnp.arctan, -1e6, 1e6),
    "sinh": (jnp.sinh, -80, 80),
    "cosh": (jnp.cosh, -80, 80),
    "asinh": (jnp.arcsinh, -1e6, 1e6),
    "acosh": (jnp.arccosh, 1, 1e6),
    "atanh": (jnp.arctanh, -0.999, 0.999),
    "cbrt": (jnp.cbrt, -1e6, 1e6),
    "erf_inv": (jax.scipy.special.erfinv, -0.999, 0.999),
}


@pytest.mark.parametrize("name", sorted(UNARY_ANY))
@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data())
def test_unary_float(name, dtype, data):
    fn = UNARY_ANY[name]
    finite = name in ("erf", "erfc", "round_away")
    x = data.draw(_arrays(dtype, data.draw(shapes), finite=finite))
    if name in ("log", "log2", "sqrt", "rsqrt"):
        x = np.abs(x)
    assert_exports_match_on(fn, x, enable_double_precision=dtype == np.float64)


@pytest.mark.parametrize("name", sorted(UNARY_BOUNDED))
@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data())
def test_unary_bounded(name, dtype, data):
    fn, lo, hi = UNARY_BOUNDED[name]
    lo, hi = (float(np.asarray(v, dtype)) for v in (lo, hi))
    elements = st.floats(lo, hi, width=np.finfo(dtype).bits, allow_subnormal=False)
    x = data.draw(_arrays(dtype, data.draw(shapes), elements=elements))
    assert_exports_match_on(fn, x, enable_double_precision=dtype == np.float64)


BINARY_FLOAT = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": jnp.divide,
    "max": jnp.maximum,
    "min": jnp.minimum,
    "pow": jnp.power,
    "rem": jax.lax.rem,
    "atan2": jnp.arctan2,
    "nextafter": jnp.nextafter,
    "eq": jnp.equal,
    "ne": jnp.not_equal,
    "lt": jnp.less,
    "le": jnp.less_equal,
    "gt": jnp.greater,
    "ge": jnp.greater_equal,
}


@pytest.mark.parametrize("name", sorted(BINARY_FLOAT))
@pytest.mark.parametrize("dtype", FLOATS)
@given(data=st.data())
def test_binary_float(name, dtype, data):
    shape = data.draw(shapes)
    finite = name in ("pow", "rem", "max", "min")
    x = data.draw(_arrays(dtype, shape, finite=finite))
    y = data.draw(_arrays(dtype, shape, finite=finite))
    if name == "pow":
        x = np.abs(x)
        y = np.clip(y, -20, 20)
    assert_exports_match_on(BINARY_FLOAT[name], x, y, enable_double_precision=dtype == np.float64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_atan2_on_every_pair_of_special_values(dtype):
    """Signed zeros, infinities, NaN and ordinary numbers in every combination (C's atan2 cases)."""
    special = np.asarray([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -3.5], dtype)
    y, x = (a.ravel() for a in np.meshgrid(special, special, indexing="ij"))
    model = assert_exports_match_on(jnp.arctan2, y, x, enable_double_precision=dtype == np.float64)
    # the comparison takes -0 == 0: the signs of zero results (atan2(-0, +0) = -0) separately
    (angle,) = run_onnx(model, [y, x])
    np.testing.assert_array_equal(np.signbit(angle), np.signbit(np.arctan2(y, x)))


BINARY_INT = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "max": jnp.maximum,
    "min": jnp.minimum,
    "and": jnp.bitwise_and,
    "or": jnp.bitwise_or,
    "xor": jnp.bitwise_xor,
    "eq": jnp.equal,
    "lt": jnp.less,
    "ge": jnp.greater_equal,
    "div": jax.lax.div,
    "rem": jax.lax.rem,
    "shift_left": jax.lax.shift_left,
    "shift_right_logical": jax.lax.shift_right_logical,
    "shift_right_arithmetic": jax.lax.shift_right_arithmetic,
}


@pytest.mark.parametrize("name", sorted(BINARY_INT))
@pytest.mark.parametrize("dtype", INTS)
@given(data=st.data())
def test_binary_int(name, dtype, data):
    shape = data.draw(shapes)
    x = data.draw(_arrays(dtype, shape))
    y = data.draw(_arrays(dtype, shape))
    if name in ("div", "rem"):
        y = np.where(y == 0, 1, y).astype(dtype)
        if np.dtype(dtype).kind == "i":  # INT_MIN / -1 overflows in C; JAX and ONNX differ there
            x = np.where(x == np.iinfo(dtype).min, 0, x).astype(dtype)
    assert_exports_match_on(BINARY_INT[name], x, y, enable_double_precision=True)


@pytest.mark.parametrize("dtype", INTS + [np.bool_])
@given(data=st.data())
def test_not_and_popcount(dtype, data):
    x = data.draw(_arrays(dtype, data.draw(shapes)))
    assert_exports_match_on(jnp.invert, x, enable_double_precision=True)
    if dtype != np.bool_:
        assert_exports_match_on(jax.lax.population_count, x, enable_double_precision=True)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint16, np.bool_])
@given(data=st.data())
def test_select_n_and_clamp(dtype, data):
    shape = data.draw(shapes)
    which = data.draw(hnp.arrays(np.bool_, shape))
    a = data.draw(_arrays(dtype, shape, finite=True))
    b = data.draw(_arrays(dtype, shape, finite=True))
    assert_exports_match_on(jax.lax.select, which, a, b, enable_double_precision=True)
    idx = data.draw(hnp.arrays(np.int32, shape, elements=st.integers(0, 2)))
    assert_exports_match_on(
        lambda i, x, y: jax.lax.select_n(i, x, y, x), idx, a, b, enable_double_precision=True
    )
    if dtype != np.bool_:
        assert_exports_match_on(
            lambda x, y: jax.lax.clamp(np.asarray(2, dtype), x, y),
            a,
            b,
            enable_double_precision=True,
        )


SIGNED = {
    # (function, op types of the export): a -0.0 that may reach a Where's x slot is moved to
    # its y slot (onnxruntime's Where turns a -0.0 picked from x into +0.0, not one from y);
    # before, each of these lost a -0.0 or took 8 nodes for the sign fix-up
    "both may be -0": (jax.lax.select, ["Mul", "Where", "Where", "Xor"]),
    "x may be -0, y a +0 constant": (lambda m, x, y: jnp.where(m, x, 0.0), ["Where", "Xor"]),
    "x a constant, y may be -0": (lambda m, x, y: jnp.where(m, 2.0, y), ["Where"]),
    # onnxruntime swaps Where(Not(c), a, b) to Where(c, b, a): no Not may reach a Where
    "a negated selector, x may be -0": (lambda m, x, y: jnp.where(~m, x, 0.0), ["Where"]),
    "a negated selector, y may be -0": (lambda m, x, y: jnp.where(~m, 2.0, y), ["Where", "Xor"]),
    "integer selector": (
        lambda m, x, y: jax.lax.select_n(m.astype(np.int32) + (x > 0), x, y, -x),
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(SIGNED))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@given(data=st.data())
def test_select_keeps_signed_zeros_bit_exact(case, dtype, data):
    """Results bit for bit as JAX's (the signs of zeros, NaN, infinities), in few nodes."""
    fn, ops = SIGNED[case]
    shape = data.draw(shapes)
    special = st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf, 1.5, -2.0])
    which = data.draw(hnp.arrays(np.bool_, shape))
    x, y = (data.draw(hnp.arrays(dtype, shape, elements=special)) for _ in range(2))
    model = assert_exports_match_on(fn, which, x, y, enable_double_precision=dtype == np.float64)
    (got,) = run_onnx(model, [which, x, y])
    want = np.asarray(jax.jit(fn)(which, x, y))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if (
        ops is not None and x.size and dtype != np.float16
    ):  # (float16 adds its Casts; an empty result is a constant)
        assert sorted(n.op_type for n in model.graph.node if n.op_type != "Constant") == ops


ALL_DTYPES = [np.bool_, *INTS, np.float16, np.float32, np.float64, jnp.bfloat16]


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_convert_element_type(src, data):
    """One export converts to every dtype at once (one output per target)."""
    src = np.dtype(src)
    shape = data.draw(shapes)
    if src.kind == "f" or src.name == "bfloat16":
        # out-of-range float -> int saturates in JAX and NaN -> int is 0: both drawn
        elements = st.floats(-1e4, 1e4, width=32, allow_subnormal=False) | st.sampled_from(
            [np.nan, np.inf, -np.inf, 3e9, -3e9]
        )
        x = data.draw(hnp.arrays(np.float32, shape, elements=elements)).astype(src)
    else:
        x = data.draw(_arrays(src, shape))
    # onnxruntime's Python API cannot pass bfloat16 arrays: feed and read them as float32
    bf16 = np.dtype(jnp.bfloat16)
    if src == bf16:
        x = x.astype(np.float32)

    def convert_all(v):
        v = v.astype(bf16) if src == bf16 else v
        outs = [jax.lax.convert_element_type(v, np.dtype(t)) for t in ALL_DTYPES]
        return [o.astype(np.float32) if o.dtype == bf16 else o for o in outs]

    assert_exports_match_on(convert_all, x, enable_double_precision=True)


@given(data=st.data())
def test_integer_pow(data):
    y = data.draw(st.integers(-4, 7))
    x = data.draw(_arrays(np.float32, data.draw(shapes), elements=st.floats(0.5, 4, width=32)))
    assert_exports_match_on(lambda v: jax.lax.integer_pow(v, y), x, enable_double_precision=False)
    xi = data.draw(_arrays(np.int32, x.shape, elements=st.integers(-5, 5)))
    if y >= 0:
        assert_exports_match_on(
            lambda v: jax.lax.integer_pow(v, y), xi, enable_double_precision=False
        )


def test_symbolic_batch_elementwise_chain():
    def f(x, y):
        return jnp.where(x > 0, jnp.exp(-x) * y, jnp.log1p(jnp.abs(y)))

    assert_exports_match(f, [("B", 5), ("B", 5)], sizes={"B": [1, 4, 17]})


# JAX rounds a float16 result after every op; onnxruntime runs float16 ops without a kernel of
# their own in float32 and merges the Casts between them (core/kernels.py): chains of ops that
# round (and exact ops after them: floor, comparisons) must match bit for bit.
FLOAT16_CHAINS = {
    "mul_add": lambda x, y, z: x * y + z,
    "div_floor": lambda x, y, z: jnp.floor(x / y) + z,
    "exp_mul_sub": lambda x, y, z: jnp.exp(x) * y - z,
    "tanh_sin": lambda x, y, z: jnp.tanh(x * y) * jnp.sin(z),
    "product_sum": lambda x, y, z: (x * y).sum(axis=0) if x.ndim else x * y,
    "compare_product": lambda x, y, z: x * y < z,
    "select_quotient": lambda x, y, z: jnp.where(x * y > 0, x / y, z),
    "square_sqrt": lambda x, y, z: jnp.sqrt(x * x + y * y) - z,
    "matmul_add": lambda x, y, z: jnp.atleast_2d(x) @ jnp.atleast_2d(y).T + 1,
}


@pytest.mark.parametrize(
    "name",
    [
        n
        if n in {"mul_add", "div_floor", "compare_product", "tanh_sin"}
        else pytest.param(n, marks=pytest.mark.slow)
        for n in FLOAT16_CHAINS
    ],
)
@given(data=st.data())
def test_float16_rounds_after_every_op_as_jax(name, data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=5))
    elements = st.floats(-100, 100, width=16) | st.sampled_from([0.0, -0.0, 1.0, 3.0, 0.1])
    x, y, z = (data.draw(hnp.arrays(np.float16, shape, elements=elements)) for _ in range(3))
    assert_exports_match_on(FLOAT16_CHAINS[name], x, y, z, rtol=0.0, atol=0.0)
