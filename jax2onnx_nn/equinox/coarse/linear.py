"""``eqx.nn.Linear`` as one Gemm (MatMul + Add beyond one batch dim)."""

from __future__ import annotations

from typing import Any

import equinox as eqx

from jax2onnx_nn.core.layers.dense import dense
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
)
from jax2onnx_nn.equinox.coarse.common import (
    Levels,
    MakeWrapper,
    coarse_patch,
    eqx_lowering,
    float_arrays,
    plain,
)


def _linear_handler(module: Any, x: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.Linear) or not float_arrays(x, module.weight, module.bias):
        return NotApplicable
    scalar_in, scalar_out = module.in_features == "scalar", module.out_features == "scalar"
    if x.ndim != (0 if scalar_in else 1):
        return NotApplicable
    return CoarseCall(
        "eqx_linear",
        inputs={"x": x},
        weights={"weight": module.weight, "bias": module.bias},
        params={"scalar_in": scalar_in, "scalar_out": scalar_out},
    )


@eqx_lowering(
    "eqx_linear",
    onnx_ops=("Gemm", "MatMul", "Add", "Transpose", "Squeeze", "Unsqueeze"),
    covers=("eqx.nn.Linear",),
)
def _linear(ctx: LoweringContext, ops: Operands, *, scalar_in: bool, scalar_out: bool) -> Any:
    levels = Levels(ctx)
    if not levels.full("x") or not levels.unbatched("weight", "bias"):
        return NotApplicable
    x, weight = ops["x"], ops["weight"]
    bias = ops.get("bias")
    if scalar_in:
        x = ctx.op.Unsqueeze(x, ctx.ints([-1]))
    y = dense(ctx, x, weight, bias, rank=len(levels) + 1, out_in=True)
    return ctx.op.Squeeze(y, ctx.ints([-1])) if scalar_out else y


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of eqx.nn.Linear."""
    return [
        coarse_patch(eqx.nn.Linear, _linear_handler),
    ]
