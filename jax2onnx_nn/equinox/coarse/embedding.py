"""``eqx.nn.Embedding`` as Gather (with JAX's index semantics) and ``eqx.nn.PReLU`` as
PRelu."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    is_array,
)
from jax2onnx_nn.equinox.coarse.common import (
    Levels,
    MakeWrapper,
    coarse_patch,
    eqx_lowering,
    float_arrays,
    operand_shape,
    out_dtype,
    plain,
)

# -- eqx.nn.Embedding: Gather, with JAX's index semantics ----------------------------------


def _embedding_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if (
        not plain(module, eqx.nn.Embedding)
        or not is_array(x)
        or x.ndim != 0
        or not np.issubdtype(x.dtype, np.integer)
    ):
        return NotApplicable
    if not is_array(module.weight) or module.weight.ndim != 2 or module.weight.shape[0] == 0:
        return NotApplicable
    return CoarseCall("eqx_embedding", inputs={"x": x}, weights={"weight": module.weight})


@eqx_lowering(
    "eqx_embedding",
    onnx_ops=("Gather", "Where", "Clip", "Add", "Less", "Cast"),
    covers=("eqx.nn.Embedding",),
)
def _embedding(ctx: LoweringContext, ops: Operands) -> Any:
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight"):
        return NotApplicable
    # JAX indexing: a negative index counts from the end, then the index is clamped
    rows = int(operand_shape(ops, "weight")[0])
    dtype = onnx_aval(ops.aval("x"))[0]
    index = ops["x"]
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        index, dtype = ctx.op.Cast(index, to=ir.DataType.INT64), np.dtype(np.int64)
        signed = np.issubdtype(onnx_aval(ops.aval("x"))[0], np.signedinteger)
    else:
        signed = True
    zero = ctx.const(np.asarray(0, dtype=dtype))
    if signed:
        index = ctx.op.Where(
            ctx.op.Less(index, zero),
            ctx.op.Add(index, ctx.const(np.asarray(rows, dtype=dtype))),
            index,
        )
    index = ctx.op.Clip(index, zero, ctx.const(np.asarray(rows - 1, dtype=dtype)))
    return ctx.op.Gather(ops["weight"], index, axis=0)


# -- eqx.nn.PReLU: PRelu -------------------------------------------------------------------


def _prelu_handler(module: Any, x: Any) -> Any:
    slope = module.negative_slope
    if not plain(module, eqx.nn.PReLU) or not float_arrays(x, slope) or slope.ndim > x.ndim:
        return NotApplicable
    return CoarseCall("eqx_prelu", inputs={"x": x}, weights={"slope": slope})


@eqx_lowering(
    "eqx_prelu",
    onnx_ops=("PRelu",),
    covers=("eqx.nn.PReLU",),
)
def _prelu(ctx: LoweringContext, ops: Operands) -> Any:
    levels = Levels(ctx)
    if (
        not levels.full("x")
        or not levels.unbatched("slope")
        or not kernels.supports("PRelu", out_dtype(ctx))
    ):
        return NotApplicable
    return ctx.op.PRelu(ops["x"], ops["slope"])


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of eqx.nn.Embedding and PReLU."""
    return [
        coarse_patch(eqx.nn.Embedding, _embedding_handler),
        coarse_patch(eqx.nn.PReLU, _prelu_handler),
    ]
