"""tract 0.23's loop rewrites (its Scan and Loop handling), listed by the profile in tract.py.

Each rewrite's docstring says what the runtime does wrong and how the rewrite avoids it."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array, constant_range, dtype_of
from jax2onnx_nn.core.ir.walk import graph_nodes, node_bodies, subgraphs
from jax2onnx_nn.core.targets.common import (
    BOOL,
    I32,
    passed_through_as_states,
    rank_of,
    scan_with_states,
)


@rewrite("Scan")
def counter_scan_as_state(node: ir.Node, edit: Editor) -> Replacement:
    """A fori_loop of static length is a Scan over its counter's values, a constant
    ``[start, start + 1, ...]``. tract 0.23's declutter breaks on it: it drops the scan input of
    a body that does not read the counter ("No scan input"), and it folds what the body computes
    from the counter alone as if the tick were the whole constant ("Trying to substitute a 1,F32
    by 5,F32"). So the counter is also a state, the previous tick (``start - 1`` at first), and
    the body reads ``Max(state + 1, tick)`` (the same number), which is also the state's output:
    neither can be dropped or folded. The value read is the one passed on because tract infers
    facts of a value from what reads it and refuses a state whose output fact differs from its
    input's ("inconsistent fact: body input 1 is ,I32 ... and body output 1 is ,I32", when the
    output was ``Max(state, tick) + 1``, read by nothing: the blocked lu and slogdet).

    Not reproduced on tract 0.23 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    if node.attributes.get_int("num_scan_inputs", 0) != 1:
        return None
    ticks = constant_range(node.inputs[-1])
    directions = node.attributes.get_ints("scan_input_directions", None)
    if (
        ticks is None
        or ticks.ndim != 1
        or not ticks.size
        or ticks.dtype.kind != "i"
        or directions
        and any(directions)
    ):
        return None
    if (
        not np.array_equal(ticks, ticks[0] + np.arange(ticks.size, dtype=ticks.dtype))
        or ticks[0] == np.iinfo(ticks.dtype).min
    ):
        return None
    body = node.attributes["body"].as_graph()
    n_state = len(node.inputs) - 1
    tick = body.inputs[n_state]
    dtype = ir.DataType.from_numpy(ticks.dtype)
    state = ir.Value(name=f"{tick.name}/state", type=ir.TensorType(dtype), shape=ir.Shape([]))
    body.inputs.insert(n_state, state)
    one = ir.Node(
        "",
        "Constant",
        [],
        ir.convenience.convert_attributes({"value": ir.tensor(np.ones((), ticks.dtype))}),
        name=f"{tick.name}/one",
    )
    following = ir.Node("", "Add", [state, one.outputs[0]], name=f"{tick.name}/next")
    counter = ir.Node("", "Max", [following.outputs[0], tick], name=f"{tick.name}/counter")
    tick.replace_all_uses_with(counter.outputs[0])
    counter.replace_input_with(1, tick)
    for new_node in (one, following, counter):
        new_node.outputs[0].name = f"{new_node.name}_output"
        new_node.outputs[0].type, new_node.outputs[0].shape = ir.TensorType(dtype), ir.Shape([])
    if len(body):
        body.insert_before(next(iter(body)), (one, following, counter))
    else:
        body.extend((one, following, counter))
    body.outputs.insert(n_state, counter.outputs[0])
    start = edit.const(np.asarray(ticks[0] - 1))
    scan = scan_with_states(node, edit, body, n_state, [start])
    scan.outputs[n_state].name = f"{tick.name}/last"
    scan.outputs[n_state].type = ir.TensorType(dtype)
    return True


_RESTARTED = "jax2onnx_nn.restarted"


_FIRST_TICK = "jax2onnx_nn.first_tick"  # (which scanned input counts the steps, its first value)


@rewrite("Scan")
def inner_scans_restarted(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 keeps the states of a Scan inside a Scan body from one step of the outer Scan
    to the next: every outer step but the first starts the inner Scan from the states the last
    one ended with, not from its initial values (a ``lax.map`` over a ``fori_loop`` or a bounded
    ``while_loop``, ``jax.random.gamma``'s rejection loops: wrong numbers, no error). In each
    Scan in this Scan's body (in If branches too) that scans a counter forward (a ``fori_loop``,
    a scan without xs, a bounded ``while_loop``: constant, or a Range of run-time length; one over
    data is given a counter, computed at run time where the length is symbolic), the body reads
    each state as ``Where(tick == first tick, initial value, state)``, or, where the counter
    has a run-time length, as a Gather from ``[state, initial value]`` by that test (tract 0.23
    gives the Where a region fact the state's output lacks and refuses the model: a fori_loop
    whose trip count is the outer counter)."""
    return any(
        [
            _restarted(_with_counter(inner, edit))
            for inner in _scans_in(node.attributes["body"].as_graph())
        ]
    )


def _with_counter(scan: ir.Node, edit: Editor) -> ir.Node:
    """``scan`` with states and no counter among its scanned inputs, as a Scan that also scans
    ``0 .. L-1`` for the length ``L`` of its first scanned input (a constant, or an exclusive
    CumSum of ones where ``L`` is symbolic): its body can then tell its first step. Else (no
    states, a known length of 0) ``scan`` itself."""
    n_scanned = scan.attributes.get_int("num_scan_inputs", 0)
    n_state = len(scan.inputs) - n_scanned
    if (
        not n_state
        or not n_scanned
        or any(_range_start(x) is not None for x in scan.inputs[n_state:])
        or scan.meta.get(_RESTARTED)
    ):
        return scan
    first = scan.inputs[n_state]
    axes = scan.attributes.get_ints("scan_input_axes", None) or [0] * n_scanned
    rank = rank_of(first)
    if first is None or rank is None:
        return scan
    axis = axes[0] % rank if rank else 0
    length = first.shape[axis] if first.shape is not None else None
    if length == 0:
        return scan
    editor = Editor(scan, edit.counter, edit.opset)
    if isinstance(length, int):
        ticks = editor.const(np.arange(length, dtype=np.int64))
    else:  # (an exclusive CumSum of ones: tract follows a Range's length symbolically)
        size = editor.op(
            "Gather",
            editor.op("Shape", first, dtype=ir.DataType.INT64),
            np.array([axis], np.int64),
            axis=0,
            dtype=ir.DataType.INT64,
        )
        ones = editor.op("Expand", np.ones((1,), np.int64), size, dtype=ir.DataType.INT64)
        ticks = editor.op(
            "CumSum", ones, np.array(0, np.int64), exclusive=1, dtype=ir.DataType.INT64
        )
        ticks.shape = ir.Shape([length])
    body = scan.attributes["body"].as_graph()
    body.inputs.append(
        ir.Value(
            name=f"{scan.name}/tick", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])
        )
    )
    attributes = {name: attr for name, attr in scan.attributes.items() if name != "body"}
    attributes["num_scan_inputs"] = ir.AttrInt64("num_scan_inputs", n_scanned + 1)
    for name in ("scan_input_directions", "scan_input_axes"):
        if name in attributes:
            attributes[name] = ir.AttrInt64s(name, [*scan.attributes.get_ints(name), 0])
    counted = ir.Node(
        "",
        "Scan",
        [*scan.inputs, ticks],
        [*attributes.values(), ir.AttrGraph("body", body)],
        num_outputs=len(scan.outputs),
        name=scan.name,
        doc_string=scan.doc_string,
    )
    assert editor.graph is not None
    editor.graph.insert_before(scan, counted)
    editor.replace(*counted.outputs)
    counted.meta[_FIRST_TICK] = (n_scanned, 0)
    return counted


def _range_start(value: ir.Value | None) -> Any:
    """The first value of a counter a Scan scans: a constant ``[s, s + 1, ...]`` or a Range of
    a constant start and step 1 (a fori_loop of run-time length); else None."""
    ticks = constant_range(value)
    if ticks is not None:
        return (
            ticks[0]
            if ticks.ndim == 1
            and ticks.size
            and np.array_equal(ticks, ticks[0] + np.arange(ticks.size, dtype=ticks.dtype))
            else None
        )
    producer = value.producer() if value is not None else None
    if producer is None or producer.op_type != "Range" or producer.domain != "":
        return None
    start, delta = constant_array(producer.inputs[0]), constant_array(producer.inputs[2])
    return (
        start.reshape(())
        if start is not None
        and delta is not None
        and delta.size == 1
        and int(delta.reshape(-1)[0]) == 1
        else None
    )


def _scans_in(graph: ir.Graph) -> list[ir.Node]:
    """The Scan nodes of ``graph`` and of the If branches in it (not those in Scan bodies)."""
    found = []
    for node in graph:
        if node.op_type == "Scan" and node.domain == "":
            found.append(node)
        elif node.op_type == "If" and node.domain == "":
            found.extend(inner for branch in node_bodies(node) for inner in _scans_in(branch))
    return found


def _restarted(scan: ir.Node) -> bool:
    if scan.meta.get(_RESTARTED):
        return False
    n_scanned = scan.attributes.get_int("num_scan_inputs", 0)
    n_state = len(scan.inputs) - n_scanned
    directions = scan.attributes.get_ints("scan_input_directions", None) or [0] * n_scanned
    counters = [
        (k, start)
        for k, start in ((k, _range_start(x)) for k, x in enumerate(scan.inputs[n_state:]))
        if start is not None and not directions[k]
    ]
    if _FIRST_TICK in scan.meta:
        counters.append(scan.meta[_FIRST_TICK])
    if not n_state or not counters:
        return False
    k, first_tick = counters[0]
    body = scan.attributes["body"].as_graph()
    tick = body.inputs[n_state + k]
    tick_dtype = dtype_of(tick)
    name = f"{tick.name}/restart"
    start = ir.Node(
        "",
        "Constant",
        [],
        ir.convenience.convert_attributes(
            {"value": ir.tensor(np.asarray(first_tick, tick_dtype.numpy()))}
        ),
        name=f"{name}/start",
    )
    first = ir.Node("", "Equal", [tick, start.outputs[0]], name=f"{name}/first")
    new_nodes = [start, first]
    for node_, dtype in ((start, tick_dtype), (first, ir.DataType.BOOL)):
        node_.outputs[0].name, node_.outputs[0].type, node_.outputs[0].shape = (
            f"{node_.name}_output",
            ir.TensorType(dtype),
            ir.Shape([]),
        )
    # a counter of run-time length (a Range, a CumSum of ones): tract follows its tick
    # symbolically and gives a state read by Where(tick == first, ...) a region fact its output
    # lacks ("inconsistent fact: body input 0 is N,F32 ... 1+-1*(0==0)" in a fori_loop whose trip
    # count is the outer counter), so the read is a Gather from [state, initial] by the test
    by_gather = constant_range(scan.inputs[n_state + k]) is None
    if by_gather:
        index = _node("Cast", [first.outputs[0]], f"{name}/index", ir.DataType.INT64, [], to=7)
        axis = _node(
            "Constant",
            [],
            f"{name}/axis",
            ir.DataType.INT64,
            [1],
            value=ir.tensor(np.zeros(1, np.int64)),
        )
        new_nodes += [index, axis]
    for i, state in enumerate(body.inputs[:n_state]):
        initial = scan.inputs[i]
        assert initial is not None and state.type is not None
        dtype, shape = state.type.dtype, state.shape
        if by_gather:
            stacked = [
                _node("Unsqueeze", [v, axis.outputs[0]], f"{name}/state{i}/{role}", dtype, None)
                for role, v in (("state", state), ("initial", initial))
            ]
            both = _node(
                "Concat",
                [s.outputs[0] for s in stacked],
                f"{name}/state{i}/both",
                dtype,
                None,
                axis=0,
            )
            read = _node(
                "Gather",
                [both.outputs[0], index.outputs[0]],
                f"{name}/state{i}",
                dtype,
                shape,
                axis=0,
            )
            reads_state = stacked[0]
            new_nodes += [*stacked, both, read]
        else:
            read = _node(
                "Where", [first.outputs[0], initial, state], f"{name}/state{i}", dtype, shape
            )
            reads_state = read
            new_nodes.append(read)
        state.replace_all_uses_with(read.outputs[0], replace_graph_outputs=True)
        reads_state.replace_input_with(0 if by_gather else 2, state)
    if len(body):
        body.insert_before(next(iter(body)), new_nodes)
    else:
        body.extend(new_nodes)
    scan.meta[_RESTARTED] = True
    return True


def _node(
    op: str,
    inputs: list[ir.Value | None],
    name: str,
    dtype: ir.DataType,
    shape: Any,
    **attributes: Any,
) -> ir.Node:
    """A node of one output ``{name}_output`` of ``dtype`` and ``shape`` (None: unknown)."""
    node = ir.Node("", op, inputs, ir.convenience.convert_attributes(attributes), name=name)
    out = node.outputs[0]
    out.name, out.type = f"{name}_output", ir.TensorType(dtype)
    if shape is not None:
        out.shape = shape if isinstance(shape, ir.Shape) else ir.Shape(shape)
    return node


_KEEPS_STATES = "jax2onnx_nn.keeps_states"  # (a Scan whose results are already selected so)


@rewrite("Scan")
def scan_of_no_steps_keeps_states(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 gives the final states of a Scan of 0 steps as zeros, not the initial values
    (a ``lax.scan`` over data of symbolic length 0: 0.0 where JAX returns the initial 1.0; at
    the top level and in a Scan body alike). Where the scanned length is not a static positive
    number, each final state is ``Where(length > 0, state, initial value)``."""
    n_scanned = node.attributes.get_int("num_scan_inputs", 0)
    n_state = len(node.inputs) - n_scanned
    first = node.inputs[n_state] if n_scanned else None
    rank = rank_of(first)
    if not n_state or first is None or not rank or node.meta.get(_KEEPS_STATES):
        return None
    axis = (node.attributes.get_ints("scan_input_axes", None) or [0])[0] % rank
    length = first.shape[axis] if first.shape is not None else None
    if (
        isinstance(length, int)
        and length > 0
        or not any(out.uses() or out.is_graph_output() for out in node.outputs[:n_state])
    ):
        return None
    size = edit.op(
        "Gather",
        edit.op("Shape", first, dtype=ir.DataType.INT64),
        np.array(axis, np.int64),
        axis=0,
        dtype=ir.DataType.INT64,
    )
    ran = edit.op("Greater", size, np.array(0, np.int64), dtype=BOOL)
    for out, initial in zip(node.outputs[:n_state], node.inputs[:n_state], strict=True):
        if initial is None or not (out.uses() or out.is_graph_output()):
            continue
        uses = list(out.uses())
        kept = ir.Node(
            "",
            "Where",
            [ran, out, initial],
            name=f"{node.name}/target{edit.counter[0]}/kept{len(uses)}",
        )
        edit.counter[0] += 1
        result = kept.outputs[0]
        result.type, result.shape = out.type, out.shape
        assert edit.graph is not None
        edit.graph.insert_after(node, kept)
        for user, index in uses:
            user.replace_input_with(index, result)
        if out.is_graph_output():
            graph = edit.graph
            for i, output in enumerate(graph.outputs):
                if output is out:
                    graph.outputs[i] = result
            out.name, result.name = f"{out.name}/scanned", out.name
        else:
            result.name = f"{out.name}/kept"
    return True


@rewrite("Scan")
def ranges_in_scan_bodies(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 finds no type for a value a Scan body reads from the enclosing graph when it is
    a Range of run-time length ("Source node without a determined fact": the counter of a
    ``fori_loop`` of symbolic length in a ``lax.map``, hoisted out of the map's body as loop
    invariant). It runs the Range computed in the body: each body reading one gets its own copy
    (reading the Range's scalar operands from outside). A late rewrite: clean-up would hoist it."""
    body = node.attributes["body"].as_graph()
    copies = []
    for value in _read_from_outside(body):
        producer = value.producer()
        if (
            producer is None
            or producer.op_type != "Range"
            or producer.domain != ""
            or constant_range(value) is not None
        ):
            continue
        edit.counter[0] += 1
        copy = ir.Node(
            "", "Range", list(producer.inputs), name=f"{producer.name}/in_body{edit.counter[0]}"
        )
        copy.outputs[0].name = f"{value.name}/in_body{edit.counter[0]}"
        copy.outputs[0].type, copy.outputs[0].shape = value.type, value.shape
        inside = {id(n) for n in graph_nodes(body)}
        for user, index in list(value.uses()):
            if id(user) in inside:
                user.replace_input_with(index, copy.outputs[0])
        copies.append(copy)
    if not copies:
        return None
    if len(body):
        body.insert_before(next(iter(body)), copies)
    else:
        body.extend(copies)
    return True


@rewrite("Loop")
def counted_loop_as_scan(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 has no Loop. A Loop with a trip count ``M`` whose condition never changes (a
    ``fori_loop`` of traced bounds, a linalg routine's steps on a matrix of symbolic size,
    ScatterND's reductions below their opset) is a Scan over ``Range(0, M)``: the body reads
    the tick where it read the iteration number, its states and stacked outputs are the Loop's
    (a Loop with stacked outputs is left as it is). tract gives the states of a Scan of 0 steps
    shape ``()``: where ``M`` is 0 each result is the initial state, through a Where. A
    while_loop whose condition depends on the data stays a Loop."""
    if len(node.inputs) < 2 or node.inputs[0] is None:
        return None
    if len(node.outputs) != len(node.inputs) - 2:
        return None
    if any(
        _reshaped_at_run_time(v) for v in _read_from_outside(node.attributes["body"].as_graph())
    ):
        return (
            False  # (tract finds no facts for them in a Scan body: ScatterND's rows below opset 18)
        )
    condition = constant_array(node.inputs[1])
    if node.inputs[1] is not None and (condition is None or not bool(condition)):
        return None
    body = node.attributes["body"].as_graph()
    iteration, cond_in = body.inputs[0], body.inputs[1]
    passed = body.outputs[0].producer()
    if body.outputs[0] is not cond_in and (
        passed is None or passed.op_type != "Identity" or passed.inputs[0] is not cond_in
    ):
        return None
    if (
        any(user is not passed for user, _ in cond_in.uses())
        or passed is not None
        and len(passed.outputs[0].uses()) > 0
    ):
        return None
    body.outputs.pop(0)
    if passed is not None:
        body.remove(passed, safe=True)
    body.inputs.remove(cond_in)
    body.inputs.remove(iteration)
    body.inputs.append(iteration)  # now the tick, the Scan's scanned input
    for state, init in zip(body.inputs, node.inputs[2:], strict=False):
        if (
            state.shape is None and init is not None
        ):  # (a Scan's states keep their shape: tract wants it)
            state.shape = init.shape
    count = node.inputs[0]
    ticks = edit.op(
        "Range", np.array(0, np.int64), count, np.array(1, np.int64), dtype=ir.DataType.INT64
    )
    ticks.shape = ir.Shape([None])
    scan = ir.Node(
        "",
        "Scan",
        [*node.inputs[2:], ticks],
        [ir.AttrGraph("body", body), ir.AttrInt64("num_scan_inputs", 1)],
        num_outputs=len(node.outputs),
        name=node.name,
        doc_string=node.doc_string,
    )
    scan.meta[_KEEPS_STATES] = True
    assert edit.graph is not None
    edit.graph.insert_before(node, scan)
    ran = edit.op(
        "Greater", count, np.array(0, np.int64), dtype=ir.DataType.BOOL
    )  # (after the Scan, before the Loop)
    results = []
    for old, new, init in zip(node.outputs, scan.outputs, node.inputs[2:], strict=True):
        new.type, new.shape = old.type, old.shape
        new.name = f"{old.name}/scanned"
        results.append(edit.op("Where", ran, new, init, dtype=old.dtype))
    return tuple(results)


_REDUCE_ROWS = {"Add": "ReduceSum", "Mul": "ReduceProd", "Max": "ReduceMax", "Min": "ReduceMin"}


_ONE_HOT_LIMIT = 1 << 12  # elements of the data: the one-hot form holds (updates + 1) times as many


@rewrite("Loop")
def scatter_loop_as_one_hot(node: ir.Node, edit: Editor) -> Replacement:
    """Below their opset ScatterND's reductions are a Loop over the update rows
    (core/opset_forms.py); tract 0.23 has no Loop, and a Scan body reading the rows finds no facts
    for them (their count is data-dependent: out-of-bounds rows are dropped). For data of a static
    size up to ``_ONE_HOT_LIMIT`` (or of a size known at run time only) the same result without a
    loop: each row's cell id (a GatherND of the ids laid out like the data) compared with every id
    gives a one-hot ``(rows, cells)``; the updates where it is set (the reduction's neutral element
    elsewhere) reduced over the rows, combined with the data where a row hit the cell. Repeated
    indices combine in another order than the Loop's (the same numbers for ints, float rounding
    otherwise)."""
    if len(node.inputs) != 3 or len(node.outputs) != 1:
        return None
    count, keep_going, data = node.inputs
    if (
        count is None
        or data is None
        or keep_going is not None
        and constant_array(keep_going) is None
    ):
        return None
    body = node.attributes["body"].as_graph()
    if len(body.inputs) != 3 or len(body.outputs) != 2:
        return None
    iteration, cond, acc = body.inputs
    passed = body.outputs[0]
    producer = passed.producer()
    if passed is not cond and (
        producer is None or producer.op_type != "Identity" or producer.inputs[0] is not cond
    ):
        return None
    write = body.outputs[1].producer()
    if (
        write is None
        or write.op_type != "ScatterND"
        or write.attributes.get_string("reduction", "none") != "none"
        or write.inputs[0] is not acc
    ):
        return None
    where, combined = write.inputs[1], write.inputs[2]
    combine = combined.producer() if combined is not None else None
    if (
        combine is None
        or combine.op_type not in _REDUCE_ROWS
        or combine.domain != ""
        or len(combine.inputs) != 2
    ):
        return None
    old, value = combine.inputs
    read = old.producer() if old is not None else None
    if (
        read is None
        or read.op_type != "GatherND"
        or read.inputs[0] is not acc
        or read.inputs[1] is not where
    ):
        return None
    rows, values = _row_of(where, iteration), _row_of(value, iteration)
    dtype, shape = data.dtype, data.shape
    if rows is None or values is None or dtype is None or dtype == ir.DataType.BOOL:
        return None
    if shape is not None and shape.is_static() and int(np.prod(shape.numpy())) > _ONE_HOT_LIMIT:
        return None
    i64, numpy_type = ir.DataType.INT64, dtype.numpy()
    neutral = np.asarray(_neutral(combine.op_type, numpy_type), numpy_type)
    zero, one = np.array([0], np.int64), np.array([1], np.int64)

    def dims(v: ir.Value, start: int, end: int) -> ir.Value:
        return edit.op(
            "Slice",
            edit.op("Shape", v, dtype=i64),
            np.array([start], np.int64),
            np.array([end], np.int64),
            dtype=i64,
        )

    data_shape = edit.op("Shape", data, dtype=i64)
    size = edit.op("ReduceProd", data_shape, keepdims=1, dtype=i64)
    depth, n = dims(rows, 1, 2), dims(rows, 0, 1)
    lead = edit.op("Slice", data_shape, zero, depth, dtype=i64)
    cells = edit.op("ReduceProd", lead, keepdims=1, dtype=i64)  # (1,): M
    row_size = edit.op("Div", size, cells, dtype=i64)  # (1,): elements per cell
    positions = edit.op(
        "Range",
        np.array(0, np.int64),
        edit.op("Squeeze", cells, zero, dtype=i64),
        np.array(1, np.int64),
        dtype=i64,
    )
    cell = edit.op(
        "GatherND", edit.op("Reshape", positions, lead, dtype=i64), rows, dtype=i64
    )  # (N,)
    order = edit.op(
        "Range",
        np.array(0, np.int64),
        edit.op("Squeeze", n, zero, dtype=i64),
        np.array(1, np.int64),
        dtype=i64,
    )
    applied = edit.op("Less", order, count, dtype=BOOL)  # (the Loop's first `count` rows)
    hits = edit.op(
        "And",
        edit.op(
            "Equal",
            edit.op("Unsqueeze", cell, one, dtype=i64),
            edit.op("Unsqueeze", positions, zero, dtype=i64),
            dtype=BOOL,
        ),
        edit.op("Unsqueeze", applied, one, dtype=BOOL),
        dtype=BOOL,
    )  # (N, M)
    # a row that hits nothing, so that no reduction is over 0 rows
    no_row = edit.op(
        "ConstantOfShape",
        edit.op("Concat", one, cells, axis=0, dtype=i64),
        value=ir.tensor(np.zeros((1,), np.bool_)),
        dtype=BOOL,
    )
    hits = edit.op("Concat", hits, no_row, axis=0, dtype=BOOL)
    updates = edit.op(
        "Reshape", values, edit.op("Concat", n, one, row_size, axis=0, dtype=i64), dtype=dtype
    )  # (N, 1, R)
    padding = edit.op(
        "Expand",
        neutral.reshape(1, 1, 1),
        edit.op("Concat", np.array([1, 1], np.int64), row_size, axis=0, dtype=i64),
        dtype=dtype,
    )
    spread = edit.op(
        "Where",
        edit.op("Unsqueeze", hits, np.array([2], np.int64), dtype=BOOL),
        edit.op("Concat", updates, padding, axis=0, dtype=dtype),
        neutral,
        dtype=dtype,
    )  # (N + 1, M, R)
    reduced = _reduce_first_axis(edit, _REDUCE_ROWS[combine.op_type], spread, dtype)
    # (tract's float ReduceMax/Min of only infinities is corrected by reduce_extremes_of_infinities)
    hit = edit.op(
        "Greater",
        _reduce_first_axis(edit, "ReduceSum", edit.op("Cast", hits, to=I32, dtype=I32), I32),
        np.int32(0),
        dtype=BOOL,
    )
    flat = edit.op(
        "Reshape", data, edit.op("Concat", cells, row_size, axis=0, dtype=i64), dtype=dtype
    )  # (M, R)
    result = edit.op(
        "Where",
        edit.op("Unsqueeze", hit, one, dtype=BOOL),
        edit.op(combine.op_type, flat, reduced, dtype=dtype),
        flat,
        dtype=dtype,
    )
    return edit.op("Reshape", result, data_shape, dtype=dtype)


def _row_of(value: ir.Value | None, iteration: ir.Value) -> ir.Value | None:
    """``x`` where ``value`` is ``Unsqueeze(Gather(x, iteration, axis=0), [0])``, x read from
    outside."""
    unsqueeze = value.producer() if value is not None else None
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or len(unsqueeze.inputs) != 2:
        return None
    axes = constant_array(unsqueeze.inputs[1])
    gather = unsqueeze.inputs[0].producer() if unsqueeze.inputs[0] is not None else None
    if (
        axes is None
        or axes.reshape(-1).tolist() != [0]
        or gather is None
        or gather.op_type != "Gather"
    ):
        return None
    if (
        gather.attributes.get_int("axis", 0) != 0
        or gather.inputs[1] is not iteration
        or gather.inputs[0] is None
    ):
        return None
    x = gather.inputs[0]
    producer = x.producer()
    return x if producer is None or producer.graph is not gather.graph else None


def _neutral(op_type: str, numpy_type: np.dtype) -> Any:
    """The element that ``op_type`` combines without change (-0.0 for a float sum: x + -0.0 is
    x)."""
    if op_type == "Add":
        return -0.0 if numpy_type.kind == "f" else 0
    if op_type == "Mul":
        return 1
    floating = numpy_type.kind == "f"
    if op_type == "Max":
        return -np.inf if floating else np.iinfo(numpy_type).min
    return np.inf if floating else np.iinfo(numpy_type).max


def _reduce_first_axis(edit: Editor, op_type: str, x: ir.Value, dtype: ir.DataType) -> ir.Value:
    """``op_type`` over axis 0 (no kept dim), in the form of opsets 13-17 (ReduceSum's axes an
    input, the others' an attribute): the opsets below ScatterND's reductions."""
    if op_type == "ReduceSum":
        return edit.op(op_type, x, np.array([0], np.int64), keepdims=0, dtype=dtype)
    return edit.op(op_type, x, axes=[0], keepdims=0, dtype=dtype)


_MASKING = frozenset({"Mul", "Div", "Pow", "And"})


@rewrite("Scan")
def scan_int_factors_as_states(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 takes a one-element integer or bool constant that a Mul, Div, Pow or And reads
    for a mask and marks the other operand with a "region of interest", up through the body:
    a Scan state read so (``n * 3``) then has a fact its output lacks, and the Scan is refused
    ("inconsistent fact: body input 0 is 2,I32 🬳 3 and body output 0 is 2,I32"). Each such
    constant becomes a state of the Scan that the body passes on unchanged (not a constant
    there, so no mask): the same numbers."""
    body = node.attributes["body"].as_graph()
    found: dict[int, tuple[ir.Value, list[tuple[ir.Node, int]]]] = {}
    arrays: dict[int, np.ndarray] = {}  # the data of each constant found
    for inner in body:
        if inner.op_type not in _MASKING or inner.domain != "" or len(inner.inputs) != 2:
            continue
        for index, value in enumerate(inner.inputs):
            array = constant_array(value)
            if value is None or array is None or array.size != 1 or array.dtype.kind not in "iub":
                continue
            other = inner.inputs[1 - index]
            if other is None or constant_array(other) is not None:
                continue
            found.setdefault(id(value), (value, []))[1].append((inner, index))
            arrays[id(value)] = array
    if not found:
        return None
    read = list(found.values())
    constants = [edit.const(arrays[id(value)]) for value, _ in read]
    passed_through_as_states(node, edit, body, "factor", read, constants)
    return True


def _reshaped_at_run_time(value: ir.Value) -> bool:
    """``value`` has no shape and is a Reshape to a shape computed at run time."""
    producer = value.producer()
    return (
        value.shape is None
        and producer is not None
        and producer.op_type == "Reshape"
        and constant_array(producer.inputs[1]) is None
    )


def _read_from_outside(body: ir.Graph) -> list[ir.Value]:
    """The values of enclosing graphs that ``body`` (or a graph inside it) reads."""
    nodes = graph_nodes(body)
    own = (
        {id(v) for n in nodes for v in n.outputs}
        | {id(v) for v in body.inputs}
        | {id(v) for g in subgraphs(body) for v in g.inputs}
    )
    return list(
        {id(v): v for n in nodes for v in n.inputs if v is not None and id(v) not in own}.values()
    )


@rewrite("Scan")
def scan_outputs_unread(node: ir.Node, edit: Editor) -> Replacement:
    """tract 0.23 fails to analyse a Scan whose body also reads a value it emits as a scan
    output (the blocked cholesky's column panel, stacked out and used for the trailing update:
    "Failed analyse for node ... StridedSlice ... Impossible to unify 2 with 3"; it takes the
    stacked rank for the value inside the body). Such an output is emitted through an Identity,
    so the value the body reads is not the one it stacks.

    Not reproduced on tract 0.23 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    body = node.attributes["body"].as_graph()
    n_state = len(node.inputs) - node.attributes.get_int("num_scan_inputs", 0)
    changed = False
    for i in range(n_state, len(body.outputs)):
        value = body.outputs[i]
        if not value.uses():
            continue
        identity = ir.Node("", "Identity", [value], name=f"{value.name}/stacked")
        identity.outputs[0].name = f"{value.name}/stacked_output"
        identity.outputs[0].type, identity.outputs[0].shape = value.type, value.shape
        body.append(identity)
        body.outputs[i] = identity.outputs[0]
        changed = True
    return changed
