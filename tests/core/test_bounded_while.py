"""``loop_bound=``: a while_loop whose condition depends on the data as a Scan of at most N steps
(tract has no ONNX Loop), checked against JAX on onnxruntime and tract.

The reference is the loop JAX computes stopped after N steps: where its condition no longer
holds it is the loop itself, exactly; where it still holds, the float results are NaN and the
integer results the values after step N.
"""

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.runtimes import missing_reason, run_model
from jax2onnx_nn.core.targets import TARGETS

# (target profile, runtime): the If step (onnxruntime's profile), the Where step (tract's)
FORMS = [
    pytest.param(TARGETS["onnxruntime"], "onnxruntime", id="if-onnxruntime"),
    pytest.param(
        dataclasses.replace(TARGETS["onnxruntime"], bounded_if=False),
        "onnxruntime",
        id="where-onnxruntime",
    ),
    pytest.param(
        TARGETS["tract"],
        "tract",
        id="tract",
        marks=pytest.mark.skipif(
            missing_reason("tract") is not None, reason=str(missing_reason("tract"))
        ),
    ),
]


def _cond(state: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
    x, limit, _ = state
    return jnp.sum(x) < limit


def _body(state: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    x, limit, steps = state
    return x * 1.5 + 0.25, limit, steps + 1


def grow(x: jax.Array, limit: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Grows ``x`` until its sum reaches ``limit`` (never, for a sum below -0.5 * size), and
    counts the steps."""
    out, _, steps = jax.lax.while_loop(_cond, _body, (x, limit, jnp.int32(0)))
    return out, steps


def stopped_after(
    cond: Callable[[Any], jax.Array], body: Callable[[Any], Any], init: Any, bound: int
) -> tuple[Any, jax.Array]:
    """The loop's carries after at most ``bound`` steps, and whether its condition still holds."""
    _, out = jax.lax.while_loop(
        lambda s: cond(s[1]) & (s[0] < bound), lambda s: (s[0] + 1, body(s[1])), (0, init)
    )
    return out, cond(out)


def expected_grow(x: np.ndarray, limit: np.float32, bound: int) -> tuple[np.ndarray, np.ndarray]:
    (out, _, steps), unfinished = stopped_after(
        _cond, _body, (jnp.asarray(x), jnp.asarray(limit), jnp.int32(0)), bound
    )
    return np.where(unfinished, np.nan, np.asarray(out)), np.asarray(steps)


def _export(
    fn: Callable[..., Any], specs: list[Any], target: Any, bound: int, **options: Any
) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the step count: an int result, tested below)
        return to_onnx(fn, specs, target=target, loop_bound=bound, **options)


def _op_types(graph: Any) -> set[str]:
    return {n.op_type for n in graph.node} | {
        t for n in graph.node for a in n.attribute if a.g.node for t in _op_types(a.g)
    }


@pytest.mark.parametrize(("target", "runtime"), FORMS)
@given(
    x=hnp.arrays(
        np.float32,
        3,
        elements=st.floats(-3, 3, width=32, allow_subnormal=False)
        | st.sampled_from([np.nan, np.inf, -np.inf, 0.0]),
    ),
    limit=st.floats(-2, 60, width=32, allow_subnormal=False),  # (XLA flushes subnormals to zero)
    bound=st.integers(1, 12),
)
def test_loop_bound_matches_jax_or_poisons_floats(
    target: Any, runtime: str, x: np.ndarray, limit: float, bound: int
) -> None:
    # drawn below and above the steps needed (0 to ~9, or never: a sum below -1.5 or -inf)
    model = _export(grow, [(3,), ((), np.float32)], target, bound)
    assert "Loop" not in _op_types(model.graph)
    out, steps = run_model(model, [x, np.float32(limit)], runtime)
    want_out, want_steps = expected_grow(x, np.float32(limit), bound)
    assert steps == want_steps
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)  # (NaN where NaN)


@pytest.mark.parametrize(("target", "runtime"), FORMS)
@given(rows=st.integers(0, 4), bound=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_vmapped_loop_poisons_only_the_rows_it_did_not_finish(
    target: Any, runtime: str, rows: int, bound: int, seed: int
) -> None:
    # a vmapped while_loop has a predicate per row: each row stops on its own, and only the
    # rows still running after the last step are NaN; the batch is symbolic
    rng = np.random.default_rng(seed)
    xs = rng.uniform(-1, 2, (rows, 3)).astype(np.float32)
    limits = rng.uniform(0, 40, rows).astype(np.float32)
    model = _export(jax.vmap(grow), [("B", 3), ("B",)], target, bound)
    out, steps = run_model(model, [xs, limits], runtime)
    want = [expected_grow(x, limit, bound) for x, limit in zip(xs, limits, strict=True)]
    np.testing.assert_array_equal(steps, np.array([w[1] for w in want], np.int32).reshape(rows))
    np.testing.assert_allclose(
        out, np.array([w[0] for w in want], np.float32).reshape(rows, 3), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(("target", "runtime"), FORMS)
@given(rows=st.integers(0, 3), bound=st.integers(1, 6))
def test_carry_of_symbolic_size(target: Any, runtime: str, rows: int, bound: int) -> None:
    # a carry [B, 2] of a symbolic (possibly empty) batch; halves until the largest is below 1
    def halve(x: jax.Array) -> jax.Array:
        return jax.lax.while_loop(lambda c: jnp.max(c, initial=0.0) >= 1.0, lambda c: c * 0.5, x)

    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * 3.0
    model = _export(halve, [("B", 2)], target, bound)
    (out,) = run_model(model, [x], runtime)
    want, unfinished = stopped_after(
        lambda c: jnp.max(c, initial=0.0) >= 1.0, lambda c: c * 0.5, jnp.asarray(x), bound
    )
    np.testing.assert_array_equal(out, np.where(unfinished, np.nan, want))


def _fixed_steps(x: jax.Array, lo: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    fori = jax.lax.fori_loop(0, 5, lambda i, c: c * 0.5 + i, x)
    traced = jax.lax.fori_loop(lo, 7, lambda i, c: c * 0.5 + i, x)
    counted = jax.lax.while_loop(lambda s: s[0] < 4, lambda s: (s[0] + 1, s[1] * 2.0), (0, x))[1]
    return fori, traced, counted


@pytest.mark.parametrize("target", ["onnxruntime", "tract"])
@pytest.mark.parametrize(
    ("fn", "specs"),
    [(_fixed_steps, [(3,), ((), np.int32)]), (lambda x, w: jnp.tanh(x @ w), [("B", 4), (4, 2)])],
)
def test_loops_of_fixed_or_traced_steps_and_loopless_models_are_unchanged(
    target: str, fn: Callable[..., Any], specs: list[Any]
) -> None:
    assert (
        to_onnx(fn, specs, target=target, loop_bound=3).SerializeToString()
        == to_onnx(fn, specs, target=target).SerializeToString()
    )


def test_integer_results_read_warn_with_the_source_line() -> None:
    with pytest.warns(
        UserWarning,
        match=r"integer or bool results of the while_loop at "
        r"\S*test_bounded_while.py:\d+:\d+ \(\S*grow\)",
    ) as caught:
        to_onnx(grow, [(3,), ((), np.float32)], loop_bound=4)
    assert caught[0].filename == __file__  # the warning points at the export call
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the step count unread: no warning
        model = to_onnx(lambda x, limit: grow(x, limit)[0], [(3,), ((), np.float32)], loop_bound=4)
    (out,) = run_model(model, [np.ones(3, np.float32), np.float32(1e9)], "onnxruntime")
    assert np.isnan(out).all()


@pytest.mark.parametrize("bound", [0, -1, 2.5, True, "8"])
def test_a_bound_that_is_not_a_positive_int_is_refused(bound: Any) -> None:
    with pytest.raises(ValueError, match="loop_bound must be a positive int"):
        to_onnx(grow, [(3,), ((), np.float32)], loop_bound=bound)


def test_tract_refusing_a_data_dependent_loop_names_the_option() -> None:
    with pytest.raises(
        ConversionError, match=r"(?s)tract cannot run Loop.*loop_bound=N \(CLI: --loop-bound N\)"
    ):
        to_onnx(grow, [(3,), ((), np.float32)], target="tract")


TRACT = pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))


@TRACT
@given(bound=st.integers(1, 9), y=st.floats(0.0, 1.0, width=32))
def test_bounded_loops_in_a_map_restart_on_tract(bound: int, y: float) -> None:
    # tract keeps an inner Scan's states from one step of the outer Scan to the next: its
    # profile makes each inner step 0 read the initial values (inner_scans_restarted)
    def halvings(xs: jax.Array, y: jax.Array) -> jax.Array:
        return jax.lax.map(
            lambda a: jax.lax.while_loop(lambda c: c < a, lambda c: c * 2 + y, jnp.float32(1.0)), xs
        )

    xs = np.array([3.0, 10.0, 100.0, 0.5, 7.0], np.float32)
    (out,) = run_model(_export(halvings, [(5,), ()], "tract", bound), [xs, np.float32(y)], "tract")
    want = [
        stopped_after(
            lambda c, a=a: c < a, lambda c: c * 2 + np.float32(y), jnp.float32(1.0), bound
        )
        for a in xs
    ]
    np.testing.assert_allclose(
        out, [np.nan if unfinished else w for w, unfinished in want], rtol=1e-6
    )


@TRACT
@pytest.mark.parametrize(
    "inner",
    ["fori_loop", "scan without xs", "scan of a counter", "scan over data", "scan from the row"],
)
def test_fixed_loops_in_a_map_restart_on_tract(inner: str) -> None:
    # the same bug without loop_bound: a lax.map over a fori_loop or a scan gave the last row's
    # state to the next row on tract (wrong numbers, no error), or failed its declutter
    def step(c: jax.Array, a: jax.Array, i: jax.Array) -> jax.Array:
        return jnp.where(c < a, c * 2 + i, c)

    loops = {
        "fori_loop": lambda a: jax.lax.fori_loop(
            0, 3, lambda i, c: step(c, a, i.astype(c.dtype)), jnp.float32(1.0)
        ),
        "scan without xs": lambda a: jax.lax.scan(
            lambda c, _: (step(c, a, 0.25), None), jnp.float32(1.0), None, length=3
        )[0],
        "scan of a counter": lambda a: jax.lax.scan(
            lambda c, i: (step(c, a, i), c), jnp.float32(1.0), jnp.arange(4.0)
        )[1],
        "scan over data": lambda a: jax.lax.scan(
            lambda c, t: (step(c, a, t), None), jnp.float32(1.0), jnp.full(3, 0.25) * a
        )[0],
        "scan from the row": lambda a: jax.lax.scan(
            lambda c, t: (c * 0.5 + t * a, None), a, jnp.linspace(0.0, 1.0, 3)
        )[0],
    }
    xs = np.array([3.0, 10.0, 100.0, 0.5, 7.0], np.float32)
    from jax2onnx_nn.testing import assert_exports_match

    assert_exports_match(
        lambda xs: jax.lax.map(loops[inner], xs),
        [(5,)],
        input_values=[xs],
        target="tract",
        runtime="tract",
    )


def _decay(c: jax.Array, t: jax.Array) -> jax.Array:
    return c * 0.5 + t


_RUN_TIME_LOOPS: dict[str, Callable[..., Any]] = {
    "scan over the row": lambda row: jax.lax.scan(
        lambda c, t: (_decay(c, t), c), jnp.float32(1.0), row
    ),
    "fori_loop of the row's length": lambda row: jax.lax.fori_loop(
        0, row.shape[0], lambda i, c: _decay(c, i + jnp.sum(row)), jnp.float32(1.0)
    ),
    "fori_loop of a traced count": lambda row: jax.lax.fori_loop(
        0,
        jnp.where(jnp.sum(row) > 0, 3, 1),
        lambda i, c: _decay(c, i.astype(c.dtype)),
        jnp.sum(row),
    ),
}


# (one compiled model runs every size in turn: OpenVINO's inner loop of 0 steps stacked what the
# previous run stacked, rows of T=0 after rows of T=4 gave ys of shape (1, 4), 0 rows of 0
# columns gave ys (0, 1); tract aborted the process on the sum of a row of 0 columns)
_RUN_TIME_SIZES = {
    "tract": {"B": [3, 1, 0, 0, 2], "T": [4, 0, 2, 0, 1]},
    "openvino": {"B": [0, 3, 1, 0, 2], "T": [2, 4, 0, 0, 1]},
}


@pytest.mark.parametrize(
    "runtime",
    [
        pytest.param(
            r,
            marks=pytest.mark.skipif(missing_reason(r) is not None, reason=str(missing_reason(r))),
        )
        for r in _RUN_TIME_SIZES
    ],
)
@pytest.mark.parametrize("inner", list(_RUN_TIME_LOOPS))
def test_loops_of_run_time_length_in_a_map_run_on_tract_and_openvino(
    inner: str, runtime: str
) -> None:
    # tract: an inner Scan of symbolic length had no constant counter to restart it by (each row
    # started from the last row's state), a fori_loop's Range of run-time length hoisted out of
    # the map's body had no type ("Source node without a determined fact"), and a Scan of 0
    # steps gave zeros for its states: its profile counts the steps at run time, computes such a
    # Range in the body and selects the initial states where no step ran. OpenVINO refused to
    # run the map's Scan over 0 rows, and an inner loop of 0 steps stacked what the previous run
    # stacked: its profile runs one step there and drops its results
    from jax2onnx_nn.testing import assert_exports_match

    assert_exports_match(
        lambda xs: jax.lax.map(_RUN_TIME_LOOPS[inner], xs),
        [("B", "T")],
        sizes=_RUN_TIME_SIZES[runtime],
        target=runtime,
        runtime=runtime,
    )


@TRACT
@pytest.mark.slow  # (~11 s)
def test_gamma_draws_run_on_tract_with_loop_bound() -> None:
    # jax.random.gamma: a lax.map over the elements, each a rejection loop around a loop
    # drawing normals (both data-dependent: bounded)
    def draws(key_data: jax.Array, alpha: jax.Array) -> jax.Array:
        return jax.random.gamma(jax.random.wrap_key_data(key_data), alpha)

    key_data = np.asarray(jax.random.key_data(jax.random.key(3)))
    alpha = np.array([0.3, 1.0, 2.5, 9.0, 40.0], np.float32)
    (out,) = run_model(
        _export(draws, [((2,), np.uint32), (5,)], "tract", 8), [key_data, alpha], "tract"
    )
    np.testing.assert_allclose(out, np.asarray(draws(key_data, alpha)), rtol=1e-5)
