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
from typing import Any, TypeAlias

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.ir.values import numpy_dtype
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


def gate_weight(
    ctx: LoweringContext, w: ir.Value, order: Sequence[int], hidden: int, *, gate_axis: int
) -> ir.Value:
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


def gate_biases(
    ctx: LoweringContext,
    bias: ir.Value,
    order: Sequence[int],
    hidden: int,
    dtype: np.dtype,
    *,
    candidate: ir.Value | None = None,
) -> ir.Value:
    """ONNX's ``B``: the input side's bias ``(gates * hidden,)`` in ONNX's gate order, then the
    recurrent side's: zeros, except a GRU's candidate bias ``(hidden,)`` where one is given (it
    sits inside the reset product, where ``linear_before_reset=1`` applies ``Rb_h``)."""
    n = len(order)
    zeros = np.zeros(((n - 1) if candidate is not None else n) * hidden, dtype)
    known = None if candidate is None else candidate.const_value

    def array(b: np.ndarray) -> np.ndarray:
        tail = [] if known is None else [known.numpy()]
        return np.concatenate([*_reordered(np.split(b, n), order), zeros, *tail])[None]

    def nodes(v: ir.Value) -> ir.Value:
        blocks = ctx.op.Split(v, ctx.ints([hidden] * n), axis=0, _outputs=n)
        tail = [] if candidate is None else [candidate]
        return ctx.op.Unsqueeze(
            ctx.op.Concat(*_reordered(blocks, order), ctx.const(zeros), *tail, axis=0),
            ctx.ints([0]),
        )

    if candidate is not None and (known is None or candidate.producer() is not None):
        return nodes(bias)
    return ctx.derived_weight(
        bias, ("onnx_biases", *order, None if candidate is None else candidate.name), array, nodes
    )


GUARD_OPS = ("If", "Size", "Equal", "Identity")
"""The ops of :func:`step`'s guard against a batch of 0 (a rule using it declares them)."""


def step(
    ctx: LoweringContext,
    cell: Cell,
    x: ir.Value,
    states: Sequence[ir.Value],
    w: ir.Value,
    r: ir.Value,
    b: ir.Value | None,
    hidden: int,
) -> list[ir.Value]:
    """One step of ``cell`` over ``x`` ``[1, N, in]`` from ``states`` (each ``[1, N, hidden]``)
    with ONNX's ``W``, ``R`` and ``B``: the new states.

    A call with symbolic dims sits in :meth:`LoweringContext.unless_empty` on ``x`` (onnxruntime
    aborts the process on a GRU or LSTM of batch 0; the states are then the empty result; a
    feature dim of 0 never reaches here), in a loop or function body too: a scan of cell steps
    still becomes the cells over the whole sequence (:func:`stacked_cells` sees the op in its
    guard), guarded once there (control_flow)."""
    made: list[ir.Node] = []

    def run(where: LoweringContext) -> list[ir.Value]:
        outputs = getattr(where.op, cell.op)(
            x,
            w,
            r,
            b,
            None,
            *states,
            hidden_size=hidden,
            _outputs=1 + cell.states,
            **dict(cell.attrs),
        )
        made.append(outputs[0].producer())
        return list(outputs[1:])

    symbolic = any(
        jxi.is_symbolic_dim(d) for aval in ctx.avals_in for d in getattr(aval, "shape", ())
    )
    if not symbolic:
        return run(ctx)
    batch = (
        x.shape[1] if x.shape is not None and len(x.shape) == 3 and x.shape[1] is not None else None
    )
    types = [(numpy_dtype(x), None if batch is None else [1, batch, hidden]) for _ in states]
    new = ctx.unless_empty([x], types, run, lambda empty: states)
    guard = new[0].producer()
    if guard is not None and guard.op_type == "If":
        guard.meta[_GUARDED] = made[0]
    return new


_GUARDED = "jax2onnx_nn.guarded_cell"
"""The meta key of :func:`step`'s guard: the op it runs on a batch that is not empty."""


def library_step(
    ctx: LoweringContext,
    cell: Cell,
    x: ir.Value,
    states: Sequence[ir.Value],
    w_ih: ir.Value,
    w_hh: ir.Value,
    bias: ir.Value | None,
    *,
    hidden: int,
    dtype: np.dtype,
    gate_axis: int,
    candidate: ir.Value | None = None,
) -> list[ir.Value]:
    """:func:`step` with a library's kernels (gate blocks along ``gate_axis`` in its order) and
    its input-side bias (plus a GRU's recurrent ``candidate`` bias), laid out for ONNX once."""
    w, r = (gate_weight(ctx, k, cell.order, hidden, gate_axis=gate_axis) for k in (w_ih, w_hh))
    b = (
        None
        if bias is None
        else gate_biases(ctx, bias, cell.order, hidden, dtype, candidate=candidate)
    )
    return step(ctx, cell, x, states, w, r, b, hidden)


# -- a scan of cell steps as the cells over the whole sequence --------------------------------

_STATES = {"GRU": 1, "RNN": 1, "LSTM": 2}
"""The recurrent ONNX ops and how many states each carries (outputs 1.. of the op)."""

StackResult: TypeAlias = tuple[int, int | None] | tuple[None, int]
"""Where a scan result of a :class:`Stack` comes from: ``(cell, state)``, ``(cell, None)``
or ``(None, carry)`` (see :class:`Stack`)."""


@dataclass(frozen=True)
class Stack:
    """A scan body that is recurrent cells stacked within one time step, each an ONNX GRU /
    LSTM / RNN node run for one step (as the cell coarse ops write them).

    ``sources[i]`` is what cell ``i`` reads at each step: a scanned input (the outer value of
    the whole sequence) or the new ``h`` of an earlier cell (its index). ``states[i]`` are the
    carries holding its states; ``results`` says where each scan result comes from:
    ``(cell, state)`` for a carry (``state`` 0 is ``h``), ``(cell, None)`` for the cell's ``h``
    at every step, ``(None, k)`` for carry ``k`` passed through unchanged.
    """

    cells: tuple[ir.Node, ...]
    sources: tuple[ir.Value | int, ...]
    states: tuple[tuple[int, ...], ...]
    results: tuple[StackResult, ...]
    axes: tuple[int, ...] = (0,)
    """The axes that make a step's ``[N, features]`` (or ``[features]``) the ONNX op's
    ``[1, N, features]``."""


def _axes(node: ir.Node) -> tuple[int, ...] | None:
    """A (Un)squeeze's constant axes: ``(0,)`` adds the one-step time axis to ``[N, features]``,
    ``(0, 1)`` the time and batch axes to ``[features]`` (an Equinox cell without vmap)."""
    axes = node.inputs[1] if len(node.inputs) > 1 else None
    if axes is None or axes.const_value is None:
        return None
    found = tuple(axes.const_value.numpy().reshape(-1).tolist())
    return found if found in ((0,), (0, 1)) else None


def stacked_cells(
    nodes: Sequence[ir.Node],
    carries: Sequence[ir.Value],
    slices: dict[int, ir.Value],
    outs: Sequence[ir.Value],
) -> Stack | None:
    """The :class:`Stack` that a scan body is, or None.

    ``nodes`` are the body's nodes, ``carries`` its carry inputs, ``slices`` maps the id of
    each step's slice of a scanned input to that input's whole sequence, ``outs`` are the
    body's results (the new carries, then the per-step outputs). Matches only bodies whose
    every result is a cell's new state (or a carry passed through), every cell reading a
    scanned input or an earlier cell's new ``h``, starting from its own carries, with weights
    from outside the body: then one run of the cells over the sequence is the scan.
    """
    own = {id(node): i for i, node in enumerate(nodes)}
    carry_at = {id(v): k for k, v in enumerate(carries)}
    seen_axes: set[tuple[int, ...] | None] = set()

    def made_by(value: ir.Value | None, op_type: str) -> ir.Node | None:
        node = None if value is None else value.producer()
        if node is None or id(node) not in own or node.op_type != op_type or node.domain != "":
            return None
        return node

    def unsqueezed(value: ir.Value | None) -> ir.Value | None:
        node = made_by(value, "Unsqueeze")
        if node is None:
            return None
        seen_axes.add(_axes(node))
        return node.inputs[0]

    def state_of(value: ir.Value | None) -> tuple[ir.Node, int] | None:
        """(cell, state) when ``value`` is a cell's new state ``[N, hidden]`` (the op's
        output, or its guard's: see :func:`step`)."""
        node = made_by(value, "Squeeze")
        if node is None:
            return None
        seen_axes.add(_axes(node))
        out = node.inputs[0]
        cell = out.producer() if out is not None else None
        index = out.index() if out is not None else None
        if cell is None or index is None or id(cell) not in own:
            return None
        if _GUARDED in cell.meta:  # the guard's outputs are the op's states
            guard, cell = cell, cell.meta[_GUARDED]
            own.setdefault(id(cell), own[id(guard)])
            return cell, index
        if cell.domain != "" or cell.op_type not in _STATES or index == 0:
            return None
        return cell, index - 1

    def outside(value: ir.Value | None) -> bool:
        producer = None if value is None else value.producer()
        return value is None or (
            (producer is None or id(producer) not in own)
            and id(value) not in carry_at
            and id(value) not in slices
        )

    found: dict[int, ir.Node] = {}
    pending = [s[0] for s in map(state_of, outs) if s is not None]
    sources: dict[int, ir.Value | ir.Node] = {}
    states: dict[int, tuple[int, ...]] = {}
    while pending:
        cell = pending.pop()
        if id(cell) in found:
            continue
        found[id(cell)] = cell
        n = _STATES[cell.op_type]
        inputs = list(cell.inputs) + [None] * (8 - len(cell.inputs))
        attrs = cell.attributes
        if (
            not all(outside(v) for v in inputs[1:4])
            or inputs[4] is not None
            or inputs[1] is None
            or inputs[2] is None
        ):
            return None
        if cell.op_type == "LSTM" and inputs[7] is not None:
            return None
        if ("direction" in attrs and attrs["direction"].value != "forward") or (
            "layout" in attrs and attrs["layout"].value != 0
        ):
            return None
        initial = [unsqueezed(v) for v in inputs[5 : 5 + n]]
        if any(v is None or id(v) not in carry_at for v in initial):
            return None
        states[id(cell)] = tuple(carry_at[id(v)] for v in initial)
        x = unsqueezed(inputs[0])
        if x is not None and id(x) in slices:
            sources[id(cell)] = slices[id(x)]
            continue
        feed = state_of(x)
        if feed is None or feed[1] != 0:
            return None
        sources[id(cell)] = feed[0]
        pending.append(feed[0])
    cells = sorted(found.values(), key=lambda c: own[id(c)])
    index = {id(c): i for i, c in enumerate(cells)}
    results: list[StackResult] = []
    for k, out in enumerate(outs):
        state = state_of(out)
        if k < len(carries):
            if state is None:
                if out is not carries[k]:
                    return None
                results.append((None, k))
            elif states[id(state[0])][state[1]] != k:
                return None
            else:
                results.append((index[id(state[0])], state[1]))
        elif state is None or state[1] != 0:
            return None  # a per-step output other than a cell's h (ONNX gives no c per step)
        else:
            results.append((index[id(state[0])], None))
    written = [
        k
        for cell, s in results[: len(carries)]
        if cell is not None and s is not None
        for k in [states[id(cells[cell])][s]]
    ]
    used = [k for c in cells for k in states[id(c)]]
    if sorted(written) != sorted(used) or len(set(used)) != len(used):
        return (
            None  # a cell's state that is not carried to the next step (or two cells' in one carry)
        )
    axes = seen_axes.pop() if len(seen_axes) == 1 else None
    if axes is None:
        return None
    return Stack(
        tuple(cells),
        tuple(
            s if isinstance(s, ir.Value) else index[id(s)] for s in (sources[id(c)] for c in cells)
        ),
        tuple(states[id(c)] for c in cells),
        tuple(results),
        axes,
    )


def run_stack(
    ctx: LoweringContext, stack: Stack, init: Sequence[ir.Value], *, reverse: bool
) -> list[ir.Value]:
    """The scan results of :class:`Stack` ``stack`` from the carries ``init``: each cell run
    once over the whole sequence (``[T, N, features]``, reversed for a reverse scan), its
    ``Y`` ``[T, 1, N, hidden]`` the next cell's input. The sequence must not be empty
    (onnxruntime aborts on a GRU of length 0)."""
    axes, one = ctx.ints(list(stack.axes)), ctx.ints([1])
    batched = stack.axes == (0,)
    hs: list[ir.Value] = []  # each cell's h at every step, [T, N, hidden]
    finals: list[list[ir.Value]] = []
    for cell, source, states in zip(stack.cells, stack.sources, stack.states, strict=True):
        x = (
            hs[source]
            if isinstance(source, int)
            else source
            if batched
            else ctx.op.Unsqueeze(source, one)
        )
        attrs = {name: attr.value for name, attr in cell.attributes.items()}
        if reverse:
            attrs["direction"] = "reverse"
        initial = [ctx.op.Unsqueeze(init[k], axes) for k in states]
        weights = [*cell.inputs[1:4], None, None][:3]
        outputs = getattr(ctx.op, cell.op_type)(
            x, *weights, None, *initial, _outputs=1 + len(states), **attrs
        )
        hs.append(ctx.op.Squeeze(outputs[0], one))
        finals.append([ctx.op.Squeeze(v, axes) for v in outputs[1:]])
    per_step = hs if batched else [ctx.op.Squeeze(h, one) for h in hs]
    return [
        init[r[1]] if r[0] is None else per_step[r[0]] if r[1] is None else finals[r[0]][r[1]]
        for r in stack.results
    ]
