"""Recurrent cells as one time step of ONNX GRU / LSTM.

ONNX orders the gates z, r, h (GRU) and i, o, f, c (LSTM); flax and Equinox both order them
r, z, n and i, f, g, o, so the weights are reordered at export time. ONNX takes the kernels as
``(1, gates * hidden, in)`` (one direction) and the biases as ``(1, 2 * gates * hidden)``: the
input side's, then the recurrent side's. A GRU whose candidate is ``tanh(x W_n + b_n + r * (h
R_n + b_rn))`` (flax, Equinox) is ONNX's ``linear_before_reset=1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.lower import LoweringContext


@dataclass(frozen=True)
class Cell:
    """An ONNX recurrent op run for one time step: its gate order from the libraries' order,
    how many states it carries (h; h and c) and its attributes."""

    op: str
    order: tuple[int, ...]
    states: int
    attrs: tuple[tuple[str, int], ...] = ()


GRU = Cell("GRU", (1, 0, 2), 1, (("linear_before_reset", 1),))
"""ONNX's z, r, h from the r, z, n order of flax and Equinox; the candidate of both is
``linear_before_reset=1``'s."""
LSTM = Cell("LSTM", (0, 3, 1, 2), 2)
"""ONNX's i, o, f, c from the i, f, g, o order of flax and Equinox; no peepholes."""


def _reordered(blocks: Sequence[Any], order: Sequence[int]) -> list[Any]:
    return [blocks[i] for i in order]


def gate_weight(ctx: LoweringContext, w: ir.Value, order: Sequence[int], hidden: int, *, gate_axis: int) -> ir.Value:
    """A kernel with its gate blocks (``hidden`` rows each) along ``gate_axis`` in ONNX's order,
    as ONNX's ``(1, gates * hidden, in)``: ``(gates * hidden, in)`` (``gate_axis=0``, Equinox)
    or ``(in, gates * hidden)`` (``gate_axis=1``, flax) transposed."""
    n = len(order)

    def array(a: np.ndarray) -> np.ndarray:
        a = np.concatenate(_reordered(np.split(a, n, axis=gate_axis), order), axis=gate_axis)
        return (a.T if gate_axis == 1 else a)[None]

    def nodes(v: ir.Value) -> ir.Value:
        blocks = ctx.op.Split(v, ctx.ints([hidden] * n), axis=gate_axis, _outputs=n)
        v = ctx.op.Concat(*_reordered(blocks, order), axis=gate_axis)
        if gate_axis == 1:
            v = ctx.op.Transpose(v, perm=[1, 0])
        return ctx.op.Unsqueeze(v, ctx.ints([0]))

    return ctx.derived_weight(w, ("onnx_gates", gate_axis, *order), array, nodes)


def gate_biases(ctx: LoweringContext, bias: ir.Value, order: Sequence[int], hidden: int, dtype: np.dtype, *, candidate: ir.Value | None = None) -> ir.Value:
    """ONNX's ``B``: the input side's bias ``(gates * hidden,)`` in ONNX's gate order, then the
    recurrent side's: zeros, except a GRU's candidate bias ``(hidden,)`` where one is given (it
    sits inside the reset product, where ``linear_before_reset=1`` applies ``Rb_h``)."""
    n = len(order)
    zeros = np.zeros(((n - 1) if candidate is not None else n) * hidden, dtype)
    known = None if candidate is None else candidate.const_value

    def array(b: np.ndarray) -> np.ndarray:
        tail = [] if candidate is None else [known.numpy()]
        return np.concatenate([*_reordered(np.split(b, n), order), zeros, *tail])[None]

    def nodes(v: ir.Value) -> ir.Value:
        blocks = ctx.op.Split(v, ctx.ints([hidden] * n), axis=0, _outputs=n)
        tail = [] if candidate is None else [candidate]
        return ctx.op.Unsqueeze(ctx.op.Concat(*_reordered(blocks, order), ctx.const(zeros), *tail, axis=0), ctx.ints([0]))

    if candidate is not None and (known is None or candidate.producer() is not None):
        return nodes(bias)
    return ctx.derived_weight(bias, ("onnx_biases", *order, None if candidate is None else candidate.name), array, nodes)


def step(ctx: LoweringContext, cell: Cell, x: ir.Value, states: Sequence[ir.Value], w: ir.Value, r: ir.Value, b: ir.Value | None, hidden: int) -> list[ir.Value]:
    """One step of ``cell`` over ``x`` ``[1, N, in]`` from ``states`` (each ``[1, N, hidden]``)
    with ONNX's ``W``, ``R`` and ``B``: the new states."""
    outputs = getattr(ctx.op, cell.op)(x, w, r, b, None, *states, hidden_size=hidden, _outputs=1 + cell.states, **dict(cell.attrs))
    return list(outputs[1:])


def library_step(
    ctx: LoweringContext, cell: Cell, x: ir.Value, states: Sequence[ir.Value], w_ih: ir.Value, w_hh: ir.Value, bias: ir.Value | None,
    *, hidden: int, dtype: np.dtype, gate_axis: int, candidate: ir.Value | None = None,
) -> list[ir.Value]:
    """:func:`step` with a library's kernels (gate blocks along ``gate_axis`` in its order) and
    its input-side bias (plus a GRU's recurrent ``candidate`` bias), laid out for ONNX once."""
    w, r = (gate_weight(ctx, k, cell.order, hidden, gate_axis=gate_axis) for k in (w_ih, w_hh))
    b = None if bias is None else gate_biases(ctx, bias, cell.order, hidden, dtype, candidate=candidate)
    return step(ctx, cell, x, states, w, r, b, hidden)
