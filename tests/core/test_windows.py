"""reduce_window_sum/max/min and reduce_window: onnxruntime vs JAX on hypothesis-drawn shapes,
windows, strides, paddings (negative too) and dilations, for float, integer and bool types,
with NaN and infinities, plus flax's pooling functions and the graphs emitted."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, sizes_for
from jax2onnx_nn.testing.assertions import op_types

# Float values that make every sum exact whatever the order (NaN and inf included), so JAX
# and onnxruntime agree exactly; max/min are exact anyway.
SPECIAL = st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, np.inf, -np.inf, np.nan])
FINITE = st.sampled_from([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.uint16]
REDUCTIONS = {
    "sum": (lax.add, lambda dtype: np.zeros((), dtype)),
    "max": (lax.max, lambda dtype: _lowest(dtype)),
    "min": (lax.min, lambda dtype: _highest(dtype)),
}


def _lowest(dtype):
    dtype = np.dtype(dtype)
    return np.asarray(-np.inf if dtype.kind == "f" else np.iinfo(dtype).min, dtype)


def _highest(dtype):
    dtype = np.dtype(dtype)
    return np.asarray(np.inf if dtype.kind == "f" else np.iinfo(dtype).max, dtype)


def _values(data, dtype, shape, *, special=True) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return data.draw(
            hnp.arrays(np.float64, shape, elements=SPECIAL if special else FINITE)
        ).astype(dtype)
    return data.draw(hnp.arrays(dtype, shape))


@st.composite
def windows(draw, *, max_rank: int = 4) -> dict:
    """A shape and reduce_window params: windows, strides, paddings (negative too), dilations."""
    rank = draw(st.integers(1, max_rank))

    def per_axis(lo, hi):
        return tuple(draw(st.integers(lo, hi)) for _ in range(rank))

    problem = dict(
        shape=per_axis(0, 5),
        window_dimensions=per_axis(1, 3),
        window_strides=per_axis(1, 3),
        padding=tuple(zip(per_axis(-1, 2), per_axis(-1, 2), strict=True)),
        base_dilation=per_axis(1, 2),
        window_dilation=per_axis(1, 2),
    )
    assume(_output_shape(problem) is not None)
    return problem


def _window_fn(problem, name, init=None):
    computation, identity = REDUCTIONS[name]
    params = {k: v for k, v in problem.items() if k != "shape"}
    params["padding"] = tuple(params["padding"])

    def fn(x):
        start = identity(x.dtype) if init is None else np.asarray(init, x.dtype)
        return lax.reduce_window(x, start, computation, **params)

    return fn


def _output_shape(problem):
    try:
        return jax.eval_shape(
            _window_fn(problem, "sum"), jax.ShapeDtypeStruct(problem["shape"], np.float32)
        ).shape
    except (TypeError, ValueError):
        return None


@given(
    problem=windows(),
    name=st.sampled_from(sorted(REDUCTIONS)),
    dtype=st.sampled_from(DTYPES),
    data=st.data(),
)
def test_reduce_window_matches_jax(problem, name, dtype, data):
    assert_exports_match_on(_window_fn(problem, name), _values(data, dtype, problem["shape"]))


BODIES = {
    "add": (lax.add, [np.float32]),
    "max": (lax.max, [np.float32, np.int8]),
    "min": (lax.min, [np.float64, np.uint16]),
    "mul": (lax.mul, [np.float32, np.int32]),
    "and": (lax.bitwise_and, [np.bool_, np.int16, np.uint8]),
    "or": (lax.bitwise_or, [np.bool_, np.int32]),
}


@given(problem=windows(max_rank=3), body=st.sampled_from(sorted(BODIES)), data=st.data())
def test_reduce_window_generic(problem, body, data):
    """A non-identity init value or a body like mul/and/or makes a generic reduce_window;
    XLA skips padding and holes and applies the init value once per window."""
    computation, dtypes = BODIES[body]
    dtype = np.dtype(data.draw(st.sampled_from(dtypes)))
    if dtype.kind == "f":  # powers of two: products stay exact
        x = data.draw(
            hnp.arrays(
                dtype,
                problem["shape"],
                elements=st.sampled_from([-2.0, -1.0, 1.0, 2.0, np.inf, np.nan]),
            )
        )
        init = np.asarray(data.draw(st.sampled_from([-1.0, 2.0, np.inf, -np.inf])), dtype)
    else:
        x = data.draw(hnp.arrays(dtype, problem["shape"]))
        init = np.asarray(data.draw(st.sampled_from([0, 1, 3])), dtype)
    params = {k: v for k, v in problem.items() if k != "shape"}
    assert_exports_match_on(lambda v: lax.reduce_window(v, init, computation, **params), x)


def test_max_propagates_nan_and_keeps_minus_inf():
    """onnxruntime's MaxPool would return 1 and -FLT_MAX here; JAX returns NaN and -inf."""
    x = np.array([[np.nan, 1.0, -np.inf, -np.inf, np.finfo(np.float32).min, -np.inf]], np.float32)
    for fn in (
        lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2), (1, 1), "VALID"),
        lambda v: lax.reduce_window(v, jnp.inf, lax.min, (1, 2), (1, 1), "VALID"),
    ):
        assert_exports_match_on(fn, x)
        assert_exports_match_on(fn, -x)


def test_pooling_graphs():
    """Max pooling is one Max over strided slices (no layout change); float sums one Conv."""

    def max_pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    assert op_types(assert_exports_match(max_pool, [(2, 6, 6, 3)])) == ["Slice"] * 4 + ["Max"]
    sum_pool = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")  # noqa: E731
    assert op_types(assert_exports_match(sum_pool, [(2, 6, 6, 3)])) == [
        "Transpose",
        "Conv",
        "Transpose",
    ]
    assert (
        op_types(
            assert_exports_match(sum_pool, [(2, 6, 6, 3)], enable_double_precision=True)
        ).count("Conv")
        == 0
    )


@pytest.mark.parametrize(
    ("name", "shape", "window", "strides", "padding"),
    [
        ("max", ("B", 7, 6, 3), (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),  # NHWC image pooling
        ("sum", ("B", 7, 6, 3), (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
        ("min", ("B", 3, 7, 6), (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),  # NCHW
        ("sum", ("B", 3, 7, 6), (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
        (
            "max",
            ("B", "T", 4),
            (1, 3, 1),
            (1, 1, 1),
            ((1, 1), (0, 0), (0, 0)),
        ),  # over a symbolic axis
        ("sum", ("B", "T", 4), (1, 3, 1), (1, 1, 1), ((1, 1), (0, 0), (0, 0))),
        ("sum", ("B", 5), (2, 2), (1, 1), "VALID"),  # a window over the batch axis too
        (
            "max",
            ("B", "H", "W", 2),
            (1, 3, 3, 1),
            (1, 2, 2, 1),
            "SAME",
        ),  # padding from H, W at run time
        ("sum", ("B", "H", "W", 2), (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_window_symbolic_dims(name, shape, window, strides, padding, dtype):
    computation, identity = REDUCTIONS[name]

    def fn(x):
        return lax.reduce_window(x, identity(x.dtype), computation, window, strides, padding)

    sizes = sizes_for([shape], {"B": [2, 3], "T": [3, 6], "H": [5, 8], "W": [7, 4]})
    assert_exports_match(
        fn, [(shape, dtype)], sizes=sizes, enable_double_precision=dtype == np.float64
    )


@pytest.mark.parametrize("strides", [(1, 1), (2, 2), (3, 2)])
def test_conv_same_padding_of_symbolic_spatial_dims(strides):
    """ "SAME" padding of a symbolic height/width is an expression: padded at run time."""
    w = np.random.default_rng(0).normal(size=(3, 3, 2, 4)).astype(np.float32)

    def fn(x):
        return lax.conv_general_dilated(
            x, w, strides, "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    model = assert_exports_match(
        fn, [("B", "H", "W", 2)], sizes={"B": [1, 2], "H": [5, 8], "W": [7, 4]}
    )
    assert "Conv" in op_types(model)


@pytest.mark.parametrize(
    "pool",
    ["avg_pool", "avg_pool_excluding_pad", "max_pool", "min_pool", "sum_pool"],
)
@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 0), (2, 1))], ids=str)
def test_flax_pooling(pool, padding):
    nn = pytest.importorskip("flax.linen")
    fns = {
        "avg_pool": lambda x: nn.avg_pool(x, (3, 3), strides=(2, 2), padding=padding),
        "avg_pool_excluding_pad": lambda x: nn.avg_pool(
            x, (3, 3), strides=(2, 1), padding=padding, count_include_pad=False
        ),
        "max_pool": lambda x: nn.max_pool(x, (2, 3), strides=(2, 2), padding=padding),
        "min_pool": lambda x: nn.pool(x, jnp.inf, lax.min, (2, 2), (1, 1), padding),
        "sum_pool": lambda x: nn.pool(x, 0.0, lax.add, (2, 2), (1, 2), padding),
    }
    assert_exports_match(fns[pool], [("B", 8, 7, 3)], sizes={"B": [1, 2]})


@pytest.mark.parametrize("opset", [17, 23])
def test_opsets(opset):
    def pool(x):
        return lax.reduce_window(
            x, -jnp.inf, lax.max, (1, 2, 1), (1, 2, 1), ((0, 0), (1, 0), (0, 0)), (1, 2, 1)
        )

    assert_exports_match(pool, [("B", 5, 3)], sizes={"B": [1, 2]}, opset=opset)
    total = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 1), (1, 1, 1), "SAME")  # noqa: E731
    assert_exports_match(total, [("B", 5, 3)], sizes={"B": [1, 2]}, opset=opset)


@given(data=st.data(), mode=st.sampled_from(["full", "same", "valid"]), corr=st.booleans())
def test_jnp_convolve_and_correlate(data, mode, corr):
    """jnp.convolve / correlate in every mode (a conv_general_dilated underneath)."""
    dtype = data.draw(st.sampled_from([np.float32, np.int32]))
    n, m = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    el = st.integers(-5, 5)
    a = data.draw(hnp.arrays(dtype, n, elements=el))
    v = data.draw(hnp.arrays(dtype, m, elements=el))
    f = jnp.correlate if corr else jnp.convolve
    assert_exports_match_on(lambda x, y: f(x, y, mode=mode), a, v)
