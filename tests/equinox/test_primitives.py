"""What Equinox's internals put in a jaxpr exports exactly: its own primitives (through their
implementations), error checks (NaN where JAX raises), its loops, and diffrax solves."""

from __future__ import annotations

import importlib.util
from typing import Any

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import ConversionError, to_onnx
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.verify import run_onnx
from jax2onnx_nn.equinox.primitives import error_fill
from jax2onnx_nn.testing import assert_exports_match
from tests.equinox.helpers import all_ops, node_ops


def _checked(x: Any) -> Any:
    return eqx.error_if(x * 2, x < -100, "too small") + 1


def test_error_if_passes_values_through() -> None:
    assert_exports_match(_checked, [(3,)])


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_error_if_gives_nan_where_jax_raises(dtype: str) -> None:
    def fn(x: Any) -> Any:
        return eqx.error_if(x, jnp.any(x == x), "always")  # raises for every input

    model = to_onnx(fn, [((4,), dtype)])
    value = np.ones(4, dtype=dtype)
    with pytest.raises(eqx.EquinoxRuntimeError):
        fn(value)
    np.testing.assert_array_equal(
        run_onnx(model, [value])[0], np.broadcast_to(error_fill(np.dtype(dtype)), (4,))
    )


def test_error_if_under_vmap_fires_for_the_batch() -> None:
    def fn(xs: Any) -> Any:
        return jax.vmap(lambda x: eqx.error_if(x, x > 5, "too big"))(xs)

    model = to_onnx(fn, [("B",)])
    np.testing.assert_array_equal(
        run_onnx(model, [np.array([1.0, 2.0], np.float32)])[0], [1.0, 2.0]
    )
    assert np.isnan(run_onnx(model, [np.array([1.0, 9.0], np.float32)])[0]).all()


def _host_sine(x: Any) -> Any:
    return jax.pure_callback(
        np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x
    )  # the line the error names


def test_other_python_callbacks_are_refused_naming_the_line_and_what_to_do() -> None:
    """The rule serves eqx.error_if only: a user's callback is a ConversionError naming the
    user's line, the function it calls, and the two ways out; the support table says so."""
    from jax2onnx_nn.testing.support import support_rows

    with pytest.raises(ConversionError) as info:
        to_onnx(_host_sine, [(3,)])
    text = str(info.value)
    assert (
        f"pure_callback (used 1x) at {__file__}:{_host_sine.__code__.co_firstlineno + 1}" in text
    ), text
    assert (
        "(calls numpy.sin)" in text
        and "jax.numpy" in text
        and '@jax2onnx_nn.lowering("pure_callback")' in text
    )
    (row,) = [r for r in support_rows() if r.primitive == "pure_callback"]
    assert (
        "only Equinox's eqx.error_if check" in row.onnx_ops
        and "any other callback is refused" in row.onnx_ops
    )


def test_a_lowering_given_for_a_callback_exports_it() -> None:
    """What the refusal advises: a lowering that writes the callback as ONNX ops."""

    def sine(ctx: Any, x: Any, **params: Any) -> Any:
        return ctx.op.Sin(x)

    assert_exports_match(_host_sine, [(5,)], lowerings={"pure_callback": sine})


MARKERS = {
    "nondifferentiable": lambda x: eqxi.nondifferentiable(x) * 2,
    "nondifferentiable_backward": lambda x: eqxi.nondifferentiable_backward(x) * 2,
    "nonbatchable": lambda x: eqxi.nonbatchable(x) * 2,
    "unvmap_any": lambda xs: jax.vmap(lambda v: jnp.where(eqxi.unvmap_any(v > 1), v, -v))(xs),
    "unvmap_all": lambda xs: jax.vmap(lambda v: jnp.where(eqxi.unvmap_all(v > -1), v, -v))(xs),
    "unvmap_max": lambda xs: jax.vmap(lambda v: v + eqxi.unvmap_max(jnp.int32(jnp.sum(v) > 0)))(xs),
    "filter_jit": lambda x: eqx.filter_jit(lambda a: jnp.sin(a) * 2)(x),
    "filter_checkpoint": lambda x: eqx.filter_checkpoint(lambda a: jnp.sin(a))(x),
    "filter_vmap": lambda xs: eqx.filter_vmap(lambda a: jnp.sum(a) * a)(xs),
    "noinline": lambda x: eqxi.noinline(lambda a: a * 3 + 1)(x),
    "noinline_vmapped": lambda xs: jax.vmap(eqxi.noinline(lambda a: jnp.cos(a)))(xs),
}


@pytest.mark.parametrize("name", sorted(MARKERS))
def test_equinox_primitives(name: str) -> None:
    assert_exports_match(MARKERS[name], [(4, 3)])


def _counting_loop(kind: str) -> Any:
    def fn(x: Any) -> Any:
        def body(carry: Any) -> Any:
            i, y = carry
            return i + 1, y * 1.5 + i

        return eqxi.while_loop(lambda c: c[0] < 5, body, (0, x), max_steps=7, kind=kind)[1]

    return fn


@pytest.mark.parametrize("kind", ["lax", "checkpointed", "bounded"])
@pytest.mark.parametrize("batch", [False, True])
def test_while_loops(kind: str, batch: bool) -> None:
    fn = _counting_loop(kind)
    model = assert_exports_match(
        jax.vmap(fn) if batch else fn,
        [("B", 3) if batch else (3,)],
        sizes={"B": [1, 4]} if batch else None,
    )
    # "bounded" is a scan of max_steps steps without xs: a Scan (a Loop before e61f92f); its
    # step's cond is an If, or a select that JAX 0.12 writes for it
    assert {"Loop", "Scan", "If"} & set(node_ops(model))


def test_while_loop_with_buffers() -> None:
    def fn(x: Any) -> Any:
        x = jnp.asarray(x)

        def body(carry: Any) -> Any:
            i, buf = carry
            return i + 1, buf.at[i].set(x[i] * 2)

        return eqxi.while_loop(
            lambda c: c[0] < 3,
            body,
            (0, jnp.zeros(3)),
            max_steps=3,
            buffers=lambda c: c[1],
            kind="checkpointed",
        )[1]

    assert_exports_match(fn, [(3,)])
    assert_exports_match(jax.vmap(fn), [("B", 3)], sizes={"B": [1, 3]})


@pytest.mark.parametrize("kind", ["lax", "checkpointed"])
def test_checkpointed_scan(kind: str) -> None:
    def fn(xs: Any) -> Any:
        return eqxi.scan(lambda c, a: (c + a, c * a), jnp.zeros(()), xs, kind=kind)

    assert_exports_match(fn, [(5,)])


# -- nextafter --------------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.75, 2.0, np.inf, -np.inf, np.nan]


def _specials(dtype: Any) -> np.ndarray:
    info = np.finfo(dtype)
    extra = [
        info.smallest_subnormal,
        info.smallest_normal,
        2 * info.smallest_normal,
        1.5 * info.smallest_normal,
        info.max,
        2.0 ** (info.minexp + 20),
    ]
    return np.array(SPECIAL + extra + [-v for v in extra], dtype=dtype)


def _same_floats(actual: np.ndarray, expected: np.ndarray) -> None:
    same = (actual == expected) & (np.signbit(actual) == np.signbit(expected)) | (
        np.isnan(actual) & np.isnan(expected)
    )
    assert same.all(), list(zip(actual[~same][:5], expected[~same][:5], strict=True))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nextafter_special_values(dtype: Any) -> None:
    values = _specials(dtype)
    x, y = np.repeat(values, len(values)), np.tile(values, len(values))
    with x64(dtype == np.float64):
        model = to_onnx(
            jnp.nextafter,
            [(x.shape, dtype), (y.shape, dtype)],
            enable_double_precision=dtype == np.float64,
        )
    with np.errstate(over="ignore"):
        _same_floats(run_onnx(model, [x, y])[0], np.nextafter(x, y))


@settings(max_examples=5)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_nextafter_random_values(data: st.DataObject, dtype: Any) -> None:
    floats = hnp.arrays(
        dtype, (64,), elements=st.floats(allow_nan=True, width=32 if dtype == np.float32 else 64)
    )
    x, y = data.draw(floats), data.draw(floats)
    with x64(dtype == np.float64):
        model = to_onnx(
            jnp.nextafter,
            [(x.shape, dtype), (y.shape, dtype)],
            enable_double_precision=dtype == np.float64,
        )
    with np.errstate(over="ignore"):
        _same_floats(run_onnx(model, [x, y])[0], np.nextafter(x, y))


def test_eqxi_nextafter_is_one_function() -> None:
    def fn(t: Any) -> Any:
        for _ in range(5):
            t = eqxi.prevbefore(t)
        return eqxi.nextafter(t)

    model = assert_exports_match(fn, [(3,)])
    assert node_ops(model) == ["prevbefore"] * 5 + ["nextafter"]
    assert sorted(f.name for f in model.functions) == ["nextafter", "prevbefore"]


# -- diffrax ------------------------------------------------------------------------------------

needs_diffrax = pytest.mark.skipif(
    importlib.util.find_spec("diffrax") is None, reason="diffrax is not installed"
)


@needs_diffrax
def test_diffrax_adaptive_solve() -> None:
    import diffrax

    def solve(y0: Any) -> Any:
        term = diffrax.ODETerm(lambda t, y, args: -y + jnp.sin(t))
        controller = diffrax.PIDController(rtol=1e-6, atol=1e-8)
        solution = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), 0.0, 1.0, 0.1, y0, stepsize_controller=controller
        )
        return solution.ys

    model = assert_exports_match(solve, [(3,)], enable_double_precision=True)
    assert "Loop" in all_ops(model)


@needs_diffrax
@pytest.mark.slow
def test_diffrax_saveat_ts_and_dopri5() -> None:
    import diffrax

    def solve(y0: Any) -> Any:
        term = diffrax.ODETerm(lambda t, y, args: jnp.stack([y[1], -y[0]]))
        controller = diffrax.PIDController(rtol=1e-7, atol=1e-9)
        saveat = diffrax.SaveAt(ts=jnp.linspace(0, 2, 5))
        return diffrax.diffeqsolve(
            term, diffrax.Dopri5(), 0.0, 2.0, 0.1, y0, stepsize_controller=controller, saveat=saveat
        ).ys

    assert_exports_match(solve, [(2,)], enable_double_precision=True)
