"""Clean-up passes: exact constant folding (it must never change a number), dead nodes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx, verify
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on, op_types, sizes_for

TABLE = np.arange(40, dtype=np.float32).reshape(10, 4) / 7.0


@given(start=st.integers(-12, 12), length=st.integers(0, 6))
def test_lookups_at_constant_positions_become_initializers(start, length):
    """An embedding lookup of constant positions (clamped as JAX clamps) folds to its rows."""

    def f(x):
        positions = jnp.arange(length) + start
        return x + jnp.take(jnp.asarray(TABLE), positions, axis=0, mode="clip").sum(axis=0)

    model = assert_exports_match(f, [("B", 4)], sizes={"B": [1, 3]})
    assert not {"Gather", "Clip", "Less", "Where"} & set(op_types(model)), op_types(model)


def test_integer_arithmetic_on_constants_folds():
    model = assert_exports_match(lambda x: x + (jnp.arange(5, dtype=jnp.int32) * 3 - 7), [((2, 5), "int32")])
    assert op_types(model) == ["Add"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_arithmetic_on_constants_is_left_to_the_runtime(dtype):
    """Folding float ops would round with numpy, not the runtime: they stay nodes."""
    c = np.linspace(-1, 1, 5).astype(dtype)
    model = assert_exports_match(lambda x: x * jnp.exp(jnp.asarray(c)), [((5,), dtype)], enable_double_precision=dtype == np.float64)
    assert "Exp" in op_types(model)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_mask_cast_to_floats_folds(dtype):
    """jnp.eye is iota comparisons cast to the float type: exact, so it folds; an integer that
    the float cannot hold (2**24 + 1 in float32) stays a Cast."""
    model = assert_exports_match(lambda x: x + jnp.eye(4, dtype=dtype), [((4, 4), dtype)], enable_double_precision=dtype == np.float64)
    assert op_types(model) == ["Add"], op_types(model)
    big = np.array([1, 2**24 + 1], np.int32)
    model = assert_exports_match(lambda x: x * jnp.asarray(big).astype(dtype), [((2,), dtype)], enable_double_precision=dtype == np.float64)
    assert ("Cast" in op_types(model)) == (dtype == np.float32), op_types(model)


def test_constants_of_equal_bytes_and_different_dtypes_stay_apart():
    """float8_e4m3fn, float8_e4m3fnuz, int4 and uint4 share NumPy's dtype.str ('<V1'): equal
    bytes of two of them are different numbers, in one export (small constants are one value
    per key) and across exports (the fold memo)."""
    import ml_dtypes

    bits = np.arange(16, dtype=np.uint8).reshape(4, 4)
    a, b = bits.view(ml_dtypes.float8_e4m3fn), bits.view(ml_dtypes.float8_e4m3fnuz)
    assert_exports_match(lambda x: jnp.asarray(a).astype(jnp.float32) + jnp.asarray(b).astype(jnp.float32) + x, [(4, 4)])
    for c in (a, b):  # a Transpose of the constant folds; the second must not get the first's result
        assert_exports_match(lambda x, c=c: jnp.transpose(jnp.asarray(c)).astype(jnp.float32) + x, [(4, 4)])


_CAST_EDGES = {
    "int32": [0, 1, -1, 2**24, 2**24 + 1, -2**31, 2**31 - 1, 65504, 65520, 70000, 257],
    "int64": [0, -2**63, 2**63 - 1, 2**53, 2**53 + 1],
    "uint64": [0, 2**64 - 1, 2**63, 2**24 + 1],
    "bool": [True, False],
}


@pytest.mark.parametrize("dst", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("src", sorted(_CAST_EDGES))
@pytest.mark.filterwarnings("error")
def test_a_cast_of_constant_integers_at_the_float_range_edges_matches_jax(src, dst):
    """Values a float cannot hold (rounded, or beyond its range: inf) keep their Cast, without a
    NumPy RuntimeWarning from checking whether they convert back."""
    c = np.array(_CAST_EDGES[src], dtype=src)
    assert_exports_match_on(
        lambda x: (jnp.asarray(c).astype(dst) + x.astype(dst)).astype(jnp.float64),
        np.zeros(c.size, np.float32), enable_double_precision=True,
    )


def test_a_fold_that_would_grow_the_file_is_not_made():
    model = to_onnx(lambda x: x + jnp.broadcast_to(jnp.arange(3, dtype=jnp.int32), (512, 512, 3)), [((512, 512, 3), "int32")])
    assert "Expand" in op_types(model)
    assert sum(i.ByteSize() for i in model.graph.initializer) < 1024


def test_unused_weights_after_folding_are_dropped():
    weights = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)

    def f(x):
        return x + jnp.asarray(weights)[jnp.arange(3)]

    model = assert_exports_match(f, [("B", 3, 8)], sizes={"B": [2]})
    assert [int(np.prod(i.dims)) for i in model.graph.initializer] == [3 * 8]  # the rows used, not the table


def test_a_large_weight_read_twice_is_not_stored_twice():
    weights = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)  # 128 KiB

    def f(x, i):
        w = jnp.asarray(weights)
        return x @ w.T, w[i]  # a transpose of the weight, and the weight itself

    model = assert_exports_match(f, [(3, 256), ((), "int32")])
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer) < 2 * weights.size


def test_equal_weights_are_stored_once():
    w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)  # 64 KiB: merged
    copy = w.copy()  # a distinct array with the same data
    other = w + 1.0

    def f(x):
        return jnp.tanh(x @ w) @ copy + x @ other

    model = assert_exports_match(f, [("B", 128)], sizes={"B": [2]})
    assert sorted(t.dims[0] * t.dims[1] for t in model.graph.initializer if len(t.dims) == 2) == [16384, 16384]


def test_equal_small_weights_keep_their_names():
    """Fresh zeros of two layers are two parameters: both names stay (merging saves nothing)."""
    bias_a, bias_b = np.zeros(20, np.float32), np.zeros(20, np.float32)
    model = to_onnx(lambda x: jnp.tanh(x + bias_a) + bias_b, [("B", 20)])
    assert len([t for t in model.graph.initializer if list(t.dims)[-1:] == [20]]) == 2


@given(batch=st.sampled_from([(), (2,), ("B",)]), k=st.integers(1, 40), n=st.integers(1, 9))
def test_transposed_matrix_times_vector_matches_jax(batch, k, n):
    """``a.T @ v`` (and its batched form): onnxruntime's Transpose+MatMul fusion got this wrong
    (off by ~10 at 32x7); the export is one MatMul of the vector and the untransposed matrix."""
    specs = [(*batch, k, n), (k,)]
    model = assert_exports_match(lambda a, v: jnp.swapaxes(a, -1, -2) @ v, specs, sizes=sizes_for(specs, {"B": [1, 3]}))
    assert op_types(model) == ["MatMul"]


_LAYOUT = {"Transpose", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten"}


def _layout_op_fed_by_same_kind(model) -> list[str]:
    """Layout nodes whose input comes from a node the chain pass should have merged them with."""
    producers = {out: node for node in model.graph.node for out in node.output}
    shape_ops = {"Reshape", "Squeeze", "Unsqueeze", "Flatten"}
    found = []
    for node in model.graph.node:
        source = producers.get(node.input[0]) if node.input else None
        if source is None:
            continue
        if node.op_type == source.op_type == "Transpose" or (node.op_type in shape_ops and source.op_type in shape_ops):
            found.append(f"{source.op_type}->{node.op_type}")
    return found


@st.composite
def _layout_chains(draw):
    """A shape and a chain of (step, argument) valid on it: transposes, expand_dims/squeeze,
    flattening reshapes and casts (lossless and rounding ones)."""
    start = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    shape, plan = list(start), []
    for step in draw(st.lists(st.sampled_from(["transpose", "expand", "squeeze", "flatten", "f16", "f32", "i32"]), min_size=1, max_size=6)):
        if step == "transpose":
            perm = draw(st.permutations(range(len(shape))))
            plan.append((step, tuple(perm)))
            shape = [shape[p] for p in perm]
        elif step == "expand":
            axis = draw(st.integers(0, len(shape)))
            plan.append((step, axis))
            shape.insert(axis, 1)
        elif step == "squeeze" and 1 in shape:
            plan.append((step, shape.index(1)))
            shape.remove(1)
        elif step == "flatten":
            plan.append((step, None))
            shape = [int(np.prod(shape))]
        elif step in ("f16", "f32", "i32"):
            plan.append((step, None))
    return start, plan


def _apply(plan, x):
    dtypes = {"f16": jnp.float16, "f32": jnp.float32, "i32": jnp.int32}
    for step, arg in plan:
        if step == "transpose":
            x = jnp.transpose(x, arg)
        elif step == "expand":
            x = jnp.expand_dims(x, arg)
        elif step == "squeeze":
            x = jnp.squeeze(x, arg)
        elif step == "flatten":
            x = x.reshape(-1)
        else:
            x = x.astype(dtypes[step])
    return x * 2


@given(chain=_layout_chains())
def test_layout_chains_cancel_and_match_jax(chain):
    """The values are JAX's, and no Transpose or shape op is left feeding another of its kind."""
    shape, plan = chain
    model = assert_exports_match(lambda x: _apply(plan, x), [(shape, "float32")])
    assert not _layout_op_fed_by_same_kind(model), op_types(model)


def test_transpose_twice_and_wide_cast_back_are_no_nodes():
    model = assert_exports_match(lambda x: jnp.transpose(x.T.astype(jnp.float64).astype(jnp.float32)).T * 2, [(("B", 3), "float32")],
                                 sizes={"B": [1, 2]}, enable_double_precision=True)
    assert op_types(model) == ["Transpose", "Mul"], op_types(model)


def test_a_rounding_cast_pair_stays():
    model = assert_exports_match(lambda x: x.astype(jnp.float16).astype(jnp.float32) * 2, [(4,)])
    assert op_types(model).count("Cast") == 2


@given(
    channels=st.integers(1, 4),
    ops=st.lists(st.sampled_from(["mul", "add", "scalar_mul"]), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_affine_after_conv_folds_into_its_weights(channels, ops, seed):
    """Mul / Add by per-channel constants after a Conv: one Conv, values within 1e-5 (the
    folded weights are rounded once, JAX rounds each step)."""
    from jax import lax

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((channels, 2, 3, 3)).astype(np.float32)
    consts = [rng.uniform(0.5, 2.0, (channels, 1, 1)).astype(np.float32) for _ in ops]

    def f(x):
        y = lax.conv_general_dilated(x, jnp.asarray(w), (1, 1), "SAME")
        for op, c in zip(ops, consts, strict=True):
            y = y * c if op == "mul" else y + c if op == "add" else y * 0.5
        return y

    model = assert_exports_match(f, [("B", 2, 5, 5)], sizes={"B": [1, 2]}, rtol=1e-5, fold_weights=True)
    assert op_types(model) == ["Conv"], op_types(model)
    assert len(op_types(to_onnx(f, [("B", 2, 5, 5)]))) == 1 + len(ops)  # off by default: JAX's roundings


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_batchnorm_after_conv_or_linear_is_one_node(layer):
    nnx = pytest.importorskip("flax.nnx")
    from jax2onnx_nn.flax import mode_copy

    rngs = nnx.Rngs(0)
    first = nnx.Conv(3, 4, (3, 3), rngs=rngs) if layer == "conv" else nnx.Linear(3, 4, rngs=rngs)
    bn = nnx.BatchNorm(4, rngs=rngs)
    rng = np.random.default_rng(1)
    bn.mean.set_value(jnp.asarray(rng.standard_normal(4), jnp.float32))
    bn.var.set_value(jnp.asarray(rng.uniform(0.2, 3.0, 4), jnp.float32))
    bn.scale.set_value(jnp.asarray(rng.standard_normal(4), jnp.float32))
    bn.bias.set_value(jnp.asarray(rng.standard_normal(4), jnp.float32))
    model = mode_copy(nnx.Sequential(first, bn))
    shape = ("B", 6, 6, 3) if layer == "conv" else ("B", 3)
    onnx_model = assert_exports_match(model, [shape], sizes={"B": [1, 3]}, rtol=1e-5, fold_weights=True)
    assert "BatchNormalization" not in op_types(onnx_model), op_types(onnx_model)


def test_a_conv_read_twice_is_not_folded():
    from jax import lax

    w = np.ones((2, 1, 3, 3), np.float32)

    def f(x):
        y = lax.conv_general_dilated(x, jnp.asarray(w), (1, 1), "VALID")
        return y * np.float32(3.0), y

    model = assert_exports_match(f, [(1, 1, 4, 4)], fold_weights=True)
    assert op_types(model) == ["Conv", "Mul"]


def _body_nodes(model):
    return [n for node in model.graph.node for a in node.attribute if a.HasField("g") for n in a.g.node]


@given(steps=st.integers(0, 4), size=st.integers(1, 4), use_while=st.booleans())
def test_loop_invariant_work_runs_before_the_loop(steps, size, use_while):
    """Work on values from outside a loop body (here on the weights and an outer input) moves
    in front of the loop; values match for every trip count, zero included."""
    from jax import lax

    w = np.linspace(0.5, 1.5, size).astype(np.float32)

    def f(x, y):
        def body(i, u):
            return u * jnp.exp(y) + jnp.concatenate([jnp.zeros((1,), u.dtype), jnp.asarray(w)[1:]]) * 2.0

        if use_while:
            return lax.while_loop(lambda s: s[0] < steps, lambda s: (s[0] + 1, body(s[0], s[1])), (0, x))[1]
        return lax.fori_loop(0, steps, body, x)

    model = assert_exports_match(f, [(size,), (size,)])
    body = _body_nodes(model)
    assert not {"Exp", "Concat", "Unsqueeze"} & {n.op_type for n in body}, [n.op_type for n in body]


@given(steps=st.integers(0, 3), rows=st.integers(1, 3), seed=st.integers(0, 100))
def test_loop_invariant_work_leaves_every_loop_around_it(steps, rows, seed):
    """Work in an inner loop on values from outside both loops (``exp(y)`` of an input; the
    shift amounts of jax.random's kernels, which are then folded) moves out of both, into the
    main graph; values match for every trip count, zero included."""
    from jax import lax

    def f(xs, n, y):
        def row(x):
            return lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * jnp.exp(y) + 1.0), (0, x))[1]

        return lax.map(row, xs)

    xs = np.random.default_rng(seed).standard_normal(rows).astype(np.float32)
    model = assert_exports_match_on(f, xs, np.int32(steps), np.float32(-0.5))
    scan_body = _body_nodes(model)
    loop_body = [n for scan in scan_body for a in scan.attribute if a.HasField("g") for n in a.g.node]
    assert "Loop" in [n.op_type for n in scan_body] and "Exp" not in [n.op_type for n in scan_body + loop_body], loop_body
    assert "Exp" in [n.op_type for n in model.graph.node]


@given(then=st.sampled_from(["none", "flatten", "expand", "transpose"]), seed=st.integers(0, 100))
def test_the_reshape_restoring_a_loops_stacked_outputs_stays(then, seed):
    """After no trip onnxruntime gives a Loop's stacked outputs as (0, 0, ...): the Reshape
    control_flow marks as required restores (0, B, 2) though its declared shape is the Loop's,
    so the chain pass neither drops it nor merges a following layout op through it."""
    from jax import lax

    def f(h, xs):
        ys = lax.scan(lambda c, x: (c + x, c * x), h, xs)[1]
        if then == "flatten":
            return ys.reshape(ys.shape[0] * ys.shape[1], 2)
        if then == "expand":
            return jnp.expand_dims(ys, 1)
        if then == "transpose":
            return jnp.transpose(ys, (1, 0, 2))
        return ys

    model = assert_exports_match(f, [("B", 2), ("T", "B", 2)], sizes={"T": [0, 1, 3], "B": [1, 2]}, seed=seed)
    producers = {out: node.op_type for node in model.graph.node for out in node.output}
    assert any(n.op_type == "Reshape" and producers.get(n.input[0]) == "Loop" for n in model.graph.node), op_types(model)


@given(batch=st.sampled_from([(), ("B",), (2,)]), parts=st.integers(2, 3), heads=st.integers(1, 3),
       head_dim=st.integers(1, 3), keys_transposed=st.booleans(), seed=st.integers(0, 100))
def test_heads_after_a_split_are_one_reshape_and_one_transpose(batch, parts, heads, head_dim, keys_transposed, seed):
    """Attention's head split (``split(qkv)`` then each piece ``(.., T, C) -> (.., N, T, H)``)
    becomes one Reshape and one Transpose before the Split (plus one Transpose for a piece
    laid out otherwise, attention's keys); values match JAX."""
    nb = len(batch)
    usual = (*range(nb), nb + 1, nb, nb + 2)
    other = (*range(nb), nb + 1, nb + 2, nb)

    def f(x):
        pieces = jnp.split(x, parts, axis=-1)
        shaped = [p.reshape(*p.shape[:-1], heads, head_dim) for p in pieces]
        perms = [other if keys_transposed and i == 1 else usual for i in range(parts)]
        return tuple(jnp.transpose(p, perm) * (i + 1) for i, (p, perm) in enumerate(zip(shaped, perms, strict=True)))

    specs = [((*batch, 3, parts * heads * head_dim), "float32")]
    model = assert_exports_match(f, specs, sizes=sizes_for(specs, {"B": [1, 2]}), seed=seed)
    ops = op_types(model)
    assert ops.count("Split") == 1, ops
    # with two pieces: neither perm moves; a Transpose of size-1 heads is a Reshape (relabel_transposes)
    assert ops.count("Reshape") + ops.count("Transpose") <= 2 + keys_transposed, ops
    if heads > 1 and head_dim > 1:
        assert ops.count("Reshape") == 1 and ops.count("Transpose") == 1 + keys_transposed, ops


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("op", ["x + 0", "0 + x", "x + -0.0", "x - 0", "x - -0.0", "x * 1", "1 * x", "x / 1"])
def test_arithmetic_with_the_identity_is_no_node_where_exact(dtype, op):
    """``x * 1``, ``x / 1`` and integer ``x +- 0`` compute ``x``; a float ``x + 0.0`` does not
    (``-0.0 + 0.0`` is ``+0.0``) and stays, as does ``x - -0.0``. Signs of zeros are compared."""
    import onnxruntime as ort

    x = np.array([-0.0, 0.0, 1.5, -2.0, np.nan, np.inf] if dtype == np.float32 else [0, 1, -7, 2**31 - 1], dtype)
    zero, one = dtype(0), dtype(1)
    negzero = dtype(-0.0) if dtype == np.float32 else zero
    fn = {"x + 0": lambda x: x + zero, "0 + x": lambda x: zero + x, "x + -0.0": lambda x: x + negzero,
          "x - 0": lambda x: x - zero, "x - -0.0": lambda x: x - negzero, "x * 1": lambda x: x * one,
          "1 * x": lambda x: one * x, "x / 1": lambda x: x / one if dtype == np.float32 else x // one}[op]
    model = assert_exports_match_on(lambda x: jnp.stack([fn(x), x]), x)
    (got,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {model.graph.input[0].name: x})
    want = np.asarray(jnp.stack([fn(x), x]))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    float_kept = dtype == np.float32 and op in ("x + 0", "0 + x", "x - -0.0")
    integer_div = dtype != np.float32 and op == "x / 1"  # floor division: its own nodes
    if not (float_kept or integer_div):
        assert not {"Add", "Sub", "Mul", "Div"} & set(op_types(model)), op_types(model)


@given(lead=st.integers(1, 2), rank=st.integers(1, 3), op=st.sampled_from(["add", "mul", "max"]), seed=st.integers(0, 100))
def test_leading_broadcast_axes_are_left_to_the_op(lead, rank, op, seed):
    """``x[None, ...] + y`` needs no Unsqueeze: ONNX broadcasting adds leading axes itself."""
    def f(x, y):
        grown = x.reshape((1,) * lead + x.shape)
        if op == "add":
            return grown + y
        if op == "max":
            return jnp.maximum(grown, y)
        return grown * y

    small = tuple(range(2, 2 + rank))
    model = assert_exports_match(f, [small, (("B",) * lead + small)], sizes={"B": [1, 3]}, seed=seed)
    assert not {"Unsqueeze", "Reshape"} & set(op_types(model)), op_types(model)


@given(t=st.integers(1, 3), seed=st.integers(0, 100))
def test_reshape_of_a_symbolic_batch_copies_its_dims(t, seed):
    """``(B, T, C) -> (B, T, N, H)`` and back have constant shapes (0 copies a dim): no
    Shape/Concat computing them."""
    def f(x):
        b = x.shape[0]
        heads = (x * 2).reshape(b, t, 2, 3)
        return jnp.tanh(heads).reshape(b, t, 6)

    model = assert_exports_match(f, [(("B", t, 6), "float32")], sizes={"B": [1, 2, 3]}, seed=seed)
    assert not {"Shape", "Concat", "Gather"} & set(op_types(model)), op_types(model)


def test_an_embedding_of_positions_checks_only_the_upper_bound():
    """``wpe(arange(T))``: the positions are a Range from 0, so only ``position < rows`` is
    checked at run time; a T past the table's rows gives JAX's NaN rows."""
    from flax import nnx

    embed = nnx.Embed(5, 3, rngs=nnx.Rngs(0))
    model = assert_exports_match(lambda x: embed(jnp.arange(x.shape[0])) + x, [(("T", 3), "float32")], sizes={"T": [1, 5, 7]})
    ops = op_types(model)
    assert "GreaterOrEqual" not in ops and "And" not in ops and ops.count("Less") == 1, ops


@given(steps=st.integers(0, 3), size=st.integers(2, 5), use_while=st.booleans(), seed=st.integers(0, 100))
def test_repeated_work_in_a_loop_body_runs_once(steps, size, use_while, seed):
    """A body reading ``u[1:]`` twice and taking its tanh twice does each once per iteration;
    values match JAX for every trip count, zero included (the count is a run-time input)."""
    from jax import lax

    def step(u):
        return jnp.concatenate([u[:1], jnp.tanh(u[1:]) * 0.5 + jnp.tanh(u[1:]) * u[1:]])

    def f(x, n):
        if use_while:
            return lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, step(s[1])), (0, x))[1]
        return lax.fori_loop(0, n, lambda i, u: step(u), x)

    x = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    model = assert_exports_match_on(f, x, np.int32(steps))
    body = [n.op_type for n in _body_nodes(model)]
    assert body.count("Tanh") == 1 and body.count("Slice") == 2, body


def test_repeated_work_in_a_function_body_runs_once():
    from jax2onnx_nn import onnx_function

    @onnx_function
    def block(x):
        return jnp.sin(x * 2) + jnp.sin(x * 2) * x

    model = assert_exports_match(lambda x: block(block(x)), [(("B", 3), "float32")], sizes={"B": [1, 2]})
    (function,) = model.functions
    assert [n.op_type for n in function.node].count("Sin") == 1, [n.op_type for n in function.node]


# -- fill_missing_types: the table of shape rules agrees with onnx's own inference ----------

_DIMS = st.sampled_from([0, 1, 2, 3, "B", "T"])


def _onnx_dims(op, shapes, attributes, axes):
    """onnx's per-node inference of the first output's dims (``None`` where it refuses)."""
    import onnx

    names = [f"x{i}" for i in range(len(shapes))] + (["axes"] if axes is not None else [])
    dtypes = [onnx.TensorProto.BOOL if op == "Where" and i == 0 else onnx.TensorProto.FLOAT for i in range(len(shapes))]
    types = {f"x{i}": onnx.helper.make_tensor_type_proto(t, s) for i, (t, s) in enumerate(zip(dtypes, shapes, strict=True))}
    data = {}
    if axes is not None:
        types["axes"] = onnx.helper.make_tensor_type_proto(onnx.TensorProto.INT64, [len(axes)])
        data["axes"] = onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")
    node = onnx.helper.make_node(op, names, ["y"], **attributes)
    try:
        out = onnx.shape_inference.infer_node_outputs(
            onnx.defs.get_schema(op, 21, ""), node, types, data, opset_imports=[onnx.helper.make_opsetid("", 21)]
        )
    except Exception:
        return None
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in out["y"].tensor_type.shape.dim]


@given(data=st.data(), op=st.sampled_from(["Add", "Where", "MatMul", "Transpose", "Relu", "Shape", "Concat", "Unsqueeze"]))
def test_the_shape_table_agrees_with_onnx_inference(data, op):
    import onnx_ir as ir

    from jax2onnx_nn.core import passes

    count = {"Where": 3, "Relu": 1, "Transpose": 1, "Shape": 1, "Unsqueeze": 1}.get(op, 2)
    min_rank = 1 if op in ("Concat", "Transpose") else 2 if op == "MatMul" else 0
    shapes = [data.draw(st.lists(_DIMS, min_size=min_rank, max_size=4)) for _ in range(count)]
    attributes, axes = {}, None
    if op == "Transpose":
        attributes = {"perm": data.draw(st.permutations(range(len(shapes[0]))))}
    elif op == "Shape":
        attributes = {k: data.draw(st.integers(-5, 5)) for k in data.draw(st.sets(st.sampled_from(["start", "end"])))}
    elif op == "Concat":
        rank = len(shapes[0])
        axis = data.draw(st.integers(-rank, rank - 1))
        shapes = [[*shapes[0][:axis % rank], data.draw(_DIMS), *shapes[0][axis % rank + 1:]] for _ in range(count)]
        attributes = {"axis": axis}
    elif op == "Unsqueeze":
        rank = len(shapes[0]) + data.draw(st.integers(1, 2))
        axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=rank - len(shapes[0]), max_size=rank - len(shapes[0]), unique_by=lambda a: a % rank))
    inputs = [ir.Value(name=f"x{i}", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(s)) for i, s in enumerate(shapes)]
    if axes is not None:
        inputs.append(ir.Value(name="axes", const_value=ir.tensor(np.array(axes, np.int64))))
    node = ir.node(op, inputs, attributes=attributes)
    ours = passes._table_shape(node, shapes)
    if ours is None:  # the one case the table leaves to onnx: a symbolic size on the Concat axis
        assert op == "Concat" and any(isinstance(s[attributes["axis"]], str) for s in shapes)
    elif all(d is not None for d in ours):  # the table's answer is used only when every dim is known
        assert ours == _onnx_dims(op, shapes, attributes, axes), (op, shapes, attributes, axes)


def _inferred_by_onnx(node, opset=21):
    """onnx's per-node inference of every output's dims of an ``ir.Node`` whose inputs carry
    types (constant inputs their data); ``None`` where it refuses."""
    import onnx
    import onnx_ir as ir

    types, data = {}, {}
    for value in node.inputs:
        types[value.name] = ir.serde.serialize_value(value).type
        if value.const_value is not None:
            data[value.name] = ir.serde.serialize_tensor(value.const_value)
    try:
        out = onnx.shape_inference.infer_node_outputs(
            onnx.defs.get_schema(node.op_type, opset, ""), ir.serde.serialize_node(node), types, data,
            opset_imports=[onnx.helper.make_opsetid("", opset)],
        )
    except Exception:
        return None
    dims = []
    for value in node.outputs:
        shape = out[value.name].tensor_type.shape if value.name in out else None
        dims.append(None if shape is None else [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in shape.dim])
    return dims


_STATIC = st.integers(0, 6)


@st.composite
def _table_cases(draw, op):
    """(shapes of the inputs, ir.Node) of ``op`` with constant operands where the table needs them."""
    import onnx_ir as ir

    def value(name, shape, const=None, dtype=ir.DataType.FLOAT):
        if const is not None:
            return ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(list(np.shape(const))),
                            const_value=ir.tensor(np.asarray(const, np.int64)))
        return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape))

    attributes, outputs = {}, 1
    x = draw(st.lists(_DIMS, min_size=1, max_size=4))
    if op == "Squeeze":
        axes = draw(st.lists(st.integers(-len(x), len(x) - 1), max_size=len(x), unique_by=lambda a: a % len(x)))
        x = [1 if i in {a % len(x) for a in axes} and draw(st.booleans()) else d for i, d in enumerate(x)]
        inputs = [value("x", x), value("axes", None, axes)]
    elif op == "Gather":
        attributes = {"axis": draw(st.integers(-len(x), len(x) - 1))}
        indices = draw(st.lists(_DIMS, max_size=3))
        inputs = [value("x", x), value("i", indices, dtype=ir.DataType.INT64)]
    elif op == "Reshape":
        target = [d if isinstance(d, int) else 0 for d in draw(st.permutations(x))] + draw(st.lists(st.just(1), max_size=2))
        if draw(st.booleans()):
            target[draw(st.integers(0, len(target) - 1))] = -1
        target = draw(st.sampled_from([target, [draw(st.sampled_from([0, -1, 2, 3])) for _ in range(len(x))]]))
        attributes = {"allowzero": draw(st.integers(0, 1))} if draw(st.booleans()) else {}
        inputs = [value("x", x), value("shape", None, target)]
    elif op == "Range":
        start, limit, delta = draw(st.integers(-9, 9)), draw(st.integers(-9, 9)), draw(st.integers(-4, 4).filter(bool))
        inputs = [value("start", None, start), value("limit", None, limit), value("delta", None, delta)]
    elif op == "Split":
        x = [draw(_STATIC) if i == 0 else d for i, d in enumerate(x)]
        outputs = draw(st.integers(1, 3))
        cuts = sorted(draw(st.lists(st.integers(0, x[0]), min_size=outputs - 1, max_size=outputs - 1)))
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, x[0]], strict=True)]
        inputs = [value("x", x), value("split", None, sizes)]
    elif op in ("GRU", "LSTM", "RNN"):
        gates = {"GRU": 3, "LSTM": 4, "RNN": 1}[op]
        hidden, features = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        directions = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
        count = 2 if directions == "bidirectional" else 1
        attributes = {"hidden_size": hidden, "direction": directions, "layout": draw(st.integers(0, 1))}
        x = [draw(_DIMS), draw(_DIMS), features]
        inputs = [value("x", x), value("w", [count, gates * hidden, features]), value("r", [count, gates * hidden, hidden])]
        outputs = draw(st.integers(1, 3 if op == "LSTM" else 2))
    else:  # Conv, AveragePool, MaxPool over 1-2 spatial axes
        n = draw(st.integers(1, 2))
        x = [draw(_DIMS), draw(st.integers(1, 3)), *(draw(st.integers(1, 9)) for _ in range(n))]
        kernel = [draw(st.integers(1, 3)) for _ in range(n)]
        attributes = {"strides": [draw(st.integers(1, 3)) for _ in range(n)], "pads": [draw(st.integers(0, 2)) for _ in range(2 * n)]}
        if op != "AveragePool" and draw(st.booleans()):
            attributes["dilations"] = [draw(st.integers(1, 2)) for _ in range(n)]
        inputs = [value("x", x)]
        if op == "Conv":
            inputs.append(value("w", [draw(st.integers(1, 4)), x[1], *kernel]))
        else:
            attributes["kernel_shape"] = kernel
    node = ir.node(op, inputs, attributes=attributes, num_outputs=outputs)
    for i, out in enumerate(node.outputs):
        out.name = f"y{i}"
    return [[d if isinstance(d, int) else d.value for d in v.shape] for v in inputs], node


@given(data=st.data(), op=st.sampled_from(["Squeeze", "Gather", "Reshape", "Range", "Split", "Conv", "AveragePool", "MaxPool", "GRU", "LSTM", "RNN"]))
def test_the_shape_table_of_ops_with_constant_operands_agrees_with_onnx_inference(data, op):
    """The table's shapes for ops whose shape needs a constant operand or attributes (what
    rules and passes make without a shape: embedding Gathers, head Splits, Conv and pools in
    NCHW, the GRU / LSTM layers' outputs) are onnx's own, and the table answers where onnx
    does for the models we export."""
    from jax2onnx_nn.core import passes

    shapes, node = data.draw(_table_cases(op))
    multi = passes._MULTI_OUTPUT_SHAPES.get(op)
    ours = multi(node, shapes) if multi is not None else [passes._table_shape(node, shapes)]
    if ours is None or ours == [None]:  # left to onnx's inference
        assert op in ("Squeeze", "Reshape", "Conv", "AveragePool", "MaxPool"), (op, shapes)
        return
    assert ours == _inferred_by_onnx(node), (op, shapes, {k: a.value for k, a in node.attributes.items()})


def test_merging_leaves_no_unread_node():
    """Merging equal weights and duplicate nodes (main graph, loop body, function body) leaves
    nothing for a removal pass: cleanup relies on it to skip one walk per export."""
    from jax import lax
    from onnx_ir.passes import common

    from jax2onnx_nn import export_model, onnx_function

    w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)  # 64 KiB: merged
    copy = w.copy()

    @onnx_function
    def block(x):
        return jnp.sin(x * 2) + jnp.sin(x * 2) * x

    def f(x):
        y = jnp.tanh(x @ w) + jnp.tanh(x @ copy)
        y = lax.fori_loop(0, 3, lambda i, u: jnp.cos(u[::-1]) * jnp.cos(u[::-1]), y)
        return block(y) + jnp.exp(y) * jnp.exp(y)

    model = assert_exports_match(f, [("B", 128)], sizes={"B": [1, 2]})
    assert len([t for t in model.graph.initializer if list(t.dims) == [128, 128]]) == 1
    assert [n.op_type for n in model.functions[0].node].count("Sin") == 1
    assert not common.RemoveUnusedNodesPass()(export_model(f, [("B", 128)])).modified


def test_remembered_folds_follow_the_weights_and_the_positions():
    """Folds are remembered across exports by their node and input bytes: a table with other
    values, other positions or another dtype is folded afresh (never a stale result)."""
    rng = np.random.default_rng(1)
    tables = [TABLE, TABLE + 1.0, rng.standard_normal((10, 4)).astype(np.float32), TABLE.astype(np.int32)]
    for table in tables:
        for start in (0, 2, 2, -3):
            def f(x, table=table, start=start):
                return x + jnp.take(jnp.asarray(table), jnp.arange(3) + start, axis=0, mode="clip").sum(axis=0)

            dtype = "int32" if table.dtype == np.int32 else "float32"
            model = assert_exports_match(f, [(("B", 4), dtype)], sizes={"B": [2]})
            assert "Gather" not in op_types(model), op_types(model)


def test_a_split_weight_folds_into_named_parts():
    """A Split of a weight (a cell's gates reordered) folds into initializers named after the
    weight; a Split of an input stays."""
    w = np.arange(24, dtype=np.float32).reshape(2, 12)

    def fn(x):
        a, b, c = jnp.split(jnp.asarray(w), 3, axis=1)
        return x @ jnp.concatenate([b, a, c], axis=1), jnp.split(x, 2, axis=1)[0]

    model = to_onnx(fn, [(3, 2)])
    ops = [n.op_type for n in model.graph.node]
    assert "Concat" not in ops and ops.count("Split") + ops.count("Slice") <= 1, ops
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    verify(fn, model, [x]).raise_if_failed()


def _loops(model):
    """(op, inputs, outputs) of every Loop and Scan, bodies and functions included."""
    found = []

    def walk(graph):
        for node in graph.node:
            if node.op_type in ("Loop", "Scan"):
                found.append((node.op_type, len(node.input), len(node.output)))
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g)

    walk(model.graph)
    for function in model.functions:
        walk(function)
    return found


@given(kind=st.sampled_from(["scan", "fori", "while"]), used=st.lists(st.booleans(), min_size=3, max_size=3),
       stacked=st.lists(st.booleans(), min_size=2, max_size=2), steps=st.integers(0, 3), size=st.integers(0, 2))
def test_unread_loop_state_is_dropped(kind, used, stacked, steps, size):
    """Carries and stacked outputs the caller does not read leave the Loop/Scan and its body,
    unless a kept one reads them (``a`` feeds ``b``, ``b`` feeds ``c``); what is read keeps
    its values, for every trip count and for empty carries."""
    from jax import lax

    def body(carry, x):
        a, b, c = carry
        return (a + x, b * 2.0 + a, c * b - 1.0), (a * x, jnp.sin(c))

    def f(x, xs):
        if kind == "scan":
            carry, ys = lax.scan(body, (x, x, x), xs)
        elif kind == "fori":
            carry = lax.fori_loop(0, steps, lambda i, c: body(c, xs[i])[0], (x, x, x))
            ys = ()
        else:
            carry = lax.while_loop(lambda s: s[0] < steps, lambda s: (s[0] + 1, *body(s[1:], xs[s[0]])[0]), (0, x, x, x))[1:]
            ys = ()
        picked = [v for v, keep in zip(carry, used, strict=True) if keep] + [v for v, keep in zip(ys, stacked, strict=False) if keep]
        return tuple(picked) or (carry[0] if kind != "scan" or not any(stacked) else ys[0],)

    model = assert_exports_match(f, [(size,), (max(steps, 1), size)])
    # c reads b, b reads a: a carry stays when it or a later one in the chain is read
    reads = [i for i, keep in enumerate(used) if keep]
    if kind == "scan":
        reads += [i for i, keep in zip((0, 2), stacked, strict=True) if keep]
    kept = max(reads, default=0) + 1  # f returns a when it picks nothing
    if not _loops(model):  # fori_loop(0, 0, ...) is no loop in the jaxpr; an empty result a constant
        assert steps == 0 or size == 0
        return
    ((_op, _inputs, outputs),) = _loops(model)
    if kind == "scan":
        assert outputs == kept + sum(stacked), (_loops(model), kept)
    else:  # the while loop's counter stays: it indexes xs
        assert kept <= outputs <= kept + 1, (_loops(model), kept)


@pytest.mark.parametrize("n", [16, 18])
def test_eigvalsh_loop_has_no_unread_state(n):
    """``eigvalsh`` exports eigh's sweep loop without the scalar state only the loop itself
    updated (before this pass: one more): its states are the counter and the two halves of
    the rotated matrix, the same as eigh's (whose vectors are that matrix's columns, no state
    of their own). Above the unroll limit (16) the rounds are an inner loop over the halves,
    and float32 runs the sweeps twice: the second refines the first's result (bf264bd)."""
    sym = lambda a: a + jnp.swapaxes(a, -1, -2)  # noqa: E731
    model = assert_exports_match(lambda a: jnp.linalg.eigvalsh(sym(a)), [(2, n, n)], rtol=1e-4, atol=1e-4)
    expected = [("Loop", 5, 3)] if n <= 16 else [("Loop", 5, 3), ("Scan", 3, 2)] * 2
    assert _loops(model) == expected, _loops(model)
    assert _loops(to_onnx(lambda a: jnp.linalg.eigh(sym(a)), [(2, n, n)])) == expected


@given(rows=st.integers(1, 3), length=st.integers(1, 4), seed=st.integers(0, 100))
def test_unread_state_of_a_loop_in_a_loop_is_dropped(rows, length, seed):
    """An inner scan (in the body of ``lax.map``'s loop) whose second carry the row function
    does not return loses it: one state and one scanned input left."""
    from jax import lax

    def row(x):
        (a, _b), _ = lax.scan(lambda c, t: ((c[0] + t, c[1] * t + c[0]), None), (x[0], x[0]), x)
        return a

    xs = np.random.default_rng(seed).standard_normal((rows, length)).astype(np.float32)
    model = assert_exports_match_on(lambda xs: lax.map(row, xs), xs)
    inner = _loops(model)[1:]
    assert inner and all(n_in == 2 and n_out == 1 for _op, n_in, n_out in inner), _loops(model)


@given(trips=st.integers(0, 3), rows=st.integers(1, 3))
def test_a_dropped_loop_leaves_nothing_its_body_read(trips, rows):
    """An inner fori_loop whose carry the outer loop drops goes with what only its body read:
    the weight it closes over and the hoisted constants (before: three initializers no node
    read, which onnxruntime warns about). ``assert_exports_match`` checks that no initializer
    of any graph is unread."""
    from jax import lax

    from jax2onnx_nn.testing.roundtrip import unread_initializers

    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10

    def f(x):
        def outer(i, c):
            dropped = lax.fori_loop(0, i, lambda j, a: jnp.tanh(a @ w.T) @ w, c[0])
            return dropped, c[1] * 0.5 + 1.0

        return lax.fori_loop(0, trips, outer, (x, x))[1]

    model = assert_exports_match(f, [(rows, 4)])
    assert unread_initializers(model) == []
    assert len(_loops(model)) <= 1 and not any(list(t.dims) == [3, 4] for t in model.graph.initializer), _loops(model)


@given(outer=st.integers(1, 3), inner=st.integers(1, 3), rows=st.integers(1, 3))
def test_a_state_feeding_only_a_dropped_outer_state_is_dropped(outer, inner, rows):
    """Rounds (an inner fori_loop) inside a convergence loop rotate a matrix and, alongside,
    vectors that only the outer loop's unread carry takes: both loops lose the vectors (the
    outer one's state is dead only because the inner loop reads its initial value for a dead
    state of its own)."""
    from jax import lax

    def rounds(i, c):
        m, v = c
        return jnp.cos(m) * 0.5, v @ m.T + m

    def sweep(i, c):
        return lax.fori_loop(0, inner + i, rounds, c)

    def f(x):
        return lax.fori_loop(0, outer, sweep, (x, jnp.ones_like(x)))[0]

    model = assert_exports_match(f, [(rows, rows)])
    both = to_onnx(lambda x: lax.fori_loop(0, outer, sweep, (x, jnp.ones_like(x))), [(rows, rows)])
    # each loop (the outer one and the rounds inside it) has one state fewer: the vectors
    assert [(op, n_out + 1) for op, _n_in, n_out in _loops(model)] == [(op, n_out) for op, _n_in, n_out in _loops(both)], (_loops(model), _loops(both))


# -- relabel_transposes: a Transpose that moves only size-1 axes is a Reshape -----------------

def _relabels(shape, perm) -> bool:
    """Whether one Reshape states ``transpose(x, perm)`` for ``x`` of ``shape``: only size-1
    axes move, and at most one symbolic dim leaves its index (then every other dim is static)."""
    kept = [p for p in perm if shape[p] != 1]
    out = [shape[p] for p in perm]
    moved = [i for i, d in enumerate(out) if isinstance(d, str) and shape[i] != d]
    symbolic = [d for d in out if isinstance(d, str)]
    return kept == sorted(kept) and (not moved or len(moved) == 1 and len(symbolic) == 1)


@given(data=st.data(), shape=st.lists(st.sampled_from([1, 1, 2, 3, "B", "T"]), min_size=1, max_size=5))
def test_a_transpose_of_size_one_axes_is_a_reshape(data, shape):
    """Values match JAX for any permutation (symbolic dims of size 1 and 3 included); a
    permutation moving only size-1 axes leaves no Transpose, and no graph grows."""
    perm = data.draw(st.permutations(range(len(shape))))
    specs = [(tuple(shape), "float32")]
    sizes = sizes_for(specs, {"B": [1, 3], "T": [2]})
    model = assert_exports_match(lambda x: jnp.transpose(x, perm) * 2, specs, sizes=sizes)
    ops = op_types(model)
    assert len(ops) <= 2, ops
    if perm == sorted(perm) or _relabels(shape, perm) and [shape[p] for p in perm] == shape:
        assert ops == ["Mul"], ops  # the identity
    elif _relabels(shape, perm):
        assert ops == ["Reshape", "Mul"], ops
    else:
        assert ops == ["Transpose", "Mul"], ops


@given(lead=st.sampled_from([(), (2,), ("B",)]), n=st.integers(1, 5))
def test_swapped_vectors_cancel_against_their_reshapes(lead, n):
    """``x (..., n, 1)`` swapped to a row, expanded, swapped back and squeezed is ``x``: the
    relabelled Transposes merge with the shape ops around them into nothing (as at a graph
    output too)."""
    def f(x):
        row = jnp.swapaxes(x, -1, -2)[..., None]  # (..., 1, n, 1)
        return jnp.swapaxes(row[..., 0], -1, -2) + 1, jnp.moveaxis(row, -2, -1)[..., 0, :]

    specs = [((*lead, n, 1), "float32")]
    model = assert_exports_match(f, specs, sizes=sizes_for(specs, {"B": [1, 3]}))
    ops = op_types(model)
    assert ops.count("Transpose") == 0 and ops.count("Reshape") <= 1, ops


def test_the_op_census_sees_bodies_and_skips_passes_without_their_ops():
    """op_census holds the op types of loop bodies too; run_if_present walks nothing for a
    pass whose declared op types are absent, runs it otherwise, and adds what it creates."""
    import jax

    from jax2onnx_nn.core.api import export_model
    from jax2onnx_nn.core.passes import op_census, rewrites, run_if_present

    model = export_model(lambda x: jax.lax.fori_loop(0, 3, lambda i, u: jnp.sin(u) * 2.0, x), [(4,)])
    census = op_census(model)
    assert {"Scan", "Sin", "Mul"} <= census and "Transpose" not in census, census
    calls = []

    @rewrites({"Transpose"}, creates={"Reshape"})
    def on_transposes(m):
        calls.append("transposes")

    @rewrites({"Sin", "Transpose"}, creates={"Gather"})
    def on_sines(m):
        calls.append("sines")
        return 1

    assert run_if_present(on_transposes, model, census) is None and "Reshape" not in census
    assert run_if_present(on_sines, model, census) == 1 and "Gather" in census
    assert calls == ["sines"]


# -- size-0 dims through the shape passes ------------------------------------------------------


def _shape_step(draw: st.DrawFn, rank: int) -> tuple[str, object]:
    """One JAX shape operation for an array of ``rank``: its kind and parameters."""
    kind = draw(st.sampled_from(["slice", "newaxis", "transpose", "reshape", "broadcast", "where", "squeeze"]))
    if kind == "slice":
        axis = draw(st.integers(0, rank - 1))
        start, stop = draw(st.integers(-3, 3)), draw(st.integers(-3, 3))
        return kind, (axis, start, stop)
    if kind == "newaxis":
        return kind, draw(st.integers(0, rank))
    if kind == "transpose":
        return kind, draw(st.permutations(range(rank)))
    if kind == "broadcast":
        return kind, draw(st.integers(1, 2))
    return kind, draw(st.integers(0, 2**16))


def _apply_shape_step(x: jnp.ndarray, kind: str, param: object) -> jnp.ndarray:
    if kind == "slice":
        axis, start, stop = param
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop)
        return x[tuple(index)]
    if kind == "newaxis":
        return jnp.expand_dims(x, param)
    if kind == "transpose":
        return jnp.transpose(x, param)
    if kind == "broadcast":
        return jnp.broadcast_to(x, (param, *x.shape))
    if kind == "where":
        return jnp.where(x > 0.5, x, -x)
    if kind == "squeeze":
        ones = [a for a, d in enumerate(x.shape) if d == 1]
        return jnp.squeeze(x, ones[param % len(ones)]) if ones else x
    # reshape: the dims in another order and split/merged where they are 0 or 1
    dims = list(x.shape)
    order = np.random.default_rng(param).permutation(len(dims)).tolist()
    return x.reshape([dims[i] for i in order] + ([1] if param % 2 else []))


@given(data=st.data(), shape=st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=1, max_size=4))
def test_shape_ops_on_size_zero_dims_match_jax(data, shape):
    """Chains of slices (empty ones too: ``x[:, -2:-2]``), new axes, transposes, reshapes,
    broadcasts, squeezes and ``where`` over arrays with size-0 dims in any position: the shape
    passes (merged shape ops, Transposes relabelled as Reshapes) keep a 0 a 0, not "copy the
    input dim"."""
    steps = []
    probe = jnp.zeros(shape)
    for _ in range(data.draw(st.integers(1, 4))):
        if probe.ndim == 0 or probe.ndim >= 6:
            break
        step = _shape_step(data.draw, probe.ndim)
        steps.append(step)
        probe = _apply_shape_step(probe, *step)

    def f(x):
        for step in steps:
            x = _apply_shape_step(x, *step)
        return x

    assert_exports_match_on(f, np.linspace(0, 1, int(np.prod(shape))).astype(np.float32).reshape(shape))


def test_an_empty_slice_under_a_new_axis_keeps_its_zero():
    """``x[:, :, -2:-2, 3]`` (size 0) through ``where`` and a new axis: Slice, Squeeze and
    Unsqueeze merged into one Reshape must not read the 0 as "copy the input dim"."""
    assert_exports_match_on(lambda x: jnp.where(x[:, :, -2:-2, 3] > 0, x[:, :, -2:-2, 3], 0.0)[:, None],
                            np.ones((2, 3, 4, 5), np.float32))
