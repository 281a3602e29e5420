"""Loop and Scan states nothing reads dropped."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax2onnx_nn import to_onnx
from jax2onnx_nn.core.lowerings.lapack import stedc, steps
from jax2onnx_nn.testing import assert_exports_match, assert_exports_match_on


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


@given(
    kind=st.sampled_from(["scan", "fori", "while"]),
    used=st.lists(st.booleans(), min_size=3, max_size=3),
    stacked=st.lists(st.booleans(), min_size=2, max_size=2),
    steps=st.integers(0, 3),
    size=st.integers(0, 2),
)
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
            carry = lax.while_loop(
                lambda s: s[0] < steps,
                lambda s: (s[0] + 1, *body(s[1:], xs[s[0]])[0]),
                (0, x, x, x),
            )[1:]
            ys = ()
        picked = [v for v, keep in zip(carry, used, strict=True) if keep] + [
            v for v, keep in zip(ys, stacked, strict=False) if keep
        ]
        return tuple(picked) or (carry[0] if kind != "scan" or not any(stacked) else ys[0],)

    model = assert_exports_match(f, [(size,), (max(steps, 1), size)])
    # c reads b, b reads a: a carry stays when it or a later one in the chain is read
    reads = [i for i, keep in enumerate(used) if keep]
    if kind == "scan":
        reads += [i for i, keep in zip((0, 2), stacked, strict=True) if keep]
    kept = max(reads, default=0) + 1  # f returns a when it picks nothing
    if not _loops(
        model
    ):  # fori_loop(0, 0, ...) is no loop in the jaxpr; an empty result a constant
        assert steps == 0 or size == 0
        return
    ((_op, _inputs, outputs),) = _loops(model)
    if kind == "scan":
        assert outputs == kept + sum(stacked), (_loops(model), kept)
    else:  # the while loop's counter stays: it indexes xs
        assert kept <= outputs <= kept + 1, (_loops(model), kept)


@pytest.mark.parametrize("n", [16, 26, 520])
def test_eigvalsh_loop_has_no_unread_state(n):
    """``eigvalsh`` lowers eigh without its vectors (the interpreter drops what nothing reads):
    syevd's values-only path (``lapack/syevd.py``), the tridiagonal reduction (a Scan above
    the unroll limit, its reflectors' state gone) and the bisection's Scan, whose states are
    the intervals' two ends. eigh keeps its vectors: up to 25x25 steqr's QL loop; from 26 to
    ``STEDC_LIMIT`` rows stedc's divide and conquer (``lapack/stedc.py``), whose merges and
    ormtr's last scan carry them; above, Jacobi's sweep loop (counter and the two halves of
    the rotated matrix, float32 running the sweeps twice: the second refines the first's)."""
    sym = lambda a: a + jnp.swapaxes(a, -1, -2)  # noqa: E731
    model = assert_exports_match(
        lambda a: jnp.linalg.eigvalsh(sym(a)), [(2, n, n)], rtol=1e-4, atol=1e-4
    )
    eigh = _loops(to_onnx(lambda a: jnp.linalg.eigh(sym(a)), [(2, n, n)]))
    values = [("Scan", 3, 2)] * (1 if n <= steps.UNROLL_LIMIT else 2)
    assert _loops(model) == values, _loops(model)
    if n <= 25:
        assert eigh == [("Loop", 8, 6)], eigh
    elif n <= stedc.STEDC_LIMIT:
        merges = [("Loop", 8, 6), ("Loop", 16, 14), ("Loop", 10, 8), ("Loop", 12, 10)]
        assert eigh == [("Scan", 4, 3), merges[0], ("Scan", 8, 7), *merges[1:], ("Scan", 2, 1)], (
            eigh
        )
    else:
        assert eigh == [("Loop", 5, 3), ("Scan", 3, 2)] * 2, eigh


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
    assert len(_loops(model)) <= 1 and not any(
        list(t.dims) == [3, 4] for t in model.graph.initializer
    ), _loops(model)


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
    assert [(op, n_out + 1) for op, _n_in, n_out in _loops(model)] == [
        (op, n_out) for op, _n_in, n_out in _loops(both)
    ], (_loops(model), _loops(both))
