"""Control flow: cond/switch -> If, while/fori_loop -> Loop or Scan, scan -> Scan/Loop, vs JAX."""

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

from jax2onnx_nn import onnx_function
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on

FLOATS = [np.float32, np.float64]
floats = st.sampled_from(FLOATS)
# Each example compiles its own JAX loop for the comparison: the costly tests draw fewer.
fewer = settings(max_examples=max(4, settings.default.max_examples // 2))
fewest = settings(max_examples=max(3, settings.default.max_examples // 5))
_ONNX_FLOAT = {np.float32: onnx.TensorProto.FLOAT, np.float64: onnx.TensorProto.DOUBLE}
small_shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3)
W = np.linspace(-1.0, 1.0, 24).reshape(4, 6)  # a closed-over weight (an initializer)


def _floats(dtype, shape, lo=-2.0, hi=2.0):
    # no subnormals: XLA on CPU flushes them to zero, onnxruntime does not
    return hnp.arrays(
        dtype, shape, elements=st.floats(lo, hi, width=np.finfo(dtype).bits, allow_subnormal=False)
    )


def _check(fn, args, x64, **kwargs):
    """Export ``fn`` with ``args`` (pytrees of arrays) as specs and inputs; compare with JAX."""
    model = assert_exports_match_on(fn, *args, enable_double_precision=x64, **kwargs)
    _assert_bodies_typed(model.graph)
    return model


def _subgraphs(graph):
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield node, attr.g
                yield from _subgraphs(attr.g)


def _assert_bodies_typed(graph):
    for _, body in _subgraphs(graph):
        for value in [*body.input, *body.output]:
            t = value.type.tensor_type
            assert t.elem_type != 0 and t.HasField("shape"), f"{body.name}: {value.name} is untyped"


def _count(graph, op_type):
    return sum(n.op_type == op_type for n in graph.node) + sum(
        n.op_type == op_type for _, g in _subgraphs(graph) for n in g.node
    )


def _float_types(graph):
    return {
        v.type.tensor_type.elem_type
        for _, g in _subgraphs(graph)
        for v in [*g.input, *g.output]
        if v.type.tensor_type.elem_type in _ONNX_FLOAT.values()
    }


def _step(a):
    """A per-dtype update of one carry leaf."""
    if a.dtype == jnp.bool_:
        return ~a
    if jnp.issubdtype(a.dtype, jnp.integer):
        return a * 3 + 1
    return jnp.sin(a) * 0.9 + 0.25


@st.composite
def carries(draw, dtype):
    """A random pytree (leaf, tuple, dict, nested) of float/int/bool arrays."""
    leaf_dtypes = st.sampled_from([dtype, dtype, np.int32, np.bool_])

    def leaf():
        d = draw(leaf_dtypes)
        shape = draw(small_shapes)
        if d == np.bool_:
            return draw(hnp.arrays(d, shape))
        if d == np.int32:
            return draw(hnp.arrays(d, shape, elements=st.integers(-50, 50)))
        return draw(_floats(d, shape))

    kind = draw(st.sampled_from(["leaf", "tuple", "dict", "nested"]))
    if kind == "leaf":
        return leaf()
    if kind == "tuple":
        return tuple(leaf() for _ in range(draw(st.integers(1, 3))))
    if kind == "dict":
        return {f"k{i}": leaf() for i in range(draw(st.integers(1, 3)))}
    return {"a": (leaf(), leaf()), "b": [leaf()]}


# -- cond / switch ----------------------------------------------------------------------------

BRANCH_OPS = [
    jnp.sin,
    jnp.cos,
    lambda a: a * 2 + 1,
    jnp.tanh,
    jnp.negative,
    lambda a: jnp.exp(-a * a),
]


@given(data=st.data(), dtype=floats)
def test_switch_any_branch_count(data, dtype):
    n = data.draw(st.integers(1, 6))
    operands = tuple(
        data.draw(_floats(dtype, data.draw(small_shapes)))
        for _ in range(data.draw(st.integers(1, 3)))
    )
    index = np.array(data.draw(st.integers(-2, n + 1)), np.int32)  # lax.switch clamps
    branches = [lambda ops, k=k: jax.tree_util.tree_map(BRANCH_OPS[k], ops) for k in range(n)]

    def fn(i, ops):
        return lax.switch(i, branches, ops)

    model = _check(fn, [index, operands], dtype == np.float64)
    assert _count(model.graph, "If") == n - 1


@given(data=st.data(), dtype=floats)
def test_cond_captures_outer_values_constants_and_nests(data, dtype):
    x = data.draw(_floats(dtype, (4,)))
    y = data.draw(_floats(dtype, (6,)))
    w = W.astype(dtype)

    def fn(x, y):
        def inner(x):
            return lax.cond(jnp.sum(y) > jnp.sum(x), lambda: x @ w + y, lambda: x @ w - 1.0)

        def outer_true(x):
            return inner(x), x, jnp.ones(3, dtype)  # an operand and a constant as branch outputs

        def outer_false(x):
            return jnp.tanh(y) * jnp.sum(x), x * 2, jnp.zeros(3, dtype)

        return lax.cond(jnp.sum(x) > 0, outer_true, outer_false, x)

    model = _check(fn, [x, y], dtype == np.float64)
    assert _count(model.graph, "If") == 2
    assert "Cast" not in [n.op_type for n in model.graph.node]  # the bool predicate is used as is


# -- while_loop / fori_loop -------------------------------------------------------------------


@fewer
@given(data=st.data(), dtype=floats)
def test_while_cond_reads_carry(data, dtype):
    carry = data.draw(carries(dtype))
    limit = data.draw(_floats(dtype, ()))
    y = data.draw(_floats(dtype, (3,)))

    def fn(carry, limit, y):
        def cond(state):
            i, total, _ = state
            return (i < 7) & (total < limit)

        def body(state):
            i, total, c = state
            return i + 1, total + jnp.sum(jnp.cos(y)) * 0.5, jax.tree_util.tree_map(_step, c)

        return lax.while_loop(cond, body, (0, jnp.zeros((), dtype), carry))

    model = _check(fn, [carry, limit, y], dtype == np.float64)
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    assert loop.input[0] == "" and loop.input[1] != ""  # data-dependent: no trip count
    if dtype == np.float64:
        assert _ONNX_FLOAT[np.float32] not in _float_types(model.graph)


@fewer
@given(data=st.data(), dtype=floats)
def test_fori_loop_traced_bounds_uses_trip_count(data, dtype):
    carry = data.draw(carries(dtype))
    lo, hi = (np.array(data.draw(st.integers(-3, 6)), np.int32) for _ in range(2))

    def fn(lo, hi, carry):
        return lax.fori_loop(lo, hi, lambda k, c: jax.tree_util.tree_map(_step, c), carry)

    model = _check(fn, [lo, hi, carry], dtype == np.float64)
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    assert loop.input[0] != "" and loop.input[1] == ""  # trip count given, no cond


@fewer
@given(data=st.data(), dtype=floats)
def test_fori_loop_static_bounds(data, dtype):
    carry = data.draw(carries(dtype))
    lo = data.draw(st.integers(-2, 4))
    hi = data.draw(st.integers(-2, 6))

    def fn(x, carry):
        def body(k, state):
            acc, c = state
            return acc + x * k, jax.tree_util.tree_map(_step, c)

        return lax.fori_loop(lo, hi, body, (jnp.zeros_like(x), carry))

    _check(fn, [data.draw(_floats(dtype, (2,))), carry], dtype == np.float64)


# -- scan -------------------------------------------------------------------------------------


@given(data=st.data(), dtype=floats, reverse=st.booleans())
def test_scan_carries_sequences_and_consts(data, dtype, reverse):
    length = data.draw(st.integers(0, 4))
    carry = data.draw(carries(dtype))
    n_seq = data.draw(st.integers(0, 2))
    xs = {
        f"s{i}": data.draw(_floats(dtype, (length, *data.draw(small_shapes)))) for i in range(n_seq)
    }
    y = data.draw(_floats(dtype, (4,)))
    w = W.astype(dtype)
    unroll = data.draw(st.integers(1, 3))

    def fn(carry, xs, y):
        def body(c, x):
            total = sum((jnp.sum(v) for v in (x or {}).values()), jnp.zeros((), dtype))
            return jax.tree_util.tree_map(_step, c), {"t": total * y @ w, "c": c}

        return lax.scan(
            body, carry, xs if n_seq else None, length=length, reverse=reverse, unroll=unroll
        )

    model = _check(fn, [carry, xs, y], dtype == np.float64)
    if dtype == np.float64:
        assert _ONNX_FLOAT[np.float32] not in _float_types(model.graph)


@fewer
@given(seed=st.integers(0, 1000), reverse=st.booleans())
def test_scan_symbolic_sequence_and_batch_dims(seed, reverse):
    def fn(h, xs):
        def body(c, x):
            new = jnp.tanh(c * 0.5 + x @ W[:3, :2] + jnp.zeros_like(c))
            return new, (new * 2, jnp.sum(x, axis=-1))

        return lax.scan(body, h, xs, reverse=reverse)

    model = assert_exports_match(
        fn, [("B", 2), ("T", "B", 3)], sizes={"T": [0, 1, 4], "B": [1, 3, 2]}, seed=seed
    )
    _assert_bodies_typed(model.graph)
    body_dims = {
        d.dim_param
        for _, g in _subgraphs(model.graph)
        for v in g.input
        for d in v.type.tensor_type.shape.dim
    }
    assert "B" in body_dims


@fewer
@given(seed=st.integers(0, 1000), dtype=floats)
def test_symbolic_dims_through_cond_and_while(seed, dtype):
    def fn(u, limit):
        def body(state):
            i, u = state
            return i + 1, u * 0.5 + jnp.mean(u, axis=0) * 0.25 + jnp.ones_like(u)

        _, u = lax.while_loop(lambda s: (s[0] < 6) & (jnp.sum(s[1] * s[1]) > limit), body, (0, u))
        return lax.cond(jnp.sum(u) > 0, lambda: u * 2, lambda: jnp.zeros_like(u) + limit)

    specs = [(("B", 3), dtype), ((), dtype)]
    model = assert_exports_match(
        fn, specs, sizes={"B": [0, 1, 4]}, seed=seed, enable_double_precision=dtype == np.float64
    )
    _assert_bodies_typed(model.graph)


@fewest
@given(data=st.data())
def test_scan_and_fori_loop_carry_prng_keys(data):
    length = data.draw(st.integers(0, 3))
    seed = data.draw(st.integers(0, 2**31 - 1))

    def fn(xs, n):
        def step(k, x):
            k, sub = jax.random.split(k)
            return k, x + jax.random.normal(sub, x.shape)

        key, ys = lax.scan(step, jax.random.key(seed), xs)
        key, total = lax.fori_loop(0, n, lambda i, c: step(*c), (key, jnp.zeros(2)))
        return ys, total, jax.random.key_data(key)

    xs = data.draw(_floats(np.float32, (length, 2)))
    _check(fn, [xs, np.array(data.draw(st.integers(0, 3)), np.int32)], False)


def test_scan_over_a_static_sequence_is_one_onnx_scan():
    def fn(c, xs):
        return lax.scan(lambda c, x: (c + x, c * x), c, xs, reverse=True)

    model = _check(
        fn, [np.ones(3, np.float32), np.arange(12, dtype=np.float32).reshape(4, 3)], False
    )
    assert [n.op_type for n in model.graph.node] == ["Scan"]


@pytest.mark.parametrize("opset", [17, 23])
def test_if_loop_and_scan_at_the_opset_bounds(opset):
    def fn(x, xs, n):
        c, ys = lax.scan(lambda c, s: (c * s + 1, jnp.sin(c)), x, xs)
        c = lax.fori_loop(0, n, lambda k, c: c * 0.5, c)
        return lax.cond(jnp.sum(c) > 0, lambda: ys * 2, lambda: ys - 1)

    x, xs = (
        np.linspace(0, 1, 3, dtype=np.float32),
        np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
    )
    model = _check(fn, [x, xs, np.array(2, np.int32)], False, opset=opset)
    assert {"Scan", "Loop", "If"} <= {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("length", [0, 4])
def test_control_flow_inside_an_onnx_function(length):
    @onnx_function
    def block(x, xs):
        c, ys = lax.scan(lambda c, s: (c * s + 1.0, jnp.sin(c) + 2.0), x, xs, reverse=True)
        c = lax.fori_loop(0, 3, lambda k, c: c * 0.5 + 0.25, c)
        return lax.cond(jnp.sum(c) > 0, lambda: ys * 2, lambda: ys - 1)

    def fn(x, xs):
        return block(x, xs) + block(x * 2, xs)

    x, xs = (
        np.linspace(-1, 1, 3, dtype=np.float32),
        np.linspace(-1, 1, 3 * length, dtype=np.float32).reshape(length, 3),
    )
    model = _check(fn, [x, xs], False)
    (function,) = model.functions
    # the static fori_loop is a Scan over ticks (faster than Loop in onnxruntime)
    assert {"Scan", "If"} <= {n.op_type for n in function.node}


# -- nesting ------------------------------------------------------------------------------------


def _scan_in_cond(x, xs):
    return lax.cond(
        jnp.sum(x) > 0, lambda: lax.scan(lambda c, s: (c * s, c + s), x, xs), lambda: (x, xs * 2)
    )


def _cond_in_scan(x, xs):
    def body(c, s):
        return lax.cond(jnp.sum(s) > 0, lambda: c + s, lambda: c * s - 1), jnp.sum(c)

    return lax.scan(body, x, xs)


def _nested_scans(x, xs):
    def outer(c, s):
        inner, ys = lax.scan(
            lambda ci, si: (ci + si * c, ci), c, jnp.broadcast_to(s, (2, 3)), reverse=True
        )
        return jnp.tanh(inner), ys

    return lax.scan(outer, x, xs)


def _nested_whiles(x, xs):
    def outer_body(state):
        i, c = state
        _, c = lax.while_loop(lambda s: s[0] < i, lambda s: (s[0] + 1, jnp.sin(s[1]) + 0.5), (0, c))
        return i + 1, c + jnp.sum(xs) * 0.1

    return lax.while_loop(lambda s: s[0] < 4, outer_body, (0, x))


def _switch_in_while_in_scan(x, xs):
    def body(c, s):
        def step(k, v):
            return lax.switch(k % 3, [lambda v: v + s, lambda v: v * 0.5, jnp.cos], v)

        c = lax.fori_loop(0, jnp.int32(jnp.sum(s > 0)) + 1, step, c)
        return c, c

    return lax.scan(body, x, xs)


NESTED = [_scan_in_cond, _cond_in_scan, _nested_scans, _nested_whiles, _switch_in_while_in_scan]


@given(data=st.data(), dtype=floats, fn=st.sampled_from(NESTED))
def test_nested_control_flow(data, dtype, fn):
    x = data.draw(_floats(dtype, (3,)))
    xs = data.draw(_floats(dtype, (data.draw(st.integers(0, 3)), 3)))
    _check(fn, [x, xs], dtype == np.float64)


# -- transformations ----------------------------------------------------------------------------


@given(data=st.data(), dtype=floats)
def test_vmap_of_cond_becomes_select(data, dtype):
    xs = data.draw(_floats(dtype, (data.draw(st.integers(0, 4)), 3)))

    def fn(xs):
        return jax.vmap(lambda x: lax.cond(jnp.sum(x) > 0, jnp.sin, lambda x: x * 3, x))(xs)

    model = _check(fn, [xs], dtype == np.float64)
    assert _count(model.graph, "If") == 0


@fewer
@given(data=st.data(), dtype=floats)
def test_vmap_of_loops_with_batched_predicates(data, dtype):
    batch = data.draw(st.integers(0, 4))
    xs = data.draw(_floats(dtype, (batch, 3), 0.125, 3.0))
    seq = data.draw(_floats(dtype, (batch, data.draw(st.integers(0, 3)), 3)))
    trips = data.draw(hnp.arrays(np.int32, (batch,), elements=st.integers(-1, 4)))

    def one(x, s, n):
        _, grown = lax.while_loop(
            lambda c: jnp.sum(c[1]) < 20.0, lambda c: (c[0] + 1, c[1] * 1.5), (0, x)
        )
        counted = lax.fori_loop(0, n, lambda k, c: c * 0.5 + k, grown)
        last, ys = lax.scan(lambda c, si: (c * si + 1, jnp.sum(c)), counted, s)
        return last, ys

    _check(jax.vmap(one), [xs, seq, trips], dtype == np.float64)


@fewer
@given(data=st.data(), dtype=floats)
def test_grad_of_scan(data, dtype):
    w = data.draw(_floats(dtype, (3,)))
    xs = data.draw(_floats(dtype, (data.draw(st.integers(0, 4)), 3)))

    def loss(w, xs):
        final, ys = lax.scan(
            lambda c, x: (jnp.sin(c * w + x), jnp.sum(c * x)), jnp.ones_like(w), xs
        )
        return jnp.sum(final) + jnp.sum(ys)

    _check(jax.grad(loss, argnums=(0, 1)), [w, xs], dtype == np.float64)


@fewer
@given(data=st.data())
def test_jvp_and_jacfwd_of_fori_loop(data):
    x, t = (data.draw(_floats(np.float64, (3,))) for _ in range(2))
    n = np.array(data.draw(st.integers(0, 4)), np.int64)

    def fn(x, t, n):
        def f(x):
            return lax.fori_loop(0, n, lambda k, c: jnp.sin(c) * 1.1 + jnp.sum(c) * 0.1, x)

        return jax.jvp(f, (x,), (t,)), jax.jacfwd(f)(x)

    _check(fn, [x, t, n], True)


@given(
    lo=st.integers(-3, 3),
    hi=st.integers(-3, 5),
    dtype=st.sampled_from([np.int16, np.int32]),
    seed=st.integers(0, 100),
)
def test_a_while_loop_of_known_steps_is_a_scan_over_its_counter(lo, hi, dtype, seed):
    """``while i < hi: i += 1`` from a constant ``lo`` runs a known number of steps: a Scan
    over the counter's values (no counter Add and condition per step in the body); the body
    reads the counter, the final counter is ``max(lo, hi)``; no step at all is no loop."""

    def f(x):
        return lax.while_loop(
            lambda s: s[0] < hi,
            lambda s: (s[0] + 1, s[1] * 0.5 + s[0]),
            (jnp.asarray(lo, dtype), x),
        )

    x = np.random.default_rng(seed).standard_normal(3).astype(np.float32)
    model = _check(f, [x], False)
    loops = [n.op_type for n in model.graph.node if n.op_type in ("Scan", "Loop")]
    assert (loops == ["Scan"]) == (hi > lo), loops
