"""Shape primitives: onnxruntime vs JAX on hypothesis-drawn shapes, dtypes, axes and values,
static and with a symbolic batch dim, plus the graph each rule is meant to emit."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, sizes_for
from jax2onnx_nn.testing.assertions import op_types

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
SIZES = {"B": [1, 3, 8]}

dtypes = st.sampled_from(DTYPES)


def shapes(min_dims: int = 0, max_dims: int = 4, max_side: int = 4) -> st.SearchStrategy:
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0, max_side=max_side)


def _check_symbolic(fn, specs, *, x64: bool = False, sizes=SIZES, **kwargs):
    return assert_exports_match(fn, specs, sizes=sizes, enable_double_precision=x64, **kwargs)


def _array(data, shape, dtype=None) -> np.ndarray:
    return data.draw(hnp.arrays(dtype or data.draw(dtypes), shape))


def _rebind(fn, example, **params):
    """``fn``'s single primitive bound with some params replaced: makes equations JAX's
    wrappers would short-circuit (an identity transpose, a reshape to the same shape)."""
    (eqn,) = jax.make_jaxpr(fn)(example).jaxpr.eqns
    return lambda x: eqn.primitive.bind(x, **{**eqn.params, **params})


def _no_shape_arithmetic(model) -> bool:
    """True when no symbolic dim is read or computed at run time."""
    return not {"Shape", "Mul", "Add", "Concat"} & set(op_types(model))


# -- reshape ----------------------------------------------------------------------------------
@st.composite
def reshapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An input shape and a target shape of the same size (size-0 and size-1 dims included)."""
    shape = draw(shapes())
    size = math.prod(shape)
    if size == 0:
        target = list(draw(shapes(min_dims=1)))
        target[draw(st.integers(0, len(target) - 1))] = 0
        return shape, tuple(target)
    factors = [p for p in range(2, size + 1) for _ in range(_multiplicity(size, p))]
    rank = draw(st.integers(1 if factors else 0, 4))
    target = [1] * rank
    for f in factors:
        target[draw(st.integers(0, rank - 1))] *= f
    return shape, tuple(target)


def _multiplicity(n: int, p: int) -> int:
    if any(p % q == 0 for q in range(2, p)):
        return 0
    k = 0
    while n % p == 0:
        n, k = n // p, k + 1
    return k


@given(data=st.data(), shapes_=reshapes())
def test_reshape(data, shapes_):
    shape, target = shapes_
    x = _array(data, shape)
    transposed = data.draw(st.booleans())
    dims = tuple(data.draw(st.permutations(range(len(shape))))) if transposed else None
    model = assert_exports_match_on(lambda v: lax.reshape(v, target, dimensions=dims), x)
    moved = tuple(shape[d] for d in dims) if dims else shape
    assert op_types(model).count("Reshape") == (moved != target)


def test_reshape_to_same_shape_emits_nothing():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    same = _rebind(lambda v: lax.reshape(v, (3, 2)), x, new_sizes=(2, 3))
    assert op_types(assert_exports_match_on(same, x)) == ["Identity"]
    swapped = _rebind(lambda v: lax.reshape(v, (3, 2)), x, new_sizes=(3, 2), dimensions=(1, 0))
    assert op_types(assert_exports_match_on(swapped, x)) == ["Transpose"]


@pytest.mark.parametrize(
    "fn, specs",
    [
        (lambda x: x.reshape(x.shape[0], -1), [("B", 3, 4)]),
        (lambda x: x.reshape(-1, 4), [("B", 3, 4)]),
        (lambda x: x.reshape(x.shape[0], 2, 6), [("B", 3, 4)]),
        (lambda x: x.reshape(1, x.shape[0], 1, 12), [("B", 3, 4)]),
    ],
)
def test_reshape_symbolic_infers_the_batch_dim(fn, specs):
    model = _check_symbolic(fn, specs)
    assert op_types(model) == ["Reshape"]  # -1 for B: nothing computed at run time


@pytest.mark.parametrize(
    "fn, specs",
    [
        (lambda x, y: y.reshape(x.shape[0], 6), [("B", 4), ("2*B", 3)]),  # B = (2*B*3) / 6
        (lambda x, y: (x.reshape(x.shape[0], y.shape[0]), y.reshape(-1)), [("B", "T"), ("T", 2)]),
        (lambda x: x.reshape(x.shape[0], 0), [("B", 2, 0)]),  # zero-sized: every dim given
        (lambda x: x.reshape(0, x.shape[0]), [("B", 0)]),
    ],
)
def test_reshape_symbolic(fn, specs):
    _check_symbolic(fn, specs, sizes=sizes_for(specs, {"B": [1, 3, 8], "T": [2, 1, 5]}))


# -- broadcast_in_dim, expand_dims, tile ----------------------------------------------------
@st.composite
def broadcasts(draw) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(operand shape, target shape, broadcast_dimensions), size-1 dims expanding."""
    shape = draw(shapes(max_dims=3))
    rank = draw(st.integers(len(shape), 4))
    dims = tuple(sorted(draw(st.permutations(range(rank)))[: len(shape)]))
    target = [draw(st.integers(0, 4)) for _ in range(rank)]
    for src, dst in enumerate(dims):
        if shape[src] != 1 or draw(st.booleans()):
            target[dst] = shape[src]
    return shape, tuple(target), dims


@given(data=st.data(), case=broadcasts())
def test_broadcast_in_dim(data, case):
    shape, target, dims = case
    x = _array(data, shape)
    model = assert_exports_match_on(lambda v: lax.broadcast_in_dim(v, target, dims), x)
    aligned = [1] * len(target)
    for src, dst in enumerate(dims):
        aligned[dst] = shape[src]
    assert ("Expand" in op_types(model)) == (tuple(aligned) != target)


@given(data=st.data(), shape=shapes(max_dims=3))
def test_expand_dims_is_one_unsqueeze(data, shape):
    n = data.draw(st.integers(1, 2))
    rank = len(shape) + n
    axes = tuple(
        data.draw(
            st.lists(
                st.integers(-rank, rank - 1), min_size=n, max_size=n, unique_by=lambda a: a % rank
            )
        )
    )
    x = _array(data, shape)
    model = assert_exports_match_on(lambda v: jnp.expand_dims(v, axes), x)
    assert op_types(model) == ["Unsqueeze"]


@pytest.mark.parametrize(
    "fn, specs",
    [
        (lambda x: lax.broadcast_in_dim(x, (x.shape[0], 5), (0, 1)), [("B", 1)]),
        (lambda x: lax.broadcast_in_dim(x, (x.shape[0], 5, 4), (0, 2)), [("B", 4)]),
        (lambda x: jnp.broadcast_to(x, (2, *x.shape)), [("B", 3)]),
    ],
)
def test_broadcast_keeps_symbolic_dims_in_place(fn, specs):
    model = _check_symbolic(fn, specs)
    assert _no_shape_arithmetic(model)  # Expand's 1 keeps B; nothing computed


@pytest.mark.parametrize(
    "fn, specs",
    [
        (lambda x: lax.broadcast_in_dim(x, (3, x.shape[0]), (1,)), [("B",)]),
        (lambda x, s: lax.broadcast_in_dim(s, (x.shape[0], 3), ()), [("B",), ((), "int8")]),
        (lambda x, y: lax.broadcast_in_dim(y, (x.shape[0], 2), (1,)), [("B",), (1,)]),
        (lambda x: jnp.broadcast_to(x[:1], x.shape), [("B", 2)]),
    ],
)
def test_broadcast_to_symbolic_shape(fn, specs):
    _check_symbolic(fn, specs)


@given(data=st.data(), shape=shapes(max_dims=3, max_side=3))
def test_tile(data, shape):
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=0, max_size=len(shape) + 1)))
    assert_exports_match_on(lambda v: jnp.tile(v, reps), _array(data, shape))


def test_tile_symbolic():
    _check_symbolic(lambda x: jnp.tile(x, (2, 1, 3)), [("B", 2)])


# -- transpose, squeeze, moveaxis ----------------------------------------------------------------
@given(data=st.data(), shape=shapes())
def test_transpose(data, shape):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    assert_exports_match_on(lambda v: jnp.transpose(v, perm), _array(data, shape))


def test_identity_transpose_emits_nothing():
    x = np.ones((2, 3), np.float32)
    identity = _rebind(lambda v: lax.transpose(v, (1, 0)), x, permutation=(0, 1))
    assert op_types(assert_exports_match_on(identity, x)) == ["Identity"]


@given(data=st.data(), shape=shapes(min_dims=1))
def test_moveaxis(data, shape):
    rank = len(shape)
    src, dst = data.draw(st.integers(-rank, rank - 1)), data.draw(st.integers(-rank, rank - 1))
    assert_exports_match_on(lambda v: jnp.moveaxis(v, src, dst), _array(data, shape))


@given(data=st.data(), shape=shapes(min_dims=1, max_side=2))
def test_squeeze(data, shape):
    ones = [a for a, d in enumerate(shape) if d == 1]
    assume(ones)
    axes = data.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
    axes = tuple(a - len(shape) if data.draw(st.booleans()) else a for a in axes)  # negative too
    model = assert_exports_match_on(lambda v: lax.squeeze(v, axes), _array(data, shape))
    assert op_types(model) == ["Squeeze"]


def test_transpose_squeeze_symbolic():
    _check_symbolic(lambda x: jnp.squeeze(jnp.transpose(x, (2, 0, 1)), -1), [("B", 1, 3)])


# -- concatenate, stack, unstack, split ---------------------------------------------------------
@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3))
def test_concatenate(data, shape):
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    dtype = data.draw(dtypes)
    parts = []
    for _ in range(data.draw(st.integers(1, 3))):
        part_shape = list(shape)
        part_shape[axis] = data.draw(st.integers(0, 3))
        parts.append(_array(data, tuple(part_shape), dtype))
    assert_exports_match_on(lambda *vs: jnp.concatenate(vs, axis=axis), *parts)


def test_concatenate_symbolic():
    sizes = {"B": [1, 3, 8], "T": [2, 1, 5]}
    _check_symbolic(
        lambda x, y: jnp.concatenate([x, y, x], axis=0), [("B", 3), ("T", 3)], sizes=sizes
    )
    _check_symbolic(
        lambda x, y: jnp.concatenate([x, y], axis=-1), [("B", 3), ("B", "T")], sizes=sizes
    )


@given(data=st.data(), shape=shapes(max_dims=3))
def test_stack_unstack(data, shape):
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    dtype = data.draw(dtypes)
    parts = [_array(data, shape, dtype) for _ in range(data.draw(st.integers(1, 3)))]
    assert_exports_match_on(lambda *vs: jnp.stack(vs, axis=axis), *parts)
    if shape:
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        assert_exports_match_on(
            lambda v: (v, *jnp.unstack(v, axis=axis)), parts[0]
        )  # v: a model needs an output


def test_stack_unstack_symbolic():
    _check_symbolic(
        lambda x, y: jnp.unstack(jnp.stack([x, y], axis=-1), axis=1), [("B", 3), ("B", 3)]
    )


@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3))
def test_split(data, shape):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    cuts = sorted(data.draw(st.lists(st.integers(0, shape[axis]), max_size=3)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, shape[axis]], strict=True)]
    model = assert_exports_match_on(lambda v: lax.split(v, sizes, axis=axis), _array(data, shape))
    assert op_types(model).count("Split") == (len(sizes) > 1)


def test_split_symbolic():
    _check_symbolic(lambda x: lax.split(x, (2, 4), axis=1), [("B", 6)])
    _check_symbolic(lambda x: lax.split(x, (1, x.shape[0] - 1), axis=0), [("B", 2)])


# -- pad ----------------------------------------------------------------------------------------
@st.composite
def padding_configs(draw, shape: tuple[int, ...]) -> list[tuple[int, int, int]]:
    config = []
    for n in shape:
        interior = draw(st.integers(0, 2))
        dilated = n + max(n - 1, 0) * interior
        lo = draw(st.integers(-dilated - 2, 3))
        hi = draw(st.integers(max(-dilated - lo, -dilated - 2), 3))  # the result is never negative
        config.append((lo, hi, interior))
    return config


@given(data=st.data(), shape=shapes(max_dims=3))
def test_pad(data, shape):
    config = data.draw(padding_configs(shape))
    dtype = data.draw(dtypes)
    x, value = _array(data, shape, dtype), _array(data, (), dtype)
    assert_exports_match_on(lambda v, p: lax.pad(v, p, config), x, value)


@pytest.mark.parametrize(
    "config",
    [
        [(1, 2, 0), (0, 0, 0)],
        [(0, 0, 2), (-1, 1, 1)],
        [(2, -3, 1), (0, 0, 3)],
        [(-1, -1, 0), (0, 0, 0)],
    ],
)
def test_pad_symbolic(config):
    sizes = {"B": [2, 3, 8], "T": [2, 1, 5]}
    _check_symbolic(
        lambda x, v: lax.pad(x, v, config),
        [("B", "T"), ((), "float32")],
        sizes=sizes,
        constraints=("B >= 2",),
    )


def test_pad_positive_only_is_one_node():
    model = assert_exports_match_on(
        lambda x: jnp.pad(x, ((1, 2), (0, 3)), constant_values=7), np.ones((2, 3), np.int16)
    )
    assert op_types(model).count("Pad") == 1 and "Slice" not in op_types(model)


# -- slice, rev, flip, roll ---------------------------------------------------------------------
@st.composite
def slices(draw, shape: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    starts, limits, strides = [], [], []
    for n in shape:
        start = draw(st.integers(0, n))
        starts.append(start)
        limits.append(draw(st.integers(start, n)))
        strides.append(draw(st.integers(1, 3)))
    return starts, limits, strides


@given(data=st.data(), shape=shapes())
def test_slice(data, shape):
    starts, limits, strides = data.draw(slices(shape))
    model = assert_exports_match_on(
        lambda v: lax.slice(v, starts, limits, strides), _array(data, shape)
    )
    full = all(
        s == 0 and e == n and t == 1
        for s, e, t, n in zip(starts, limits, strides, shape, strict=True)
    )
    assert ("Slice" in op_types(model)) == (not full)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: lax.slice(x, (1, 0), (x.shape[0], 2)),
        lambda x: lax.slice(x, (0, 1), (x.shape[0] - 1, 4), (2, 2)),
        lambda x: lax.slice_in_dim(x, 0, x.shape[0] // 2),
        lambda x: lax.slice_in_dim(x, x.shape[0] // 2, x.shape[0]),
    ],
)
def test_slice_symbolic(fn):
    _check_symbolic(fn, [("B", 4)])


def test_slice_counted_from_a_symbolic_end_needs_no_shape():
    model = _check_symbolic(
        lambda x: lax.slice(x, (1, 0), (x.shape[0] - 1, 4)),
        [("B", 4)],
        sizes={"B": [2, 3, 8]},
        constraints=("B >= 2",),
    )
    assert op_types(model) == ["Slice"]


@given(data=st.data(), shape=shapes())
def test_rev(data, shape):
    dims = tuple(
        data.draw(
            st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True, max_size=len(shape))
        )
    )
    assert_exports_match_on(lambda v: lax.rev(v, dims), _array(data, shape))


@given(data=st.data(), shape=shapes(min_dims=1))
def test_flip_roll_repeat(data, shape):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    shift = data.draw(st.integers(-5, 5))
    repeats = data.draw(st.integers(0, 3))
    x = _array(data, shape)
    assert_exports_match_on(
        lambda v: (
            jnp.flip(v, axis),
            jnp.roll(v, shift, axis=axis),
            jnp.repeat(v, repeats, axis=axis),
        ),
        x,
    )
    assert_exports_match_on(
        lambda v, s: jnp.roll(v, s, axis=axis), x, np.int32(shift)
    )  # traced shift: dynamic_slice


def test_rev_flip_symbolic():
    model = _check_symbolic(lambda x: (lax.rev(x, (0,)), jnp.flip(x)), [("B", 3)])
    assert _no_shape_arithmetic(model)


# -- dynamic_slice, dynamic_update_slice --------------------------------------------------------
def _starts(data, rank: int, bound: int) -> list[np.ndarray]:
    dtype = data.draw(st.sampled_from(INDEX_DTYPES))
    lo = 0 if np.dtype(dtype).kind == "u" else -bound
    hi = 250 if dtype == np.uint8 else bound  # unsigned indices far past the end clamp too
    return [np.asarray(data.draw(st.integers(lo, hi)), dtype) for _ in range(rank)]


@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3))
def test_dynamic_slice(data, shape):
    sizes = [data.draw(st.integers(0, n)) for n in shape]
    starts = _starts(data, len(shape), 8)
    fn = lambda v, *s: lax.dynamic_slice(v, s, sizes)  # noqa: E731
    assert_exports_match_on(fn, _array(data, shape), *starts)


@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3))
def test_dynamic_update_slice(data, shape):
    dtype = data.draw(dtypes)
    window = tuple(data.draw(st.integers(0, n)) for n in shape)
    starts = _starts(data, len(shape), 8)
    fn = lambda v, u, *s: lax.dynamic_update_slice(v, u, s)  # noqa: E731
    assert_exports_match_on(fn, _array(data, shape, dtype), _array(data, window, dtype), *starts)


def test_static_dynamic_slice_is_one_slice():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    model = assert_exports_match_on(
        lambda v: lax.dynamic_slice(v, (3, 1), (2, 3)), x
    )  # start 3 clamps to 2
    assert op_types(model) == ["Slice"]
    model = assert_exports_match_on(
        lambda v, u: lax.dynamic_update_slice(v, u, (1, 9)), x, np.ones((2, 2), np.float32)
    )
    assert sorted(set(op_types(model))) == ["Concat", "Slice"]


def test_dynamic_slice_symbolic():
    _check_symbolic(
        lambda x, i: lax.dynamic_slice(x, (i, 0), (2, 4)),
        [("B", 4), ((), "int32")],
        sizes={"B": [2, 3, 8]},
        constraints=("B >= 2",),
    )
    _check_symbolic(
        lambda x, i: lax.dynamic_slice_in_dim(x, i, x.shape[0] - 1),
        [("B", 4), ((), "int64")],
        x64=True,
    )
    _check_symbolic(lambda x, i: lax.dynamic_index_in_dim(x, i, axis=1), [("B", 4), ((), "int32")])


def test_dynamic_update_slice_symbolic_cache():
    """A KV-cache write: only the time axis is spliced (two Slices and a Concat)."""

    def write(cache, new, pos):
        return lax.dynamic_update_slice(cache, new, (0, pos, 0))

    model = _check_symbolic(write, [("B", 8, 4), ("B", 1, 4), ((), "int32")])
    assert op_types(model).count("Concat") == 1
    _check_symbolic(
        lambda c, n, p: lax.dynamic_update_slice(c, n, (p, 0)),
        [("B", 4), (2, 4), ((), "int32")],
        sizes={"B": [2, 3, 8]},
        constraints=("B >= 2",),
    )


@pytest.mark.parametrize("opset", [21, 24])
def test_write_into_a_padded_tail_is_a_concat(opset):
    """A KV cache given ``S`` empty slots after its ``P`` past ones and written at ``P``
    (``cache_index`` a dim: what a decoder's boundary feeds) is the past and the new
    entries concatenated: no Pad, no clamp of the start, no TensorScatter; equal to JAX."""

    def write(past, new):
        buffer = jnp.pad(past, ((0, 0), (0, new.shape[1]), (0, 0)))
        start = jnp.asarray(past.shape[1], jnp.int32)
        return lax.dynamic_update_slice(buffer, new, (0, start, 0))

    model = _check_symbolic(write, [("B", "P", 4), ("B", "S", 4)], opset=opset)
    assert op_types(model) == ["Concat"], op_types(model)


def test_write_at_a_dim_start_skips_the_clamp():
    """A window written at the operand's last fitting slot, given as a dim: no Min/Max."""

    def write(cache, new):
        start = jnp.asarray(cache.shape[1] - new.shape[1], jnp.int32)
        return lax.dynamic_update_slice(cache, new, (0, start, 0))

    model = _check_symbolic(
        write,
        [("B", "T", 4), ("B", 3, 4)],
        opset=24,
        sizes={"B": [1, 2], "T": [3, 5]},
        constraints=("T >= 3",),
    )
    assert "TensorScatter" in op_types(model), op_types(model)
    assert not {"Min", "Max"} & set(op_types(model)), op_types(model)


# -- iota, dim_as_value -------------------------------------------------------------------------
@given(data=st.data(), dtype=st.sampled_from([d for d in DTYPES if d is not np.bool_]))
def test_iota(data, dtype):
    shape = data.draw(shapes(min_dims=1, max_dims=3))
    dimension = data.draw(st.integers(0, len(shape) - 1))
    x = np.zeros((), dtype)  # an (unused) input for the export
    assert_exports_match_on(lambda v: lax.broadcasted_iota(dtype, shape, dimension), x)


def test_iota_wraps_and_rounds_like_jax():
    assert_exports_match_on(lambda v: lax.iota(jnp.int8, 300), np.int8(0))
    assert "Range" in op_types(
        assert_exports_match_on(lambda v: lax.iota(jnp.int8, 5000), np.int8(0))
    )
    assert "Range" in op_types(
        assert_exports_match_on(
            lambda v: lax.broadcasted_iota(jnp.float16, (2, 3000), 1), np.float16(0)
        )
    )


@pytest.mark.parametrize("dtype", ["int8", "uint32", "int64", "float16", "float32", "float64"])
def test_iota_symbolic(dtype):
    x64 = np.dtype(dtype).itemsize == 8

    def fn(x):
        return (
            lax.broadcasted_iota(dtype, (x.shape[0], 3), 0),
            lax.broadcasted_iota(dtype, (2, x.shape[0]), 1),
            jnp.arange(x.shape[0], dtype=dtype),
        )

    _check_symbolic(fn, [("B",)], x64=x64)


def test_dim_as_value():
    def fn(x):
        n = x.shape[0]
        return x * n, jnp.asarray(n // 2, jnp.int32), jnp.full((3,), n, jnp.int8)

    _check_symbolic(fn, [("B", 3)])
    _check_symbolic(lambda x: x * x.shape[0], [(("B",), "float64")], x64=True)


# -- PRNG keys: the key data rides along as a trailing dim ------------------------------------
KEY_OPS = {
    "transpose": lambda k: k.transpose(2, 0, 1),
    "reshape": lambda k: k.reshape(6, 2),
    "broadcast": lambda k: jnp.broadcast_to(k[:, :1], (2, 5, 2)),
    "expand_squeeze": lambda k: jnp.squeeze(k[None, :, 1:2], (0, -2)),
    "concatenate": lambda k: jnp.concatenate([k, k[:, :1]], axis=1),
    "slice": lambda k: lax.slice(k, (0, 1, 0), (2, 3, 2), (1, 2, 1)),
    "rev": lambda k: lax.rev(k, (0, 2)),
    "tile": lambda k: jnp.tile(k, (1, 2, 1)),
    "stack_unstack": lambda k: jnp.stack(jnp.unstack(k, axis=1)[::-1], axis=-1),
    "split": lambda k: lax.split(k, (1, 2), axis=1),
    "dynamic_slice": lambda k: lax.dynamic_slice(k, (1, 2, 0), (1, 2, 2)),
    "dynamic_update_slice": lambda k: lax.dynamic_update_slice(k, k[:1, :1], (1, 1, 1)),
}


@pytest.mark.parametrize("name", sorted(KEY_OPS))
def test_key_arrays(name):
    keys = jax.random.split(jax.random.key(0), 12).reshape(2, 3, 2)
    assert_exports_match_on(lambda k: jax.tree.map(jax.random.key_data, KEY_OPS[name](k)), keys)


def test_key_reshape_with_dimensions():
    """JAX cannot compile this one itself; compare with the transpose it stands for."""
    keys = jax.random.split(jax.random.key(0), 12).reshape(2, 3, 2)
    model = to_onnx(
        lambda k: jax.random.key_data(lax.reshape(k, (12,), dimensions=(1, 0, 2))), [keys]
    )
    reference = lambda k: jax.random.key_data(k.transpose(1, 0, 2).reshape(12))  # noqa: E731
    verify(reference, model, [keys], input_values=[keys]).raise_if_failed()
    assert op_types(model) == ["Transpose", "Reshape"]


def test_key_transpose_is_one_node():
    keys = jax.random.split(jax.random.key(0), 6).reshape(2, 3)
    model = assert_exports_match_on(lambda k: jax.random.key_data(k.T), keys)
    assert [(n.op_type, list(n.attribute[0].ints)) for n in model.graph.node] == [
        ("Transpose", [1, 0, 2])
    ]


@pytest.mark.parametrize("opset", [17, 23])
def test_every_rule_at_the_opset_bounds(opset):
    def pipeline(x, u, i):
        y = lax.pad(x, jnp.float32(0), [(1, -1, 1), (0, 0, 0)])
        y = lax.dynamic_update_slice(y, u, (i, 0))
        a, b = lax.split(jnp.tile(y, (1, 2)), (3, 3), axis=1)
        rows = jnp.unstack(lax.rev(a + b, (0,))[:, :2], axis=1)
        z = jnp.stack(rows, axis=0).reshape(-1) + lax.iota(jnp.float32, 2 * (2 * x.shape[0] - 1))
        return lax.dynamic_slice_in_dim(z, i, 2), jnp.expand_dims(z, 0).T

    assert_exports_match(pipeline, [("B", 3), (1, 3), ((), "int32")], sizes=SIZES, opset=opset)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_])
def test_empty_buffers_are_zeros_of_their_shape(dtype):
    """``lax.empty`` (scan buffers of newer JAX) has unspecified contents; XLA and we give zeros.
    A symbolic shape becomes one ConstantOfShape, not a constant in the file."""
    model = assert_exports_match(
        lambda x: jax.lax.empty((x.shape[0], 40), dtype), [("B", 3)], sizes={"B": [1, 5]}
    )
    assert [n.op_type for n in model.graph.node][-1] == "ConstantOfShape"
    assert_exports_match(lambda x: x + jax.lax.empty((), np.float32), [(2,)])


@given(
    axis=st.integers(1, 3),
    length=st.integers(1, 4),
    start=st.integers(-6, 9),
    batch=st.integers(1, 3),
)
def test_window_along_one_inner_axis_is_tensor_scatter_at_opset_24(axis, length, start, batch):
    """A KV-cache write (``dynamic_update_slice`` of a window along one axis after the first)
    is one TensorScatter from opset 24, its start clamped as JAX clamps it (out of range both
    ways); a splice of Slices and a Concat below."""
    shape = [batch, 2, 5, 3]
    window = list(shape)
    window[axis] = min(length, shape[axis])
    rng = np.random.default_rng(axis * 100 + length)
    x = rng.standard_normal(shape).astype(np.float32)
    update = rng.standard_normal(window).astype(np.float32)

    def f(x, update, i):
        return lax.dynamic_update_slice(x, update, tuple(i if a == axis else 0 for a in range(4)))

    for opset in (21, 24):
        model = assert_exports_match_on(f, x, update, np.int32(start), opset=opset)
        scattered = "TensorScatter" in op_types(model)
        assert scattered == (opset >= 24 and window[axis] != shape[axis]), op_types(model)
