"""dot_general -> MatMul/Einsum; conv_general_dilated -> Conv."""

from __future__ import annotations

import string

import onnx_ir as ir

from jax2onnx_nn.core.graph import ir_dtype
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.registry import lowering


@lowering("dot_general", onnx_ops=("MatMul", "Einsum"))
def _dot_general(ctx: LoweringContext, lhs: ir.Value, rhs: ir.Value, *, dimension_numbers: tuple, preferred_element_type: object = None, **_: object) -> ir.Value:
    (lc, rc), (lb, rb) = dimension_numbers
    lrank, rrank = len(ctx.avals_in[0].shape), len(ctx.avals_in[1].shape)
    out_dtype = onnx_aval(ctx.aval_out)[0]
    in_dtype = onnx_aval(ctx.avals_in[0])[0]
    if in_dtype != out_dtype:
        lhs = ctx.op.Cast(lhs, to=ir_dtype(out_dtype))
        rhs = ctx.op.Cast(rhs, to=ir_dtype(out_dtype))
    elif onnx_aval(ctx.avals_in[1])[0] != out_dtype:
        rhs = ctx.op.Cast(rhs, to=ir_dtype(out_dtype))
    letters = iter(string.ascii_letters)
    lhs_sub = [next(letters) for _ in range(lrank)]
    rhs_sub = [""] * rrank
    for a, b in zip(lb, rb):
        rhs_sub[b] = lhs_sub[a]
    for a, b in zip(lc, rc):
        rhs_sub[b] = lhs_sub[a]
    for i in range(rrank):
        if not rhs_sub[i]:
            rhs_sub[i] = next(letters)
    out = [lhs_sub[i] for i in lb]
    out += [lhs_sub[i] for i in range(lrank) if i not in lb and i not in lc]
    out += [rhs_sub[i] for i in range(rrank) if i not in rb and i not in rc]
    # plain matrix products become MatMul
    if not lb and len(lc) == 1 and lc[0] == lrank - 1 and rrank == 2 and rc[0] == 0:
        return ctx.op.MatMul(lhs, rhs)
    equation = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out)}"
    return ctx.op.Einsum(lhs, rhs, equation=equation)
