"""lax.fft (FFT, IFFT, RFFT, IRFFT over 1-3 trailing axes) on (real, imag) pairs, one axis at a
time, by ONNX ``DFT`` or by one ``MatMul`` against an exact DFT matrix.

Which one, per axis (measured with ``benchmarks/fft_accuracy.py``): onnxruntime's DFT is a
radix-2 FFT for power-of-two lengths (accurate, O(n log n)) and a direct sum with float32
twiddle angles otherwise (float32 error ~n * 1e-7 of the spectrum's max: 2e-5 at n = 100);
its inverse scales float64 by a float32 1/n (5e-8 error). So: a static length that is not a
power of two (up to :data:`MATMUL_MAX`) or is small is a MatMul with a matrix computed in
float64 at export (angles reduced exactly, mod n); power-of-two and symbolic lengths use
DFT; inverses are forward transforms of the conjugate, scaled by us in the data's dtype.
Below opset 17 (no DFT) a symbolic length is a MatMul too, its matrix built at run time from
the length by the same float64 arithmetic (:meth:`_Axis.runtime_matmul`); so is every length a
target without DFT (TensorRT, core/targets/tensorrt.py) takes: see :data:`NO_DFT_MAX`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.registry import lowering

_F64 = np.dtype(np.float64)

MATMUL_MAX = 1024  # longest non-power-of-two axis done by MatMul (its matrix: (2n)^2 floats)
MATMUL_ALWAYS = 32  # up to this length MatMul is also used for powers of two (it is faster)

FFT, IFFT, RFFT, IRFFT = 0, 1, 2, 3

DFT_OPSET = 17  # the first opset with ONNX DFT: below it every static length is a MatMul


# A target without DFT (TensorRT) gets MatMuls: up to MATMUL_MAX against a stored matrix, up to
# NO_DFT_MAX (and at a symbolic length) against matrices built at run time; a longer static axis
# stays a DFT, which the export reports before writing. Measured on onnxruntime, float32, against
# numpy's float64 FFT: at most 5e-7 of the spectrum's max for n = 32..4096, either way
# (JAX's own FFT: 1.6e-7); the limit is the matrices' size ((2n)^2 floats: 256 MB at 4096).
NO_DFT_MAX = 4096


def _use_matmul(n: Any, ctx: LoweringContext) -> bool:
    """A static length done by a MatMul against a matrix computed at export."""
    if jxi.is_symbolic_dim(n):
        return False
    n, opset = int(n), ctx.opset
    return (
        opset < DFT_OPSET
        or n <= MATMUL_ALWAYS
        or (n & (n - 1) != 0 and n <= MATMUL_MAX)
        or not ctx.target.runs("DFT")
        and n <= MATMUL_MAX
    )


def _runtime_matmul(n: Any, ctx: LoweringContext) -> bool:
    """A length done by a MatMul against matrices built at run time: a symbolic one below opset
    17, and one up to NO_DFT_MAX or symbolic for a target without DFT."""
    return (
        ctx.opset < DFT_OPSET
        or not ctx.target.runs("DFT")
        and (jxi.is_symbolic_dim(n) or int(n) <= NO_DFT_MAX)
    )


def _angles(rows: int, cols: int, n: int) -> np.ndarray:
    """2 pi (t k mod n) / n for t < rows, k < cols: exact reduction before the float64 angle."""
    t, k = np.arange(rows)[:, None], np.arange(cols)[None, :]
    return 2 * np.pi * ((t * k) % n) / n


def dft_matrix(n: int, kind: int, dtype: Any) -> np.ndarray:
    """The real matrix M with ``pairs.reshape(..., 2 * n_in) @ M`` the transform over one
    axis of length ``n`` (pairs interleaved (re0, im0, re1, ...); RFFT takes real input,
    IRFFT gives real output). Inverses include 1/n; IRFFT weighs the bins k and n-k, and
    ignores the imaginary parts of bins 0 and n/2, as numpy and JAX do."""
    m = n // 2 + 1
    if kind in (FFT, IFFT):
        theta = _angles(n, n, n)
        c, s = np.cos(theta), np.sin(theta) * (1 if kind == IFFT else -1)
        out = np.empty((2 * n, 2 * n))
        out[0::2, 0::2], out[0::2, 1::2] = c, s  # re_t contributes (c, s) to (re_k, im_k)
        out[1::2, 0::2], out[1::2, 1::2] = -s, c  # im_t contributes (-s, c)
        if kind == IFFT:
            out /= n
    elif kind == RFFT:
        theta = _angles(n, m, n)
        out = np.empty((n, 2 * m))
        out[:, 0::2], out[:, 1::2] = np.cos(theta), -np.sin(theta)
    else:
        theta = _angles(m, n, n)
        weight = np.full((m, 1), 2.0)
        weight[0] = 1.0
        if n % 2 == 0:
            weight[-1] = 1.0
        out = np.empty((2 * m, n))
        out[0::2], out[1::2] = weight * np.cos(theta) / n, -weight * np.sin(theta) / n
    return out.astype(dtype)


class _Axis:
    """Transforms over one axis of a (real, imag) pair tensor (rank = complex rank + 1)."""

    def __init__(self, ctx: LoweringContext, dtype: np.dtype, rank: int) -> None:
        self.ctx, self.op, self.dtype, self.rank = ctx, ctx.op, dtype, rank

    def _to_last(self, x: ir.Value, axis: int, last: int) -> tuple[ir.Value, list[int] | None]:
        if axis == last:
            return x, None
        perm = [d for d in range(self.rank) if d != axis]
        perm.insert(last, axis)
        return self.op.Transpose(x, perm=perm), perm

    def matmul(self, x: ir.Value, axis: int, n: int, kind: int) -> ir.Value:
        """One MatMul over ``axis`` (moved before the pair dim, and back)."""
        real_in, real_out = kind == RFFT, kind == IRFFT
        last = self.rank - 2  # the last axis of the values (of a real input: its last)
        x, perm = self._to_last(x, axis, last)
        keep = [0] * last  # (sizes, not -1: a batch dim may be 0)
        matrix = dft_matrix(n, kind, self.dtype)
        if not real_in:  # (..., n_in, 2) -> (..., 2 n_in)
            x = self.op.Reshape(x, self.ctx.ints([*keep, matrix.shape[0]]))
        y = self.op.MatMul(x, self.ctx.const(matrix))
        if not real_out:  # (..., 2 n_out) -> (..., n_out, 2)
            y = self.op.Reshape(y, self.ctx.ints([*keep, matrix.shape[1] // 2, 2]))
        if perm is not None:  # (only complex-to-complex axes are moved)
            y = self.op.Transpose(y, perm=[int(p) for p in np.argsort(perm)])
        return y

    def _trig(self, n: ir.Value, rows: ir.Value, cols: ir.Value) -> tuple[ir.Value, ir.Value]:
        """cos and sin of the angles of :func:`_angles` at run time (int64 scalars ``n``,
        ``rows``, ``cols``): t k reduced mod n in int64, the angle and its cos/sin in float64."""
        ctx = self.ctx
        t = self.op.Unsqueeze(self.op.Range(ctx.ints(0), rows, ctx.ints(1)), ctx.ints([1]))
        k = self.op.Range(ctx.ints(0), cols, ctx.ints(1))
        turns = ctx.cast(self.op.Mod(self.op.Mul(t, k), n), _F64)
        theta = self.op.Div(self.op.Mul(turns, ctx.const(2 * np.pi, dtype=_F64)), ctx.cast(n, _F64))
        return self.op.Cos(theta), self.op.Sin(theta)

    def runtime_matmul(self, x: ir.Value, axis: int, n: Any, kind: int) -> ir.Value:
        """:meth:`matmul` for a symbolic length (below opset 17): the real and imaginary parts
        times the cos and sin matrices of :func:`dft_matrix`, built at run time from ``n`` in
        float64 and cast to the data's dtype."""
        ctx, op = self.ctx, self.op
        last = self.rank - 2
        size = ctx.dim_scalar(n)
        half = op.Add(op.Div(size, ctx.ints(2)), ctx.ints(1))  # n // 2 + 1 bins of a real signal
        rows, cols = {
            FFT: (size, size),
            IFFT: (size, size),
            RFFT: (size, half),
            IRFFT: (half, size),
        }[kind]
        cos, sin = self._trig(size, rows, cols)
        if kind in (FFT, RFFT):
            sin = op.Neg(sin)
        if kind in (IFFT, IRFFT):  # 1/n, and IRFFT's bins k and n-k counted twice (0 and n/2 once)
            weight = ctx.const(1.0, dtype=_F64)
            if kind == IRFFT:
                k = ctx.cast(op.Range(ctx.ints(0), half, ctx.ints(1)), _F64)
                once = op.Or(
                    op.Equal(k, ctx.const(0.0, dtype=_F64)),
                    op.Equal(op.Add(k, k), ctx.cast(size, _F64)),
                )
                weight = op.Unsqueeze(
                    op.Where(once, ctx.const(1.0, dtype=_F64), ctx.const(2.0, dtype=_F64)),
                    ctx.ints([1]),
                )
            weight = op.Div(weight, ctx.cast(size, _F64))
            cos, sin = op.Mul(cos, weight), op.Mul(sin, weight)
        cos, sin = ctx.cast(cos, self.dtype), ctx.cast(sin, self.dtype)
        if kind == RFFT:  # real (..., n) -> pairs (..., n // 2 + 1, 2)
            parts = [op.MatMul(x, cos), op.MatMul(x, sin)]
            return op.Concat(*[op.Unsqueeze(p, ctx.ints([-1])) for p in parts], axis=-1)
        x, perm = self._to_last(x, axis, last)
        re, im = (op.Gather(x, ctx.ints(i), axis=last + 1) for i in (0, 1))
        if kind == IRFFT:  # pairs (..., n // 2 + 1, 2) -> real (..., n)
            return op.Sub(op.MatMul(re, cos), op.MatMul(im, sin))
        parts = [
            op.Sub(op.MatMul(re, cos), op.MatMul(im, sin)),
            op.Add(op.MatMul(re, sin), op.MatMul(im, cos)),
        ]
        y = op.Concat(*[op.Unsqueeze(p, ctx.ints([-1])) for p in parts], axis=-1)
        if perm is not None:
            y = op.Transpose(y, perm=[int(p) for p in np.argsort(perm)])
        return y

    def dft(self, x: ir.Value, axis: int, onesided: bool = False) -> ir.Value:
        """Forward ONNX DFT over ``axis`` of its full length."""
        if self.ctx.opset >= 20:
            return self.op.DFT(x, None, self.ctx.ints(axis), onesided=int(onesided))
        return self.op.DFT(x, axis=axis, onesided=int(onesided))

    def conj_scaled(self, x: ir.Value, n: Any) -> ir.Value:
        """conj(x) / n (n = 1: conj(x))."""
        sign = self.ctx.const(np.array([1, -1], self.dtype))
        if isinstance(n, int) and n == 1:
            return self.op.Mul(x, sign)
        if not jxi.is_symbolic_dim(n):
            return self.op.Mul(x, self.ctx.const(np.array([1, -1], self.dtype) / int(n)))
        return self.op.Div(self.op.Mul(x, sign), self.ctx.cast(self.ctx.dim(n), self.dtype))

    def complex(self, x: ir.Value, axis: int, n: Any, inverse: bool) -> ir.Value:
        if _use_matmul(n, self.ctx):
            return self.matmul(x, axis, int(n), IFFT if inverse else FFT)
        if _runtime_matmul(n, self.ctx):
            return self.runtime_matmul(x, axis, n, IFFT if inverse else FFT)
        if not inverse:
            return self.dft(x, axis)
        return self.conj_scaled(
            self.dft(self.conj_scaled(x, 1), axis), n
        )  # ifft = conj(fft(conj)) / n

    def real_to_complex(self, x: ir.Value, n: Any) -> ir.Value:
        """RFFT over the last axis of a real tensor (rank - 1 dims)."""
        if _use_matmul(n, self.ctx):
            return self.matmul(x, self.rank - 2, int(n), RFFT)
        if _runtime_matmul(n, self.ctx):
            return self.runtime_matmul(x, self.rank - 2, n, RFFT)
        return self.dft(self.op.Unsqueeze(x, self.ctx.ints([-1])), self.rank - 2, onesided=True)

    def complex_to_real(self, x: ir.Value, n: Any) -> ir.Value:
        """IRFFT over the last complex axis: the full Hermitian spectrum (bins n-k are the
        conjugates of bins k), its inverse transform, the real part."""
        axis = self.rank - 2
        if _use_matmul(n, self.ctx):
            return self.matmul(x, axis, int(n), IRFFT)
        if _runtime_matmul(n, self.ctx):
            return self.runtime_matmul(x, axis, n, IRFFT)
        ctx = self.ctx
        m = n // 2 + 1
        # bins n-m .. 1 (reversed), conjugated: X[n - k] for k = m .. n-1
        mirrored = ctx.slice(x, [axis], [ctx.index(n - m)], [0], [-1])
        full = self.op.Concat(
            ctx.slice(x, [axis], [0], [ctx.index(m)]), self.conj_scaled(mirrored, 1), axis=axis
        )
        spectrum = self.dft(self.conj_scaled(full, 1), axis)
        real = self.op.Gather(spectrum, ctx.ints(0), axis=self.rank - 1)
        return self.op.Div(real, ctx.cast(ctx.dim(n), self.dtype))


@lowering(
    "fft",
    onnx_ops=(
        "DFT",
        "MatMul",
        "Reshape",
        "Transpose",
        "Mul",
        "Div",
        "Concat",
        "Slice",
        "Gather",
        "Unsqueeze",
        "Range",
        "Mod",
        "Cos",
        "Sin",
        "Cast",
        "Neg",
        "Add",
        "Sub",
        "Equal",
        "Or",
        "Where",
        "Squeeze",
    ),
    complex_pairs=True,
)
def _fft(
    ctx: LoweringContext, x: ir.Value, *, fft_type: Any, fft_lengths: tuple[Any, ...]
) -> ir.Value:
    kind = int(getattr(fft_type, "value", fft_type))
    complex_aval = ctx.aval_out if kind == RFFT else ctx.aval_in
    dtype = jxi.real_dtype(complex_aval.dtype)
    rank = len(complex_aval.shape) + 1  # of the pair tensor
    axes = list(range(rank - 1 - len(fft_lengths), rank - 1))
    t = _Axis(ctx, dtype, rank)
    if kind in (FFT, IFFT):
        for axis, n in zip(axes, fft_lengths, strict=True):
            x = t.complex(x, axis, n, inverse=kind == IFFT)
        return x
    if kind == RFFT:
        x = t.real_to_complex(x, fft_lengths[-1])
        for axis, n in zip(axes[:-1], fft_lengths[:-1], strict=True):
            x = t.complex(x, axis, n, inverse=False)
        return x
    for axis, n in zip(axes[:-1], fft_lengths[:-1], strict=True):
        x = t.complex(x, axis, n, inverse=True)
    return t.complex_to_real(x, fft_lengths[-1])
