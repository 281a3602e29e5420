"""Target profiles: the graph written for each runtime runs there and computes JAX's numbers."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jax2onnx_nn import TARGETS, ConversionError, inline_functions, onnx_function, to_onnx, verify
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.runtimes import RUNTIMES, missing_reason
from jax2onnx_nn.core.targets import get_target
from jax2onnx_nn.testing import assert_exports_match, op_types


def runtime_params(fast: tuple[str, ...] = RUNTIMES) -> list:
    """Every runtime, skipped where not installed; those not in ``fast`` only with --run-slow."""
    return [
        pytest.param(
            r,
            marks=[
                pytest.mark.skipif(missing_reason(r) is not None, reason=str(missing_reason(r))),
                *([] if r in fast else [pytest.mark.slow]),
            ],
        )
        for r in RUNTIMES
    ]


KEY = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)


@pytest.mark.parametrize("runtime", runtime_params())
@pytest.mark.parametrize("sampler", ["bits", "uniform", "normal"])
def test_random_samplers_match_jax_on_every_runtime(runtime: str, sampler: str) -> None:
    # OpenVINO computes uint32 arithmetic through float (its profile rewrites it as int32);
    # onnxruntime-web has no uint32 Where kernel (its profile widens)
    draw = {"bits": jax.random.bits, "uniform": jax.random.uniform, "normal": jax.random.normal}[
        sampler
    ]
    assert_exports_match(lambda key: draw(key, (64,)), [KEY], target=runtime, runtime=runtime)


def _draws_of_symbolic_shape(key_data: jax.Array, x: jax.Array) -> tuple[jax.Array, ...]:
    key = jax.random.wrap_key_data(key_data)
    keys = jax.random.split(key, (4, x.shape[0]))
    return (
        jax.random.key_data(keys),
        jax.random.bits(key, x.shape),
        jax.random.normal(key, (3, *x.shape)),
    )


@pytest.mark.parametrize("runtime", runtime_params(fast=("tract",)))
def test_random_draws_of_a_symbolic_shape_match_jax_on_every_runtime(runtime: str) -> None:
    # the counters of a symbolic shape were a Range over the product of its dims, reshaped:
    # tract 0.23 could not relate that Range's length to the dims ("Reshape ... invalid",
    # "Div ... expected 64*B got range" in the gamma_sampling example)
    assert_exports_match(
        _draws_of_symbolic_shape,
        [((2,), np.uint32), ("B", 2)],
        sizes={"B": [0, 1, 5]},
        target=runtime,
        runtime=runtime,
    )


@pytest.mark.parametrize(
    "runtime", [r for r in runtime_params() if r.values[0] in ("tract", "openvino")]
)
def test_bounded_gamma_draws_of_a_symbolic_shape_run_on_tract_and_openvino(runtime: str) -> None:
    # tract runs the rejection sampler only as the bounded loop (a Scan) loop_bound writes
    # (the other runtimes run its Loop: test_gamma_draws_match_jax_on_every_runtime). OpenVINO
    # refused it ("TensorIterator with dynamic rank"): a uint32 BitShift by an amount left
    # unfolded in the loops became rank 1 there (its frontend's own constant 2 is [1]), so the
    # loop states it feeds lost their rank; its profile writes such shifts on tables
    key_data = np.asarray(jax.random.key_data(jax.random.key(3)))
    alpha = np.array([0.3, 1.0, 2.5, 9.0, 40.0], np.float32)
    assert_exports_match(
        lambda k, a: jax.random.gamma(jax.random.wrap_key_data(k), a, shape=(2, *a.shape)),
        [((2,), np.uint32), ("B",)],
        input_values=[key_data, alpha],
        target=runtime,
        runtime=runtime,
        loop_bound=16,
    )


@pytest.mark.parametrize("runtime", runtime_params())
def test_scalar_inputs_keep_their_shape_on_every_runtime(runtime: str) -> None:
    # (numpy's ascontiguousarray makes a 0-d array 1-d: tract then refuses the input)
    assert_exports_match(
        lambda s, x: (x * s, s + 1), [((), np.float32), (3,)], target=runtime, runtime=runtime
    )


@pytest.mark.parametrize("runtime", runtime_params())
@given(
    x=hnp.arrays(
        np.float32, 6, elements=st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -1.5, 2.0, 3.25])
    )
)
def test_max_min_clip_propagate_nan_on_every_runtime(runtime: str, x: np.ndarray) -> None:
    y = x[::-1].copy()

    def f(a, b):
        return jnp.maximum(a, b), jnp.minimum(a, b), jnp.clip(a, -1.0, 1.0)

    assert_exports_match(f, [(6,), (6,)], input_values=[x, y], target=runtime, runtime=runtime)


_EXTREMES = [np.inf, -np.inf, np.nan, 3.4028235e38, -3.4028235e38, 0.0, -1.5, 2.0]


@pytest.mark.parametrize(
    "runtime", runtime_params(fast=("openvino", "tract"))
)  # (the others: --run-slow)
@given(
    x=hnp.arrays(np.float32, (3, 4), elements=st.sampled_from(_EXTREMES)), keepdims=st.booleans()
)
@example(
    x=np.array(
        [[-np.inf] * 4, [np.inf] * 4, [-3.4028235e38, -np.inf, -np.inf, -np.inf]], np.float32
    ),
    keepdims=False,
)
def test_max_min_reductions_of_infinities_on_every_runtime(
    runtime: str, x: np.ndarray, keepdims: bool
) -> None:
    # OpenVINO and tract start a float ReduceMax at the lowest finite float (a row of -inf gave
    # -3.4028235e38): their profiles make it the infinity where no element is that float
    def f(v: jax.Array) -> tuple[jax.Array, ...]:
        return (
            jnp.max(v, axis=1, keepdims=keepdims),
            jnp.min(v, axis=0, keepdims=keepdims),
            jnp.max(v),
            jnp.min(v, axis=(0, 1)),
            jnp.max(v[:, :0], axis=1, initial=-jnp.inf),
        )

    assert_exports_match(f, [(3, 4)], input_values=[x], target=runtime, runtime=runtime)


_INT32_EDGES = [
    2**31 - 1,
    -(2**31),
    -(2**31) + 1,
    2**24 + 1,
    2**24,
    -(2**24) - 1,
    65536,
    65535,
    -1,
    0,
    7,
]


@pytest.mark.parametrize(
    "runtime", runtime_params(fast=("openvino", "tract"))
)  # (the others: --run-slow)
@given(
    x=hnp.arrays(
        np.int32,
        (3, 4),
        elements=st.one_of(st.sampled_from(_INT32_EDGES), st.integers(-(2**31), 2**31 - 1)),
    ),
    keepdims=st.booleans(),
    opset=st.sampled_from([13, 18, 21]),
    unsigned=st.booleans(),
)
@example(
    x=np.array(
        [[2**31 - 1, 5, 0, 1], [2**24 + 1, 2**24, 0, -1], [-(2**31) + 1, -5, -7, -(2**31)]],
        np.int32,
    ),
    keepdims=False,
    opset=21,
    unsigned=True,
)
@example(
    x=np.array(
        [[2**31 - 1, 5, 0, 1], [2**24 + 1, 2**24, 0, -1], [-(2**31) + 1, -5, -7, -(2**31)]],
        np.int32,
    ),
    keepdims=True,
    opset=13,
    unsigned=False,
)
@example(
    x=np.array(
        [[2**31 - 1, 5, 0, 1], [2**24 + 1, 2**24, 0, -1], [-(2**31) + 1, -5, -7, -(2**31)]],
        np.int32,
    ),
    keepdims=False,
    opset=13,
    unsigned=True,
)
def test_int32_max_min_reductions_are_exact_on_every_runtime(
    runtime: str, x: np.ndarray, keepdims: bool, opset: int, unsigned: bool
) -> None:
    # OpenVINO computes int32 ReduceMax/Min through float32 (max of [2**31 - 1, 5]: -2**31) and
    # uint32 ones widened to its 32-bit int64; tract has no uint32 ones, and below opset 15 the
    # Cast widening uint32 to int64 gave its symbolic-dim type (a max along an axis came out
    # 4294967295 for 2147483647): their profiles reduce the 16-bit halves of the bits (of int32,
    # with the sign bit flipped), clipped so that an empty reduction gives the type's identity
    def f(v: jax.Array) -> tuple[jax.Array, ...]:
        return (
            jnp.max(v, axis=1, keepdims=keepdims),
            jnp.min(v, axis=0, keepdims=keepdims),
            jnp.max(v),
            jnp.min(v, axis=(0, 1)),
            jax.lax.reduce_max(v[:, :0], axes=(1,)),
            jax.lax.reduce_min(v[:0], axes=(0,)),
            jnp.max(v[:, :0], axis=1, initial=v.dtype.type(5)),
        )

    dtype = np.uint32 if unsigned else np.int32
    assert_exports_match(
        f,
        [((3, 4), dtype)],
        input_values=[x.view(dtype)],
        opset=opset,
        target=runtime,
        runtime=runtime,
    )


_INT_DTYPES = (np.int32, np.uint32, np.int16, np.uint16)


@pytest.mark.parametrize("runtime", runtime_params(fast=("openvino",)))  # (the others: --run-slow)
@given(
    data=st.data(),
    dtype=st.sampled_from(_INT_DTYPES),
    batch=st.integers(0, 3),
    depth=st.integers(1, 5),
    axis=st.sampled_from([None, 0, 1, -1, (0, 1)]),
    keepdims=st.booleans(),
)
@example(data=None, dtype=np.int32, batch=1, depth=3, axis=-1, keepdims=False)
def test_integer_sums_and_matmuls_wrap_on_every_runtime(
    runtime: str, data: Any, dtype: type, batch: int, depth: int, axis: Any, keepdims: bool
) -> None:
    # OpenVINO sums (ReduceSum) and multiplies matrices (MatMul) of integers in float32: the
    # sum of [2147483647, 1, 5] was -2147483648 (JAX wraps: -2147483643); its profile sums by
    # CumSum and multiplies by an elementwise Mul, which wrap. A symbolic batch, of 0 rows too
    info = np.iinfo(dtype)
    elements = st.one_of(
        st.sampled_from([info.max, info.min, info.max // 2 + 1, 1, 0]),
        st.integers(int(info.min), int(info.max)),
    )
    if data is None:  # the measured case
        x, w = np.array([[2147483647, 1, 5]], dtype), np.array([[1], [5], [16777217]], dtype)
    else:
        x = data.draw(hnp.arrays(dtype, (batch, depth), elements=elements))
        w = data.draw(hnp.arrays(dtype, (depth, 2), elements=elements))

    def f(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        return (
            jnp.sum(a, axis=axis, keepdims=keepdims, dtype=a.dtype),
            jnp.matmul(a, b, preferred_element_type=a.dtype),
            jnp.matmul(b[:, 0], b, preferred_element_type=a.dtype),
            jnp.dot(b[:, 1], b[:, 0], preferred_element_type=a.dtype),
        )

    assert_exports_match(
        f,
        [(("B", w.shape[0]), dtype), (w.shape, dtype)],
        input_values=[x, w],
        target=runtime,
        runtime=runtime,
    )


def _causal_attention(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    t = x.shape[1]
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), x @ jnp.swapaxes(x, 1, 2), -jnp.inf)
    return jax.nn.softmax(scores, axis=-1) @ x, jnp.arange(t, dtype=jnp.int32) * 3 - 1


@pytest.mark.parametrize("runtime", runtime_params())
def test_causal_mask_of_symbolic_length_runs_on_every_runtime(runtime: str) -> None:
    # tract's optimizer follows Range(0, T) symbolically and splits the masked attention into
    # regions bounded by a symbol it never binds ("Undetermined symbol in expression"); its
    # profile computes the same values as a CumSum of ones
    model = assert_exports_match(
        _causal_attention,
        [("B", "T", 4)],
        sizes={"B": [2, 1, 3], "T": [0, 1, 6]},
        target=runtime,
        runtime=runtime,
    )
    assert ("CumSum" in op_types(model)) == (runtime == "tract")


@pytest.mark.parametrize("opset", [23, 25])
@pytest.mark.parametrize("runtime", runtime_params())
def test_dot_product_attention_runs_on_every_runtime(runtime: str, opset: int) -> None:
    # grouped heads, causal and a mask, symbolic batch and length: ONNX Attention on
    # [B, T, N*H] where the target has its kernel (onnxruntime from 25: the decomposition)
    def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True)

    specs = [("B", "T", 4, 8), ("B", "T", 2, 8), ("B", "T", 2, 8), (("B", 1, "T", "T"), "bool")]
    if get_target(runtime).max_opset is not None and opset > get_target(runtime).max_opset:
        pytest.skip(f"{runtime} loads opsets up to {get_target(runtime).max_opset}")
    model = assert_exports_match(
        attend,
        specs,
        sizes={"B": [0, 2], "T": [1, 5]},
        opset=opset,
        target=runtime,
        runtime=runtime,
        rtol=1e-5,
        atol=1e-6,
    )
    attention = "Attention" in op_types(model, nested=True)
    assert attention == get_target(runtime).has_kernel("Attention", opset)


def _spectra(x: jax.Array) -> tuple[jax.Array, ...]:
    return (
        jnp.fft.fft2(x),
        jnp.fft.ifft2(x).real,
        jnp.fft.fft(x, axis=0).imag,
        jnp.fft.rfft(x, axis=0),
        jnp.fft.rfft2(x),
    )


@pytest.mark.parametrize("runtime", runtime_params())
def test_ffts_along_every_axis_run_on_every_runtime(runtime: str) -> None:
    # OpenVINO 2026.4 ignores DFT's axis input (it transforms along axis 1) and gives a real
    # input's DFT an extra dim: its profile moves the axis there between two Transposes and
    # reshapes the real DFTs' results
    assert_exports_match(
        _spectra, [("N", "M")], sizes={"N": [1, 8], "M": [6, 5]}, target=runtime, runtime=runtime
    )


@pytest.mark.skipif(missing_reason("openvino") is not None, reason=str(missing_reason("openvino")))
def test_float64_fft_runs_on_openvino_in_float32() -> None:
    # it refuses a float64 DFT, and computes float64 in float32 anyway: the DFT is float32 there
    from jax2onnx_nn.core.runtimes import run_model

    x = np.random.default_rng(0).normal(size=(8, 6))
    model = to_onnx(
        lambda v: jnp.fft.fft2(v).real,
        [(("N", "M"), np.float64)],
        target="openvino",
        enable_double_precision=True,
    )
    (got,) = run_model(model, [x], "openvino")
    np.testing.assert_allclose(got, np.fft.fft2(x.astype(np.float32)).real, rtol=1e-5, atol=1e-5)


_EDGES = [
    2.5,
    -2.5,
    0.5,
    -0.5,
    1.7,
    -1.7,
    2.999,
    -0.999,
    3e9,
    -3e9,
    1e20,
    np.nan,
    np.inf,
    -np.inf,
    2.0**31,
    2.0**32 - 256,
]


def _casts_and_comparisons(x: jax.Array, y: jax.Array) -> tuple[jax.Array, ...]:
    wide = (
        (x.astype(jnp.int64), x.astype(jnp.uint32).astype(jnp.int64) + 1)
        if x.dtype == jnp.float64
        else ()
    )
    return (
        x.astype(jnp.int32),
        x.astype(jnp.uint32),
        x.astype(jnp.uint8),
        x.astype(jnp.int8),
        x > y,
        x >= y,
        x < y,
        x <= y,
        x == y,
        jnp.isnan(x),
        jnp.maximum(x, 0.5),
        *wide,
    )


@pytest.mark.parametrize("runtime", runtime_params())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_casts_and_comparisons_match_jax_on_every_runtime(runtime: str, dtype: type) -> None:
    # JAX truncates toward zero, saturates out-of-range values and makes NaN 0. OpenVINO's
    # Greater / GreaterOrEqual are true for NaN and its float -> uint32 Cast and uint32 Where
    # saturate at 2**31 - 1; tract refuses IsNaN of float64 and casts to int64 into a type its
    # API cannot return (saturating at 2**31): their profiles write these so that the numbers
    # are JAX's
    if runtime == "openvino" and dtype == np.float64:
        pytest.skip(
            "OpenVINO computes float64 in float32 (test_openvino_computes_float64_in_float32)"
        )
    x = np.array(_EDGES, dtype)
    assert_exports_match(
        _casts_and_comparisons,
        [((16,), dtype)] * 2,
        input_values=[x, x[::-1].copy()],
        target=runtime,
        runtime=runtime,
        enable_double_precision=dtype == np.float64,
    )


def _maps_reading_an_input(xs: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    halvings = jax.lax.map(
        lambda a: jax.lax.while_loop(lambda c: c < a, lambda c: c * 2 + y, jnp.float32(1.0)), xs
    )
    return halvings, jax.lax.map(lambda a: a * y + 1.0, xs)


@pytest.mark.parametrize("runtime", runtime_params())
def test_scan_bodies_reading_outer_values_run_on_every_runtime(runtime: str) -> None:
    # OpenVINO's frontend refuses a Scan body that reads a non-constant value of the enclosing
    # graph (jax.random.gamma's lax.map does): its profile passes each through as a state
    if runtime == "tract":
        pytest.skip("the data-dependent while_loop is a Loop, which tract does not run")
    xs = np.array([3.0, 10.0, 100.0, 0.5, 7.0], np.float32)
    assert_exports_match(
        _maps_reading_an_input,
        [(5,), ()],
        input_values=[xs, np.float32(0.25)],
        target=runtime,
        runtime=runtime,
    )


def _nested_op_types(model: onnx.ModelProto) -> list[str]:
    """The op types of the nodes in the bodies of the main graph's Scans."""
    return [
        n.op_type
        for scan in model.graph.node
        if scan.op_type == "Scan"
        for a in scan.attribute
        if a.name == "body"
        for n in a.g.node
    ]


def _gamma_draws(key_data: jax.Array, alpha: jax.Array) -> jax.Array:
    # a lax.map over the elements, each a rejection loop around a loop drawing normals
    return jax.random.gamma(jax.random.wrap_key_data(key_data), alpha)


@pytest.mark.parametrize(
    "runtime", runtime_params(fast=())
)  # (~20 s on OpenVINO; the next test is its fast form)
def test_gamma_draws_match_jax_on_every_runtime(runtime: str) -> None:
    # OpenVINO: the clean-up after the profile's rewrites hoisted a Scan body's invariant work
    # into the main graph (a read of the enclosing graph it refuses: the captures become states
    # after it), and a shift amount left unfolded two loops deep made its BitShift of scalars
    # rank 1 (invariant work now leaves every loop around it and is folded)
    if runtime == "tract":
        pytest.skip("the rejection sampler's while_loop is a Loop, which tract does not run")
    key_data = np.asarray(jax.random.key_data(jax.random.key(3)))
    alpha = np.array([0.3, 1.0, 2.5, 9.0, 40.0], np.float32)
    model = assert_exports_match(
        _gamma_draws,
        [((2,), np.uint32), (5,)],
        input_values=[key_data, alpha],
        target=runtime,
        runtime=runtime,
    )
    assert "Loop" in _nested_op_types(model)


def _draw_until(key: jax.Array) -> jax.Array:
    def draw(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        key, sub = jax.random.split(state[0])
        return key, jax.random.uniform(sub)

    return jax.lax.while_loop(lambda s: s[1] < 0.8, draw, (key, jnp.float32(0.0)))[1]


@pytest.mark.parametrize("runtime", runtime_params(fast=("openvino",)))
def test_draws_in_a_while_loop_in_a_map_match_jax_on_every_runtime(runtime: str) -> None:
    # both OpenVINO failures of the gamma sampler above: captures hoisted after the rewrites
    # (a conversion failure) and a BitShift amount left unfolded two loops deep (NaN)
    if runtime == "tract":
        pytest.skip("the data-dependent while_loop is a Loop, which tract does not run")
    key_data = np.asarray(jax.random.key_data(jax.random.key(0)))
    model = assert_exports_match(
        lambda k: jax.lax.map(_draw_until, jax.random.split(jax.random.wrap_key_data(k), 6)),
        [((2,), np.uint32)],
        input_values=[key_data],
        target=runtime,
        runtime=runtime,
    )
    assert "Loop" in _nested_op_types(model)


@pytest.mark.parametrize("runtime", runtime_params(fast=("onnxruntime", "openvino")))
@given(
    steps=st.integers(1, 3),
    length=st.integers(1, 4),
    reverse=st.tuples(st.booleans(), st.booleans()),
    seed=st.integers(0, 100),
)
def test_scans_in_scans_run_on_every_runtime(
    runtime: str, steps: int, length: int, reverse: tuple[bool, bool], seed: int
) -> None:
    # OpenVINO refuses a Scan in a Scan body ("No nested TensorIterator"): its profile writes
    # the inner one as a Loop (reversed inputs and stacked outputs read and put back in order)
    def f(c: jax.Array, xs: jax.Array, ws: jax.Array) -> tuple[jax.Array, jax.Array]:
        def row(c: jax.Array, xw: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            x, w = xw
            return jax.lax.scan(lambda d, a: (d * 0.5 + a * w, d - a), c, x, reverse=reverse[1])

        return jax.lax.scan(row, c, (xs, ws), reverse=reverse[0])

    rng = np.random.default_rng(seed)
    values = [
        rng.standard_normal(2).astype(np.float32),
        rng.standard_normal((steps, length, 2)).astype(np.float32),
        rng.standard_normal(steps).astype(np.float32),
    ]
    model = assert_exports_match(
        f,
        [(2,), (steps, length, 2), (steps,)],
        input_values=values,
        target=runtime,
        runtime=runtime,
    )
    assert "Scan" in op_types(model) and (
        "Loop" if runtime == "openvino" else "Scan"
    ) in _nested_op_types(model)


_U32 = st.integers(0, 2**32 - 1)


_DIVISORS = (10, 2**15, 2**15 + 1, 2**31 + 7)  # the ways of computing a remainder on OpenVINO


def _uint32_pairs() -> st.SearchStrategy:
    # near values (equal high halves) and the extremes, where float32 arithmetic goes wrong
    edges = st.sampled_from([0, 1, 2**15, 2**16 - 1, 2**24 + 1, 2**31 - 1, 2**31, 2**32 - 1])
    values = st.lists(st.one_of(_U32, edges), min_size=6, max_size=6)
    return st.tuples(values, values, st.lists(st.integers(-2, 2), min_size=6, max_size=6)).map(
        lambda t: (
            t[0],
            [*t[1][:3], *((a + d) % 2**32 for a, d in zip(t[0][3:], t[2][3:], strict=True))],
        )
    )


@pytest.mark.parametrize("runtime", runtime_params())
@given(pair=_uint32_pairs(), shift=st.integers(0, 31))
def test_uint32_arithmetic_is_exact_on_every_runtime(
    runtime: str, pair: tuple[list[int], list[int]], shift: int
) -> None:
    # OpenVINO computes uint32 (and int32 comparisons, Mod, shifts) through float32: its
    # profile computes them on 16-bit halves
    def f(x, y):
        return (
            x + y,
            x * y,
            x - y,
            x ^ y,
            x << shift,
            x >> shift,
            x < y,
            x <= y,
            x > y,
            x >= y,
            x == y,
            jnp.maximum(x, y),
            jnp.minimum(x, y),
            jax.lax.shift_right_logical(x, jnp.uint32(32 - shift)),
            jax.lax.rem(x, jnp.maximum(y, jnp.uint32(1))),
            *(x % jnp.uint32(d) for d in _DIVISORS),
        )

    values = [np.array(v, np.uint32) for v in pair]
    assert_exports_match(
        f,
        [((6,), "uint32"), ((6,), "uint32")],
        input_values=values,
        target=runtime,
        runtime=runtime,
    )


@pytest.mark.parametrize("runtime", runtime_params(fast=("openvino",)))  # (the others: --run-slow)
@given(
    x=hnp.arrays(
        np.uint32, 6, elements=st.one_of(_U32, st.sampled_from([0, 1, 2**16 - 1, 2**31, 2**32 - 1]))
    ),
    s=hnp.arrays(
        np.uint32, 6, elements=st.one_of(st.integers(0, 40), st.sampled_from([2**31, 2**32 - 1]))
    ),
)
@example(
    x=np.array([4294967295, 2**31 + 12345, 16777217, 7, 2**32 - 2, 123456789], np.uint32),
    s=np.array([0, 1, 3, 31, 16, 33], np.uint32),
)
def test_uint32_shifts_by_run_time_amounts_are_exact_on_every_runtime(
    runtime: str, x: np.ndarray, s: np.ndarray
) -> None:
    # OpenVINO shifts uint32 through float32 (2**31 + 12345 >> 1 gave 3221231616, JAX 1073747996;
    # 4294967294 >> 16 gave 0): its profile shifts the 16-bit halves by factors from tables
    def f(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        return (
            jax.lax.shift_right_logical(a, b),
            jax.lax.shift_left(a, b),
            jax.lax.shift_right_logical(a, b[0]),
            jax.lax.shift_left(a[0], b),
        )

    assert_exports_match(
        f,
        [((6,), "uint32"), ((6,), "uint32")],
        input_values=[x, s],
        target=runtime,
        runtime=runtime,
    )


@pytest.mark.parametrize("runtime", runtime_params())
@given(pair=_uint32_pairs())
def test_uint32_bitwise_ops_below_opset_18_are_exact_on_every_runtime(
    runtime: str, pair: tuple[list[int], list[int]]
) -> None:
    # their decomposition reads bits with BitShift and Mod, sums them with CumSum (uint32 on
    # tract and OpenVINO, whose int64 is not what onnxruntime's widening needs)
    values = [np.array(v, np.uint32) for v in pair]
    assert_exports_match(
        lambda x, y: (x ^ y, x & y, x | y, ~x),
        [((6,), "uint32"), ((6,), "uint32")],
        input_values=values,
        opset=13,
        target=runtime,
        runtime=runtime,
    )


_NARROW = (np.int8, np.uint8, np.int16, np.uint16)


@st.composite
def _narrow_values(draw: st.DrawFn) -> tuple[type, np.ndarray, np.ndarray, np.ndarray]:
    """A narrow int type and two arrays of it (the extremes, 0, 1, -1 likely), and int32 values
    around and beyond its range."""
    dtype = draw(st.sampled_from(_NARROW))
    info = np.iinfo(dtype)
    edges = st.sampled_from(
        sorted(
            {
                int(info.min),
                int(info.min) + 1,
                0,
                1,
                int(info.max) // 2 + 1,
                int(info.max) - 1,
                int(info.max),
                *((-1,) if info.min < 0 else ()),
            }
        )
    )
    values = st.lists(
        st.one_of(st.integers(int(info.min), int(info.max)), edges), min_size=8, max_size=8
    )
    wide = st.lists(
        st.one_of(
            st.integers(-(2**31), 2**31 - 1),
            st.sampled_from([2**31 - 1, -(2**31), 128, -129, 256, 65535, 65536, -32769]),
        ),
        min_size=8,
        max_size=8,
    )
    return (
        dtype,
        np.array(draw(values), dtype),
        np.array(draw(values), dtype),
        np.array(draw(wide), np.int32),
    )


@pytest.mark.parametrize(
    "runtime", runtime_params(fast=("openvino", "tract"))
)  # (the others: --run-slow)
@given(case=_narrow_values())
@example(
    case=(
        np.int8,
        np.array([100, -128, -128, 127, 7, -7, 64, 0], np.int8),
        np.array([100, -1, -128, 127, 2, 2, -2, 1], np.int8),
        np.array([300, -129, 2**31 - 1, -(2**31), 128, 255, 256, -1], np.int32),
    )
)
def test_narrow_int_arithmetic_wraps_on_every_runtime(
    runtime: str, case: tuple[type, np.ndarray, np.ndarray, np.ndarray]
) -> None:
    # OpenVINO saturates an overflowing int8 / uint8 sum, difference, product, negation and
    # absolute value (100 * 100: 127 where JAX wraps to 16) and rounds their quotient (7 // 2: 4):
    # its profile computes those in int32, and the Cast back wraps as JAX does
    dtype, a, b, wide = case

    def f(x: jax.Array, y: jax.Array, w: jax.Array) -> tuple[jax.Array, ...]:
        divisor = jnp.where(y == 0, jnp.ones_like(y), y)
        return (
            x + y,
            x - y,
            x * y,
            -x,
            jnp.abs(x),
            x * x * x,
            jax.lax.div(x, divisor),
            jax.lax.rem(x, divisor),
            jnp.cumsum(x, dtype=x.dtype),
            jnp.sum(x, dtype=x.dtype),
            jnp.prod(x, dtype=x.dtype),
            w.astype(x.dtype),
        )

    assert_exports_match(
        f,
        [((8,), dtype), ((8,), dtype), ((8,), np.int32)],
        input_values=[a, b, wide],
        target=runtime,
        runtime=runtime,
    )


@pytest.mark.parametrize(
    "runtime", runtime_params(fast=("openvino", "tract"))
)  # (the others: --run-slow)
@given(dtype=st.sampled_from([*_NARROW, np.int32, np.uint32]), data=st.data())
def test_integer_squares_wrap_on_every_runtime(
    runtime: str, dtype: type, data: st.DataObject
) -> None:
    # tract makes Mul(x, x) a Square, which saturates int8/uint8/int32 and has no int16, uint16
    # or uint32 kernel: its profile multiplies x by Max(x, x)
    info = np.iinfo(dtype)
    edges = st.sampled_from(
        [
            int(info.min),
            int(info.max),
            int(info.max) // 2 + 1,
            0,
            1,
            100,
            70000 % (int(info.max) + 1),
        ]
    )
    x = np.array(
        data.draw(
            st.lists(
                st.one_of(st.integers(int(info.min), int(info.max)), edges), min_size=6, max_size=6
            )
        ),
        dtype,
    )
    assert_exports_match(
        lambda v: (v * v, v * v * v, v**2),
        [((6,), dtype)],
        input_values=[x],
        target=runtime,
        runtime=runtime,
    )


def _seeded(seed: jax.Array) -> tuple[jax.Array, ...]:
    key = jax.random.key(seed)
    k1, k2 = jax.random.split(key)
    return (
        jax.random.bits(k1, (8,)),
        jax.random.randint(k2, (8,), -5, 10**6),
        jax.random.uniform(key, (8,)),
    )


def _seed_cases() -> list:
    # on OpenVINO the graph is ~7x larger (uint32 ops on 16-bit halves) and takes ~20 s: slow
    # there (its ops are checked one by one above by default)
    cases = []
    for p in runtime_params():
        for opset, seed in ((21, 2**32 - 1), (21, 0), (13, 7)):
            slow = (opset, seed) != (21, 2**32 - 1) or p.values[0] == "openvino"
            cases.append(
                pytest.param(
                    p.values[0],
                    opset,
                    seed,
                    marks=[*p.marks, *([pytest.mark.slow] if slow else [])],
                )
            )
    return cases


@pytest.mark.parametrize(("runtime", "opset", "seed"), _seed_cases())
def test_random_from_a_seed_input_matches_jax_on_every_runtime(
    runtime: str, opset: int, seed: int
) -> None:
    # bits and randint exactly, uniform to float32 rounding (the graph computes its bits in
    # uint32: split, then threefry, then the remainder randint takes)
    assert_exports_match(
        _seeded,
        [((), np.uint32)],
        input_values=[np.uint32(seed)],
        opset=opset,
        target=runtime,
        runtime=runtime,
    )


@pytest.mark.parametrize("runtime", runtime_params())
@given(
    index=st.lists(st.integers(-9, 9), min_size=5, max_size=5),
    u=hnp.arrays(np.float32, 5, elements=st.floats(-4, 4, width=32)),
)
def test_scatter_drops_out_of_bounds_updates_on_every_runtime(
    runtime: str, index: list[int], u: np.ndarray
) -> None:
    # the dropped updates leave through Compress, which tract does not translate (its profile
    # gathers the rows NonZero finds)
    x = np.arange(6, dtype=np.float32)

    def f(x, i, u):
        return x.at[i].add(u), x.at[i].set(u), x.at[i].max(u)

    model = assert_exports_match(
        f,
        [(6,), ((5,), np.int32), (5,)],
        input_values=[x, np.array(index, np.int32), u],
        target=runtime,
        runtime=runtime,
    )
    assert ("Compress" in op_types(model)) == (runtime != "tract")


def _scatter_reductions(
    x: jax.Array, i: jax.Array, u: jax.Array, rows: jax.Array
) -> tuple[jax.Array, ...]:
    return (
        x.at[i, 1].add(u),
        x.at[i, 2].mul(u),
        x.at[i, 0].max(u),
        x.at[i, 1].min(u),
        x.at[i].add(rows),
        x.at[i].max(rows),
        x.at[:, 1].add(u[:4]),
    )


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@given(
    index=st.lists(st.integers(-6, 6), min_size=5, max_size=5),
    opset=st.sampled_from([13, 16, 17]),
    dtype=st.sampled_from([np.float32, np.int32]),
    data=st.data(),
)
@example(
    index=[9, -9, 5, 7, -6], opset=13, dtype=np.float32, data=None
)  # every update out of bounds: none applied
@settings(max_examples=3)  # (each ~1.5 s)
def test_scatter_reductions_below_their_opset_run_on_tract(
    index: list[int], opset: int, dtype: type, data: Any
) -> None:
    # below their opset they are a Loop over the update rows, which tract lacks: its profile
    # writes them without a loop (a one-hot of the rows' cells, reduced over the rows)
    special = (
        [np.inf, -np.inf, -0.0, 0.0, 1.5]
        if dtype == np.float32
        else [2**31 - 1, -(2**31), 0, -1, 3]
    )
    draw = (
        (lambda n: np.array([(special + list(range(-4, 5)))[k % 14] for k in range(n)], dtype))
        if data is None
        else (
            lambda n: np.array(
                data.draw(
                    st.lists(st.sampled_from(special + list(range(-4, 5))), min_size=n, max_size=n)
                ),
                dtype,
            )
        )
    )
    x = draw(12).reshape(4, 3)
    values = [x, np.array(index, np.int32), draw(5), draw(15).reshape(5, 3)]
    specs = [((4, 3), dtype), ((5,), np.int32), ((5,), dtype), ((5, 3), dtype)]
    model = assert_exports_match(
        _scatter_reductions,
        specs,
        input_values=values,
        opset=opset,
        target="tract",
        runtime="tract",
    )
    assert "Loop" not in _all_op_types(model.graph)
    verify(
        _scatter_reductions, model, values, runtime="onnxruntime"
    ).raise_if_failed()  # (the same graph on onnxruntime)


@onnx_function
def _block(x: jax.Array) -> jax.Array:
    return jnp.tanh(x * 2.0) + 1.0


def _two_blocks(x: jax.Array) -> jax.Array:
    return _block(_block(x))


@pytest.mark.parametrize("runtime", runtime_params())
def test_functions_are_inlined_for_targets_without_them(runtime: str) -> None:
    model = assert_exports_match(
        _two_blocks, [("B", 3)], sizes={"B": [2]}, target=runtime, runtime=runtime
    )
    assert bool(model.functions) == TARGETS[runtime].model_functions


def test_inline_functions_keeps_the_call_name_as_prefix() -> None:
    model = to_onnx(_two_blocks, [(3,)])
    calls = [n.name for n in model.graph.node]
    flat = inline_functions(model)
    assert isinstance(flat, onnx.ModelProto) and not flat.functions and model.functions
    assert {n.name.split("/")[0] for n in flat.graph.node} == {c.split("/")[0] for c in calls}
    assert all(n.name.startswith(tuple(f"{c}/" for c in calls)) for n in flat.graph.node)
    assert "jax2onnx_nn" not in {o.domain for o in flat.opset_import}
    assert_exports_match(_two_blocks, [(3,)], onnx_model=flat)


def test_functions_option_overrides_the_target() -> None:
    assert to_onnx(_two_blocks, [(3,)], target="openvino", functions="keep").functions
    assert not to_onnx(_two_blocks, [(3,)], functions="inline").functions
    with pytest.raises(ValueError, match="'keep' or 'inline'"):
        to_onnx(_two_blocks, [(3,)], functions="flatten")


def _rnn(xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    h, hs = jax.lax.scan(lambda h, x: (jnp.tanh(h * 0.5 + x), h), jnp.zeros(xs.shape[1:]), xs)
    return jax.lax.fori_loop(0, 5, lambda i, c: c * 0.9 + 0.1, h), hs


@pytest.mark.parametrize("runtime", runtime_params())
def test_static_and_symbolic_scans_run_on_every_runtime(runtime: str) -> None:
    model = assert_exports_match(
        _rnn, [("T", 4)], sizes={"T": [1, 6]}, target=runtime, runtime=runtime
    )
    loops = [t for t in op_types(model) if t in ("Scan", "Loop")]
    profile = TARGETS[runtime]
    # symbolic T: Scan where the runtime runs an empty Scan (onnxruntime does not); the static
    # fori_loop: a Scan over ticks where the runtime runs one (OpenVINO does not)
    expected = [
        "Scan" if profile.scan_symbolic else "Loop",
        "Scan" if profile.scan_ticks else "Loop",
    ]
    assert sorted(loops) == sorted(expected)


def _counted_loops(x: jax.Array) -> tuple[jax.Array, ...]:
    ignores = jax.lax.fori_loop(0, 4, lambda i, c: c * 0.9 + 0.1, x)  # the body never reads i
    reads = jax.lax.fori_loop(-2, 3, lambda i, c: c * 0.5 + i * 0.25, x)  # from a negative start
    steps, doubled = jax.lax.while_loop(
        lambda s: s[0] < 7, lambda s: (s[0] + 1, s[1] * 2.0), (jnp.int32(2), x)
    )
    unsigned = jax.lax.fori_loop(
        jnp.uint32(1), jnp.uint32(4), lambda i, c: c * 0.5 + i.astype(c.dtype), x
    )  # (no Range of uint32)
    return ignores, reads, steps, doubled, unsigned


@pytest.mark.parametrize("runtime", runtime_params())
def test_loops_of_static_length_run_on_every_runtime(runtime: str) -> None:
    # tract's declutter drops the counter a body does not read ("No scan input") and folds what
    # a body computes from it alone wrongly: its profile also carries the counter as a state
    model = assert_exports_match(
        _counted_loops, [("N",)], sizes={"N": [0, 1, 5]}, target=runtime, runtime=runtime
    )
    assert "Loop" not in op_types(model) or not TARGETS[runtime].scan_ticks


def _time_field(dtype: type) -> Any:
    """A neural ODE's step: the time broadcast to (B, 1) beside the state, through an
    eqx.nn.Linear (a Gemm), in a fori_loop; and the same outside a loop."""
    import equinox as eqx

    with x64(dtype == np.float64):
        linear = jax.vmap(eqx.nn.Linear(4, 3, dtype=dtype, key=jax.random.key(0)))

    def field(y: jax.Array) -> tuple[jax.Array, jax.Array]:
        def step(i, y):
            t = jnp.broadcast_to((i * 0.25).astype(y.dtype), (y.shape[0], 1))
            return jnp.tanh(linear(jnp.concatenate([t, y], axis=1)))

        return linear(
            jnp.concatenate([jnp.full((y.shape[0], 1), 0.5, y.dtype), y], axis=1)
        ), jax.lax.fori_loop(0, 3, step, y)

    return field


@pytest.mark.parametrize("runtime", runtime_params())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_concat_of_a_broadcast_through_a_linear_runs_on_every_runtime(
    runtime: str, dtype: type
) -> None:
    # tract splits a MatMul of a Concat per part and fails on a part that is an Expand of a
    # lower rank; it translates a float64 Gemm with a float32 beta: its profile writes both
    # another way
    if runtime == "openvino" and dtype == np.float64:
        pytest.skip(
            "OpenVINO computes float64 in float32 (test_openvino_computes_float64_in_float32)"
        )
    model = assert_exports_match(
        _time_field(dtype),
        [(("B", 3), dtype)],
        sizes={"B": [1, 4]},
        target=runtime,
        runtime=runtime,
        enable_double_precision=dtype == np.float64,
    )
    assert ("Gemm" in _all_op_types(model.graph)) == (runtime != "tract" or dtype == np.float32)


def _all_op_types(graph: onnx.GraphProto) -> set[str]:
    """The op types of a graph and of the graphs in its nodes' attributes (Scan bodies)."""
    ops = {n.op_type for n in graph.node}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= _all_op_types(attr.g)
    return ops


@pytest.mark.parametrize("runtime", runtime_params())
def test_symbolic_scan_runs_on_every_runtime(runtime: str) -> None:
    def rnn(xs):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h * 0.5 + x), h), jnp.zeros(xs.shape[1:]), xs)

    # (of 0 steps: OpenVINO refused to run its Scan, "Invalid start, stride, end values", and
    # tract gave zeros as its final state; their profiles run one step or select the initial one)
    model = assert_exports_match(
        rnn, [("T", 4)], sizes={"T": [0, 1, 6]}, target=runtime, runtime=runtime
    )
    assert ("Scan" if TARGETS[runtime].scan_symbolic else "Loop") in op_types(model)


def _count_up(x):
    return jax.lax.while_loop(lambda c: c.sum() < 10.0, lambda c: c + 1.0, x)


def test_while_loop_with_data_dependent_trips_stays_a_loop() -> None:
    f = _count_up
    model = assert_exports_match(f, [(3,)], target="openvino")  # the graph, run by onnxruntime
    assert "Loop" in op_types(model) and "Scan" not in op_types(model)
    # tract has no Loop at all: said before writing, with the line and what to write instead
    with pytest.raises(
        ConversionError,
        match=r"(?s)tract cannot run .*Loop .*test_targets.py:\d+.*condition depends on the data"
        r".*fori_loop or scan",
    ):
        to_onnx(f, [(3,)], target="tract")


@pytest.mark.skipif(missing_reason("openvino") is not None, reason=str(missing_reason("openvino")))
def test_data_dependent_while_loop_runs_on_openvino() -> None:
    assert_exports_match(_count_up, [(3,)], target="openvino", runtime="openvino")


@pytest.mark.skipif(missing_reason("openvino") is not None, reason=str(missing_reason("openvino")))
def test_openvino_computes_float64_in_float32() -> None:
    # what its profile says (float64=False): the CPU plugin has no float64 kernels, so a
    # float64 model matches JAX to float32 precision there, whatever the graph
    from jax2onnx_nn.core.runtimes import run_model

    x = np.array([1 / 3, np.pi, 1 + 2**-30], np.float64)
    model = to_onnx(
        lambda v: v * v, [((3,), np.float64)], target="openvino", enable_double_precision=True
    )
    (got,) = run_model(model, [x], "openvino")
    assert got.dtype == np.float64 and not TARGETS["openvino"].float64
    np.testing.assert_array_equal(got, (x.astype(np.float32) ** 2).astype(np.float64))


@pytest.mark.skipif(missing_reason("openvino") is not None, reason=str(missing_reason("openvino")))
def test_verify_on_openvino_says_it_computes_float64_in_float32() -> None:
    with x64(True):
        f = lambda v: jnp.sin(v) * 1e3 + v / 3  # noqa: E731
        specs = [((5,), np.float64)]
        model = to_onnx(f, specs, target="openvino", enable_double_precision=True)
        report = verify(
            f, model, specs, runtime="openvino", input_values=[np.linspace(0.1, 7.0, 5)]
        )
        loose = verify(
            f,
            model,
            specs,
            runtime="openvino",
            input_values=[np.linspace(0.1, 7.0, 5)],
            rtol=1e-5,
            atol=1e-5,
        )
    assert not report.ok and loose.ok and not loose.note
    assert (
        "openvino computes float64 in float32" in str(report)
        and "within float32's tolerance" in report.note
    ), str(report)
    with pytest.raises(AssertionError, match="openvino computes float64 in float32"):
        report.raise_if_failed()


def test_unknown_target_names_the_choices() -> None:
    with pytest.raises(ValueError, match="onnxruntime, onnxruntime-web, openvino, tract, tensorrt"):
        to_onnx(jnp.sin, [(2,)], target="coreml")


def test_tensorrt_opset_range_is_checked() -> None:
    model = to_onnx(jnp.sin, [(2,)], target="tensorrt")
    assert model.opset_import[0].version == 20
    with pytest.raises(ValueError, match="between 13 and 20 for target tensorrt"):
        to_onnx(jnp.sin, [(2,)], target="tensorrt", opset=21)


def test_op_a_target_cannot_run_is_reported_with_the_source_line() -> None:
    def sample(key):
        return jax.random.bits(key, (4,))  # BitShift / BitwiseXor: not in TensorRT

    with pytest.raises(
        ConversionError, match=r"(?s)tensorrt cannot run .*BitShift .*test_targets.py:\d+"
    ):
        to_onnx(sample, [KEY], target="tensorrt")


def test_a_custom_profile_is_data() -> None:
    custom = dataclasses.replace(TARGETS["onnxruntime"], name="no-loops", scan_symbolic=True)
    assert "Loop" not in op_types(to_onnx(_rnn, [("T", 4)], target=custom))
    assert "Loop" in op_types(to_onnx(_rnn, [("T", 4)]))


def _stacks_what_it_reads(xs: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
    def body(c, x):
        y = jnp.tanh(c[:, :2] * x)  # stacked as the scan's output and read for the next carry
        return c - 0.5 * jnp.concatenate([y, y], axis=1), y

    return jax.lax.scan(body, c, xs)


@pytest.mark.parametrize("runtime", runtime_params())
def test_scan_body_reading_what_it_stacks_runs_on_every_runtime(runtime: str) -> None:
    # tract 0.23 gives such a value the stacked rank inside the body ("Impossible to unify 2
    # with 3"): its profile emits the scan output through an Identity
    assert_exports_match(
        _stacks_what_it_reads,
        [(3,), ("B", 4)],
        sizes={"B": [1, 4]},
        target=runtime,
        runtime=runtime,
    )


def _factor(n: int) -> Any:
    def cholesky(a: jax.Array) -> jax.Array:
        spd = a @ jnp.swapaxes(a, -1, -2) + n * jnp.eye(n, dtype=a.dtype)
        return jnp.linalg.cholesky(spd)

    return cholesky


def _lu_and_logdet(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    lu, pivots, _ = jax.lax.linalg.lu(a)
    return lu, pivots, jnp.linalg.slogdet(a)[1]


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@pytest.mark.parametrize("shape", [(20, 20), ("B", 40, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_cholesky_runs_on_tract(shape: tuple, dtype: type) -> None:
    # above 16 rows the factor is a Scan over blocks whose body stacks the panel it also reads
    # for the trailing update (the gaussian_process example); values checked against JAX
    sizes = {"B": [1, 3]} if "B" in shape else None
    assert_exports_match(
        _factor(shape[-1]),
        [(shape, dtype)],
        sizes=sizes,
        target="tract",
        runtime="tract",
        enable_double_precision=dtype == np.float64,
    )


@pytest.mark.parametrize("runtime", runtime_params())
@given(n=st.integers(0, 5), data=st.data())
def test_dot_of_two_vectors_runs_on_every_runtime(
    runtime: str, n: int, data: st.DataObject
) -> None:
    # tract refuses a MatMul of two 1-D operands: its profile makes the left one a row
    assume(
        n > 0 or runtime != "openvino"
    )  # OpenVINO 2026.4 fails to run a dot of two empty vectors
    x, y = (
        data.draw(hnp.arrays(np.float32, n, elements=st.floats(-4, 4, width=32))) for _ in range(2)
    )
    assert_exports_match(
        lambda a, b: a @ b, [(n,), (n,)], input_values=[x, y], target=runtime, runtime=runtime
    )


@pytest.mark.parametrize("runtime", runtime_params())
@pytest.mark.parametrize("step", [-1, -2, 3])
def test_strided_slice_after_a_reshape_runs_on_every_runtime(runtime: str, step: int) -> None:
    # tract fails to move a Slice of step other than 1 over the Reshape before it (the
    # reversal in the blocked upper triangular solve): its profile writes it as a Gather
    model = assert_exports_match(
        lambda x: (x.reshape(-1, 1)[::step] * 2.0, x[:, ::-1]),
        [(2, 8, 1)],
        target=runtime,
        runtime=runtime,
    )
    assert ("Gather" in op_types(model)) == (runtime == "tract")


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@pytest.mark.parametrize("shape", [(20, 20), ("B", 40, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_lu_runs_on_tract(shape: tuple, dtype: type) -> None:
    # above 16 rows lu is a Scan over blocks whose body computes with the block number; tract
    # refused the counter state when its output was a value nothing in the body read
    sizes = {"B": [1, 3]} if "B" in shape else None
    assert_exports_match(
        _lu_and_logdet,
        [(shape, dtype)],
        sizes=sizes,
        target="tract",
        runtime="tract",
        enable_double_precision=dtype == np.float64,
    )


@pytest.mark.skipif(missing_reason("openvino") is not None, reason=str(missing_reason("openvino")))
@pytest.mark.parametrize("shape", [(20, 20), ("B", 40, 40)])
def test_blocked_cholesky_runs_on_openvino(shape: tuple) -> None:
    # above 16 rows the factor is a Scan over block numbers that its body does not read (it
    # reads its carry only); OpenVINO 2026.4 ran such a Scan once ("Shape inference input
    # shapes {[1,1,16],[2]}", the gaussian_process example): its profile makes the body read
    # them. float32: OpenVINO computes float64 in float32; values checked against JAX
    sizes = {"B": [1, 3]} if "B" in shape else None
    model = assert_exports_match(
        _factor(shape[-1]),
        [(shape, np.float32)],
        sizes=sizes,
        target="openvino",
        runtime="openvino",
    )
    (scan,) = (node for node in model.graph.node if node.op_type == "Scan")
    body = scan.attribute[0].g
    scanned = body.input[len(body.input) - 1].name
    assert any(scanned in node.input for node in body.node)


def _ignores_its_xs(c: jax.Array, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.lax.scan(lambda c, x: (c * 0.5 - 1.0, -c), c, xs)


@pytest.mark.parametrize("runtime", runtime_params())
def test_scan_body_reading_no_scanned_input_runs_on_every_runtime(runtime: str) -> None:
    # the scanned input gives only the trip count; OpenVINO ran such a Scan once, tract drops
    # it and then fails ("No scan input"): both profiles make the body read it
    c = np.array([0.0, -0.0, np.inf, np.nan, 3.0], np.float32)  # -0.0 and NaN pass through exactly
    model = assert_exports_match(
        _ignores_its_xs,
        [(5,), (7, 2)],
        input_values=[c, np.ones((7, 2), np.float32)],
        target=runtime,
        runtime=runtime,
    )
    assert "Scan" in op_types(model)


def _unscanned(length: int, reverse: bool, dtypes: tuple[type, type]) -> Any:
    """A ``lax.scan`` without xs whose carries (a float, an int, a bool) are no step counter."""
    real, whole = dtypes

    def f(x: jax.Array, n: jax.Array, b: jax.Array) -> Any:
        def step(carry: tuple, _: None) -> tuple:
            x, n, b = carry
            # (tract marks a state read by a Mul of an integer constant, and then refused the
            # Scan: its profile passes such constants in as states)
            return (jnp.tanh(x * 1.5 + 0.25), n * whole(3) + whole(1), b ^ (n > 4) & True), (
                x - 1.0,
                n // whole(2),
                b,
            )

        return jax.lax.scan(step, (x, n, b), None, length=length, reverse=reverse)

    return f, [((3,), real), ((2,), whole), ((2,), np.bool_)]


@pytest.mark.parametrize("runtime", runtime_params())
@given(
    length=st.integers(0, 6),
    reverse=st.booleans(),
    real=st.sampled_from([np.float32, np.float64]),
    whole=st.sampled_from([np.int8, np.int32, np.int64, np.uint32]),
)
@example(length=0, reverse=False, real=np.float32, whole=np.int32)
@example(length=1, reverse=True, real=np.float64, whole=np.uint32)
def test_scan_without_xs_of_static_length_is_a_scan(
    runtime: str, length: int, reverse: bool, real: type, whole: type
) -> None:
    # tract has no Loop: a static number of steps is a Scan over ticks the body does not read
    # (also on onnxruntime, where it is faster than a Loop: benchmarks/scan_vs_loop.py)
    assume(runtime != "openvino" or real == np.float32)  # (OpenVINO computes float64 in float32)
    fn, specs = _unscanned(length, reverse, (real, whole))
    model = assert_exports_match(
        fn,
        specs,
        target=runtime,
        runtime=runtime,
        enable_double_precision=np.float64 in (real, whole) or whole == np.int64,
    )
    loops = [t for t in op_types(model) if t in ("Scan", "Loop")]
    assert loops == ([] if length == 0 else ["Scan" if TARGETS[runtime].scan_ticks else "Loop"])


@pytest.mark.parametrize("runtime", runtime_params())
@pytest.mark.parametrize("dtype", [np.float32, np.uint32, np.bool_])  # (int8, int32: as float32)
def test_empty_constants_keep_shape_and_type_on_every_runtime(runtime: str, dtype: type) -> None:
    # OpenVINO gave an empty constant output shape () and its sum with a (3,) input shape (3,);
    # tract read an empty uint32 initializer as int32: both profiles write a ConstantOfShape
    def f(x: jax.Array) -> tuple[jax.Array, ...]:
        _, ys = jax.lax.scan(lambda c, _: (c, c), x, None, length=0)
        return (
            ys,
            jnp.zeros((0, 3), x.dtype),
            jnp.zeros((2, 0), x.dtype),
            jnp.zeros((0, 3), x.dtype) | x if dtype == np.bool_ else jnp.zeros((0, 3), x.dtype) + x,
        )

    x = np.array([1, 0, 1], dtype)
    model = assert_exports_match(
        f, [((3,), dtype)], input_values=[x], target=runtime, runtime=runtime
    )
    assert ("ConstantOfShape" in op_types(model)) == (runtime in ("openvino", "tract"))


@pytest.mark.parametrize("runtime", runtime_params())
@given(i=st.integers(-3, 9), j=st.integers(-3, 9))
def test_slice_at_a_run_time_start_runs_on_every_runtime(runtime: str, i: int, j: int) -> None:
    # tract gives such a Slice a symbolic length, and a Where of it fails: its profile writes a
    # Gather of start + [0 .. size) (the starts clamped as JAX clamps them)
    def window(x: jax.Array, i: jax.Array, j: jax.Array) -> tuple[jax.Array, jax.Array]:
        part = jax.lax.dynamic_slice(x, (i, j), (2, 3))
        return jnp.where(part > 0, part, -2.0 * part), jax.lax.dynamic_slice_in_dim(x, j, 1, axis=1)

    x = np.arange(42, dtype=np.float32).reshape(6, 7) - 20.0
    model = assert_exports_match(
        window,
        [(6, 7), ((), np.int32), ((), np.int32)],
        input_values=[x, np.int32(i), np.int32(j)],
        target=runtime,
        runtime=runtime,
    )
    assert ("Slice" in op_types(model)) == (runtime != "tract")


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@pytest.mark.parametrize(
    ("shape", "mode"),
    [
        ((20, 20), "reduced"),
        ((20, 23), "reduced"),
        *(
            pytest.param(shape, mode, marks=pytest.mark.slow)
            for shape, mode in [
                ((40, 40), "reduced"),
                (("B", 40, 40), "reduced"),
                ((43, 40), "complete"),
            ]
        ),
    ],
)
def test_qr_above_the_unrolled_size_runs_on_tract(shape: tuple, mode: str) -> None:
    # a square one is a Scan over blocks, another a Scan per column (geqrf, orgqr): both loops of
    # static length, which tract runs; Q and R match JAX's, and Q R = A with Q orthonormal there
    from jax2onnx_nn.core.runtimes import run_model

    def qr(a: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.linalg.qr(a, mode=mode)

    sizes = {"B": [1, 3]} if "B" in shape else None
    model = assert_exports_match(qr, [shape], sizes=sizes, target="tract", runtime="tract")
    assert "Loop" not in _all_op_types(model.graph)
    a = (
        np.random.default_rng(1)
        .standard_normal(tuple(2 if d == "B" else d for d in shape))
        .astype(np.float32)
    )
    q, r = run_model(model, [a], "tract")
    eye = np.eye(q.shape[-1], dtype=np.float32)
    np.testing.assert_allclose(q @ r, a, atol=2e-5 * np.abs(a).max() * shape[-1])
    np.testing.assert_allclose(
        np.swapaxes(q, -1, -2) @ q,
        np.broadcast_to(eye, q.shape[:-2] + eye.shape),
        atol=1e-5 * shape[-1],
    )
    np.testing.assert_array_equal(np.tril(r, -1), 0)


def test_a_loop_tract_cannot_run_is_traced_to_the_call_that_wrote_it() -> None:
    def draw(key: jax.Array) -> jax.Array:
        return jax.random.gamma(
            key, jnp.full((4,), 0.5)
        )  # a rejection sampler: a while_loop on the data

    with pytest.raises(
        ConversionError,
        match=r"(?s)tract cannot run Loop.*Loop \(used \d+x\) at "
        r"\S*test_targets.py:\d+:\d+ \(\S*draw\) in \S*gamma\n"
        r".*condition depends on the data",
    ):
        to_onnx(draw, [KEY], target="tract")


@pytest.mark.parametrize("runtime", runtime_params())
@given(lo=st.integers(-2, 4), hi=st.integers(-2, 4))
def test_fori_loop_of_traced_bounds_runs_on_every_runtime(runtime: str, lo: int, hi: int) -> None:
    # a Loop of a trip count and no condition: tract's profile writes it as a Scan over
    # Range(0, trips), the states passed through a Where where there are 0 steps
    def steps(lo: jax.Array, hi: jax.Array, x: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(lo, hi, lambda i, c: c * 0.5 + i.astype(c.dtype), x)

    x = np.array([1.0, -2.0, np.nan], np.float32)
    model = assert_exports_match(
        steps,
        [((), np.int32), ((), np.int32), (3,)],
        input_values=[np.int32(lo), np.int32(hi), x],
        target=runtime,
        runtime=runtime,
    )
    assert ("Loop" in _all_op_types(model.graph)) == (runtime != "tract")


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
def test_qr_of_symbolic_size_runs_on_tract() -> None:
    # geqrf / orgqr step over a symbolic number of columns: Loops of a trip count, Scans for tract
    model = assert_exports_match(
        jnp.linalg.qr, [("N", "N")], sizes={"N": [1, 3, 20]}, target="tract", runtime="tract"
    )
    assert "Loop" not in _all_op_types(model.graph)


def _sign_case(n: int, case: int) -> np.ndarray:
    """A matrix of positive, negative and zero determinant (an exactly zero row: a pivot of
    round-off would make log|det| round-off too), and all zeros."""
    a = np.random.default_rng(3).standard_normal((n, n))
    if case == 1:
        a[[0, 1]] = a[[1, 0]]
    if case == 2:
        a[2] = 0.0
    return np.zeros((n, n)) if case == 3 else a


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@pytest.mark.parametrize("n", [5, pytest.param(20, marks=pytest.mark.slow)])  # (20: the blocked lu)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(4))
def test_slogdet_sign_runs_on_tract(n: int, dtype: type, case: int) -> None:
    # in float64 the sign counts row swaps with an int64 count_nonzero: tract made the Cast of
    # bools to int64 its symbolic-dim type and failed on the Pad of it; its profile writes a Where
    from jax2onnx_nn.core.runtimes import run_model

    a = _sign_case(n, case).astype(dtype)
    model = assert_exports_match(
        jnp.linalg.slogdet,
        [((n, n), dtype)],
        input_values=[a],
        target="tract",
        runtime="tract",
        enable_double_precision=dtype == np.float64,
    )
    sign, _ = run_model(model, [a], "tract")
    assert sign == np.linalg.slogdet(a.astype(np.float64))[0]


@pytest.mark.parametrize("runtime", runtime_params())
def test_bools_cast_to_int64_run_on_every_runtime(runtime: str) -> None:
    def count(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return (x > 0).astype(jnp.int64), jnp.count_nonzero(x, axis=0)

    x = np.array([[0.0, 1.5, -2.0], [3.0, 0.0, np.nan]], np.float64)
    assert_exports_match(
        count,
        [((2, 3), np.float64)],
        input_values=[x],
        target=runtime,
        runtime=runtime,
        enable_double_precision=True,
    )


@pytest.mark.parametrize("runtime", runtime_params())
def test_integer_states_times_constants_run_on_every_runtime(runtime: str) -> None:
    # tract took the one-element integer constant of n * 3 for a mask and refused the Scan
    # ("inconsistent fact: body input 0 is 2,I32 🬳 3"): its profile makes it a state
    def scan(n: jax.Array, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.lax.scan(lambda n, x: (n * 3 - x, (n // 2) * 5), n, xs)

    n, xs = np.array([-7, 0, 2**20], np.int32), np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    model = assert_exports_match(
        scan,
        [((3,), np.int32), ((4, 3), np.int32)],
        input_values=[n, xs],
        target=runtime,
        runtime=runtime,
    )
    assert "Scan" in op_types(model)


@pytest.mark.skipif(missing_reason("openvino") is not None, reason=str(missing_reason("openvino")))
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("const_first", [False, True])
def test_arithmetic_on_an_expanded_constant_keeps_an_empty_batch_on_openvino(
    op: str, const_first: bool
) -> None:
    """OpenVINO 2026.4 gives ``jnp.zeros((B, 4)) + 0.5`` the shape (1, 4) at B = 0; written as
    the arithmetic first and the Expand after, it gives JAX's shapes and values (B 0, 1, 3)."""
    c = np.array([0.5, -2.0, 3.0, 0.25], np.float32)
    binary = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide}[op]

    def f(xs: jax.Array) -> jax.Array:
        filled = jnp.full((xs.shape[0], 4), 1.5, xs.dtype)
        return binary(c, filled) if const_first else binary(filled, c)

    model = to_onnx(f, [("B", 3)], target="openvino")
    for runtime in ("openvino", "onnxruntime"):
        verify(f, model, [("B", 3)], sizes={"B": [0, 1, 3]}, runtime=runtime).raise_if_failed()


_SUMS_OVER_LAST_AXES = {
    "sum of a vector": (lambda x: jnp.sum(x), ("T",)),
    "sum over axis -1": (lambda x: jnp.sum(x, axis=-1), ("B", "T")),
    "sum over both axes": (lambda x: jnp.sum(x), ("B", "T")),
    "mean over axis 1, keepdims": (lambda x: jnp.mean(x, axis=1, keepdims=True), ("B", "T")),
    "sum over axes (0, 2)": (lambda x: jnp.sum(x, axis=(0, 2)), (2, "B", "T")),
    "sum of a map's rows": (lambda xs: jax.lax.map(jnp.sum, xs), ("B", "T")),
}


@pytest.mark.skipif(missing_reason("tract") is not None, reason=str(missing_reason("tract")))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(_SUMS_OVER_LAST_AXES))
def test_float_sums_over_an_empty_last_axis_run_on_tract(
    case: str, dtype: type, tmp_path: Any
) -> None:
    # tract 0.23 aborted the process (a Rust panic, "attempt to divide by zero") on a float
    # ReduceSum over an empty last axis: the model runs in a subprocess, so that a regression
    # fails this test instead of killing pytest
    import subprocess
    import sys

    fn, spec = _SUMS_OVER_LAST_AXES[case]
    sizes = [(2, 0), (0, 0), (1, 0), (0, 3), (3, 1), (1, 5)]
    rng = np.random.default_rng(0)
    with x64(dtype == np.float64):
        model = to_onnx(
            fn, [(spec, dtype)], target="tract", enable_double_precision=dtype == np.float64
        )
        inputs, expected = {}, {}
        for i, (b, t) in enumerate(sizes):
            size = tuple({"B": b, "T": t}.get(d, d) for d in spec)
            x = rng.normal(size=size).astype(dtype)  # type: ignore[call-overload]
            if x.size > 2:
                x.reshape(-1)[:2] = [np.inf, -0.0]
            inputs[f"x{i}"], expected[f"x{i}"] = x, np.asarray(fn(jnp.asarray(x)))
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    np.savez(tmp_path / "inputs.npz", **inputs)
    script = (
        "import sys, numpy as np, tract; d = sys.argv[1]; xs = np.load(d + '/inputs.npz');"
        "run = tract.onnx().load(d + '/model.onnx').into_model().into_runnable().run;"
        "np.savez(d + '/outputs.npz', "
        "**{k: run([np.ascontiguousarray(xs[k])])[0].to_numpy() for k in xs.files})"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"tract exited with {done.returncode}: {done.stderr[-2000:]}"
    outputs = np.load(tmp_path / "outputs.npz")
    for k, want in expected.items():
        got = outputs[k]
        assert got.shape == want.shape and got.dtype == want.dtype, (
            k,
            inputs[k].shape,
            got.shape,
            want.shape,
            got.dtype,
        )
        np.testing.assert_allclose(
            got,
            want,
            rtol=1e-12 if dtype == np.float64 else 1e-5,
            atol=1e-12 if dtype == np.float64 else 1e-6,
        )
