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
from hypothesis import given
from hypothesis import strategies as st
from jax import lax

from jax2onnx_nn.core.api import MAX_OPSET, to_onnx
from jax2onnx_nn.core.jax_internals import x64
from jax2onnx_nn.core.verify import run_onnx

BF16 = np.dtype(jnp.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
BITCAST_OPSET = 26
opsets = [21] + ([BITCAST_OPSET] if MAX_OPSET >= BITCAST_OPSET else [])


def unsigned(dtype: Any) -> np.dtype:
    return np.dtype(f"uint{8 * np.dtype(dtype).itemsize}")


def edge_values(dtype: Any) -> np.ndarray:
    """±0, the smallest subnormals, the largest subnormal, min/max normal, 1, ±inf, NaN."""
    dtype = np.dtype(dtype)
    info = jnp.finfo(dtype)
    u = unsigned(dtype)
    bits = [1, 2, int(np.asarray(info.smallest_normal, dtype).view(u)) - 1]
    subnormals = np.asarray(bits, dtype=u).view(dtype)
    special = np.asarray([0.0, float(info.smallest_normal), float(info.max), 1.0, np.inf, np.nan], dtype=dtype)
    return np.concatenate([subnormals, special, -subnormals, -special[:-1]])


def all_patterns(dtype: Any) -> np.ndarray:
    """Every bit pattern of a 16-bit float, as values."""
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(dtype)


def feed(values: np.ndarray) -> np.ndarray:
    """onnxruntime's Python API has no bfloat16: bfloat16 travels as float32 (exactly)."""
    return values.astype(np.float32) if values.dtype == BF16 else values


def run(fn: Callable[..., Any], *values: np.ndarray, opset: int = 21, wide: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
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
        model = to_onnx(wrapped, [(v.shape, v.dtype) for v in feeds], opset=opset, enable_double_precision=wide)
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
    return st.lists(pattern, min_size=1, max_size=12).map(lambda bits: np.asarray(bits, dtype=u).view(dtype))


# -- bitcast_convert_type -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("opset", opsets)
def test_bitcast_is_exact_on_every_16_bit_pattern(dtype: Any, opset: int) -> None:
    values = all_patterns(dtype)
    (to_int,), (expected,) = run(lambda x: lax.bitcast_convert_type(x, np.int16), values, opset=opset)
    nan = np.isnan(values.astype(np.float32))
    np.testing.assert_array_equal(to_int[~nan], expected[~nan])
    if opset < BITCAST_OPSET:  # a NaN's sign and payload are invisible to arithmetic
        np.testing.assert_array_equal(to_int[nan], np.asarray(np.nan, dtype).view(np.int16))
    else:
        np.testing.assert_array_equal(to_int, expected)
    (back,), (expected,) = run(lambda b: lax.bitcast_convert_type(b, dtype), values.view(np.int16), opset=opset)
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


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), signed=st.booleans())
def test_bitcast_round_trips_drawn_patterns(data: st.DataObject, dtype: Any, signed: bool) -> None:
    values = data.draw(float_bits(dtype))
    itype = np.dtype(f"{'int' if signed else 'uint'}{8 * values.dtype.itemsize}")
    (bits,), (expected,) = run(lambda x: lax.bitcast_convert_type(x, itype), values)
    nan = np.isnan(values)
    np.testing.assert_array_equal(bits[~nan], expected[~nan])
    (back,), (expected,) = run(lambda b: lax.bitcast_convert_type(b, dtype), values.view(itype))
    assert_same_bits(back, expected, any_nan=True)


@pytest.mark.parametrize(
    ("source", "target"),
    [(np.uint32, np.float32), (np.int32, np.float32), (np.uint64, np.float64), (np.int64, np.float64),
     (np.uint16, np.float16), (np.int32, np.uint32), (np.uint64, np.int64)],
)
def test_bitcast_to_float_covers_every_exponent(source: Any, target: Any) -> None:
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
    (actual,), (expected,) = run(lambda b: lax.bitcast_convert_type(b, target), bits.view(source))
    assert_same_bits(actual, expected, any_nan=True)


@pytest.mark.parametrize(
    ("source", "target"),
    [(np.float32, np.uint8), (np.float64, np.uint16), (np.float64, np.float32), (np.uint8, np.float32),
     (np.int16, np.float64), (np.float16, np.uint8), (np.uint32, np.uint64)],
)
def test_bitcast_between_widths_is_little_endian(source: Any, target: Any) -> None:
    """A wide element is a trailing axis of narrow ones, least significant first (as XLA)."""
    rng = np.random.default_rng(0)
    ratio = max(np.dtype(source).itemsize, np.dtype(target).itemsize) // min(np.dtype(source).itemsize, np.dtype(target).itemsize)
    shape = (3, 2) if np.dtype(source).itemsize > np.dtype(target).itemsize else (3, 2, ratio)
    values = rng.integers(0, 256, size=(*shape, np.dtype(source).itemsize), dtype=np.uint8).view(source).reshape(shape)
    if np.dtype(source).kind == "f":
        values.reshape(-1)[:2] = [-0.0, np.inf]
    (actual,), (expected,) = run(lambda x: lax.bitcast_convert_type(x, target), values, wide=np.dtype(target).itemsize == 8)
    assert_same_bits(actual, expected)


def test_bitcast_keeps_nan_payloads_from_opset_26() -> None:
    if MAX_OPSET < BITCAST_OPSET:
        pytest.skip(f"opset {BITCAST_OPSET} is not supported yet (max {MAX_OPSET})")
    bits = np.asarray([0x7FC00001, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], dtype=np.uint32)
    (actual,), (expected,) = run(lambda b: lax.bitcast_convert_type(lax.bitcast_convert_type(b, np.float32), np.uint32), bits, opset=BITCAST_OPSET)
    np.testing.assert_array_equal(actual, expected)


def test_bitcast_uses_onnx_bitcast_from_opset_26() -> None:
    if MAX_OPSET < BITCAST_OPSET:
        pytest.skip(f"opset {BITCAST_OPSET} is not supported yet (max {MAX_OPSET})")
    model = to_onnx(lambda x: lax.bitcast_convert_type(x, np.int32), [(3,)], opset=BITCAST_OPSET)
    assert [n.op_type for n in model.graph.node] == ["BitCast"]


# -- copysign and signbit: JAX's bitcast and select_n, -0.0 included ---------------------------------

@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_copysign_and_signbit_match_jax(data: st.DataObject, dtype: Any) -> None:
    x = data.draw(float_bits(dtype))
    y = data.draw(float_bits(dtype).filter(lambda v: len(v) >= len(x)))[: len(x)]
    y = np.where(np.isnan(y), np.asarray(np.nan, dtype), y)  # a NaN's sign is invisible below opset 26
    (magnitude, sign), (expected_magnitude, expected_sign) = run(lambda a, b: (jnp.copysign(a, b), jnp.signbit(b)), x, y)
    assert_same_bits(magnitude, expected_magnitude, any_nan=True)
    np.testing.assert_array_equal(sign, expected_sign)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_copysign_on_every_16_bit_pattern(dtype: Any) -> None:
    values = all_patterns(dtype)
    values = np.where(np.isnan(values.astype(np.float32)), np.asarray(np.nan, dtype), values)
    (plus, minus), (expected_plus, expected_minus) = run(lambda x: (jnp.copysign(1.0, x).astype(x.dtype), jnp.copysign(x, -1.0).astype(x.dtype)), values)
    assert_same_bits(plus, expected_plus)
    assert_same_bits(minus, expected_minus, any_nan=True)


@pytest.mark.parametrize("where_x", ["x", "zero", "abs"])
def test_where_keeps_negative_zero(where_x: str) -> None:
    """onnxruntime's Where turns a -0.0 picked from its second input into +0.0; select_n keeps it."""
    x = np.asarray([-0.0, 0.0, -1.0, np.inf, -0.0], np.float32)
    c = np.asarray([True, True, False, True, False])
    pick: dict[str, Callable[[Any], Any]] = {"x": lambda v: v, "zero": lambda v: jnp.zeros_like(v), "abs": jnp.abs}
    (actual,), (expected,) = run(lambda c, v: jnp.where(c, pick[where_x](v), -v), c, x)
    assert_same_bits(actual, expected)


def _ops(fn: Callable[..., Any], specs: Sequence[Any]) -> list[str]:
    return [n.op_type for n in to_onnx(fn, specs).graph.node]


def test_where_adds_nothing_when_no_negative_zero_can_be_picked() -> None:
    assert _ops(lambda c, v: jnp.where(c, 1.0, v), [((3,), np.bool_), (3,)]) == ["Where"]
    assert _ops(lambda c, v: jnp.where(c, jnp.abs(v), v), [((3,), np.bool_), (3,)]) == ["Abs", "Where"]
