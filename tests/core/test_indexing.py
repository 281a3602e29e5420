"""gather / scatter: onnxruntime vs JAX on hypothesis-drawn operands, index arrays (negative and
out of bounds included), slice patterns, modes, vmap batching and symbolic dims."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn import ConversionError
from jax2onnx_nn.core.api import to_onnx
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, sizes_for
from jax2onnx_nn.testing.assertions import op_types

DTYPES = [np.float32, np.float64, np.int32, np.bool_]
GATHER_MODES = [None, "clip", "fill", "promise_in_bounds"]
SCATTER_MODES = [None, "clip", "drop", "promise_in_bounds"]
SPECIAL_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0]


def _check(fn, *values, **kwargs):
    """Export ``fn`` for the given concrete values and compare; JAX sees them as jax arrays."""
    return assert_exports_match_on(lambda *args: fn(*map(jnp.asarray, args)), *values, **kwargs)


def _elements(dtype, *, special: bool = True) -> st.SearchStrategy:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return st.booleans()
    if dtype.kind == "i":
        return st.integers(-50, 50)
    finite = st.floats(-100, 100, width=dtype.itemsize * 8)
    return st.one_of(finite, st.sampled_from(SPECIAL_FLOATS)) if special else finite


def _operand(data, dtype, shape) -> np.ndarray:
    return data.draw(hnp.arrays(dtype, shape, elements=_elements(dtype)))


def _index(data, n: int, shape, *, oob: bool = True, dtype=np.int32) -> np.ndarray:
    """Index values for an axis of size ``n``: negative ones and (when ``oob``) out-of-bounds
    ones."""
    lo, hi = (-2 * n - 2, 2 * n + 2) if oob else (-n, n - 1)
    return data.draw(hnp.arrays(dtype, shape, elements=st.integers(lo, hi)))


def _index_dtype(data, operand_dtype) -> type:
    return data.draw(
        st.sampled_from(
            [np.int32, np.int64] if operand_dtype == np.float64 else [np.int32, np.int8]
        )
    )


operand_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)
index_shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3)


# -- gather: NumPy-style patterns -------------------------------------------------------------
@given(data=st.data())
def test_take(data):
    dtype = data.draw(st.sampled_from(DTYPES))
    shape = data.draw(operand_shapes)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    assume(shape[axis] > 0)
    mode = data.draw(st.sampled_from([None, "clip", "fill"]))
    fill = data.draw(st.none() | st.just(7)) if mode == "fill" else None
    x = _operand(data, dtype, shape)
    i = _index(data, shape[axis], data.draw(index_shapes), dtype=_index_dtype(data, dtype))
    _check(lambda x, i: jnp.take(x, i, axis=axis, mode=mode, fill_value=fill), x, i)


@st.composite
def getitem_patterns(draw, rank: int):
    """Per operand axis: a full slice, a static slice, a traced index array or a traced scalar;
    sometimes a None inserted and trailing full slices written as an Ellipsis."""
    kinds = draw(
        st.lists(
            st.sampled_from(["full", "slice", "array", "scalar"]), min_size=rank, max_size=rank
        )
    )
    assume(any(k in ("array", "scalar") for k in kinds))
    parts: list = []
    for k in kinds:
        if k == "slice":
            bound = st.none() | st.integers(-5, 5)
            step = st.none() | st.sampled_from([1, 2, -1, 3])
            parts.append(("slice", slice(draw(bound), draw(bound), draw(step))))
        else:
            parts.append((k, None))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), ("none", None))
    trailing = 0
    while trailing < len(parts) and parts[len(parts) - 1 - trailing][0] == "full":
        trailing += 1
    if trailing and draw(st.booleans()):
        parts = parts[: len(parts) - trailing] + [("ellipsis", None)]
    return parts


def _build_index(parts, arrays):
    arrays = iter(arrays)
    index = []
    for kind, value in parts:
        if kind in ("array", "scalar"):
            index.append(next(arrays))
        else:
            index.append(
                {"full": slice(None), "slice": value, "none": None, "ellipsis": Ellipsis}[kind]
            )
    return tuple(index)


@given(data=st.data())
def test_getitem(data):
    dtype = data.draw(st.sampled_from(DTYPES))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    parts = data.draw(getitem_patterns(len(shape)))
    mode = data.draw(st.sampled_from(["getitem", *GATHER_MODES]))
    # index arrays broadcast against each other: each is a common shape with some dims set to 1
    common = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=3))
    arrays, axis = [], 0
    for kind, _ in parts:
        if kind in ("array", "scalar"):
            ishape = (
                ()
                if kind == "scalar"
                else tuple(d if data.draw(st.booleans()) else 1 for d in common)
            )
            arrays.append(_index(data, shape[axis], ishape))
        if kind in ("full", "slice", "array", "scalar"):
            axis += 1
    x = _operand(data, dtype, shape)

    def fn(x, *arrays):
        index = _build_index(parts, arrays)
        return x[index] if mode == "getitem" else x.at[index].get(mode=mode)

    _check(fn, x, *arrays)


@given(data=st.data())
def test_take_along_axis(data):
    dtype = data.draw(st.sampled_from(DTYPES))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    length = data.draw(st.integers(0, 4))
    ishape = tuple(
        length if a == axis % len(shape) else (d if data.draw(st.booleans()) else 1)
        for a, d in enumerate(shape)
    )
    mode = data.draw(st.sampled_from([None, "clip", "fill"]))
    x = _operand(data, dtype, shape)
    i = _index(data, shape[axis], ishape, dtype=_index_dtype(data, dtype))
    _check(lambda x, i: jnp.take_along_axis(x, i, axis=axis, mode=mode), x, i)


@given(data=st.data())
def test_wide_index_values(data):
    """Index values far outside the operand, in every integer type: clamped, filled or dropped
    exactly as JAX does (a FILL_OR_DROP gather first converts indices to int32, wrapping)."""
    itype = data.draw(
        st.sampled_from([np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64])
    )
    info = np.iinfo(itype)
    i = data.draw(
        hnp.arrays(
            itype,
            (data.draw(st.integers(0, 4)),),
            elements=st.integers(int(info.min), int(info.max)),
        )
    )
    x = data.draw(hnp.arrays(np.float64, (3, 2), elements=_elements(np.float64)))
    mode = data.draw(st.sampled_from(["clip", "fill", "promise_in_bounds"]))
    _check(lambda x, i: (x.at[:, i].get(mode=mode), x.at[i].add(1.0, mode=mode)), x, i)


# -- gather: vmap batching (operand_batching_dims) ----------------------------------------------
VMAPPED_GATHERS = {
    "row[j]": lambda r, j: r[j],
    "row[:, j]": lambda r, j: r[:, j] if r.ndim > 1 else r[j],
    "take fill": lambda r, j: jnp.take(r, j, axis=-1, mode="fill"),
    "dynamic_slice": lambda r, j: lax.dynamic_slice_in_dim(
        r, jnp.reshape(j, (-1,))[0] if j.size else 0, 1, axis=0
    ),
}


@given(data=st.data())
def test_vmap_gather(data):
    name = data.draw(st.sampled_from(sorted(VMAPPED_GATHERS)))
    dtype = data.draw(st.sampled_from(DTYPES))
    batch = data.draw(st.integers(1, 3))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=4))
    in_axis = data.draw(st.integers(0, len(shape)))
    x = _operand(data, dtype, shape[:in_axis] + (batch,) + shape[in_axis:])
    ishape = (batch,) + data.draw(hnp.array_shapes(min_dims=0, max_dims=1, min_side=1, max_side=3))
    i = _index(data, shape[0], ishape)
    _check(jax.vmap(VMAPPED_GATHERS[name], in_axes=(in_axis, 0)), x, i)


@given(data=st.data())
def test_vmap_dynamic_slice_windows(data):
    """Batched starts of a dynamic_slice: a gather whose windows are neither 1 nor the whole dim."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    sizes = tuple(data.draw(st.integers(0, d)) for d in shape)
    batch = data.draw(st.integers(0, 3))
    x = _operand(data, np.float32, shape)
    starts = _index(data, max(shape), (batch, len(shape)))
    _check(jax.vmap(lambda s: lax.dynamic_slice(jnp.asarray(x), tuple(s), sizes)), starts)


# -- gather: every GatherDimensionNumbers form ---------------------------------------------------
@st.composite
def gather_configs(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(rank))
    nonempty = [d for d in range(rank) if shape[d] > 0]
    batching = sorted(draw(st.sets(st.sampled_from(nonempty), max_size=1))) if nonempty else []
    free = [d for d in nonempty if d not in batching]
    index_map = draw(
        st.permutations(free).flatmap(lambda p: st.integers(0, len(p)).map(lambda k: tuple(p[:k])))
    )
    sizes = [
        1 if d in batching else draw(st.integers(1 if d in index_map else 0, shape[d]))
        for d in range(rank)
    ]
    collapsed = sorted(
        d for d in range(rank) if sizes[d] == 1 and d not in batching and draw(st.booleans())
    )
    nb = draw(st.integers(len(batching), 2))
    batch_shape = [draw(st.integers(0, 3)) for _ in range(nb)]
    index_batching = draw(st.permutations(range(nb)))[: len(batching)]
    for d, axis in zip(batching, index_batching, strict=True):
        batch_shape[axis] = shape[d]
    offsets = [d for d in range(rank) if d not in collapsed and d not in batching]
    offset_dims = sorted(draw(st.permutations(range(nb + len(offsets))))[: len(offsets)])
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(offset_dims),
        collapsed_slice_dims=tuple(collapsed),
        start_index_map=index_map,
        operand_batching_dims=tuple(batching),
        start_indices_batching_dims=tuple(index_batching),
    )
    return shape, tuple(batch_shape) + (len(index_map),), dnums, tuple(sizes)


@given(data=st.data(), config=gather_configs())
def test_lax_gather(data, config):
    shape, ishape, dnums, sizes = config
    dtype = data.draw(st.sampled_from(DTYPES))
    mode = data.draw(st.sampled_from(["clip", "fill", "promise_in_bounds"]))
    x = _operand(data, dtype, shape)
    i = _index(data, max(shape, default=1), ishape)
    _check(lambda x, i: lax.gather(x, i, dnums, sizes, mode=mode), x, i)


# -- scatter: NumPy-style patterns ----------------------------------------------------------------
SCATTER_OPS = ["set", "add", "subtract", "multiply", "min", "max"]
SCATTER_PATTERNS = {  # name -> (operand rank needed, number of index arrays, index builder)
    "x[i]": (1, 1, lambda i: (i,)),
    "x[:, i]": (2, 1, lambda i: (slice(None), i)),
    "x[..., i]": (1, 1, lambda i: (Ellipsis, i)),
    "x[i, 1:3]": (2, 1, lambda i: (i, slice(1, 3))),
    "x[i, j]": (2, 2, lambda i, j: (i, j)),
    "x[i, None, j]": (3, 2, lambda i, j: (i, None, slice(None), j)),
}


def _unique_positions(data, dims, count, *, oob: bool) -> list[np.ndarray]:
    """``count`` distinct in-bounds positions (some written negatively), plus out-of-bounds ones
    when ``oob``: ``set`` is tested with unique effective indices only (duplicates are
    implementation-defined in JAX)."""
    total = math.prod(dims)
    flat = data.draw(st.permutations(range(total)))[: min(count, total)]
    columns = [
        np.array(c, dtype=np.int64) for c in np.unravel_index(np.array(flat, dtype=np.int64), dims)
    ]
    out = []
    for n, column in zip(dims, columns, strict=True):
        negative = np.array(
            data.draw(st.lists(st.booleans(), min_size=column.size, max_size=column.size)),
            dtype=bool,
        )
        out.append(np.where(negative, column - n, column))
    if oob:
        extra = data.draw(st.integers(0, 2))
        out = [
            np.concatenate(
                [
                    c,
                    np.array(
                        data.draw(
                            st.lists(
                                st.sampled_from([n, n + 3, -n - 1, -2 * n - 5]),
                                min_size=extra,
                                max_size=extra,
                            )
                        ),
                        dtype=np.int64,
                    ),
                ]
            )
            for c, n in zip(out, dims, strict=True)
        ]
    return [c.astype(np.int32) for c in out]


@given(data=st.data())
def test_scatter(data):
    op = data.draw(st.sampled_from(SCATTER_OPS))
    dtypes = [np.float32, np.float64, np.int32] + (
        [np.bool_] if op in ("set", "min", "max") else []
    )
    dtype = data.draw(st.sampled_from(dtypes))
    mode = data.draw(st.sampled_from(SCATTER_MODES))
    name = data.draw(st.sampled_from(sorted(SCATTER_PATTERNS)))
    rank, n_arrays, build = SCATTER_PATTERNS[name]
    shape = data.draw(hnp.array_shapes(min_dims=rank, max_dims=rank + 1, min_side=1, max_side=4))
    axes = {"x[:, i]": [1], "x[..., i]": [len(shape) - 1], "x[i, None, j]": [0, 2]}.get(
        name, list(range(n_arrays))
    )
    dims = [shape[a] for a in axes]
    count = data.draw(st.integers(0, 4))
    if op == "set":
        arrays = _unique_positions(data, dims, count, oob=mode != "clip")
    else:
        arrays = [_index(data, n, (count,)) for n in dims]
    x = _operand(data, dtype, shape)
    target = jax.eval_shape(lambda x, *a: x[build(*a)], x, *arrays).shape
    updates = _operand(data, dtype, target if data.draw(st.booleans()) else ())

    def fn(x, u, *arrays):
        return getattr(x.at[build(*arrays)], op)(u, mode=mode)

    _check(fn, x, updates, *arrays)


@given(data=st.data())
def test_scatter_extremum_nan_and_signed_zero(data):
    """JAX's min/max propagate NaN and order -0 below +0, duplicates included."""
    op = data.draw(st.sampled_from(["min", "max"]))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    n = data.draw(st.integers(1, 4))
    x = data.draw(hnp.arrays(dtype, (n,), elements=st.sampled_from(SPECIAL_FLOATS)))
    u = data.draw(hnp.arrays(dtype, (6,), elements=st.sampled_from(SPECIAL_FLOATS)))
    i = _index(data, n, (6,), oob=False)
    _check(lambda x, u, i: getattr(x.at[i], op)(u), x, u, i)


def test_scatter_set_duplicates_last_wins():
    """Duplicate indices in ``set``: XLA on CPU and onnxruntime both apply updates in order."""
    x = np.zeros((5, 2), np.float32)
    u = np.arange(12, dtype=np.float32).reshape(6, 2)
    i = np.array([1, 3, 1, -4, 3, 1], np.int32)
    _check(lambda x, u, i: x.at[i].set(u), x, u, i)


# -- scatter: every ScatterDimensionNumbers form ---------------------------------------------------
@given(data=st.data(), config=gather_configs())
def test_lax_scatter(data, config):
    shape, ishape, g, sizes = config
    prim = data.draw(
        st.sampled_from(
            [lax.scatter, lax.scatter_add, lax.scatter_mul, lax.scatter_min, lax.scatter_max]
        )
    )
    n_updates = math.prod(ishape[:-1])
    assume(prim is not lax.scatter or n_updates <= 1)  # overlapping windows: set is ill-defined
    # XLA on CPU keeps only the last update when the index vector is empty and the operand has
    # one element (a scatter the spec defines as reducing all updates): not ours to copy
    assume(not (ishape[-1] == 0 and math.prod(shape) == 1 and n_updates > 1))
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=g.offset_dims,
        inserted_window_dims=g.collapsed_slice_dims,
        scatter_dims_to_operand_dims=g.start_index_map,
        operand_batching_dims=g.operand_batching_dims,
        scatter_indices_batching_dims=g.start_indices_batching_dims,
    )
    dtype = data.draw(st.sampled_from([np.float32, np.float64, np.int32]))
    mode = data.draw(st.sampled_from(["clip", "fill", "promise_in_bounds"]))
    x = _operand(data, dtype, shape)
    i = _index(data, max(shape, default=1), ishape)
    window = jax.eval_shape(lambda x, i: lax.gather(x, i, g, sizes), x, i).shape
    u = _operand(data, dtype, window)
    _check(lambda x, i, u: prim(x, i, u, dnums, mode=mode), x, i, u)


@given(data=st.data())
def test_scatter_one_window(data):
    """One start vector and a window (dynamic_update_slice-like), out-of-bounds starts included."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    sizes = tuple(data.draw(st.integers(1, d)) for d in shape)
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(len(shape))),
        inserted_window_dims=(),
        scatter_dims_to_operand_dims=tuple(range(len(shape))),
    )
    prim = data.draw(st.sampled_from([lax.scatter, lax.scatter_add, lax.scatter_max]))
    mode = data.draw(st.sampled_from(["clip", "fill", "promise_in_bounds"]))
    x = _operand(data, np.float32, shape)
    u = _operand(data, np.float32, sizes)
    i = _index(data, max(shape), (len(shape),))
    _check(lambda x, i, u: prim(x, i, u, dnums, mode=mode), x, i, u)


# -- scatter: vmap -----------------------------------------------------------------------------
@given(data=st.data())
def test_vmap_scatter(data):
    op = data.draw(st.sampled_from(["set", "add", "max"]))
    batch = data.draw(st.integers(1, 3))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=4))
    x = _operand(data, np.float32, (batch, *shape))
    u = _operand(data, np.float32, (batch, *shape[1:]))
    i = _index(data, shape[0], (batch,), oob=op != "set")  # one update per row: no duplicates
    _check(jax.vmap(lambda r, u, j: getattr(r.at[j], op)(u)), x, u, i)


@given(data=st.data())
def test_vmap_dynamic_update_slice(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=5))
    sizes = tuple(data.draw(st.integers(0, d)) for d in shape)
    batch = data.draw(st.integers(1, 3))
    x = _operand(data, np.float32, shape)
    u = _operand(data, np.float32, (batch, *sizes))
    starts = _index(data, max(shape), (batch, len(shape)))
    _check(
        jax.vmap(
            lambda u, s: lax.dynamic_update_slice(jnp.asarray(x), u, tuple(s)), in_axes=(0, 0)
        ),
        u,
        starts,
    )


# -- symbolic dims -----------------------------------------------------------------------------
SYMBOLIC = {
    "x[:, i]": (lambda x, i: x[:, i], [("B", 5), ((3,), np.int32)]),
    "x[i] with i of size B": (lambda x, i: x[i], [(4, 5), (("B",), np.int32)]),
    "take fill": (
        lambda x, i: jnp.take(x, i, axis=0, mode="fill"),
        [("B", 3), (("T", 2), np.int32)],
    ),
    "take_along_axis": (
        lambda x, i: jnp.take_along_axis(x, i, axis=1),
        [("B", 5), (("B", 3), np.int32)],
    ),
    "vmap row[j]": (jax.vmap(lambda r, j: r[j]), [("B", 5), (("B",), np.int32)]),
    "vmap dynamic_slice": (
        jax.vmap(lambda r, j: lax.dynamic_slice_in_dim(r, j, 2)),
        [("B", 5), (("B",), np.int32)],
    ),
    "x[i, j]": (lambda x, i, j: x[i, j], [("B", "T"), (("N",), np.int32), (("N",), np.int32)]),
    "add at rows": (
        lambda x, i, u: x.at[i].add(u),
        [("B", 4), (("N",), np.int32), (("N", 4), np.float32)],
    ),
    "max at column": (
        lambda x, i, u: x.at[:, i].max(u),
        [("B", 4), ((2,), np.int32), (("B", 2), np.float32)],
    ),
    "add at [i, 1:3]": (
        lambda x, i, u: x.at[i, 1:3].add(u),
        [("B", 4), (("N",), np.int32), (("N", 2), np.float32)],
    ),
    "vmap add": (
        jax.vmap(lambda r, j, u: r.at[j].add(u)),
        [("B", 5), (("B",), np.int32), (("B",), np.float32)],
    ),
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_symbolic(name):
    fn, specs = SYMBOLIC[name]
    jax_fn = lambda *args: fn(*map(jnp.asarray, args))  # noqa: E731
    sizes = sizes_for(specs, {"B": [1, 4], "T": [3, 1], "N": [0, 5]})
    model = assert_exports_match(jax_fn, specs, sizes=sizes)
    dims = {d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim}
    assert dims & {"B", "T", "N"}


# -- graph properties: the simplest op per pattern -------------------------------------------------
SIMPLEST = {
    "x[i]": (lambda x, i: x[i], "Gather"),
    "x[:, i]": (lambda x, i: x[:, i], "Gather"),
    "take_along_axis": (
        lambda x, i: jnp.take_along_axis(x, jnp.broadcast_to(i[:3, None], (3, 4)), axis=1),
        "GatherElements",
    ),
    "x[i, i]": (lambda x, i: x[i, i], "GatherND"),
    "vmap row[j]": (lambda x, i: jax.vmap(lambda r, j: r[j])(x, i[:3]), "GatherND"),
    "x.at[i].add": (lambda x, i: x.at[i].add(1.0), "ScatterND"),
}


@pytest.mark.parametrize("name", sorted(SIMPLEST))
def test_simplest_op(name):
    fn, expected = SIMPLEST[name]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = np.array([2, -1, 0, 5], np.int32)
    ops = op_types(_check(fn, x, i))
    index_ops = [o for o in ops if o.startswith(("Gather", "Scatter"))]
    assert index_ops.count(expected) == 1, ops
    assert not {"GatherND", "GatherElements"} - {expected} & set(ops), ops
    if name == "vmap row[j]":  # batch_dims instead of an iota coordinate
        assert "Range" not in ops and "Concat" not in ops, ops


def test_scatter_add_uses_reduction():
    model = to_onnx(lambda x, i: x.at[i].add(1.0), [(4,), ((3,), np.int32)])
    (node,) = [n for n in model.graph.node if n.op_type == "ScatterND"]
    assert [a.s for a in node.attribute if a.name == "reduction"] == [b"add"]


# -- errors ------------------------------------------------------------------------------------
def test_scatter_min_below_opset_18_matches_jax():
    # ScatterND's min reduction is opset 18: below it the builder writes a Loop
    # (core/opset_forms.py)
    x, i = np.array([1.0, -0.0, np.nan, 3.0], np.float32), np.array([0, 0, 3], np.int32)
    model = assert_exports_match_on(lambda x, i: x.at[i].min(0.0), x, i, opset=17)
    assert "Loop" in {n.op_type for n in model.graph.node}


def test_scatter_apply_is_reported():
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    fn = lambda x, i: lax.scatter_apply(x, i, jnp.sin, dnums, update_shape=(3,))  # noqa: E731
    with pytest.raises(ConversionError, match="scatter_apply"):
        to_onnx(fn, [(4,), ((3, 1), np.int32)])


@pytest.mark.parametrize("opset", [17, 19])
@pytest.mark.parametrize("mode", ["fill", "promise_in_bounds"])
def test_masked_indexing_below_opset_20(opset, mode):
    """The in-bounds check of a FILL_OR_DROP gather and a dropping scatter is a reduce_and over
    the index vector: no bool ReduceMin (opset 20) and no axes input (opset 18) before them."""
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    i = np.array([[0, 1], [4, 2], [7, 0], [-9, 1]], np.int32)
    assert_exports_match_on(
        lambda x, i: x.at[i[:, 0], i[:, 1]].get(mode=mode, fill_value=-1.0), x, i, opset=opset
    )
    assert_exports_match_on(
        lambda x, i: x.at[i[:, 0], i[:, 1]].add(1.0, mode=mode), x, i, opset=opset
    )


@given(data=st.data(), which=st.sampled_from(["unique", "unique_all", "compress", "extract"]))
def test_unique_compress_extract_with_size(data, which):
    """The static-size forms of jnp.unique (fill_value, index/inverse/counts), compress, extract."""
    n = data.draw(st.integers(0 if which.startswith("unique") else 1, 8))
    size = data.draw(st.integers(1, 6 if which.startswith("unique") else n))  # compress: size <= n
    dtype = data.draw(st.sampled_from([np.float32, np.int32]))
    x = data.draw(hnp.arrays(dtype, n, elements=st.integers(-3, 3)))
    fns = {
        "unique": lambda v: jnp.unique(v, size=size, fill_value=7),
        "unique_all": lambda v: jnp.unique(
            v, size=size, fill_value=7, return_index=True, return_inverse=True, return_counts=True
        ),
        "compress": lambda v: jnp.compress(v > 0, v, size=size),
        "extract": lambda v: jnp.extract(v != 0, v, size=size, fill_value=-9),
    }
    assert_exports_match_on(fns[which], x)
