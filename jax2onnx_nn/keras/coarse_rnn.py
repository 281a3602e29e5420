"""Keras 3 recurrent layers as ONNX's: ``LSTM``, ``GRU``, ``SimpleRNN`` and ``Bidirectional``
over them (``merge_mode="concat"``) as one ONNX ``LSTM`` / ``GRU`` / ``RNN`` over the whole
sequence, between a Transpose in and out (ONNX's sequences are time-major). Where the batch or
the sequence length is symbolic, the op sits in :meth:`LoweringContext.unless_empty` on its
input: onnxruntime aborts the process on a recurrent op over 0 rows, and Keras's result is then
zeros.

Keras's gates: LSTM i, f, c, o (ONNX: i, o, f, c, reordered at export time); GRU z, r, h (ONNX's
order); ``reset_after=True`` (the default, ``bias`` of shape ``(2, 3 * units)``: the input
side's, then the recurrent side's) is ONNX's ``linear_before_reset=1``, ``reset_after=False``
its ``0``. The ONNX defaults are Keras's default activations (``tanh``, and ``sigmoid`` for the
gates); other activations, masks, initial states, ``stateful``, ``go_backwards`` outside a
``Bidirectional``, returned states of a ``Bidirectional`` and the other merge modes keep the
lax path (a ``lax.scan`` of Keras's cell).
"""

from __future__ import annotations

from typing import Any

import jax
import keras
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.layers import rnn
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
    coarse_lowering,
    map_calls,
)
from jax2onnx_nn.core.symbolic import has_zero
from jax2onnx_nn.keras.coarse import FLOATS, out_dtype, plain, variable_array

L = keras.layers

_KINDS: dict[type, tuple[str, type, tuple[int, ...]]] = {
    # layer -> ONNX op, its cell class, ONNX's gate order from Keras's
    L.LSTM: ("LSTM", L.LSTMCell, (0, 3, 1, 2)),
    L.GRU: ("GRU", L.GRUCell, (0, 1, 2)),
    L.SimpleRNN: ("RNN", L.SimpleRNNCell, (0,)),
}


def _layer_spec(layer: Any, x: Any) -> dict[str, Any] | None:
    """The weights and params of a recurrent layer the ONNX op models, or None."""
    kind = _KINDS.get(type(layer))
    if kind is None or not plain(layer, type(layer)) or not plain(layer.cell, kind[1]):
        return None
    cell = layer.cell
    recurrent = getattr(cell, "recurrent_activation", keras.activations.sigmoid)
    if (
        layer.stateful
        or cell.activation is not keras.activations.tanh
        or recurrent is not keras.activations.sigmoid
        or np.dtype(x.dtype) not in FLOATS
        or x.ndim != 3
        or has_zero(x.shape[1:])
    ):
        return None
    return {
        "kernel": variable_array(cell.kernel),
        "recurrent": variable_array(cell.recurrent_kernel),
        "bias": variable_array(cell.bias) if cell.use_bias else None,
        "op": kind[0],
        "order": kind[2],
        "units": int(cell.units),
        "reset_after": bool(getattr(cell, "reset_after", False)),
    }


def _sequence_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``call(sequences, initial_state=None, mask=None, training=...)`` without a state or mask."""
    if len(args) != 1 or set(kwargs) - {"training", "mask", "initial_state"}:
        return NotApplicable
    if kwargs.get("mask") is not None or kwargs.get("initial_state") is not None:
        return NotApplicable
    return args[0]


def _recurrent_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = _sequence_input(args, kwargs)
    spec = None if x is NotApplicable else _layer_spec(layer, x)
    if spec is None or layer.go_backwards:
        return NotApplicable
    return CoarseCall(
        "keras_rnn",
        inputs={"x": x},
        weights={"kernel": spec["kernel"], "recurrent": spec["recurrent"], "bias": spec["bias"]},
        params={
            "op": spec["op"],
            "order": spec["order"],
            "units": spec["units"],
            "reset_after": spec["reset_after"],
            "sequences": bool(layer.return_sequences),
            "states": bool(layer.return_state),
            "bidirectional": False,
        },
    )


@map_calls(L.Bidirectional, "call")
def _bidirectional_handler(layer: Any, *args: Any, **kwargs: Any) -> Any:
    x = _sequence_input(args, kwargs)
    if x is NotApplicable or not plain(layer, L.Bidirectional) or layer.merge_mode != "concat":
        return NotApplicable
    forward, backward = layer.forward_layer, layer.backward_layer
    first, second = _layer_spec(forward, x), _layer_spec(backward, x)
    if first is None or second is None or layer.return_state:
        return NotApplicable
    specs = [first, second]
    same = ("op", "units", "reset_after")
    if any(specs[0][k] != specs[1][k] for k in same) or (specs[0]["bias"] is None) != (
        specs[1]["bias"] is None
    ):
        return NotApplicable
    if forward.go_backwards or not backward.go_backwards:
        return NotApplicable
    if forward.return_sequences != backward.return_sequences:
        return NotApplicable
    weights = {f"{r}{i}": s[r] for i, s in enumerate(specs) for r in ("kernel", "recurrent")}
    weights.update({f"bias{i}": s["bias"] for i, s in enumerate(specs)})
    return CoarseCall(
        "keras_rnn",
        inputs={"x": x},
        weights=weights,
        params={
            "op": specs[0]["op"],
            "order": specs[0]["order"],
            "units": specs[0]["units"],
            "reset_after": specs[0]["reset_after"],
            "sequences": bool(forward.return_sequences),
            "states": False,
            "bidirectional": True,
        },
    )


for _cls in _KINDS:
    map_calls(_cls, "call")(_recurrent_handler)


def _onnx_weights(
    ctx: LoweringContext,
    ops: Operands,
    suffix: str,
    *,
    order: tuple[int, ...],
    units: int,
    reset_after: bool,
    dtype: np.dtype,
) -> tuple[ir.Value, ir.Value, ir.Value | None]:
    """ONNX's ``W``, ``R`` and ``B`` of one direction (a leading dim of 1)."""
    w, r = (
        rnn.gate_weight(ctx, ctx.cast(ops[role + suffix], dtype), order, units, gate_axis=1)
        for role in ("kernel", "recurrent")
    )
    if "bias" + suffix not in ops:
        return w, r, None
    bias = ctx.cast(ops["bias" + suffix], dtype)
    if reset_after:  # (2, 3 * units): the input side's, then the recurrent side's, as ONNX's B
        return w, r, ctx.reshaped_weight(bias, [1, 2 * len(order) * units])
    return w, r, rnn.gate_biases(ctx, bias, order, units, dtype)


@coarse_lowering(
    "keras_rnn",
    onnx_ops=("LSTM", "GRU", "RNN", "Transpose", "Squeeze", "Reshape", "Concat", "Split")
    + rnn.GUARD_OPS
    + ("ConstantOfShape", "Shape"),
    min_opset=14,
    covers=("keras.layers.LSTM", "keras.layers.GRU", "keras.layers.SimpleRNN"),
)
def _recurrent(
    ctx: LoweringContext,
    ops: Operands,
    *,
    op: str,
    order: tuple[int, ...],
    units: int,
    reset_after: bool,
    sequences: bool,
    states: bool,
    bidirectional: bool,
) -> Any:
    dtype = out_dtype(ctx)
    batch, steps = ops.aval("x").shape[:2]
    if dtype not in FLOATS or has_zero(ops.aval("x").shape):
        return NotApplicable
    suffixes = ("0", "1") if bidirectional else ("",)
    found = [
        _onnx_weights(ctx, ops, s, order=order, units=units, reset_after=reset_after, dtype=dtype)
        for s in suffixes
    ]
    w, r, b = (
        found[0][i]
        if len(found) == 1 or found[0][i] is None
        else ctx.op.Concat(*(f[i] for f in found), axis=0)
        for i in range(3)
    )
    attrs: dict[str, Any] = {"hidden_size": units}
    if op == "GRU":
        attrs["linear_before_reset"] = int(reset_after)
    if bidirectional:
        attrs["direction"] = "bidirectional"
    n_states = 2 if op == "LSTM" else 1
    x = ctx.transpose(ctx.cast(ops["x"], dtype), [1, 0, 2])  # [T, B, in]
    directions = len(suffixes)
    # Y [T, D, B, units], then Y_h (and Y_c) [D, B, units]: those the layer returns
    shapes = [(steps, directions, batch, units)] + [(directions, batch, units)] * n_states
    wanted = ([0] if sequences else []) + ([1] if states or not sequences else [])
    wanted += list(range(2, 1 + n_states)) if states else []
    # onnxruntime aborts the process on a batch or sequence of 0: Keras's result is then zeros

    def run(full: LoweringContext) -> list[ir.Value]:
        outputs = getattr(full.op, op)(x, w, r, b, _outputs=1 + n_states, **attrs)
        return [outputs[i] for i in wanted]

    returned = ctx.unless_empty(
        [x] if jxi.is_symbolic_dim(batch) or jxi.is_symbolic_dim(steps) else [],
        [(dtype, shapes[i]) for i in wanted],
        run,
        lambda empty: [empty.zeros(jax.ShapeDtypeStruct(shapes[i], dtype)) for i in wanted],
    )
    y, *last = returned if sequences else [None, *returned]
    if sequences and not bidirectional:  # Y [T, 1, B, units] -> [B, T, units]
        # (a recurrent layer after this one transposes back: the two Transposes cancel)
        out = ctx.op.Transpose(ctx.op.Squeeze(y, ctx.ints([1])), perm=[1, 0, 2])
    elif sequences:  # Y [T, 2, B, units] -> [B, T, 2 * units]
        out = ctx.op.Transpose(y, perm=[2, 0, 1, 3])
        out = ctx.reshape(out, [batch, steps, directions * units])
    elif not bidirectional:  # Y_h [1, B, units]
        out = ctx.op.Squeeze(last[0], ctx.ints([0]))
    else:  # Y_h [2, B, units] -> [B, 2 * units]
        out = ctx.reshape(ctx.op.Transpose(last[0], perm=[1, 0, 2]), [batch, 2 * units])
    if not states:
        return out
    return [out, *(ctx.op.Squeeze(s, ctx.ints([0])) for s in last)]


__all__: list[str] = []
