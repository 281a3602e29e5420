"""Control flow: cond/switch -> If, while/fori_loop -> Loop (Scan when the trip count is static, or
bounded by ``loop_bound=``), scan -> Scan or Loop.

Bodies are child graphs. Operands and loop-invariant values (consts) are not passed in: a body
reads them from the enclosing graph (ONNX outer scope). Body inputs and outputs are stamped
with the dtype and shape of the jaxpr's avals, so every body graph is fully typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.graph import mark_required
from jax2onnx_nn.core.ir.values import dtype_of, shape_of
from jax2onnx_nn.core.layers import rnn
from jax2onnx_nn.core.lower import LoweringContext, OnnxType, onnx_aval
from jax2onnx_nn.core.passes.unpoisoned import UNPOISONED
from jax2onnx_nn.core.registry import lowering
from jax2onnx_nn.core.symbolic import same_dim

_BOOL_SCALAR: OnnxType = (np.dtype(np.bool_), ())
# Loop counters whose range int64 holds, so that the trip count ``hi - lo`` is exact.
_RANGE_DTYPES = frozenset(np.dtype(t) for t in (np.int16, np.int32, np.int64))
_COUNTER_DTYPES = frozenset(
    np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)
)


# -- body graphs ------------------------------------------------------------------------------


def _add_input(body: LoweringContext, name: str, aval: Any) -> ir.Value:
    return body.builder.add_input(name, *onnx_aval(aval))


def _loop_inputs(body: LoweringContext) -> tuple[ir.Value, ir.Value]:
    """The (iteration_num, cond) inputs every Loop body starts with."""
    return body.builder.add_input("iteration", np.int64, ()), body.builder.add_input(
        "cond", np.bool_, ()
    )


def _node(
    ctx: LoweringContext,
    op_type: str,
    inputs: Sequence[ir.Value | None],
    avals: Sequence[Any],
    **attrs: Any,
) -> list[ir.Value]:
    """A control-flow node with typed outputs (later nodes of the rule need their dtypes)."""
    outs = ctx.builder.add_node(op_type, inputs, attrs, num_outputs=len(avals))
    for value, aval in zip(outs, avals, strict=True):
        ctx.typed(value, aval)
    return outs


def _types(avals: Sequence[Any]) -> list[OnnxType]:
    return [onnx_aval(a) for a in avals]


# -- cond / switch ----------------------------------------------------------------------------


@lowering("platform_index", onnx_ops=())
def _platform_index(ctx: LoweringContext, *, platforms: Sequence[Any]) -> ir.Value:
    """``lax.platform_dependent``'s branch index: the CPU branch (the numerics an exported
    model is checked against), else the default branch (``None``)."""
    groups = list(platforms)
    index = next((i for i, g in enumerate(groups) if g is not None and "cpu" in g), None)
    if index is None:
        index = next((i for i, g in enumerate(groups) if g is None), len(groups))
    return ctx.const(index, dtype=ctx.aval_out.dtype)


@lowering("cond", onnx_ops=("If", "Equal", "Identity", "ConstantOfShape"), key_data=True)
def _cond(
    ctx: LoweringContext,
    index: ir.Value,
    *operands: ir.Value,
    branches: Sequence[Any],
    branches_platforms: Any = None,
) -> list[ir.Value]:
    # lax.platform_dependent's platforms per branch: its platform_index (the index here, a
    # constant) has chosen the branch already
    del branches_platforms
    if not ctx.avals_out:
        return []
    if len(branches) == 1:
        return ctx.lower_sub(branches[0], operands)
    if index.const_value is not None:  # e.g. a platform_index: only the chosen branch is exported
        chosen = int(np.clip(index.const_value.numpy(), 0, len(branches) - 1))
        return ctx.lower_sub(branches[chosen], operands)
    source = _bool_source(index)
    if len(branches) == 2 and source is not None:
        return _if(ctx, source, branches[1], branches[0], operands)
    return _switch_chain(ctx, index, list(branches), operands)


def _bool_source(index: ir.Value) -> ir.Value | None:
    """The bool that ``index`` was cast from (``lax.cond(pred, ...)``), if any."""
    producer = index.producer()
    if producer is None or producer.op_type != "Cast" or producer.domain != "":
        return None
    source = producer.inputs[0]
    return source if source is not None and source.dtype == ir.DataType.BOOL else None


def _switch_chain(
    ctx: LoweringContext,
    index: ir.Value,
    branches: list[Any],
    operands: Sequence[ir.Value],
    first: int = 0,
) -> list[ir.Value]:
    """``index == 0 ? b0 : (index == 1 ? b1 : ... b[n-1])``: an out-of-range index takes the
    last branch, as XLA's Case does (``lax.switch`` clamps before binding ``cond``)."""
    is_first = ctx.op.Equal(index, ctx.const(first, like=index))
    if len(branches) - first == 2:
        return _if(ctx, is_first, branches[first], branches[first + 1], operands)
    rest = ctx.body("else_branch")
    outs = _switch_chain(rest, index, branches, operands, first + 1)
    else_graph = rest.graph_returning(outs, _types(ctx.avals_out))
    then_graph = _branch(ctx, branches[first], operands, "then_branch")
    return _node(
        ctx, "If", [is_first], ctx.avals_out, then_branch=then_graph, else_branch=else_graph
    )


def _if(
    ctx: LoweringContext, pred: ir.Value, then: Any, otherwise: Any, operands: Sequence[ir.Value]
) -> list[ir.Value]:
    then_graph = _branch(ctx, then, operands, "then_branch")
    else_graph = _branch(ctx, otherwise, operands, "else_branch")
    return _node(ctx, "If", [pred], ctx.avals_out, then_branch=then_graph, else_branch=else_graph)


def _branch(ctx: LoweringContext, jaxpr: Any, operands: Sequence[ir.Value], name: str) -> ir.Graph:
    body = ctx.body(name)
    return body.graph_returning(body.lower_sub(jaxpr, operands), _types(ctx.avals_out))


# -- while_loop / fori_loop -------------------------------------------------------------------


@lowering(
    "while",
    onnx_ops=(
        "Loop",
        "If",
        "Where",
        "ReduceMax",
        "Cast",
        "Identity",
        "Max",
        "Sub",
        "Unsqueeze",
        "Scan",
        "Range",
        "Add",
        "Slice",
        "Squeeze",
        "ConstantOfShape",
        "Concat",
    ),
    key_data=True,
)
def _while(
    ctx: LoweringContext,
    *args: ir.Value,
    cond_jaxpr: Any,
    body_jaxpr: Any,
    cond_nconsts: int,
    body_nconsts: int,
) -> list[ir.Value]:
    cond_consts = args[:cond_nconsts]
    body_consts = args[cond_nconsts : cond_nconsts + body_nconsts]
    init = args[cond_nconsts + body_nconsts :]
    carry_avals = ctx.avals_out
    pred_aval = jxi.as_closed(cond_jaxpr).out_avals[0]
    batched = bool(pred_aval.shape)  # vmap of a loop whose predicate depends on the batch

    def predicate(values: Sequence[ir.Value], where: LoweringContext = ctx) -> ir.Value:
        return where.lower_sub(cond_jaxpr, [*cond_consts, *values])[0]

    counted = (
        None
        if batched
        else _counted_trips(
            ctx, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, cond_consts, init
        )
    )
    trip_count, counter = counted if counted is not None else (None, None)
    trips = (
        trip_count.const_value.numpy().item()
        if trip_count is not None and trip_count.const_value is not None
        else None
    )
    if trips == 0:
        return list(init)
    if trips and ctx.target.scan_ticks:
        # a fixed number of steps (> 0: Scan fails on an empty sequence in onnxruntime): a
        # Scan over the counter's values, as a fori_loop, without the counter's Add and the
        # Loop's condition in the body (a body of carries only is a scan body without xs)
        if counter is not None and np.dtype(carry_avals[counter].dtype) in _RANGE_DTYPES:
            return _scan_over_counter(ctx, body_jaxpr, body_consts, init, counter, trips)
        return _scan_over_ticks(ctx, body_jaxpr, body_consts, init, trips, False)
    bound = ctx.lowerer.config.loop_bound
    if trip_count is None and bound is not None:
        return _bounded_while(ctx, predicate, body_jaxpr, body_consts, init, pred_aval, bound)
    pred = None if trip_count is not None else predicate(init)
    body = ctx.body("while_body")
    _, cond_in = _loop_inputs(body)
    pred_in = _add_input(body, "pred", pred_aval) if batched else None
    carries = [_add_input(body, "carry", a) for a in carry_avals]
    new = body.lower_sub(body_jaxpr, [*body_consts, *carries])
    if pred_in is not None:  # as in JAX, batch elements whose predicate is false keep their carry
        new = [_select_batch(body, pred_in, n, c) for n, c in zip(new, carries, strict=True)]
    state: list[ir.Value] = []  # the batched predicate rides along as a loop-carried value
    if trip_count is not None:
        again = cond_in
    else:  # the predicate of the next iteration is computed at the end of this one
        again = predicate(new, body)
        if batched:
            state, again = [again], body.any(again)
    state_types = _types([pred_aval] * len(state))
    graph = body.graph_returning(
        [again, *state, *new], [_BOOL_SCALAR, *state_types, *_types(carry_avals)]
    )
    first = ctx.any(pred) if batched and pred is not None else pred
    loop_in = [trip_count, first, *([pred] if batched else []), *init]
    outs = _node(ctx, "Loop", loop_in, [*[pred_aval] * len(state), *carry_avals], body=graph)
    return outs[len(state) :]


def _bounded_while(
    ctx: LoweringContext,
    predicate: Any,
    body_jaxpr: Any,
    body_consts: Sequence[ir.Value],
    init: Sequence[ir.Value],
    pred_aval: Any,
    bound: int,
) -> list[ir.Value]:
    """A data-dependent ``while_loop`` as a Scan of ``bound`` steps (``loop_bound=``), the
    condition a state: each step runs the body where the condition holds and keeps the
    carries where it does not (per batch element for a vmapped loop). Where the condition
    still holds after the last step, the loop did not finish: its float results are NaN; its
    integer and bool results, which have no NaN, are the values after the last step (marked
    for :func:`warn_unpoisoned`)."""
    carry_avals = ctx.avals_out
    batched = bool(pred_aval.shape)
    types = _types([pred_aval, *carry_avals])
    body = ctx.body("bounded_while_body")
    running = _add_input(body, "running", pred_aval)
    carries = [_add_input(body, "carry", a) for a in carry_avals]
    body.builder.add_input(
        "tick", np.int64, ()
    )  # Scan needs a scanned input; the body does not read it

    def step(where: LoweringContext) -> list[ir.Value]:
        new = where.lower_sub(body_jaxpr, [*body_consts, *carries])
        if (
            batched or not ctx.target.bounded_if
        ):  # (an If on one predicate runs the body only while it holds)
            new = [_select_batch(where, running, n, c) for n, c in zip(new, carries, strict=True)]
        return [predicate(new, where), *new]

    if not ctx.target.bounded_if:
        outs = step(body)
    else:
        then = body.body("then_branch")
        then_graph = then.graph_returning(step(then), types)
        stay = body.body("else_branch")
        else_graph = stay.graph_returning([running, *carries], types)
        outs = _node(
            body,
            "If",
            [body.any(running) if batched else running],
            [pred_aval, *carry_avals],
            then_branch=then_graph,
            else_branch=else_graph,
        )
    graph = body.graph_returning(outs, types)
    unfinished, *results = _node(
        ctx,
        "Scan",
        [predicate(init), *init, ctx.iota(bound)],
        [pred_aval, *carry_avals],
        body=graph,
        num_scan_inputs=1,
    )
    line = ctx.source_line
    for k, value in enumerate(results):
        if dtype_of(value).is_floating_point():
            poisoned = _select_batch(ctx, unfinished, ctx.const(np.nan, like=value), value)
            results[k] = ctx.typed(poisoned, carry_avals[k])
        else:
            value.meta[UNPOISONED] = line
    return results


def _select_batch(body: LoweringContext, pred: ir.Value, new: ir.Value, old: ir.Value) -> ir.Value:
    """``where(pred, new, old)`` with ``pred`` over the leading (batch) dims of the carry."""
    rank = len(shape_of(pred))
    trailing = list(range(rank, len(shape_of(old))))
    if trailing and rank:  # (a scalar broadcasts as it is)
        pred = body.op.Unsqueeze(pred, body.ints(trailing))
    return body.op.Where(pred, new, old)


def _counted_trips(
    ctx: LoweringContext,
    cond_jaxpr: Any,
    body_jaxpr: Any,
    cond_nconsts: int,
    body_nconsts: int,
    cond_consts: Sequence[ir.Value],
    init: Sequence[ir.Value],
) -> tuple[ir.Value, int] | None:
    """The trip count ``max(hi - lo, 0)`` of a counted loop (a fori_loop with traced bounds)
    and the position of its counter among the carries: the cond is ``i < hi`` with ``hi``
    loop-invariant and the body adds 1 to ``i``. None for any other loop."""
    cond = jxi.as_closed(cond_jaxpr).jaxpr
    body = jxi.as_closed(body_jaxpr).jaxpr
    if (
        len(cond.eqns) != 1
        or cond.eqns[0].primitive.name != "lt"
        or cond.outvars != cond.eqns[0].outvars
    ):
        return None
    counter, bound = cond.eqns[0].invars
    carry_in = list(cond.invars[cond_nconsts:])
    if jxi.is_literal(counter) or counter not in carry_in:
        return None
    k = carry_in.index(counter)
    if np.dtype(counter.aval.dtype) not in _COUNTER_DTYPES or not _adds_one(
        body, body.invars[body_nconsts + k], body.outvars[k]
    ):
        return None
    if jxi.is_literal(bound):
        hi = ctx.const(jxi.literal_value(bound), like=counter.aval)
    elif bound in carry_in:
        m = carry_in.index(bound)
        if body.outvars[m] is not body.invars[body_nconsts + m]:
            return None  # the bound changes in the loop
        hi = init[m]
    elif bound in cond.invars[:cond_nconsts]:
        hi = cond_consts[list(cond.invars).index(bound)]
    else:
        return None
    hi_known, lo_known = hi.const_value, init[k].const_value
    if hi_known is not None and lo_known is not None:  # known bounds: a constant
        return ctx.ints(max(int(hi_known.numpy()) - int(lo_known.numpy()), 0)), k
    trips = ctx.op.Sub(ctx.cast(hi, np.int64), ctx.cast(init[k], np.int64))
    return ctx.op.Max(trips, ctx.ints(0)), k


def _counter(jaxpr: Any, num_consts: int, num_carry: int) -> int | None:
    """The carry of a scan body that counts steps (``i -> i + 1``, an integer scalar of a type
    ONNX Range takes): fori_loop's."""
    body = jxi.as_closed(jaxpr).jaxpr
    for k in range(num_carry):
        var = body.invars[num_consts + k]
        if (
            np.dtype(var.aval.dtype) in _RANGE_DTYPES
            and var.aval.shape == ()
            and _adds_one(body, var, body.outvars[k])
        ):
            return k
    return None


def _adds_one(jaxpr: Any, var_in: Any, var_out: Any) -> bool:
    """True when ``var_out = var_in + 1`` in ``jaxpr``."""
    if jxi.is_literal(var_out):
        return False
    eqn = next((e for e in jaxpr.eqns if var_out in e.outvars), None)
    if eqn is None or eqn.primitive.name != "add":
        return False
    a, b = eqn.invars
    one = b if a is var_in else a if b is var_in else None
    return (
        one is not None and jxi.is_literal(one) and np.asarray(jxi.literal_value(one)).item() == 1
    )


# -- scan -------------------------------------------------------------------------------------


@lowering(
    "scan",
    onnx_ops=(
        "Scan",
        "Loop",
        "Gather",
        "Slice",
        "Concat",
        "Identity",
        "Reshape",
        "Squeeze",
        "Sub",
        "Add",
        "Range",
        "GRU",
        "LSTM",
        "RNN",
        "Unsqueeze",
        "If",
        "Equal",
        "Or",
        "ConstantOfShape",
    ),
    key_data=True,
)
def _scan(
    ctx: LoweringContext, *args: ir.Value, jaxpr: Any, length: Any, reverse: bool, **params: object
) -> list[ir.Value]:
    num_consts, num_carry = jxi.scan_counts(params)
    consts, init, xs = (
        args[:num_consts],
        args[num_consts : num_consts + num_carry],
        args[num_consts + num_carry :],
    )
    symbolic = jxi.is_symbolic_dim(length)
    if not symbolic and int(length) == 0:
        return [*init, *[ctx.zeros(aval) for aval in ctx.avals_out[num_carry:]]]
    # ONNX Scan fails on an empty sequence in onnxruntime, and a length that is a symbolic dim
    # may be 0 at run time; a Loop with a trip count runs 0 times correctly.
    if xs and (not symbolic or ctx.target.scan_symbolic):
        return _scan_as_scan(ctx, jaxpr, consts, init, xs, reverse, length=length)
    if not xs and not symbolic and ctx.target.scan_ticks:  # (JAX wants a static length without xs)
        counter = _counter(jaxpr, num_consts, num_carry) if not reverse else None
        if counter is not None:
            return _scan_over_counter(ctx, jaxpr, consts, init, counter, int(length))  # a fori_loop
        return _scan_over_ticks(ctx, jaxpr, consts, init, int(length), reverse)
    return _scan_as_loop(ctx, jaxpr, consts, init, xs, length, reverse)


def _scan_over_counter(
    ctx: LoweringContext,
    jaxpr: Any,
    consts: Sequence[ir.Value],
    init: Sequence[ir.Value],
    counter: int,
    trips: int,
) -> list[ir.Value]:
    """A loop of ``trips`` steps whose carry ``counter`` counts them, as a Scan over the
    counter's values (Scan needs a scanned input, and tract drops one the body does not
    read), each step reading its value in place of the carry."""
    start = init[counter]
    ticks = ctx.op.Range(
        start, ctx.op.Add(start, ctx.const(trips, like=start)), ctx.const(1, like=start)
    )
    return _scan_as_scan(ctx, jaxpr, consts, init, [ticks], False, counter=counter)


def _scan_over_ticks(
    ctx: LoweringContext,
    jaxpr: Any,
    consts: Sequence[ir.Value],
    init: Sequence[ir.Value],
    length: int,
    reverse: bool,
) -> list[ir.Value]:
    """A loop of ``length`` steps without scanned inputs and without a counter among its carries
    (``lax.scan(f, init, None, length)``) as a Scan over ``0 .. length - 1``, which its body does
    not read: ONNX Scan needs a scanned input. (Profiles whose runtime drops an input the body
    does not read make the body read it, core/targets/.)"""
    return _scan_as_scan(ctx, jaxpr, consts, init, [ctx.iota(length)], reverse, unread=True)


def _scan_as_scan(
    ctx: LoweringContext,
    jaxpr: Any,
    consts: Sequence[ir.Value],
    init: Sequence[ir.Value],
    xs: Sequence[ir.Value],
    reverse: bool,
    counter: int | None = None,
    length: Any = None,
    unread: bool = False,
) -> list[ir.Value]:
    """An ONNX Scan. With ``counter``, ``xs`` holds that carry's values: the body reads them
    instead of the carry, which leaves the Scan's state (its final value is ``xs[-1] + 1``).
    With ``unread``, ``xs`` holds one sequence that only gives the number of steps."""
    closed = jxi.as_closed(jaxpr)
    in_avals = closed.in_avals[len(consts) :]
    body = ctx.body("scan_body")
    carries = [_add_input(body, "carry", a) for a in in_avals[: len(init)]]
    out_avals, avals_out, state = list(closed.out_avals), list(ctx.avals_out), list(init)
    if counter is not None:
        tick = _add_input(body, "tick", in_avals[counter])
        body.builder.inputs.remove(carries[counter])
        carries[counter] = tick
        outs = body.lower_sub(jaxpr, [*consts, *carries])
        del outs[counter], out_avals[counter], avals_out[counter], state[counter]
    elif unread:
        body.builder.add_input("tick", np.int64, ())
        outs = body.lower_sub(jaxpr, [*consts, *carries])
    else:
        x_slices = [_add_input(body, "x", a) for a in in_avals[len(init) :]]
        outs = body.lower_sub(jaxpr, [*consts, *carries, *x_slices])
        cells = _cells_over_sequence(
            ctx,
            body,
            carries,
            dict(zip(map(id, x_slices), xs, strict=True)),
            outs,
            init,
            length,
            reverse,
        )
        if cells is not None:
            return cells
    graph = body.graph_returning(outs, _types(out_avals))
    n_ys = len(avals_out) - len(state)
    directions = {}
    if reverse:  # (the order of unread ticks does not matter: forward, as a counter's)
        directions = {
            "scan_input_directions": [0 if unread else 1] * len(xs),
            "scan_output_directions": [1] * n_ys or None,
        }
    results = _node(
        ctx, "Scan", [*state, *xs], avals_out, body=graph, num_scan_inputs=len(xs), **directions
    )
    if counter is not None:
        n = ctx.const(1, like=init[counter])
        last = ctx.op.Add(ctx.op.Squeeze(ctx.slice(xs[0], [0], [-1], [2**62]), ctx.ints([0])), n)
        results.insert(counter, ctx.typed(last, ctx.avals_out[counter]))
    return results


def _cells_over_sequence(
    ctx: LoweringContext,
    body: LoweringContext,
    carries: Sequence[ir.Value],
    slices: dict[int, ir.Value],
    outs: Sequence[ir.Value],
    init: Sequence[ir.Value],
    length: Any,
    reverse: bool,
) -> list[ir.Value] | None:
    """A body of recurrent cell steps (ONNX GRU / LSTM / RNN of one step, stacked) as the cells
    run over the whole sequence, one node each instead of a loop of steps (onnxruntime's
    Scan and Loop cost microseconds per step); None for any other body. A length or batch
    that may be 0 at run time is guarded by an If: onnxruntime aborts the process on a GRU
    of length 0 and on a GRU or LSTM of batch 0."""
    stack = rnn.stacked_cells(body.builder.nodes, carries, slices, outs)
    if stack is None:
        return None
    dims: list[Any] = [length] if jxi.is_symbolic_dim(length) else []
    if stack.axes == (0,):  # states [N, hidden]
        for k in sorted({k for states in stack.states for k in states}):
            batch = ctx.avals_out[k].shape[0]
            if jxi.is_symbolic_dim(batch) and not any(same_dim(batch, d) for d in dims):
                dims.append(batch)
    return ctx.unless_empty(
        dims,
        _types(ctx.avals_out),
        lambda full: rnn.run_stack(full, stack, init, reverse=reverse),
        lambda empty: [*init, *[empty.zeros(a) for a in ctx.avals_out[len(init) :]]],
    )


def _scan_as_loop(
    ctx: LoweringContext,
    jaxpr: Any,
    consts: Sequence[ir.Value],
    init: Sequence[ir.Value],
    xs: Sequence[ir.Value],
    length: Any,
    reverse: bool,
) -> list[ir.Value]:
    closed = jxi.as_closed(jaxpr)
    in_avals = closed.in_avals[len(consts) :]
    trip_count = ctx.dim_scalar(length)
    last = ctx.op.Sub(trip_count, ctx.ints(1)) if reverse and xs else None
    body = ctx.body("scan_body")
    iteration, cond_in = _loop_inputs(body)
    carries = [_add_input(body, "carry", a) for a in in_avals[: len(init)]]
    index = body.op.Sub(last, iteration) if last is not None else iteration
    x_slices = [
        ctx.typed(body.op.Gather(x, index, axis=0), a)
        for x, a in zip(xs, in_avals[len(init) :], strict=True)
    ]
    outs = body.lower_sub(jaxpr, [*consts, *carries, *x_slices])
    cells = _cells_over_sequence(
        ctx,
        body,
        carries,
        dict(zip(map(id, x_slices), xs, strict=True)),
        outs,
        init,
        length,
        reverse,
    )
    if cells is not None:
        return cells
    graph = body.graph_returning([cond_in, *outs], [_BOOL_SCALAR, *_types(closed.out_avals)])
    # with no carries a trailing empty cond would be dropped, and Loop needs (M, cond): pass True
    cond = None if init else ctx.const(np.array(True))
    results = _node(ctx, "Loop", [trip_count, cond, *init], ctx.avals_out, body=graph)
    carry_out, ys = results[: len(init)], results[len(init) :]
    ys_avals = ctx.avals_out[len(init) :]
    return [
        *carry_out,
        *[_finish_ys(ctx, y, a, length, reverse) for y, a in zip(ys, ys_avals, strict=True)],
    ]


def _finish_ys(
    ctx: LoweringContext, ys: ir.Value, aval: Any, length: Any, reverse: bool
) -> ir.Value:
    """Loop stacks scan outputs in iteration order; a reverse scan wants them the other way."""
    _, shape = onnx_aval(aval)
    if jxi.is_symbolic_dim(length) and any(jxi.is_symbolic_dim(d) for d in shape[1:]):
        # after 0 iterations onnxruntime makes a symbolic dim of the stacked output 0: the
        # Reshape restores it, though its declared shape is the Loop's (the passes keep it)
        ys = mark_required(ctx.op.Reshape(ys, ctx.shape_tensor(shape), allowzero=1))
    if reverse:
        ys = ctx.slice(ys, [0], [-1], [np.iinfo(np.int64).min], [-1])
    return ys
