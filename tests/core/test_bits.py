"""Bit-level float ops against JAX, compared bit for bit.

Every float16 and bfloat16 bit pattern is checked in one export and one run; float32 and
float64 are checked on their edge cases (signed zeros, subnormals, the normal limits,
infinities, NaN) and on hypothesis-drawn bit patterns. Below opset 26 a NaN's sign and
payload cannot be read, so every NaN must come out as the canonical quiet NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn.core.api import MAX_OPSET, to_onnx
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.verify import run_onnx

BF16 = np.dtype(jnp.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
BITCAST_OPSET = 26
# the emulation below ONNX BitCast, its first opset and the newest (MAX_OPSET is 28 here)
opsets = sorted(
    {21, *(o for o in (BITCAST_OPSET, MAX_OPSET) if o >= BITCAST_OPSET and o <= MAX_OPSET)}
)


def unsigned(dtype: Any) -> np.dtype:
    return np.dtype(f"uint{8 * np.dtype(dtype).itemsize}")


def edge_values(dtype: Any) -> np.ndarray:
    """±0, the smallest subnormals, the largest subnormal, min/max normal, 1, ±inf, NaN."""
    dtype = np.dtype(dtype)
    info = jnp.finfo(dtype)
    u = unsigned(dtype)
    bits = [1, 2, int(np.asarray(info.smallest_normal, dtype).view(u)) - 1]
    subnormals = np.asarray(bits, dtype=u).view(dtype)
    special = np.asarray(
        [0.0, float(info.smallest_normal), float(info.max), 1.0, np.inf, np.nan], dtype=dtype
    )
    return np.concatenate([subnormals, special, -subnormals, -special[:-1]])


def all_patterns(dtype: Any) -> np.ndarray:
    """Every bit pattern of a 16-bit float, as values."""
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(dtype)


def feed(values: np.ndarray) -> np.ndarray:
    """onnxruntime's Python API has no bfloat16: bfloat16 travels as float32 (exactly)."""
    return values.astype(np.float32) if values.dtype == BF16 else values


def run(
    fn: Callable[..., Any], *values: np.ndarray, opset: int = 21, wide: bool = False
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnxruntime, JAX) results of ``fn`` on ``values``; bfloat16 crosses the boundary as float32.
    64-bit inputs (or ``wide``) export with double precision."""
    dtypes = [v.dtype for v in values]

    def wrapped(*args: Any) -> Any:
        with np.errstate(invalid="ignore"):  # NaN float32 -> bfloat16
            args = [a.astype(d) for a, d in zip(args, dtypes, strict=True)]
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(o.astype(np.float32) if o.dtype == BF16 else o for o in outs)

    feeds = [feed(v) for v in values]
    wide = wide or any(v.dtype.itemsize == 8 for v in values)
    with x64(wide):
        model = to_onnx(
            wrapped, [(v.shape, v.dtype) for v in feeds], opset=opset, enable_double_precision=wide
        )
        actual = run_onnx(model, feeds)
        expected = [np.asarray(e) for e in wrapped(*feeds)]
    return actual, expected


def assert_same_bits(actual: np.ndarray, expected: np.ndarray, *, any_nan: bool = False) -> None:
    """Equal bit patterns; NaN where JAX has NaN (``any_nan``: any NaN, else the canonical one)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected)
        return
    u = unsigned(actual.dtype)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    np.testing.assert_array_equal(actual[~nan].view(u), expected[~nan].view(u))
    if not any_nan:
        np.testing.assert_array_equal(actual[nan].view(u), np.asarray(np.nan, actual.dtype).view(u))


def float_bits(dtype: Any) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``dtype`` from drawn bit patterns, edge values mixed in."""
    dtype = np.dtype(dtype)
    u = unsigned(dtype)
    edges = [int(b) for b in edge_values(dtype).view(u)]
    pattern = st.integers(0, 2 ** (8 * dtype.itemsize) - 1) | st.sampled_from(edges)
    return st.lists(pattern, min_size=1, max_size=12).map(
        lambda bits: np.asarray(bits, dtype=u).view(dtype)
    )


# -- bitcast_convert_type -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("opset", opsets)
def test_bitcast_is_exact_on_every_16_bit_pattern(dtype: Any, opset: int) -> None:
    values = all_patterns(dtype)
    (to_int,), (expected,) = run(
        lambda x: lax.bitcast_convert_type(x, np.int16), values, opset=opset
    )
    nan = np.isnan(values.astype(np.float32))
    np.testing.assert_array_equal(to_int[~nan], expected[~nan])
    if opset < BITCAST_OPSET:  # a NaN's sign and payload are invisible to arithmetic
        np.testing.assert_array_equal(to_int[nan], np.asarray(np.nan, dtype).view(np.int16))
    else:
        np.testing.assert_array_equal(to_int, expected)
    (back,), (expected,) = run(
        lambda b: lax.bitcast_convert_type(b, dtype), values.view(np.int16), opset=opset
    )
    assert_same_bits(back, expected, any_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opset", opsets)
def test_bitcast_is_exact_on_edge_values(dtype: Any, opset: int) -> None:
    values = edge_values(dtype)
    u = unsigned(dtype)
    (bits,), (expected,) = run(lambda x: lax.bitcast_convert_type(x, u), values, opset=opset)
    np.testing.assert_array_equal(bits, expected)
    (back,), (expected,) = run(lambda b: lax.bitcast_convert_type(b, dtype), expected, opset=opset)
    assert_same_bits(back, expected)


@pytest.mark.parametrize("opset", opsets)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), signed=st.booleans())
def test_bitcast_round_trips_drawn_patterns(
    data: st.DataObject, dtype: Any, signed: bool, opset: int
) -> None:
    """Float <-> int of the same width; from opset 26 (ONNX BitCast) NaN payloads too."""
    values = data.draw(float_bits(dtype))
    itype = np.dtype(f"{'int' if signed else 'uint'}{8 * values.dtype.itemsize}")
    (bits,), (expected,) = run(lambda x: lax.bitcast_convert_type(x, itype), values, opset=opset)
    keep = ~np.isnan(values) if opset < BITCAST_OPSET else np.ones(values.shape, bool)
    np.testing.assert_array_equal(bits[keep], expected[keep])
    (back,), (expected,) = run(
        lambda b: lax.bitcast_convert_type(b, dtype), values.view(itype), opset=opset
    )
    if opset < BITCAST_OPSET:
        assert_same_bits(back, expected, any_nan=True)
    else:
        np.testing.assert_array_equal(back.view(itype), expected.view(itype))


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (np.uint32, np.float32),
        (np.int32, np.float32),
        (np.uint64, np.float64),
        (np.int64, np.float64),
        (np.uint16, np.float16),
        (np.int32, np.uint32),
        (np.uint64, np.int64),
    ],
)
@pytest.mark.parametrize("opset", opsets)
def test_bitcast_to_float_covers_every_exponent(source: Any, target: Any, opset: int) -> None:
    """Every sign and exponent field (zero, subnormal, normal, inf/NaN), random mantissas."""
    width = 8 * np.dtype(source).itemsize
    rng = np.random.default_rng(width)
    u = unsigned(source)
    if np.dtype(target).kind == "f":
        n_mant = np.finfo(target).nmant
        fields = np.arange(2 ** (width - n_mant), dtype=np.uint64) << np.uint64(n_mant)
        mantissas = rng.integers(0, 2**n_mant, size=(len(fields), 3), dtype=np.uint64)
        mantissas[:, 0] = 0
        bits = (fields[:, None] | mantissas).astype(u).ravel()
    else:
        bits = rng.integers(0, 2**width, size=1000, dtype=np.uint64).astype(u)
    (actual,), (expected,) = run(
        lambda b: lax.bitcast_convert_type(b, target), bits.view(source), opset=opset
    )
    if opset < BITCAST_OPSET:
        assert_same_bits(actual, expected, any_nan=True)
    else:  # every bit, NaN payloads included
        np.testing.assert_array_equal(
            actual.view(unsigned(target)), expected.view(unsigned(target))
        )


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (np.float32, np.uint8),
        (np.float64, np.uint16),
        (np.float64, np.float32),
        (np.uint8, np.float32),
        (np.int16, np.float64),
        (np.float16, np.uint8),
        (np.uint32, np.uint64),
    ],
)
def test_bitcast_between_widths_is_little_endian(source: Any, target: Any) -> None:
    """A wide element is a trailing axis of narrow ones, least significant first (as XLA)."""
    rng = np.random.default_rng(0)
    ratio = max(np.dtype(source).itemsize, np.dtype(target).itemsize) // min(
        np.dtype(source).itemsize, np.dtype(target).itemsize
    )
    shape = (3, 2) if np.dtype(source).itemsize > np.dtype(target).itemsize else (3, 2, ratio)
    values = (
        rng.integers(0, 256, size=(*shape, np.dtype(source).itemsize), dtype=np.uint8)
        .view(source)
        .reshape(shape)
    )
    if np.dtype(source).kind == "f":
        values.reshape(-1)[:2] = [-0.0, np.inf]
    (actual,), (expected,) = run(
        lambda x: lax.bitcast_convert_type(x, target), values, wide=np.dtype(target).itemsize == 8
    )
    assert_same_bits(actual, expected)


def test_bitcast_keeps_nan_payloads_from_opset_26() -> None:
    if MAX_OPSET < BITCAST_OPSET:
        pytest.skip(f"opset {BITCAST_OPSET} is not supported yet (max {MAX_OPSET})")
    bits = np.asarray([0x7FC00001, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], dtype=np.uint32)
    (actual,), (expected,) = run(
        lambda b: lax.bitcast_convert_type(lax.bitcast_convert_type(b, np.float32), np.uint32),
        bits,
        opset=BITCAST_OPSET,
    )
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("float32", np.int32),
        ("float16", np.uint16),
        ("bfloat16", np.int16),
        ("float64", np.uint64),
        ("int64", np.float64),
    ],
)
def test_bitcast_uses_onnx_bitcast_from_opset_26(source: str, target: Any) -> None:
    if MAX_OPSET < BITCAST_OPSET:
        pytest.skip(f"opset {BITCAST_OPSET} is not supported yet (max {MAX_OPSET})")
    for opset in range(BITCAST_OPSET, MAX_OPSET + 1):
        model = to_onnx(
            lambda x: lax.bitcast_convert_type(x, target),
            [((3,), source)],
            opset=opset,
            enable_double_precision=True,
        )
        assert [n.op_type for n in model.graph.node] == ["BitCast"]


# -- copysign and signbit: JAX's bitcast and select_n, -0.0 included -------------------------------


@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_copysign_and_signbit_match_jax(data: st.DataObject, dtype: Any) -> None:
    x = data.draw(float_bits(dtype))
    y = data.draw(float_bits(dtype).filter(lambda v: len(v) >= len(x)))[: len(x)]
    y = np.where(
        np.isnan(y), np.asarray(np.nan, dtype), y
    )  # a NaN's sign is invisible below opset 26
    (magnitude, sign), (expected_magnitude, expected_sign) = run(
        lambda a, b: (jnp.copysign(a, b), jnp.signbit(b)), x, y
    )
    assert_same_bits(magnitude, expected_magnitude, any_nan=True)
    np.testing.assert_array_equal(sign, expected_sign)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_copysign_on_every_16_bit_pattern(dtype: Any) -> None:
    values = all_patterns(dtype)
    values = np.where(np.isnan(values.astype(np.float32)), np.asarray(np.nan, dtype), values)
    (plus, minus), (expected_plus, expected_minus) = run(
        lambda x: (jnp.copysign(1.0, x).astype(x.dtype), jnp.copysign(x, -1.0).astype(x.dtype)),
        values,
    )
    assert_same_bits(plus, expected_plus)
    assert_same_bits(minus, expected_minus, any_nan=True)


@pytest.mark.parametrize("where_x", ["x", "zero", "abs"])
def test_where_keeps_negative_zero(where_x: str) -> None:
    """onnxruntime's Where turns a -0.0 picked from its second input into +0.0; select_n keeps
    it."""
    x = np.asarray([-0.0, 0.0, -1.0, np.inf, -0.0], np.float32)
    c = np.asarray([True, True, False, True, False])
    pick: dict[str, Callable[[Any], Any]] = {
        "x": lambda v: v,
        "zero": lambda v: jnp.zeros_like(v),
        "abs": jnp.abs,
    }
    (actual,), (expected,) = run(lambda c, v: jnp.where(c, pick[where_x](v), -v), c, x)
    assert_same_bits(actual, expected)


def _ops(fn: Callable[..., Any], specs: Sequence[Any]) -> list[str]:
    return [n.op_type for n in to_onnx(fn, specs).graph.node]


def test_where_adds_nothing_when_no_negative_zero_can_be_picked() -> None:
    assert _ops(lambda c, v: jnp.where(c, 1.0, v), [((3,), np.bool_), (3,)]) == ["Where"]
    assert _ops(lambda c, v: jnp.where(c, jnp.abs(v), v), [((3,), np.bool_), (3,)]) == [
        "Abs",
        "Where",
    ]


# -- nextafter, spacing, frexp, ldexp --------------------------------------------------------------
# XLA on CPU flushes subnormals to zero (docs/limitations.md); onnxruntime and numpy do not, and
# JAX >= 0.12's frexp flushes them by its own integer algorithm. So the reference is JAX, except
# where an input or the IEEE result is subnormal: there the export may give JAX's value or
# numpy's IEEE one (ml_dtypes for bfloat16); off those places numpy must agree with JAX.


def _subnormal(values: np.ndarray, dtype: Any) -> np.ndarray:
    v = np.abs(np.asarray(values, dtype=np.float64))
    return (v > 0) & (v < float(jnp.finfo(dtype).smallest_normal))


def ieee_reference(
    actual: np.ndarray,
    expected: np.ndarray,
    ieee: np.ndarray,
    dtype: Any,
    *inputs: np.ndarray,
    underflows: np.ndarray | None = None,
) -> np.ndarray:
    """JAX's ``expected``, or numpy's ``ieee`` where a subnormal is involved (an input, the
    result, or ``underflows``: the exact result before rounding) and ``actual`` is not JAX's."""
    ieee = np.asarray(ieee).astype(expected.dtype)
    flushed = _subnormal(ieee, dtype) if expected.dtype.kind == "f" else np.zeros(ieee.shape, bool)
    if underflows is not None:
        flushed = flushed | underflows
    for x in inputs:
        if x.dtype.kind == "f" or x.dtype == BF16:
            flushed = flushed | _subnormal(x, dtype)
    assert_same_bits(
        np.where(flushed, expected, ieee), expected, any_nan=True
    )  # numpy agrees elsewhere
    u = unsigned(expected.dtype)
    is_jax = (
        actual.view(u) == expected.view(u) if expected.dtype.kind == "f" else actual == expected
    )
    return np.where(flushed & ~is_jax, ieee, expected)


def _ldexp_underflows(x: np.ndarray, n: np.ndarray, dtype: Any) -> np.ndarray:
    """Where x * 2**n, before rounding, is below the smallest normal (JAX's ldexp may flush)."""
    with np.errstate(invalid="ignore"):
        m, e = np.frexp(np.asarray(x, np.float64))
    return (m != 0) & np.isfinite(m) & (e.astype(np.int64) + n <= int(jnp.finfo(dtype).minexp))


def _nextafter_cases(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    x = all_patterns(dtype) if np.dtype(dtype).itemsize == 2 else edge_values(dtype)
    y = np.roll(x, 7)
    y[::3] = np.where(np.isnan(x[::3]), y[::3], x[::3])  # x == y too
    return x, y


FLOATS_BF16_SLOW = [
    np.dtype(np.float16),
    pytest.param(BF16, marks=pytest.mark.slow),
    np.dtype(np.float32),
    np.dtype(np.float64),
]


@pytest.mark.parametrize("dtype", FLOATS_BF16_SLOW, ids=str)
def test_nextafter_and_spacing_match_ieee(dtype: Any) -> None:
    x, y = _nextafter_cases(dtype)
    (step, space), (expected_step, expected_space) = run(
        lambda a, b: (jnp.nextafter(a, b), jnp.spacing(a)), x, y
    )
    to32 = (lambda v: v.astype(np.float32)) if dtype == BF16 else (lambda v: v)
    assert_same_bits(
        step,
        ieee_reference(step, expected_step, to32(np.nextafter(x, y)), dtype, x, y),
        any_nan=True,
    )
    # spacing is nextafter minus x (tested above); where its result is subnormal XLA flushes,
    # and numpy's spacing has other conventions (spacing(-0.0) > 0), so compare the rest
    # (XLA computes float16 in float32, where its subnormals are normal: nothing to skip)
    keep = ~(_subnormal(x, dtype) | _subnormal(space, dtype) | _subnormal(expected_space, dtype))
    keep = keep | (np.dtype(dtype) == np.float16)
    assert_same_bits(space[keep], expected_space[keep], any_nan=True)
    assert keep.sum() >= 6


@pytest.mark.parametrize("dtype", FLOATS_BF16_SLOW, ids=str)
def test_frexp_and_ldexp_match_ieee(dtype: Any) -> None:
    x = all_patterns(dtype) if np.dtype(dtype).itemsize == 2 else edge_values(dtype)
    span = 41 if np.dtype(dtype).itemsize == 2 else 2101  # exponents that cross every range
    n = ((np.arange(x.size) * 97) % span - span // 2).astype(np.int32)
    (mantissa, exponent, scaled), (e_mantissa, e_exponent, e_scaled) = run(
        lambda a, k: (*jnp.frexp(a), jnp.ldexp(a, k)), x, n
    )
    wide = x.astype(np.float32) if dtype == BF16 else x
    with np.errstate(invalid="ignore"):
        i_mantissa, i_exponent = np.frexp(wide)
        i_scaled = np.ldexp(wide, n).astype(dtype).astype(wide.dtype)
    finite = np.isfinite(np.asarray(x, np.float64))  # numpy's exponent of inf/NaN is arbitrary
    assert_same_bits(
        mantissa, ieee_reference(mantissa, e_mantissa, i_mantissa, dtype, x), any_nan=True
    )
    np.testing.assert_array_equal(
        exponent,
        ieee_reference(exponent, e_exponent, np.where(finite, i_exponent, e_exponent), dtype, x),
    )
    assert_same_bits(
        scaled,
        ieee_reference(
            scaled, e_scaled, i_scaled, dtype, x, underflows=_ldexp_underflows(x, n, dtype)
        ),
        any_nan=True,
    )


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_nextafter_frexp_ldexp_on_drawn_patterns(data: st.DataObject, dtype: Any) -> None:
    x = data.draw(float_bits(dtype))
    y = data.draw(float_bits(dtype).filter(lambda v: len(v) >= len(x)))[: len(x)]
    n = np.asarray(
        data.draw(st.lists(st.integers(-1100, 1100), min_size=len(x), max_size=len(x))), np.int32
    )
    (step, mantissa, scaled), (e_step, e_mantissa, e_scaled) = run(
        lambda a, b, k: (jnp.nextafter(a, b), jnp.frexp(a)[0], jnp.ldexp(a, k)), x, y, n
    )
    with np.errstate(invalid="ignore", over="ignore"):
        assert_same_bits(
            step, ieee_reference(step, e_step, np.nextafter(x, y), dtype, x, y), any_nan=True
        )
        assert_same_bits(
            mantissa, ieee_reference(mantissa, e_mantissa, np.frexp(x)[0], dtype, x), any_nan=True
        )
        assert_same_bits(
            scaled,
            ieee_reference(
                scaled,
                e_scaled,
                np.ldexp(x, n),
                dtype,
                x,
                underflows=_ldexp_underflows(x, n, dtype),
            ),
            any_nan=True,
        )


# -- reduce_precision, float_power ---------------------------------------------------------------

FORMATS = [(5, 10), (8, 7), (8, 23), (4, 3), (5, 2), (3, 1), (2, 5), (1, 1), (6, 4), (11, 10)]


@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(np.float16, marks=pytest.mark.slow),
        np.float32,
        pytest.param(np.float64, marks=pytest.mark.slow),
    ],
    ids=str,
)
def test_reduce_precision_on_every_16_bit_pattern(dtype: Any) -> None:
    """Every float16 value (subnormals, inf, NaN included) through every format, one export."""
    values = all_patterns(np.float16).astype(dtype)
    actual, expected = run(
        lambda x: tuple(lax.reduce_precision(x, e, m) for e, m in FORMATS), values
    )
    for a, e in zip(actual, expected, strict=True):
        assert_same_bits(a, e, any_nan=True)


@given(
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
    exponent_bits=st.integers(1, 11),
    mantissa_bits=st.integers(0, 52),
)
def test_reduce_precision_matches_jax(
    data: st.DataObject, dtype: Any, exponent_bits: int, mantissa_bits: int
) -> None:
    x = data.draw(float_bits(dtype))
    (actual,), (expected,) = run(lambda v: lax.reduce_precision(v, exponent_bits, mantissa_bits), x)
    assert_same_bits(actual, expected, any_nan=True)


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_float_power_matches_jax(data: st.DataObject, dtype: Any) -> None:
    x = data.draw(float_bits(dtype))
    y = np.asarray(
        data.draw(
            st.lists(
                st.sampled_from([0.0, 1.0, 2.0, -1.0, 0.5, -2.5, 3.0, np.inf, np.nan]),
                min_size=len(x),
                max_size=len(x),
            )
        ),
        dtype,
    )
    x = np.where(np.abs(x) > 1e30, 1e30, x).astype(dtype)
    x = np.where(_subnormal(x, dtype), 0, x).astype(dtype)  # XLA flushes them (docs/limitations.md)
    with x64(True):
        from jax2onnx_nn.testing import assert_exports_match_on

        assert_exports_match_on(jnp.float_power, x, y, enable_double_precision=True)


# -- clz, population_count -------------------------------------------------------------------------

INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@given(data=st.data(), dtype=st.sampled_from(INTS))
def test_clz_and_population_count_match_jax(data: st.DataObject, dtype: str) -> None:
    width = 8 * np.dtype(dtype).itemsize
    edges = [0, 1, 2 ** (width - 1), 2**width - 1, 2 ** (width - 1) - 1]
    bits = data.draw(
        st.lists(st.integers(0, 2**width - 1) | st.sampled_from(edges), min_size=1, max_size=16)
    )
    x = np.asarray(bits, dtype=f"uint{width}").view(dtype)
    (clz, count), (e_clz, e_count) = run(lambda v: (lax.clz(v), lax.population_count(v)), x)
    np.testing.assert_array_equal(clz, e_clz)
    np.testing.assert_array_equal(count, e_count)


def test_population_count_is_a_few_nodes() -> None:
    """The SWAR count: a dozen nodes per width, not a shift and an add per bit."""
    with x64(True):
        model = to_onnx(lax.population_count, [((3,), np.uint64)], enable_double_precision=True)
    assert len(model.graph.node) <= 12


# -- total-order comparisons and what JAX builds on them -----------------------------------------


def test_total_order_comparisons_match_jax() -> None:
    """lt_to/le_to/eq_to on every pair of edge values (-0.0 < +0.0, NaN above +inf)."""
    from jax._src.lax import lax as lax_internal

    v = np.asarray([np.nan, -np.inf, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1.0, np.inf], np.float32)
    a, b = (t.ravel() for t in np.meshgrid(v, v, indexing="ij"))
    prims = [lax_internal.lt_to_p, lax_internal.le_to_p, lax_internal.eq_to_p]
    actual, expected = run(lambda x, y: tuple(p.bind(x, y) for p in prims), a, b)
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(got, want)


sorted_floats = st.lists(
    st.sampled_from([-np.inf, -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, np.inf, np.nan]),
    min_size=1,
    max_size=8,
)


@given(
    data=st.data(),
    side=st.sampled_from(["left", "right"]),
    method=st.sampled_from(["scan", "scan_unrolled", "sort", "compare_all"]),
)
def test_searchsorted_and_digitize_match_jax(data: st.DataObject, side: str, method: str) -> None:
    edges = np.sort(np.asarray(data.draw(sorted_floats), np.float32))
    queries = np.asarray(data.draw(sorted_floats), np.float32)
    actual, expected = run(
        lambda a, v: (
            jnp.searchsorted(a, v, side=side, method=method),
            jnp.digitize(v, a, right=side == "right"),
        ),
        edges,
        queries,
    )
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=max(2, settings.default.max_examples // 2))  # five exports per example
@given(x=st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=12), bins=st.integers(1, 5))
def test_histograms_bincount_interp_match_jax(x: list[float], bins: int) -> None:
    v = np.asarray(x, np.float32)
    w = v[::-1].copy()
    actual, expected = run(
        lambda a, b: (
            jnp.histogram(a, bins=bins)[0],
            jnp.histogram2d(a, b, bins=bins)[0],
            jnp.histogramdd(jnp.stack([a, b], axis=1), bins=bins)[0],
            jnp.bincount(jnp.clip(a, 0, 4).astype(np.int32), length=5),
            jnp.interp(a, jnp.arange(-3.0, 4.0), jnp.arange(-3.0, 4.0) ** 2),
        ),
        v,
        w,
    )
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
