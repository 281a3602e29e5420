"""A dense layer: ``x @ kernel (+ bias)`` as one Gemm for a matrix ``x``, MatMul (+ Add) else."""

from __future__ import annotations

import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext


def dense(
    ctx: LoweringContext,
    x: ir.Value,
    kernel: ir.Value,
    bias: ir.Value | None,
    *,
    rank: int,
    out_in: bool = False,
    shared: bool = False,
) -> ir.Value:
    """``x @ kernel + bias`` for an ``x`` of ``rank``; ``out_in``: the kernel is ``(out, in)``
    (Equinox, an embedding's ``attend``), transposed at export time where it is a weight, by a
    node where it is ``shared`` with another layer (a tied embedding keeps one initializer)."""
    if rank == 2:
        return ctx.op.Gemm(x, kernel, bias, transB=1 if out_in else None)
    if not out_in:
        y = ctx.op.MatMul(x, kernel)
    elif rank == 1:
        y = ctx.op.MatMul(kernel, x)
    else:
        y = ctx.op.MatMul(
            x,
            ctx.op.Transpose(kernel, perm=[1, 0])
            if shared
            else ctx.transposed_weight(kernel, [1, 0]),
        )
    return y if bias is None else ctx.op.Add(y, bias)
