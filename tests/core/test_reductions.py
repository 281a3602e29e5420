"""Reductions, scans and sorts: onnxruntime vs JAX on hypothesis-drawn shapes, dtypes, axes,
values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.config import MAX_OPSET
from jax2onnx_nn.testing import assert_exports_match
from jax2onnx_nn.testing.assertions import op_types

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOATS = [np.float16, jnp.bfloat16, np.float32, np.float64]
NUMBERS = INTS + FLOATS
ALL = NUMBERS + [np.bool_]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0]
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5)


def _name(dtype: object) -> str:
    return np.dtype(dtype).name


def _is_float(dtype: object) -> bool:
    return bool(jnp.issubdtype(dtype, jnp.floating))


def _values(draw: st.DrawFn, dtype: object, shape: tuple[int, ...]) -> np.ndarray:
    """Arrays with many ties and, for floats, NaN/inf/-0. Finite floats lie on a grid on which
    every sum of up to 125 of them is exact in the dtype, so any summation order gives JAX's
    numbers (f16: integers up to 8, bf16: up to 2, wider: quarters up to 256)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return draw(hnp.arrays(np.bool_, shape))
    if not _is_float(dtype):
        info = np.iinfo(dtype)
        small = st.integers(max(-2, int(info.min)), 2)
        return draw(
            hnp.arrays(
                dtype, shape, elements=st.one_of(small, st.integers(int(info.min), int(info.max)))
            )
        )
    scale, bound = {"float16": (1, 8), "bfloat16": (1, 2)}.get(dtype.name, (4, 256))
    finite = st.integers(-bound * scale, bound * scale).map(lambda v: v / scale)
    elements = st.one_of(finite, st.sampled_from([-1.0, 1.0]), st.sampled_from(SPECIAL))
    return draw(hnp.arrays(np.float32, shape, elements=elements)).astype(dtype)


def _product_safe(x: np.ndarray) -> np.ndarray:
    """Finite floats become +-1 or +-2 (never overflowing float16: +-1 only), so products
    are exact in any order; NaN, inf and +-0 stay."""
    if not _is_float(x.dtype):
        return x
    with np.errstate(invalid="ignore"):
        two = (np.abs(x) > 1) & (x.dtype != np.float16)
        return np.where(np.isfinite(x) & (x != 0), np.sign(x) * np.where(two, 2, 1), x).astype(
            x.dtype
        )


def _check(fn: object, values: list[np.ndarray], *, x64: bool = False, **kwargs: object) -> object:
    """Compare with JAX; bfloat16 inputs and outputs travel as float32 (onnxruntime's Python
    API has no bfloat16), converted inside the function."""
    dtypes = [v.dtype for v in values]
    feeds = [v.astype(np.float32) if v.dtype == jnp.bfloat16 else v for v in values]
    x64 = x64 or any(d.itemsize == 8 for d in dtypes)
    if (
        jnp.bfloat16 in dtypes and "rtol" not in kwargs
    ):  # outputs come back as float32: keep bfloat16's tolerance
        kwargs.update(rtol=1.6e-2, atol=1.6e-2)

    def wrapped(*args: jax.Array) -> object:
        outs = fn(*[a.astype(d) for a, d in zip(args, dtypes, strict=True)])
        return jax.tree_util.tree_map(
            lambda o: o.astype(np.float32) if o.dtype == jnp.bfloat16 else o, outs
        )

    # one XLA compilation per example instead of one per primitive keeps the tests quick
    return assert_exports_match(
        jax.jit(wrapped),
        [(v.shape, v.dtype) for v in feeds],
        input_values=feeds,
        enable_double_precision=x64,
        **kwargs,
    )


def _axes(draw: st.DrawFn, ndim: int) -> tuple[int, ...]:
    """A set of axes, drawn with negative spellings and normalized as jnp does."""
    drawn = draw(
        st.lists(st.integers(-ndim, ndim - 1), max_size=ndim, unique_by=lambda a: a % ndim)
    )
    return tuple(sorted(a % ndim for a in drawn))


# -- every rule on every dtype, with ties, extremes, NaN/inf/-0 and empty axes ---------------


def _sweep_values(dtype: object) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([[1, 0, 1, 1, 0, 0], [0] * 6, [1] * 6], dtype=bool)
    if _is_float(dtype):
        values = [
            np.nan,
            -0.0,
            0.0,
            np.inf,
            -np.inf,
            1,
            1,
            -1,
            2.5,
            np.nan,
            0.0,
            -0.0,
            3,
            3,
            -np.inf,
            np.inf,
            0.5,
            -2,
        ]
        return np.array(values, np.float32).reshape(3, 6).astype(dtype)
    info = np.iinfo(dtype)
    values = [
        info.min,
        info.max,
        0,
        1,
        1,
        2,
        info.max,
        info.min,
        0,
        3,
        1,
        2,
        1,
        info.max,
        2,
        0,
        info.max // 3,
        info.min,
    ]
    return np.array(values, dtype=dtype).reshape(3, 6)


def _every_rule(dtype: object) -> object:
    is_float = _is_float(dtype)

    def fn(v, p, e):
        outs = [
            lax.reduce_max(v, (1,)),
            lax.reduce_min(v, (0, 1)),
            lax.reduce_max(e, (1,)),
            lax.reduce_min(e, (1, 2)),
            jnp.argmax(v, axis=1),
            jnp.argmin(v, axis=0),
            jnp.sort(v, axis=1),
            jnp.argsort(v, axis=0),
        ]
        if dtype != np.bool_:
            outs += [
                lax.reduce_sum(v, (1,)),
                lax.reduce_prod(p, (0, 1)),
                lax.reduce_sum(e, (1,)),
                lax.reduce_prod(e, (0, 1)),
                *lax.top_k(v, 4),
                lax.cumsum(v, 1),
                lax.cumprod(p, 0, reverse=True),
                lax.cummax(v, 1, reverse=True),
                lax.cummin(v, 0),
            ]
        if is_float:
            outs += [lax.cumlogsumexp(v, 1), lax.cumlogsumexp(v, 0, reverse=True)]
        else:
            outs += [
                f(a, axes)
                for f in (lax.reduce_and, lax.reduce_or, lax.reduce_xor)
                for a, axes in ((v, (1,)), (e, (1,)))
            ]
        return outs

    return fn


@pytest.mark.parametrize("dtype", ALL, ids=_name)
def test_every_rule_on_every_dtype(dtype):
    x = _sweep_values(dtype)
    _check(_every_rule(dtype), [x, _product_safe(x), np.zeros((2, 0, 3), dtype)])


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.uint64, np.float64], ids=_name)
def test_every_rule_at_opset17(dtype):
    x = _sweep_values(dtype)
    _check(_every_rule(dtype), [x, _product_safe(x), np.zeros((2, 0, 3), dtype)], opset=17)


# -- hypothesis: shapes (0/1-sized dims), dtypes, axes, values ------------------------------


@given(data=st.data())
def test_reduce(data):
    dtype = data.draw(st.sampled_from(ALL))
    shape = data.draw(shapes)
    axes = _axes(data.draw, len(shape))
    x = _values(data.draw, dtype, shape)

    def fn(v, p):
        extrema = [lax.reduce_max(v, axes), lax.reduce_min(v, axes)]
        return (
            extrema
            if dtype == np.bool_
            else [*extrema, lax.reduce_sum(v, axes), lax.reduce_prod(p, axes)]
        )

    _check(fn, [x, _product_safe(x)])


@given(data=st.data())
def test_bitwise_reductions(data):
    dtype = data.draw(st.sampled_from(INTS + [np.bool_]))
    shape = data.draw(shapes)
    axes = _axes(data.draw, len(shape))
    x = data.draw(hnp.arrays(dtype, shape))
    _check(
        lambda v: (lax.reduce_and(v, axes), lax.reduce_or(v, axes), lax.reduce_xor(v, axes)), [x]
    )


@given(data=st.data())
def test_argmax_argmin(data):
    dtype = data.draw(st.sampled_from(ALL))
    shape = data.draw(shapes)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = tuple(
        max(d, 1) if i == axis % len(shape) else d for i, d in enumerate(shape)
    )  # JAX rejects empty
    index_dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    x = _values(data.draw, dtype, shape)
    a = axis % len(shape)

    def fn(v):
        return (
            lax.argmax(v, a, index_dtype),
            lax.argmin(v, a, index_dtype),
            jnp.argmax(v, axis=axis),
        )

    model = _check(fn, [x], x64=True)
    assert model.graph.output[0].type.tensor_type.elem_type == (6 if index_dtype == np.int32 else 7)


@given(data=st.data())
def test_cumulative(data):
    dtype = data.draw(st.sampled_from(NUMBERS))
    shape = data.draw(shapes)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1)) % len(shape)
    reverse = data.draw(st.booleans())
    x = _values(data.draw, dtype, shape)

    def fn(v, p):
        outs = [
            lax.cumsum(v, axis, reverse),
            lax.cummax(v, axis, reverse),
            lax.cummin(v, axis, reverse),
            lax.cumprod(p, axis, reverse),
        ]
        return outs + [lax.cumlogsumexp(v, axis, reverse)] if _is_float(dtype) else outs

    # cumlogsumexp rounds differently in 16-bit floats than XLA's float32-internal math
    loose = (
        {"rtol": 2e-2, "atol": 2e-2} if np.dtype(dtype).itemsize == 2 and _is_float(dtype) else {}
    )
    _check(fn, [x, _product_safe(x)], **loose)


@given(data=st.data())
def test_sort_and_argsort(data):
    dtype = data.draw(st.sampled_from(ALL))
    shape = data.draw(shapes)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = _values(data.draw, dtype, shape)
    unstable = lambda v: lax.sort(v, dimension=axis % len(shape), is_stable=False)  # noqa: E731
    _check(lambda v: (jnp.sort(v, axis=axis), jnp.argsort(v, axis=axis), unstable(v)), [x])


@given(data=st.data())
def test_multi_operand_sort(data):
    """Lexicographic on ``num_keys`` keys; the permutation is checked exactly through an iota."""
    shape = data.draw(shapes)
    dimension = data.draw(st.integers(0, len(shape) - 1))
    num_keys = data.draw(st.integers(1, 2))
    k1 = _values(data.draw, data.draw(st.sampled_from(ALL)), shape)
    k2 = _values(data.draw, data.draw(st.sampled_from(ALL)), shape)

    def fn(a, b):
        payload = lax.broadcasted_iota(jnp.int32, shape, dimension)
        return lax.sort((a, b, payload), dimension=dimension, is_stable=True, num_keys=num_keys)

    _check(fn, [k1, k2])


@given(data=st.data())
def test_top_k(data):
    dtype = data.draw(st.sampled_from(NUMBERS))
    shape = data.draw(shapes)
    k = data.draw(st.integers(0, shape[-1]))
    x = _values(data.draw, dtype, shape)
    if _is_float(
        dtype
    ):  # a NaN with its sign bit set is the smallest float for XLA; ONNX cannot see that bit
        x = np.where(np.isnan(x), np.nan, x).astype(x.dtype)
    _check(lambda v: lax.top_k(v, k), [x])


@given(data=st.data(), is_max_k=st.booleans(), aggregate=st.booleans(), ties=st.booleans())
def test_approx_top_k_is_exact_top_k(data, is_max_k, aggregate, ties):
    """CPU JAX's approx_max_k / approx_min_k are exact top-k (NaN-free inputs). Among tied
    values XLA's sort is not stable (which index comes first varies with size, k and dtype),
    so with ties only the values are compared; with distinct values the indices too."""
    dtype = data.draw(st.sampled_from(FLOATS))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(1, shape[axis]))
    if ties:
        x = _values(data.draw, dtype, shape)
        x = np.where(np.isnan(x) | (x == 0), 1, x).astype(
            x.dtype
        )  # (-0 and +0 tie: their signs may swap)
    else:  # distinct integers, exact in every float dtype
        x = np.array(
            data.draw(st.permutations(range(-20, int(np.prod(shape)) - 20))), dtype
        ).reshape(shape)
    approx = lax.approx_max_k if is_max_k else lax.approx_min_k
    outputs = slice(0, 1) if ties else slice(0, 2)
    _check(
        lambda v: approx(v, k, reduction_dimension=axis, aggregate_to_topk=aggregate)[outputs], [x]
    )


def test_approx_top_k_longer_output_and_symbolic_batch():
    x = np.random.default_rng(0).normal(size=(2, 3000)).astype(np.float32)
    model = _check(lambda v: lax.approx_max_k(v, 3, aggregate_to_topk=False), [x])
    assert model.graph.output[0].type.tensor_type.shape.dim[1].dim_value > 3
    assert_exports_match(lambda v: lax.approx_min_k(v, 2), [(("B", 7), np.float32)])


def _first_argmax(x, y, axes):
    """A variadic reduce with an associative, non-commutative computation (ties keep the left)."""
    init = (np.asarray(-np.inf, x.dtype), np.int32(0))
    return lax.reduce(
        (x, y),
        init,
        lambda a, b: (jnp.maximum(a[0], b[0]), jnp.where(a[0] >= b[0], a[1], b[1])),
        axes,
    )


@given(data=st.data())
def test_reduce_with_custom_computation(data):
    shape = data.draw(shapes)
    axes = _axes(data.draw, len(shape))
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.sampled_from([0.0, 1.0, 2.0, -np.inf])))
    y = data.draw(hnp.arrays(np.int32, shape, elements=st.integers(-50, 50)))
    _check(lambda a, b: _first_argmax(a, b, axes), [x, y])


def test_reduce_with_custom_computation_needs_static_reduced_dims():
    with pytest.raises(ConversionError, match="symbolic dim"):
        to_onnx(
            lambda a, b: _first_argmax(a, b, (0,)), [(("B", 3), np.float32), (("B", 3), np.int32)]
        )


# -- exactness and graph shape -----------------------------------------------------------------


def test_integer_sums_and_products_wrap_like_jax():
    # onnxruntime's ReduceSum/ReduceProd go through float64: inexact past 2**53, saturating
    big = np.array([[2**62, 2**62, 2**53 + 1, 1], [1, 2, 3, -(2**63)]], np.int64)
    model = _check(
        lambda v: (lax.reduce_sum(v, (0, 1)), lax.reduce_prod(v, (1,)), lax.reduce_prod(v, (0, 1))),
        [big],
    )
    assert "ReduceSum" not in op_types(model) and "ReduceProd" not in op_types(model)
    model = _check(lambda v: lax.reduce_sum(v, (0, 1)), [np.full((300, 300), 2**31 - 1, np.int32)])
    assert op_types(model).count("ReduceSum") == 1  # every partial sum is exact in float64
    _check(lambda v: lax.reduce_prod(v, (0,)), [np.full((3, 2), 2**31 - 1, np.uint32)])


def test_uint64_keeps_its_order():
    u = np.array([[1, 2**63 + 5, 3], [2**64 - 1, 0, 2**63]], np.uint64)
    _check(
        lambda v: (
            jnp.max(v, axis=0),
            jnp.min(v, axis=1),
            jnp.argmax(v, axis=1),
            jnp.sort(v, axis=1),
            lax.top_k(v, 2),
        ),
        [u],
    )


def test_reduce_opset17_axes_attribute():
    x = np.array([[1, np.nan, 3], [0, 2, -np.inf]], np.float32)
    model = _check(lambda v: (lax.reduce_max(v, (1,)), lax.reduce_prod(v, (0,))), [x], opset=17)
    reduce_nodes = [n for n in model.graph.node if n.op_type in ("ReduceMax", "ReduceProd")]
    assert reduce_nodes and all("axes" in [a.name for a in n.attribute] for n in reduce_nodes)


@pytest.mark.parametrize("name", ["cummax", "cumprod", "cumlogsumexp"])
@pytest.mark.parametrize("n", [9, 33])
def test_scan_is_logarithmic(name, n):
    x = np.random.default_rng(n).choice(
        np.array([0.5, 1.0, 2.0, -1.0, 3.0, np.nan, -np.inf], np.float32), size=(3, n)
    )
    scan = getattr(lax, name)
    model = _check(lambda v: (scan(v, 1), scan(v, 1, reverse=True)), [x])
    assert op_types(model).count("Pad") == 2 * int(np.ceil(np.log2(n)))
    assert "Loop" not in op_types(model)


@given(data=st.data())
def test_cumprod_is_onnx_cumprod_from_opset_26(data):
    dtype = data.draw(st.sampled_from(NUMBERS))
    shape = data.draw(shapes)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    reverse = data.draw(st.booleans())
    x = _product_safe(_values(data.draw, dtype, shape))
    opset = data.draw(st.sampled_from([26, MAX_OPSET]))
    model = _check(
        lambda v: (
            lax.cumprod(v, axis % len(shape), reverse),
            lax.reduce_prod(v, (axis % len(shape),)),
        ),
        [x],
        opset=opset,
    )
    # 16-bit floats keep the scan (CumProd would round once in float32, XLA rounds per step);
    # integer reduce_prod is a CumProd's last element (onnxruntime's ReduceProd is float64)
    uses = not (_is_float(dtype) and np.dtype(dtype).itemsize == 2)
    assert op_types(model).count("CumProd") == (uses * (1 if _is_float(dtype) else 2))
    assert "Loop" not in op_types(model)


def test_cumprod_wraps_integers_and_propagates_nan_at_opset_26():
    ints = np.array([[2**20, 2**13, 3, -1], [7, 0, 5, 2**30]], np.int32)
    floats = np.array([[np.nan, 2.0, 0.5], [np.inf, 0.0, -3.0], [1e30, 1e30, 1e-30]], np.float32)
    for x in (
        ints,
        ints.astype(np.int8),
        ints.astype(np.uint64),
        floats,
        floats.astype(np.float64),
    ):
        model = _check(
            lambda v: (lax.cumprod(v, 1), lax.cumprod(v, 0, reverse=True)), [x], opset=26
        )
        assert op_types(model).count("CumProd") == 2


def test_sort_takes_one_topk_per_key():
    x = np.array([[3.0, -0.0, np.nan, 0.0, np.inf, 1.0]], np.float32)
    assert op_types(_check(jnp.argsort, [x])).count("TopK") == 1
    # float64 has no wider float to put NaN above +inf: NaN-ness is a second, stable pass
    assert op_types(_check(jnp.argsort, [x.astype(np.float64)])).count("TopK") == 2
    ints = np.array([[3, 1, 2, 1]], np.int32)
    assert op_types(_check(lambda v: lax.sort((v, v, v), num_keys=2), [ints])).count("TopK") == 2


# -- symbolic dims -----------------------------------------------------------------------------

SYMBOLIC = {
    "sum_over_batch": (lambda x: jnp.sum(x, axis=0), np.float32),
    "max_over_features": (lambda x: jnp.max(x, axis=-1), np.int16),
    "min_over_all": (lambda x: lax.reduce_min(x, (0, 1)), np.float32),
    "prod_int_over_batch": (lambda x: lax.reduce_prod(x, (0,)), np.int32),
    "sum_int64_over_all": (lambda x: lax.reduce_sum(x, (0, 1)), np.int64),
    "or_over_batch": (lambda x: lax.reduce_or(x, (0,)), np.uint16),
    "argmax_over_features": (lambda x: jnp.argmax(x, axis=1), np.float32),
    "cumsum_over_batch": (lambda x: jnp.cumsum(x, axis=0), np.float32),
    "cummax_over_batch": (lambda x: lax.cummax(x, 0, reverse=True), np.float32),
    "cumprod_over_batch": (lambda x: lax.cumprod(x, 0), np.int8),
    "cumlogsumexp_over_batch": (lambda x: lax.cumlogsumexp(x, 0), np.float64),
    "sort_over_batch": (lambda x: (jnp.sort(x, axis=0), jnp.argsort(x, axis=0)), np.float64),
    "argsort_features": (lambda x: jnp.argsort(x, axis=1), np.int32),
    "top_k": (lambda x: lax.top_k(x, 3), np.float32),
}
LOOPS = {
    "cummax_over_batch",
    "cumprod_over_batch",
    "cumlogsumexp_over_batch",
    "prod_int_over_batch",
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_symbolic_batch(name):
    fn, dtype = SYMBOLIC[name]
    x64 = np.dtype(dtype).itemsize == 8
    model = assert_exports_match(
        fn, [(("B", 5), dtype)], sizes={"B": [0, 1, 3, 9]}, enable_double_precision=x64
    )
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"
    assert ("Loop" in op_types(model)) == (name in LOOPS)  # a scan over B loops log2(B) times
    if name in ("cumprod_over_batch", "prod_int_over_batch"):  # ... or is one CumProd from opset 26
        model = assert_exports_match(
            fn, [(("B", 5), dtype)], sizes={"B": [0, 1, 3, 9]}, opset=MAX_OPSET
        )
        assert "Loop" not in op_types(model) and "CumProd" in op_types(model)


@given(data=st.data(), prod=st.booleans())
def test_cumulative_include_initial(data, prod):
    """jnp.cumulative_sum / cumulative_prod with the initial 0 / 1 prepended, size-0 axes too."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dtype = data.draw(st.sampled_from([np.float32, np.int32]))
    x = data.draw(hnp.arrays(dtype, shape, elements=st.integers(-3, 3)))
    f = jnp.cumulative_prod if prod else jnp.cumulative_sum
    _check(lambda v: f(v, axis=axis, include_initial=True), [x])


KEEPDIMS = {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min, "prod": jnp.prod}


@pytest.mark.parametrize("name", sorted(KEEPDIMS))
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@given(data=st.data())
def test_keepdims_is_one_reduction(name, dtype, data):
    """``keepdims=True`` exports as ReduceX(keepdims=1), no Unsqueeze, where the reduction is
    one ReduceX (a float max/min keeps its NaN fix-up between the reduction and the Unsqueeze,
    an integer sum its Casts, an integer product its log-step folds); values as JAX's."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    rank = len(shape)
    reduced = data.draw(st.sets(st.integers(0, rank - 1), min_size=1))
    axes = tuple(
        a - rank if data.draw(st.booleans()) else a for a in sorted(reduced)
    )  # negative axes too
    elements = (
        st.floats(-10, 10, width=32) | st.sampled_from([np.nan, np.inf, -np.inf, -0.0])
        if dtype == np.float32
        else st.integers(-5, 5)
    )
    x = data.draw(hnp.arrays(dtype, shape, elements=elements))
    fn = lambda v: KEEPDIMS[name](v, axis=axes, keepdims=True)  # noqa: E731
    one_reduction = name in (("max", "min") if dtype == np.int32 else ("sum", "mean", "prod"))
    model = _check(fn, [x])
    if one_reduction:
        assert "Unsqueeze" not in op_types(model)
    if 0 not in reduced:  # a symbolic batch (of size 0 too) that is not reduced
        model = assert_exports_match(fn, [(("B", *shape[1:]), dtype)], sizes={"B": [0, 1, 3]})
        if one_reduction:
            assert "Unsqueeze" not in op_types(model)


@pytest.mark.parametrize("opset", [13, 17, 18, MAX_OPSET])
def test_keepdims_in_every_opset_form(opset):
    """Axes as an attribute (ReduceMax before 18) or as an input (ReduceSum from 13)."""
    for fn, dtype in [
        (lambda v: jnp.sum(v, axis=(0, -1), keepdims=True), np.float32),
        (lambda v: jnp.max(v, axis=-1, keepdims=True), np.int32),
    ]:
        model = assert_exports_match(fn, [(("B", 3, 4), dtype)], sizes={"B": [0, 2]}, opset=opset)
        assert len(op_types(model)) == 1 and op_types(model)[0] in ("ReduceSum", "ReduceMax")
