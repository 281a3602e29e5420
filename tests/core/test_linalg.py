"""dot_general and conv_general_dilated: onnxruntime vs JAX on hypothesis-drawn dimension
numbers, layouts, strides, paddings, dilations, groups and dtypes, plus the graphs emitted.

Float inputs are small integers unless a test says otherwise: products and sums of those are
exact in float32, so JAX and onnxruntime agree exactly whatever order each one sums in.
"""

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
from tests.jax_facts import conv_crop_wrong

SMALL_INTS = st.integers(-3, 3)
DOT_DTYPES = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
    np.bool_,
]


def _values(data, dtype, shape) -> np.ndarray:
    """Small integers for floats (exact sums); the full range for ints (wrap-around)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return data.draw(hnp.arrays(np.int8, shape, elements=SMALL_INTS)).astype(dtype)
    return data.draw(hnp.arrays(dtype, shape))


# -- dot_general ------------------------------------------------------------------------------
@st.composite
def dot_problems(draw) -> tuple[tuple[int, ...], tuple[int, ...], tuple]:
    """Two shapes and dimension numbers: batch, contracting and free axes in random positions."""
    counts = {kind: draw(st.integers(0, 2)) for kind in "bclr"}
    sizes = {(kind, i): draw(st.integers(0, 3)) for kind, n in counts.items() for i in range(n)}
    lhs = draw(st.permutations([(k, i) for k in "bcl" for i in range(counts[k])]))
    rhs = draw(st.permutations([(k, i) for k in "bcr" for i in range(counts[k])]))

    def positions(axes, kind):
        return tuple(axes.index((kind, i)) for i in range(counts[kind]))

    numbers = (
        (positions(lhs, "c"), positions(rhs, "c")),
        (positions(lhs, "b"), positions(rhs, "b")),
    )
    return tuple(sizes[a] for a in lhs), tuple(sizes[a] for a in rhs), numbers


@given(
    problem=dot_problems(), dtype=st.sampled_from(DOT_DTYPES), normal=st.booleans(), data=st.data()
)
def test_dot_general_matches_jax(problem, dtype, normal, data):
    lhs_shape, rhs_shape, numbers = problem
    fn = lambda x, y: lax.dot_general(x, y, numbers)  # noqa: E731
    if normal and dtype in (np.float32, np.float64):
        # random normal values: at most 9 products per sum, rounding stays far below 1e-5
        assert_exports_match(
            fn,
            [(lhs_shape, dtype), (rhs_shape, dtype)],
            enable_double_precision=dtype == np.float64,
        )
        return
    assert_exports_match_on(fn, _values(data, dtype, lhs_shape), _values(data, dtype, rhs_shape))


PREFERRED = [
    (np.float16, np.float32),
    (np.int8, np.int32),
    (np.int8, np.float32),
    (np.int16, np.int64),
    (np.float32, np.float64),
    (np.uint8, np.uint32),
    (np.int32, np.int64),
]


@given(problem=dot_problems(), types=st.sampled_from(PREFERRED), data=st.data())
def test_dot_general_preferred_element_type(problem, types, data):
    dtype, preferred = types
    lhs_shape, rhs_shape, numbers = problem
    a, b = _values(data, dtype, lhs_shape), _values(data, dtype, rhs_shape)
    x64 = np.dtype(preferred).itemsize == 8
    assert_exports_match(
        lambda x, y: lax.dot_general(x, y, numbers, preferred_element_type=preferred),
        [(a.shape, a.dtype), (b.shape, b.dtype)],
        input_values=[a, b],
        enable_double_precision=x64,
    )


def test_dot_bfloat16_and_mixed_inputs():
    """bfloat16 (fed as f32, cast inside: onnxruntime takes no bf16 inputs) and int8 x f32."""

    def bf16_dot(x, y):
        return jnp.dot(
            x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), preferred_element_type=jnp.float32
        )

    rng = np.random.default_rng(0)
    x, y = (rng.integers(-3, 4, s).astype(np.float32) for s in [(3, 4), (4, 5)])
    assert_exports_match_on(bf16_dot, x, y)
    # the result is cast back too: onnxruntime returns no bf16 outputs
    assert_exports_match_on(
        lambda x, y: jnp.dot(x.astype(jnp.bfloat16), y.astype(jnp.bfloat16)).astype(jnp.float32),
        x,
        y,
    )
    xi = rng.integers(-100, 100, (3, 4)).astype(np.int8)
    assert_exports_match_on(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))), xi, y)


EINSUM_GRAPHS = {
    "btd,df->btf": ["MatMul"],
    "ij,kj->ik": ["Transpose", "MatMul"],
    "ji,jk->ik": ["Transpose", "MatMul"],
    "i,i->": ["MatMul"],
    "ij,j->i": ["MatMul"],
    "ji,j->i": ["MatMul"],  # as j @ ji: onnxruntime miscomputes Transpose -> MatMul(., vector)
    "jik,j->ik": ["Transpose", "MatMul"],
    "j,jkl->kl": ["Transpose", "MatMul"],
    "bij,bjk->bik": ["MatMul"],
    "bthd,bshd->bhts": ["Transpose", "Transpose", "MatMul"],
    "bhts,bshd->bthd": [
        "Transpose",
        "Transpose",
        "MatMul",
        "Transpose",
    ],  # jnp.einsum swaps the operands
    "ijk,ijk->": ["Einsum"],
    "ij,kl->ijkl": ["Einsum"],
    "bij,bj->bi": ["Einsum"],
}


@pytest.mark.parametrize("spec", sorted(EINSUM_GRAPHS))
def test_dot_graph_is_one_matmul_where_it_fits(spec):
    operands, _ = spec.split("->")
    sizes = dict(zip("bdfhijklst", [2, 3, 4, 2, 3, 4, 5, 2, 3, 4], strict=True))
    shapes = [tuple(sizes[c] for c in op) for op in operands.split(",")]
    model = assert_exports_match(lambda x, y: jnp.einsum(spec, x, y), shapes)
    assert sorted(op_types(model)) == sorted(EINSUM_GRAPHS[spec])


@pytest.mark.parametrize(
    ("spec", "shapes"),
    [
        ("btd,df->btf", [("B", "T", 4), (4, 5)]),
        ("bij,bjk->bik", [("B", 3, 4), ("B", 4, 2)]),
        ("bthd,bshd->bhts", [("B", "T", 2, 4), ("B", "T", 2, 4)]),
        ("bij,bj->bi", [("B", 3, 4), ("B", 4)]),
        ("bt,tf->bf", [("B", "T"), ("T", 3)]),
    ],
)
def test_dot_symbolic_dims(spec, shapes):
    sizes = sizes_for(shapes, {"B": [1, 3], "T": [1, 5]})
    assert_exports_match(lambda x, y: jnp.einsum(spec, x, y), shapes, sizes=sizes)


def test_dot_integer_wraps_like_jax():
    x = np.full((2, 3), 100, np.int8)
    y = np.full((3, 4), 100, np.int8)
    assert_exports_match_on(jnp.dot, x, y)
    big = np.full((2, 3), 2**30, np.int32)
    assert_exports_match_on(lambda a, b: jnp.einsum("ij,jk->ik", a, b), big, big.T.copy())


# -- conv_general_dilated ---------------------------------------------------------------------
@st.composite
def conv_problems(draw, *, lhs_dilation: bool = True, max_spatial: int = 3) -> dict:
    """A random convolution: layouts, sizes, strides, paddings, dilations and groups."""
    n = draw(st.integers(1, max_spatial))
    max_side = 6 if n < 3 else 4
    groups = draw(st.integers(1, 3))
    batch_groups = draw(st.sampled_from([1, 1, 2]))
    if batch_groups > 1:
        groups = 1
    batch = draw(st.integers(1, 2)) * batch_groups
    cin, cout = draw(st.integers(1, 2)) * groups, draw(st.integers(1, 2)) * groups * batch_groups
    ints = _int_lists(draw, n)
    problem = dict(
        x=(batch, cin, *ints(1, max_side)),
        w=(cout, cin // groups, *ints(1, 3)),
        window_strides=tuple(ints(1, 3)),
        padding=tuple(zip(ints(-1, 2), ints(-1, 2), strict=True)),
        lhs_dilation=tuple(ints(1, 3)) if lhs_dilation else (1,) * n,
        rhs_dilation=tuple(ints(1, 2)),
        feature_group_count=groups,
        batch_group_count=batch_groups,
        specs=tuple(tuple(draw(st.permutations(range(n + 2)))) for _ in range(3)),
    )
    assume(_conv_output_shape(problem) is not None)
    assume(not conv_crop_wrong(problem["padding"]))  # JAX 0.10's own bug (tests/jax_facts.py)
    return problem


def _int_lists(draw, n):
    return lambda lo, hi: [draw(st.integers(lo, hi)) for _ in range(n)]


def _laid_out(shape, spec):
    """The array shape whose axis spec[i] has the i-th of the canonical (N, C, spatial) dims."""
    out = [0] * len(shape)
    for i, axis in enumerate(spec):
        out[axis] = shape[i]
    return tuple(out)


def _conv_fn(problem, **extra):
    lhs_spec, rhs_spec, out_spec = problem["specs"]
    numbers = lax.ConvDimensionNumbers(lhs_spec, rhs_spec, out_spec)
    params = {
        k: problem[k]
        for k in (
            "window_strides",
            "padding",
            "lhs_dilation",
            "rhs_dilation",
            "feature_group_count",
            "batch_group_count",
        )
    }
    return lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=numbers, **params, **extra)


def _conv_shapes(problem):
    lhs_spec, rhs_spec, _ = problem["specs"]
    return _laid_out(problem["x"], lhs_spec), _laid_out(problem["w"], rhs_spec)


def _conv_output_shape(problem):
    x, w = _conv_shapes(problem)
    try:
        out = jax.eval_shape(
            _conv_fn(problem),
            jax.ShapeDtypeStruct(x, np.float32),
            jax.ShapeDtypeStruct(w, np.float32),
        )
    except (TypeError, ValueError):
        return None
    return out.shape


@given(
    problem=conv_problems(),
    dtype=st.sampled_from([np.float32, np.float64]),
    normal=st.booleans(),
    data=st.data(),
)
def test_conv_matches_jax(problem, dtype, normal, data):
    x_shape, w_shape = _conv_shapes(problem)
    if normal:
        # random normal values: sums of at most 2 features * 3**3 taps = 54 products, whose
        # float32 rounding (~sqrt(54) * 6e-8 * |terms|) stays well inside rtol = atol = 1e-5
        specs = [(x_shape, dtype), (w_shape, dtype)]
        assert_exports_match(_conv_fn(problem), specs, enable_double_precision=dtype == np.float64)
        return
    assert_exports_match_on(
        _conv_fn(problem), _values(data, dtype, x_shape), _values(data, dtype, w_shape)
    )


CONV_TYPES = [
    (np.int8, None),
    (np.int32, None),
    (np.uint8, None),
    (np.int64, None),  # integers wrap like JAX
    (np.float16, np.float32),
    (np.int8, np.int32),
    (np.float32, np.float64),
]


@given(problem=conv_problems(max_spatial=2), types=st.sampled_from(CONV_TYPES), data=st.data())
def test_conv_other_types(problem, types, data):
    dtype, preferred = types
    x_shape, w_shape = _conv_shapes(problem)
    x, w = _values(data, dtype, x_shape), _values(data, dtype, w_shape)
    fn = _conv_fn(problem, preferred_element_type=preferred)
    x64 = np.dtype(dtype).itemsize == 8 or preferred == np.float64
    assert_exports_match(
        fn,
        [(x.shape, x.dtype), (w.shape, w.dtype)],
        input_values=[x, w],
        enable_double_precision=x64,
    )


def test_conv_float16_and_bfloat16():
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, (2, 3, 6, 6)).astype(np.float16)
    w = rng.integers(-3, 4, (4, 3, 3, 3)).astype(np.float16)
    conv = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME")  # noqa: E731
    model = assert_exports_match_on(conv, x, w)
    # computed in float32 and rounded once, as XLA: onnxruntime has no float16 Conv kernel of
    # its own (it would insert these Casts itself, and merge them with a neighbour's)
    assert op_types(model) == ["Cast", "Cast", "Conv", "Cast"]
    bf16 = jnp.bfloat16  # fed and returned as f32: onnxruntime takes and returns no bf16
    assert_exports_match_on(
        lambda a, b: conv(a.astype(bf16), b.astype(bf16)).astype(np.float32),
        x.astype(np.float32),
        w.astype(np.float32),
    )


FLAX_LAYOUT = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2), (0, 1))], ids=str)
@pytest.mark.parametrize("strides", [(1, 1), (2, 2)], ids=str)
def test_flax_style_conv_symbolic_batch(groups, padding, strides):
    def conv(x, w):
        return lax.conv_general_dilated(
            x, w, strides, padding, dimension_numbers=FLAX_LAYOUT, feature_group_count=groups
        )

    model = assert_exports_match(
        conv, [("B", 7, 6, 3), (3, 3, 3 // groups, 6)], sizes={"B": [1, 3]}
    )
    assert sorted(op_types(model)) == ["Conv", "Transpose", "Transpose", "Transpose"]


@given(
    layout=st.sampled_from([FLAX_LAYOUT, ("NCHW", "OIHW", "NCHW")]),
    padding=st.sampled_from(["SAME", "VALID", ((2, 1), (0, 2))]),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    transpose_kernel=st.booleans(),
    data=st.data(),
)
def test_conv_transpose(layout, padding, strides, kernel, dilation, transpose_kernel, data):
    """jax.lax.conv_transpose (lhs dilation, stride 1): one ConvTranspose where the pads fit."""
    nhwc = layout[0] == "NHWC"
    x_shape = (2, 5, 4, 3) if nhwc else (2, 3, 5, 4)
    w_shape = (*kernel, 3, 2) if nhwc else (2, 3, *kernel)
    if transpose_kernel:  # then the kernel's I and O are the other way round
        w_shape = (*kernel, 2, 3) if nhwc else (3, 2, *kernel)

    def fn(x, w):
        return lax.conv_transpose(
            x,
            w,
            strides,
            padding,
            rhs_dilation=dilation,
            dimension_numbers=layout,
            transpose_kernel=transpose_kernel,
        )

    model = assert_exports_match_on(
        fn, _values(data, np.float32, x_shape), _values(data, np.float32, w_shape)
    )
    if padding in ("SAME", "VALID") and max(strides) > 1:
        assert "ConvTranspose" in op_types(model) and "Conv" not in op_types(model)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [
        ((0, 2, 5), (3, 2, 2)),
        ((2, 0, 5), (3, 0, 2)),
        ((2, 2, 0), (3, 2, 2)),
        ((2, 2, 5), (0, 2, 2)),
    ],
    ids=str,
)
def test_conv_empty(x_shape, w_shape):
    assert_exports_match_on(
        lambda x, w: lax.conv_general_dilated(x, w, (1,), [(1, 1)]),
        np.ones(x_shape, np.float32),
        np.ones(w_shape, np.float32),
    )


def test_conv_without_spatial_dims():
    rng = np.random.default_rng(2)
    x, w = (
        rng.integers(-3, 4, (3, 4)).astype(np.float32),
        rng.integers(-3, 4, (5, 4)).astype(np.float32),
    )
    assert_exports_match_on(lambda a, b: lax.conv_general_dilated(a, b, (), []), x, w)


def test_conv_symbolic_batch_with_batch_groups():
    def fn(x, w):  # a batch of 2*B, as where batch groups come from (weight gradients)
        return lax.conv_general_dilated(
            jnp.concatenate([x, 2 * x + 1]), w, (1,), "SAME", batch_group_count=2
        )

    assert_exports_match(fn, [("B", 3, 5), (4, 3, 2)], sizes={"B": [1, 3]})
    assert_exports_match(
        fn, [("B", 3, 5), (4, 3, 2)], sizes={"B": [1, 2]}, enable_double_precision=True
    )


def test_conv_graph_for_dilated_strided_input():
    """lhs dilation with a stride > 1 does not fit ConvTranspose: holes are inserted, then Conv."""
    fn = lambda x, w: lax.conv_general_dilated(x, w, (2,), [(1, 1)], lhs_dilation=(2,))  # noqa: E731
    model = assert_exports_match(fn, [(1, 2, 5), (3, 2, 3)])
    assert op_types(model).count("Conv") == 1 and "ConvTranspose" not in op_types(model)


@pytest.mark.parametrize("opset", [17, 23])
def test_opsets(opset):
    def conv(x, w):
        return lax.conv_transpose(x, w, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))

    assert_exports_match(conv, [("B", 5, 3), (3, 3, 2)], sizes={"B": [1, 2]}, opset=opset)
    assert_exports_match(
        lambda x, w: jnp.einsum("bij,bkj->bik", x, w), [("B", 2, 3), ("B", 4, 3)], opset=opset
    )


FLAX_LINEN_LAYERS = {  # name: (module factory, input shape without batch, the op it becomes)
    "conv": (lambda nn: nn.Conv(4, (3, 3)), (7, 6, 3), "Conv"),
    "conv_strided_grouped": (
        lambda nn: nn.Conv(6, (3, 2), strides=2, padding=((1, 2), (0, 1)), feature_group_count=3),
        (7, 6, 3),
        "Conv",
    ),
    "conv_dilated_1d": (
        lambda nn: nn.Conv(4, (3,), kernel_dilation=2, padding="CAUSAL"),
        (9, 3),
        "Conv",
    ),
    "conv_transpose": (
        lambda nn: nn.ConvTranspose(4, (3, 3), strides=(2, 2)),
        (5, 4, 3),
        "ConvTranspose",
    ),
    "conv_transpose_valid": (
        lambda nn: nn.ConvTranspose(2, (2, 3), strides=(2, 1), padding="VALID"),
        (5, 4, 3),
        "ConvTranspose",
    ),
    "dense_general": (lambda nn: nn.DenseGeneral((2, 3), axis=(-2, -1)), (4, 5), "Einsum"),
}


LINEN_SLOW = {
    "conv_strided_grouped",
    "conv_dilated_1d",
    "conv_transpose_valid",
}  # one conv, one transposed by default


@pytest.mark.parametrize(
    "layer",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in LINEN_SLOW else name
        for name in sorted(FLAX_LINEN_LAYERS)
    ],
)
def test_flax_linen_layers(layer):
    nn = pytest.importorskip("flax.linen")
    make, shape, op = FLAX_LINEN_LAYERS[layer]
    module = make(nn)
    params = jax.jit(module.init)(
        jax.random.key(0), jnp.ones((1, *shape))
    )  # one XLA program, not one per initializer op
    model = assert_exports_match(
        lambda x: module.apply(params, x), [("B", *shape)], sizes={"B": [1, 3]}
    )
    assert op_types(model).count(op) == 1
