"""jax.random: typed PRNG keys and their hashes, bit-exact with JAX (no Random* ops).

Keys are their uint32 data in ONNX: shape ``(*keys_shape, *key_data_shape)`` (see
``onnx_aval``), so wrapping and unwrapping are identities, and ops that only rearrange keys
(slice, reshape, gather, ...) are lowered on that data by the interpreter. ``random_seed``,
``random_bits``, ``random_split`` and ``random_fold_in`` are lowered through the key
implementation's own JAX code traced on the data: what JAX would run, including its
``jax_threefry_partitionable`` choice at export time. Only the hashes those impls call
(threefry2x32, and threefry4x32 / philox2x32 / philox4x32 of the other impls) are written out
here, in integer ONNX ops. The ``rbg`` impls use XLA's RngBitGenerator, whose bits ONNX
cannot reproduce; they stay unsupported.

Uniform floats are made from random bits by ``bitcast_convert_type`` (core/lowerings/bits.py).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.registry import lowering, register

_THREEFRY_OPS = ("Add", "BitShift", "BitwiseOr", "BitwiseXor")
# a key primitive lowered through its JAX implementation: threefry and the key plumbing around it
_KEY_IMPL_OPS = (
    *_THREEFRY_OPS,
    "BitwiseAnd",
    "Cast",
    "Concat",
    "ConstantOfShape",
    "Less",
    "Max",
    "Min",
    "Mul",
    "Range",
    "Reshape",
    "Slice",
    "Split",
    "Squeeze",
    "Transpose",
    "Unsqueeze",
    "Where",
)


def _identity(ctx: LoweringContext, keys: ir.Value, *, impl: object = None) -> ir.Value:
    del impl  # (random_wrap's) the PRNG the key data is for: the data is the key here
    return keys


for _name in ("random_wrap", "random_unwrap", "random_clone"):
    register(_name, _identity, key_data=True)


def _through_key_impl(ctx: LoweringContext, *operands: ir.Value, **params: Any) -> list[ir.Value]:
    return ctx.lower_sub(jxi.prng_impl_jaxpr(ctx.eqn), operands)


for _name in ("random_seed", "random_bits", "random_split", "random_fold_in"):
    register(_name, _through_key_impl, key_data=True, onnx_ops=_KEY_IMPL_OPS)


@lowering(
    "iota_2x32_shape",
    onnx_ops=(
        "Range",
        "Reshape",
        "Cast",
        "ConstantOfShape",
        "BitShift",
        "Add",
        "Mul",
        "Unsqueeze",
        "Squeeze",
    ),
)
def _iota_2x32_shape(
    ctx: LoweringContext, *, shape: tuple[Any, ...], out_sharding: object = None
) -> list[ir.Value]:
    """Row-major flat indices of ``shape`` as 64-bit counts split into (high, low) uint32 words.

    Of a symbolic shape, the counts are the broadcast sum of each axis's iota times its
    stride, not a Range over the product of the dims reshaped: tract 0.23 cannot relate the
    length of ``Range(0, ReduceProd(shape))`` to the dims (its Reshape fails, "invalid"),
    while a sum of per-axis iotas has the shape of the broadcast."""
    del out_sharding  # (JAX 0.12) where the result lives on a mesh: one device here
    if all(isinstance(d, (int, np.integer)) for d in shape):
        size = int(np.prod(shape, dtype=np.int64))
        counts = ctx.reshape(ctx.op.Range(ctx.ints(0), ctx.ints(size), ctx.ints(1)), shape)
        if size <= 2**32:
            high = ctx.op.ConstantOfShape(ctx.shape_tensor(shape), value=np.zeros(1, np.uint32))
            return [high, ctx.cast(counts, np.uint32)]
    else:
        counts = None
        for axis, d in enumerate(shape):
            stride = math.prod(shape[axis + 1 :])
            term = ctx.iota(d, axis=axis, rank=len(shape))
            if jxi.is_symbolic_dim(stride) or int(stride) != 1:
                term = ctx.op.Mul(term, ctx.dim_scalar(stride))
            counts = term if counts is None else ctx.op.Add(counts, term)
    # the words of the count as uint64 (tract 0.23 failed an int64 Div by 2**32: "Division by zero")
    assert counts is not None  # a symbolic shape has an axis
    counts = ctx.cast(counts, np.uint64)
    high = ctx.op.BitShift(counts, ctx.const(32, dtype=np.uint64), direction="RIGHT")
    return [ctx.cast(high, np.uint32), ctx.cast(counts, np.uint32)]


# -- the counter-based hashes of JAX's key impls (Salmon et al., "Parallel random numbers:
# as easy as 1, 2, 3", SC 2011), in uint32 words; constants as in JAX / Random123.


class _Words:
    """uint32 arithmetic for the hashes: Add wraps modulo 2**32 in onnxruntime, as in XLA."""

    def __init__(self, ctx: LoweringContext) -> None:
        self.op = ctx.op
        self.const = functools.cache(lambda value, dtype=np.uint32: ctx.const(value, dtype=dtype))

    def add(self, *xs: ir.Value | int) -> ir.Value:
        total, *rest = [x if isinstance(x, ir.Value) else self.const(x) for x in xs]
        for x in rest:
            total = self.op.Add(total, x)
        return total

    def xor(self, *xs: ir.Value | int) -> ir.Value:
        total, *rest = [x if isinstance(x, ir.Value) else self.const(x) for x in xs]
        for x in rest:
            total = self.op.BitwiseXor(total, x)
        return total

    def rotate_left(self, x: ir.Value, r: int) -> ir.Value:
        left = self.op.BitShift(x, self.const(r), direction="LEFT")
        return self.op.BitwiseOr(left, self.op.BitShift(x, self.const(32 - r), direction="RIGHT"))

    def mix(self, x: list[ir.Value], a: int, b: int, r: int) -> None:
        """One threefry mix on words a, b: add b into a, rotate b, xor a into b."""
        x[a] = self.add(x[a], x[b])
        x[b] = self.xor(x[a], self.rotate_left(x[b], r))

    def mulhilo(self, m: int, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(low, high) words of the 64-bit product m * x."""
        product = self.op.Mul(self.op.Cast(x, to=ir.DataType.UINT64), self.const(m, np.uint64))
        high = self.op.BitShift(product, self.const(32, np.uint64), direction="RIGHT")
        return self.op.Cast(product, to=ir.DataType.UINT32), self.op.Cast(
            high, to=ir.DataType.UINT32
        )


_SKEIN_PARITY = 0x1BD11BDA
_THREEFRY2X32_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # per group of four rounds
_THREEFRY4X32_ROTATIONS = (
    (10, 26),
    (11, 21),
    (13, 27),
    (23, 5),
    (6, 20),
    (17, 11),
    (25, 10),
    (18, 20),
)
_PHILOX_WEYL = (0x9E3779B9, 0xBB67AE85)  # key bumps per round
_PHILOX2X32_M = 0xD256D193
_PHILOX4X32_M = (0xD2511F53, 0xCD9E8D57)


@lowering("threefry2x32", onnx_ops=_THREEFRY_OPS)
def _threefry2x32(ctx: LoweringContext, *keys_and_counts: ir.Value) -> list[ir.Value]:
    w = _Words(ctx)
    k0, k1, x0, x1 = keys_and_counts
    ks = [k0, k1, w.xor(k0, k1, _SKEIN_PARITY)]
    x = [w.add(x0, ks[0]), w.add(x1, ks[1])]
    for group in range(5):  # 20 rounds, the key injected after every four
        for r in _THREEFRY2X32_ROTATIONS[group % 2]:
            w.mix(x, 0, 1, r)
        x = [w.add(x[0], ks[(group + 1) % 3]), w.add(x[1], ks[(group + 2) % 3], group + 1)]
    return x


@lowering("threefry4x32", onnx_ops=_THREEFRY_OPS)
def _threefry4x32(ctx: LoweringContext, *keys_and_counts: ir.Value) -> list[ir.Value]:
    w = _Words(ctx)
    keys, counts = keys_and_counts[:4], keys_and_counts[4:]
    ks = [*keys, w.xor(*keys, _SKEIN_PARITY)]
    x = [w.add(c, k) for c, k in zip(counts, ks, strict=False)]
    for rnd in range(20):
        r0, r1 = _THREEFRY4X32_ROTATIONS[rnd % 8]
        (a0, b0), (a1, b1) = ((0, 1), (2, 3)) if rnd % 2 == 0 else ((0, 3), (2, 1))
        w.mix(x, a0, b0, r0)
        w.mix(x, a1, b1, r1)
        if rnd % 4 == 3:
            i = rnd // 4
            x = [w.add(x[j], ks[(j + 1 + i) % 5]) for j in range(4)]
            x[3] = w.add(x[3], i + 1)
    return x


@lowering("philox2x32", onnx_ops=("Mul", "Cast", "BitShift", "BitwiseXor", "Add"))
def _philox2x32(ctx: LoweringContext, k0: ir.Value, x0: ir.Value, x1: ir.Value) -> list[ir.Value]:
    w = _Words(ctx)
    for rnd in range(10):
        if rnd:
            k0 = w.add(k0, _PHILOX_WEYL[0])
        lo, hi = w.mulhilo(_PHILOX2X32_M, x0)
        x0, x1 = w.xor(hi, x1, k0), lo
    return [x0, x1]


@lowering("philox4x32", onnx_ops=("Mul", "Cast", "BitShift", "BitwiseXor", "Add"))
def _philox4x32(
    ctx: LoweringContext, k0: ir.Value, k1: ir.Value, *counts: ir.Value
) -> list[ir.Value]:
    w = _Words(ctx)
    x0, x1, x2, x3 = counts
    for rnd in range(10):
        if rnd:
            k0, k1 = w.add(k0, _PHILOX_WEYL[0]), w.add(k1, _PHILOX_WEYL[1])
        lo0, hi0 = w.mulhilo(_PHILOX4X32_M[0], x0)
        lo1, hi1 = w.mulhilo(_PHILOX4X32_M[1], x2)
        x0, x1, x2, x3 = w.xor(hi1, x1, k0), lo1, w.xor(hi0, x3, k1), lo0
    return [x0, x1, x2, x3]
