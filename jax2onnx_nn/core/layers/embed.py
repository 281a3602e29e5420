"""Embedding lookups as ONNX Gather, with ``jnp.take``'s index semantics.

``jnp.take`` (what ``nnx.Embed`` and Keras's ``Embedding`` call) wraps an index in ``[-n, 0)``
once and gives a row of NaN for an index out of range, where ONNX Gather fails: the index is
made safe first and the rows it did not name are NaN after the Gather.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import ir_dtype
from jax2onnx_nn.core.lower import LoweringContext


def take_rows(ctx: LoweringContext, table: ir.Value, index: ir.Value, rows: int) -> ir.Value:
    """``jnp.take(table, index, axis=0)`` for a float ``table`` of ``rows`` rows and an
    integer ``index`` (cast to int64 unless int32 or int64)."""
    if index.dtype not in (ir.DataType.INT32, ir.DataType.INT64):
        index = ctx.op.Cast(index, to=ir_dtype(np.int64))
    index_dtype = index.dtype.numpy() if index.dtype is not None else np.dtype(np.int64)
    valid = ctx.op.And(
        ctx.op.GreaterOrEqual(index, ctx.const(-rows, dtype=index_dtype)),
        ctx.op.Less(index, ctx.const(rows, dtype=index_dtype)),
    )
    safe = ctx.op.Where(valid, index, ctx.const(0, dtype=index_dtype))
    found = ctx.op.Gather(table, safe, axis=0)
    dtype = table.dtype.numpy() if table.dtype is not None else np.dtype(np.float32)
    return ctx.op.Where(
        ctx.op.Unsqueeze(valid, ctx.ints([-1])), found, ctx.const(np.nan, dtype=dtype)
    )


TAKE_ROWS_OPS = ("Gather", "Where", "Cast", "Less", "GreaterOrEqual", "And", "Unsqueeze")
"""The ops :func:`take_rows` may emit (a rule using it declares them)."""
