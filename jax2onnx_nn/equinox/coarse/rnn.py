"""``eqx.nn.GRUCell`` / ``LSTMCell`` as one step of ONNX GRU / LSTM."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import onnx_ir as ir

from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.layers import rnn
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
    flatten_batch,
    float_arrays,
    has_empty,
    operand_shape,
    out_dtype,
    plain,
    unflatten_batch,
)

# -- eqx.nn.GRUCell / LSTMCell: one step of ONNX GRU / LSTM -------------------------------


def _gru_handler(module: Any, input: Any, hidden: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.GRUCell) or not float_arrays(
        input, hidden, module.weight_ih, module.weight_hh, module.bias, module.bias_n
    ):
        return NotApplicable
    if input.ndim != 1 or hidden.ndim != 1:
        return NotApplicable
    return CoarseCall(
        "eqx_gru",
        inputs={"input": input, "hidden": hidden},
        weights={
            "weight_ih": module.weight_ih,
            "weight_hh": module.weight_hh,
            "bias": module.bias,
            "bias_n": module.bias_n,
        },
        params={"hidden_size": int(module.hidden_size)},
    )


def _lstm_handler(module: Any, input: Any, hidden: Any, *, key: Any = None) -> Any:
    if not isinstance(hidden, tuple) or len(hidden) != 2:
        return NotApplicable
    h, c = hidden
    if not plain(module, eqx.nn.LSTMCell) or not float_arrays(
        input, h, c, module.weight_ih, module.weight_hh, module.bias
    ):
        return NotApplicable
    if input.ndim != 1 or h.ndim != 1 or c.ndim != 1:
        return NotApplicable
    return CoarseCall(
        "eqx_lstm",
        inputs={"input": input, "h": h, "c": c},
        weights={"weight_ih": module.weight_ih, "weight_hh": module.weight_hh, "bias": module.bias},
        params={"hidden_size": int(module.hidden_size)},
    )


def _rnn_inputs(
    ctx: LoweringContext, ops: Operands, levels: Levels, roles: Sequence[str]
) -> list[ir.Value] | None:
    """Input and states as [1, N, features] (one time step, every vmap dim in N)."""
    if not all(levels.full(r) for r in roles):
        return None
    return [
        flatten_batch(ctx, ops[r], operand_shape(ops, r)[-1:], len(levels), front=(1,))
        for r in roles
    ]


def _rnn_output(ctx: LoweringContext, value: ir.Value, n_levels: int, aval: Any) -> ir.Value:
    """A [1, N, hidden] state as the cell's output (vmap dims, hidden)."""
    return unflatten_batch(ctx, value, n_levels, aval, front=1)


def _cell(
    cell: rnn.Cell,
    states: tuple[str, ...],
    ctx: LoweringContext,
    ops: Operands,
    *,
    hidden_size: int,
) -> Any:
    """One GRU / LSTM step for both cells: operands to ``[1, N, features]``, the layer
    emitter (eqx's gate order on axis 0; a GRU's ``bias_n`` is the recurrent candidate bias),
    the new states back to the cell's shape."""
    if has_empty(ctx):
        return NotApplicable
    levels = Levels(ctx)
    dtype = out_dtype(ctx)
    weights = [r for r in ops if r.startswith(("weight", "bias"))]
    inputs = _rnn_inputs(ctx, ops, levels, ("input", *states))
    if inputs is None or not levels.unbatched(*weights) or not kernels.supports(cell.op, dtype):
        return NotApplicable
    x, *carried = inputs
    new = rnn.library_step(
        ctx,
        cell,
        x,
        carried,
        ops["weight_ih"],
        ops["weight_hh"],
        ops.get("bias"),
        hidden=hidden_size,
        dtype=dtype,
        gate_axis=0,
        candidate=ops.get("bias_n"),
    )
    return [
        _rnn_output(ctx, state, len(levels), aval)
        for state, aval in zip(new, ctx.avals_out, strict=True)
    ]


for _name, _kind, _states, _module in (
    ("eqx_gru", rnn.GRU, ("hidden",), "GRUCell"),
    ("eqx_lstm", rnn.LSTM, ("h", "c"), "LSTMCell"),
):
    eqx_lowering(
        _name,
        onnx_ops=(_kind.op, "Reshape", "Squeeze", "Unsqueeze", "Concat", "Split", *rnn.GUARD_OPS),
        covers=(f"eqx.nn.{_module}",),
    )(functools.partial(_cell, _kind, _states))


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the GRU and LSTM cells."""
    return [
        coarse_patch(eqx.nn.GRUCell, _gru_handler),
        coarse_patch(eqx.nn.LSTMCell, _lstm_handler),
    ]
