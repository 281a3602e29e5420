"""Complex numbers as (real, imag) pairs: onnxruntime vs JAX on hypothesis-drawn complex values,
infinite and NaN parts included, complex64 and complex128."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on
from jax2onnx_nn.testing.strategies import complex_numbers

COMPLEX = [np.complex64, np.complex128]
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def _no_tiny(z):
    """Tiny parts as signed zeros: their quotients and products would be subnormal, which
    XLA on CPU flushes to zero and onnxruntime does not (see docs/limitations.md)."""

    def part(v):
        return np.where(np.abs(v) < 1e-30, np.copysign(0.0, v), v)

    out = np.empty_like(z)
    out.real, out.imag = part(z.real), part(z.imag)  # (re + 1j * im would mix NaNs in)
    return out


def _arrays(dtype, shape, *, special=True, bound=10.0):
    # bounded parts: products stay far from overflow, where XLA's fused multiply-adds and
    # onnxruntime's separate ones legitimately round differently
    parts = complex_numbers(dtype, min_value=-bound, max_value=bound, allow_special=special)
    return hnp.arrays(dtype, shape, elements=parts).map(_no_tiny)


def _params(names, default):
    """All names, those not in ``default`` marked slow (the default run stays in budget)."""
    return [n if n in default else pytest.param(n, marks=pytest.mark.slow) for n in sorted(names)]


def _tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-4} if dtype == np.complex64 else {}


def test_complex_graph_io_are_float_pairs():
    model = to_onnx(lambda z: z * z, [((2, "B"), "complex64")])
    (inp,), (out,) = model.graph.input, model.graph.output
    for value in (inp, out):
        dims = [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]
        assert value.type.tensor_type.elem_type == 1 and dims == [2, "B", 2]  # float32 [2, B, 2]


STRUCTURAL = {
    "reshape_transpose": lambda z: z.T.reshape(-1),
    "broadcast": lambda z: jnp.broadcast_to(z, (2, *z.shape)),
    "concat_slice": lambda z: jnp.concatenate([z, z[::-1]], axis=0)[1::2],
    "pad": lambda z: jnp.pad(z, 1, constant_values=1 - 2j),
    "gather": lambda z: jnp.take(z, jnp.array([0, -1, 0]), axis=0),
    "scatter": lambda z: z.at[0].set(z[-1]).at[-1].add(z[0]),
    "select": lambda z: jnp.where(jnp.isnan(z.real), z, -z),
    "roll_flip": lambda z: jnp.flip(jnp.roll(z, 1, axis=0), axis=-1),
    "dynamic_slice": lambda z: jax.lax.dynamic_slice_in_dim(z, z.shape[0] // 2, 1, axis=0),
    "squeeze_expand": lambda z: jnp.squeeze(z[None, :1], axis=(0, 1)),
    "sum_cumsum": lambda z: (z.sum(axis=0), jnp.cumsum(z, axis=-1)),
    "add_sub_neg": lambda z: (z + z[::-1]) - (-z),
    "stop_gradient_device_put": lambda z: jax.lax.stop_gradient(z) - jax.device_put(z[::-1]),
}


@pytest.mark.parametrize(
    "name",
    _params(STRUCTURAL, {"pad", "scatter", "select", "sum_cumsum", "stop_gradient_device_put"}),
)
@given(data=st.data())
def test_rearranging_and_linear_ops_act_on_pairs(name, data):
    dtype = data.draw(st.sampled_from(COMPLEX))
    z = data.draw(_arrays(dtype, data.draw(shapes)))
    assert_exports_match_on(STRUCTURAL[name], z)


UNARY = {
    "abs": jnp.abs,
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "sign": jnp.sign,
    "conj": jnp.conj,
    "real": jnp.real,
    "imag": jnp.imag,
    "square": lambda z: z**2,
    "cube": lambda z: z**3,
    "reciprocal": lambda z: z**-1,
    "pow_5": lambda z: z**5,
    "to_bool": lambda z: z.astype(bool),
    "to_real": lambda z: jnp.real(z).astype(np.float32),
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "jnp_square": jnp.square,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log1p": jnp.log1p,
    "log2": jnp.log2,
}
# parts up to 80 reach overflow of exp in float32 (inf parts in the result); from 88.7 to
# 89.4 XLA's complex sin and cos overflow where sinh and cosh do not (docs/limitations.md)
WIDE = {"exp", "pow_5", "sin", "cos", "tan", "sinh", "cosh", "tanh", "exp2", "expm1"}


@pytest.mark.parametrize(
    "name", _params(UNARY, {"abs", "sqrt", "log", "reciprocal", "to_bool", "sin", "tanh", "log1p"})
)
@given(data=st.data())
def test_unary(name, data):
    dtype = data.draw(st.sampled_from(COMPLEX))
    z = data.draw(_arrays(dtype, data.draw(shapes), bound=80.0 if name in WIDE else 10.0))
    assert_exports_match_on(UNARY[name], z, **_tolerance(dtype))


BINARY = {
    "mul": jnp.multiply,
    "div": jnp.divide,
    "eq": jnp.equal,
    "ne": jnp.not_equal,
    "complex": lambda x, y: jax.lax.complex(x.real, y.imag),
}


@pytest.mark.parametrize("name", _params(BINARY, {"mul", "div", "eq"}))
@given(data=st.data())
def test_binary(name, data):
    dtype = data.draw(st.sampled_from(COMPLEX))
    shape = data.draw(shapes)
    x, y = data.draw(_arrays(dtype, shape)), data.draw(_arrays(dtype, shape))
    if name == "eq":
        y = np.where(np.arange(y.size).reshape(y.shape) % 2 == 0, x, y)  # equal elements too
    assert_exports_match_on(BINARY[name], x, y, **_tolerance(dtype))


@given(data=st.data())
def test_pow_finite(data):
    dtype = data.draw(st.sampled_from(COMPLEX))
    shape = data.draw(shapes)
    x = data.draw(_arrays(dtype, shape, special=False, bound=4.0))
    y = data.draw(_arrays(dtype, shape, special=False, bound=2.0))
    # exp(y log x) amplifies the parts' rounding: compare relative to the result's magnitude
    scale = float(np.max(np.nan_to_num(np.abs(np.asarray(jnp.power(x, y)))), initial=1.0))
    assert_exports_match_on(
        jnp.power, x, y, rtol=1e-4 if dtype == np.complex64 else 1e-10, atol=1e-5 * scale
    )


@pytest.mark.parametrize("dtype", COMPLEX)
def test_casts_to_and_from_complex(dtype):
    x = np.array([[1.5, -2.0, np.inf], [np.nan, 0.0, -0.0]], np.float32)

    def fns(v):
        return (
            v.astype(dtype),
            (v.astype(dtype) * 1j).astype(np.complex64),
            jax.lax.complex(v, -v),
        )

    assert_exports_match_on(fns, x.astype(np.float64 if dtype == np.complex128 else np.float32))


BILINEAR = {
    "matmul": (lambda a, b: a @ b, [("B", 3), (3, 4)]),
    "einsum": (lambda a, b: jnp.einsum("bi,ij->bj", a, b), [("B", 3), (3, 2)]),
    "batched_dot": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [("B", 2, 3), ("B", 3, 2)]),
    "real_times_complex": (lambda a, b: a.real @ b, [("B", 3), (3, 4)]),
    "conv": (
        lambda a, b: jax.lax.conv_general_dilated(a, b, (1,), "SAME", feature_group_count=1),
        [("B", 2, 7), (3, 2, 3)],
    ),
}


@pytest.mark.parametrize("name", _params(BILINEAR, {"einsum", "conv"}))
@pytest.mark.parametrize("dtype", COMPLEX)
def test_dot_general_and_conv(name, dtype):
    fn, shapes_ = BILINEAR[name]
    specs = [(s, np.dtype(dtype).name) for s in shapes_]
    assert_exports_match(
        fn, specs, sizes={"B": [1, 3]}, enable_double_precision=dtype == np.complex128
    )


@pytest.mark.parametrize("dtype", COMPLEX)
@given(data=st.data())
def test_reduce_prod(dtype, data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    z = data.draw(_arrays(dtype, shape, special=False, bound=1.5))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    assert_exports_match_on(lambda v: jnp.prod(v, axis=axis), z, **_tolerance(dtype))


def test_complex_inside_control_flow():
    def body(carry, x):
        return carry * x + 1j, jnp.abs(carry)

    fn = lambda z: jax.lax.scan(body, z[0], z)  # noqa: E731
    assert_exports_match(fn, [((5, 2), "complex64")])


def test_complex_op_without_a_pair_lowering_is_named():
    with pytest.raises(ConversionError, match="rsqrt on complex numbers") as info:
        to_onnx(jax.lax.rsqrt, [((3,), "complex64")])
    # how to fix it: a rule for pairs (one registered without complex_pairs=True is not asked)
    assert "lowering(primitive, complex_pairs=True)" in str(info.value)
    assert "pass lowerings=" not in str(info.value)


def test_complex_linear_algebra_is_refused_with_its_real_form():
    def solve(a, b):
        return jnp.linalg.solve(a, b)

    with pytest.raises(ConversionError) as info:
        to_onnx(solve, [((4, 4), "complex64"), ((4, 1), "complex64")])
    message = str(info.value)
    assert [u.primitive for u in info.value.unsupported] == [
        "lu on complex numbers",
        "triangular_solve on complex numbers",
    ]
    assert all(
        loc.startswith(f"{__file__}:{solve.__code__.co_firstlineno + 1}")
        for u in info.value.unsupported
        for loc in u.locations
    )
    assert "lax.linalg's lu, triangular_solve of complex matrices are not lowered" in message
    assert "[[A.real, -A.imag], [A.imag, A.real]]" in message


def _grid_arrays(dtype, shape, *, special):
    """Parts from a small grid (ties in the real part, signed zeros; inf/NaN when ``special``):
    what exercises a lexicographic order."""
    grid = [0.0, -0.0, 1.0, -1.0, 2.5] + ([np.inf, -np.inf, np.nan] if special else [])
    part = st.sampled_from(grid)
    return hnp.arrays(dtype, shape, elements=st.builds(complex, part, part)).map(_no_tiny)


ORDERED = {
    "sort": (lambda z: jnp.sort(z, axis=-1), True),
    "sort_with_payload": (
        lambda z: jax.lax.sort(
            (z, jax.lax.broadcasted_iota(np.int32, z.shape, 0)), dimension=0, num_keys=1
        ),
        True,
    ),
    "maximum": (lambda z: jax.lax.max(z, z[::-1]), True),
    "minimum": (lambda z: jax.lax.min(z, jnp.flip(z, -1)), True),
    "reduce_max": (lambda z: jnp.max(z, axis=0), False),
    "reduce_min": (lambda z: jnp.min(z, axis=-1), False),
    "max_all": (jnp.max, False),
}


@pytest.mark.parametrize("name", _params(ORDERED, {"sort_with_payload", "maximum", "reduce_max"}))
@given(data=st.data())
def test_lexicographic_order(name, data):
    """JAX orders complex numbers by (real, imag); sort and the elementwise max/min also with
    inf/NaN parts, the reductions on NaN-free values (docs/limitations.md)."""
    fn, special = ORDERED[name]
    dtype = data.draw(st.sampled_from(COMPLEX))
    z = data.draw(_grid_arrays(dtype, data.draw(shapes), special=special))
    assert_exports_match_on(fn, z)


@pytest.mark.parametrize("reverse", [False, pytest.param(True, marks=pytest.mark.slow)])
@given(data=st.data())
def test_cumprod(reverse, data):
    dtype = data.draw(st.sampled_from(COMPLEX))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    z = data.draw(_arrays(dtype, shape, special=False, bound=1.5))
    axis = data.draw(st.integers(0, len(shape) - 1))  # lax takes no negative axes
    assert_exports_match_on(
        lambda v: jax.lax.cumprod(v, axis=axis, reverse=reverse), z, **_tolerance(dtype)
    )


INVERSE = {
    "arcsin": jnp.arcsin,
    "arccos": jnp.arccos,
    "arctan": jnp.arctan,
    "arcsinh": jnp.arcsinh,
    "arccosh": jnp.arccosh,
    "arctanh": jnp.arctanh,
}


def _wide_parts(dtype):
    """Parts over the whole finite range (overflow of naive formulas), near +-1 (the branch
    points), small, and signed zeros, infinities and NaN (the cuts and JAX's special values)."""
    width = np.finfo(dtype).bits
    floats = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False, width=width)
    lo, hi = (float(np.finfo(dtype).dtype.type(v)) for v in (1 - 1e-3, 1 + 1e-3))
    near_one = st.floats(lo, hi, width=width) | st.floats(-hi, -lo, width=width)
    small = st.floats(-4.0, 4.0, allow_subnormal=False, width=width)
    special = st.sampled_from([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan])
    return floats | near_one | small | special


def assert_close_to_magnitude(fn, z, rtol):
    """onnxruntime vs JAX for complex results, each part within ``rtol * |result|`` (the
    error measure of complex functions: a part far smaller than the other carries no
    accuracy of its own), infinite and NaN parts and the sign of zero parts exactly.
    Returns the largest relative error."""
    double = z.dtype == np.complex128
    model = to_onnx(fn, [(z.shape, z.dtype.name)], enable_double_precision=double)
    (actual,) = run_onnx(model, [np.stack([z.real, z.imag], -1)])
    with jxi.x64(double):
        expected = np.asarray(jax.jit(fn)(z))
    expected = np.stack([expected.real, expected.imag], -1)
    finite = np.isfinite(actual) & np.isfinite(expected)
    same = np.where(finite, True, (actual == expected) | (np.isnan(actual) & np.isnan(expected)))
    same &= np.where(expected == 0, np.signbit(actual) == np.signbit(expected), True)
    magnitude = np.hypot(
        *np.where(np.isfinite(expected), np.abs(expected), 0).transpose(-1, *range(z.ndim))
    )
    error = (
        np.where(finite, np.abs(actual - np.where(finite, expected, 0)), 0)
        / np.maximum(magnitude, np.finfo(actual.dtype).tiny)[..., None]
    )
    bad = ~same | (error > rtol)
    assert not bad.any(), (
        f"{fn.__name__}{z[bad.any(-1)][:4]}: onnxruntime {actual[bad.any(-1)][:4]}, JAX "
        f"{expected[bad.any(-1)][:4]}"
    )
    return float(error.max(initial=0.0))


@pytest.mark.parametrize("name", _params(INVERSE, {"arcsin", "arctanh"}))
@given(data=st.data())
def test_inverse_trigonometric_and_hyperbolic(name, data):
    """Hull et al.'s algorithm (asin, acos, asinh, acosh) and atanh's log1p formula, as XLA
    computes them: accurate near the branch points, finite up to the largest float, the cuts'
    sides chosen by the sign of a zero part, and JAX's results for infinite and NaN parts."""
    dtype = data.draw(st.sampled_from(COMPLEX))
    parts = _wide_parts(dtype)
    z = data.draw(
        hnp.arrays(dtype, data.draw(shapes), elements=st.builds(complex, parts, parts)).map(
            _no_tiny
        )
    )
    assert_close_to_magnitude(INVERSE[name], z, rtol=1e-5 if dtype == np.complex64 else 1e-12)
