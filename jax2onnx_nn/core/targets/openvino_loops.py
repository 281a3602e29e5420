"""OpenVINO 2026.4 (CPU plugin): the rewrites of its Scan bodies (a Scan of no steps, nested
Scans as Loops, a Scan body reading values of the enclosing graph).

Each rewrite's docstring says what the runtime does wrong and how the rewrite avoids it; the
profile that lists them is ``openvino.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import Editor, Replacement
from jax2onnx_nn.core.ir.values import constant_array
from jax2onnx_nn.core.ir.walk import graph_nodes, subgraphs
from jax2onnx_nn.core.targets.common import (
    BOOL,
    passed_through_as_states,
    rank_of,
)


@rewrite("Scan")
def scan_of_no_steps_runs_one(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 refuses to run a Scan (its TensorIterator) of 0 steps ('Invalid "start",
    "stride", "end" values'; a ``lax.scan`` over data of symbolic length 0). Where the scanned
    length is not a static positive number, each scanned input is padded with one element of
    zeros along its axis when it is empty, so that at least one step runs; the stacked outputs
    are sliced back to the length and the final states selected as the initial ones where it
    is 0 (the extra step's results are never read).

    Not reproduced on OpenVINO 2026.4 by the direct case tried (tests/core/targets/: the model
    matched JAX without this rewrite too); kept until the case that needs it is known."""
    if node.meta.get(_RUNS_ONE):
        return None
    n_scanned = node.attributes.get_int("num_scan_inputs", 0)
    n_state = len(node.inputs) - n_scanned
    xs = node.inputs[n_state:]
    ranks = [rank_of(x) for x in xs]
    out_ranks = [rank_of(y) for y in node.outputs[n_state:]]
    known = [r for r in ranks if r is not None]
    known_out = [r for r in out_ranks if r is not None]
    if not xs or None in xs or len(known) != len(ranks) or len(known_out) != len(out_ranks):
        return None
    if 0 in known:
        return None
    in_axes = [a % r for a, r in zip(_axes(node, "scan_input_axes", n_scanned), known, strict=True)]
    out_axes = [
        a % r
        for a, r in zip(_axes(node, "scan_output_axes", len(known_out)), known_out, strict=True)
    ]
    length = xs[0].shape[in_axes[0]] if xs[0].shape is not None else None  # type: ignore[union-attr]
    if isinstance(length, int) and length > 0:
        return None
    i64 = ir.DataType.INT64
    size = edit.op(
        "Gather",
        edit.op("Shape", xs[0], dtype=i64),
        np.array([in_axes[0]], np.int64),
        axis=0,
        dtype=i64,
    )  # (1,)
    ran = edit.op("Greater", size, np.array([0], np.int64), dtype=BOOL)  # (1,)
    padded = _padded_when_empty(edit, xs, in_axes, ranks, ran)
    attributes = [attr for name, attr in node.attributes.items()]
    scan = ir.Node(
        "",
        "Scan",
        [*node.inputs[:n_state], *padded],
        attributes,
        num_outputs=len(node.outputs),
        name=node.name,
        doc_string=node.doc_string,
    )
    scan.meta[_RUNS_ONE] = True
    assert edit.graph is not None
    edit.graph.insert_before(node, scan)
    results = []
    for old, new, initial in zip(
        node.outputs[:n_state], scan.outputs[:n_state], node.inputs[:n_state], strict=True
    ):
        new.type, new.shape, new.name = old.type, old.shape, f"{old.name}/ran"
        results.append(
            edit.op(
                "Where",
                edit.op("Reshape", ran, np.zeros((0,), np.int64), dtype=BOOL),
                new,
                initial,
                dtype=old.dtype,
            )
        )
    for old, new, axis in zip(
        node.outputs[n_state:], scan.outputs[n_state:], out_axes, strict=True
    ):
        new.type, new.name = old.type, f"{old.name}/ran"
        results.append(
            edit.op(
                "Slice",
                new,
                np.array([0], np.int64),
                size,
                np.array([axis], np.int64),
                dtype=old.dtype,
            )
        )
    return tuple(results)


def _padded_when_empty(
    edit: Editor,
    xs: Sequence[ir.Value | None],
    axes: Sequence[int],
    ranks: Sequence[int | None],
    ran: ir.Value,
) -> list[ir.Value]:
    """The scanned inputs ``xs``, each with one row of zeros appended on its scan axis where
    ``ran`` (bool of shape (1,)) is false: a scan of no steps then runs one, whose results
    the caller drops."""
    i64 = ir.DataType.INT64
    extra = edit.op(
        "Cast", edit.op("Not", ran, dtype=BOOL), to=i64, dtype=i64
    )  # (1,): 1 where empty
    padded = []
    for x, axis, rank in zip(xs, axes, ranks, strict=True):
        assert x is not None and rank is not None
        after = np.zeros((2 * rank,), np.int64)
        after[rank + axis] = 1
        padded.append(edit.op("Pad", x, edit.op("Mul", extra, after, dtype=i64), dtype=x.dtype))
    return padded


_RUNS_ONE = "jax2onnx_nn.runs_one"


@rewrite("Scan")
def nested_scans_as_loops(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4 translates a Scan as a TensorIterator and refuses one inside another's
    body, at any depth ("No nested TensorIterator": a ``lax.map`` of ``jax.random.gamma`` draws,
    whose sampler is a ``lax.map`` too, or a scan in a scan). Each Scan inside a Scan's body
    becomes a Loop (:func:`_scan_as_loop`), which it runs there. A Loop of 0 trips in a Scan body
    returns, as its stacked outputs, what the previous inference stacked (a ``lax.map`` of a scan
    over rows of 0 columns run after rows of 4 gave ys of shape (B, 4)): where the length is not
    a static positive number, the Loop runs at least one trip and its results are dropped."""
    inner = [
        n
        for n in graph_nodes(node.attributes["body"].as_graph())
        if n.op_type == "Scan" and n.domain == ""
    ]
    return sum(_scan_as_loop(n, edit) for n in inner) > 0


def _axes(node: ir.Node, name: str, count: int) -> list[int]:
    attr = node.attributes.get(name)
    return list(attr.as_ints()) if attr is not None and attr.as_ints() else [0] * count


def _scan_as_loop(scan: ir.Node, outer: Editor) -> bool:
    """``scan`` as a Loop of as many trips as its scanned length: the body reads element ``i``
    (``length - 1 - i`` for a reversed input) of each scanned input with a Gather, and each
    stacked output (Loop stacks along axis 0, in trip order) is reversed and moved to its axis
    where the Scan said so. False (nothing changed) where an axis or the length is not known."""
    edit = Editor(scan, outer.counter, outer.opset)
    counter = edit.counter
    body = scan.attributes["body"].as_graph()
    n_scanned = scan.attributes.get_int("num_scan_inputs", 0)
    n_state = len(scan.inputs) - n_scanned
    xs, slices, ys = scan.inputs[n_state:], list(body.inputs[n_state:]), scan.outputs[n_state:]
    in_axes, out_axes = (
        _axes(scan, "scan_input_axes", n_scanned),
        _axes(scan, "scan_output_axes", len(ys)),
    )
    in_reversed = _axes(scan, "scan_input_directions", n_scanned)
    out_reversed = _axes(scan, "scan_output_directions", len(ys))
    ranks = [rank_of(x) for x in xs]
    out_ranks = [rank_of(y) for y in ys]
    if (
        not xs
        or None in xs
        or any(a < 0 and r is None for a, r in zip(in_axes, ranks, strict=True))
    ):
        return False
    if any(a < 0 and r is None for a, r in zip(out_axes, out_ranks, strict=True)):
        return False
    in_axes = [a % r if a < 0 else a for a, r in zip(in_axes, ranks, strict=True)]  # type: ignore[operator]
    out_axes = [a % r if a < 0 else a for a, r in zip(out_axes, out_ranks, strict=True)]  # type: ignore[operator]
    x0 = xs[0]
    assert x0 is not None
    length = x0.shape[in_axes[0]] if x0.shape is not None else None
    if isinstance(length, int):
        trips = edit.const(np.array(length, np.int64))
    else:
        trips = edit.op(
            "Gather",
            edit.op("Shape", x0, dtype=ir.DataType.INT64),
            np.array(in_axes[0], np.int64),
            axis=0,
            dtype=ir.DataType.INT64,
        )
    last = (
        edit.op("Sub", trips, np.array(1, np.int64), dtype=ir.DataType.INT64)
        if any(in_reversed)
        else None
    )
    ran = size = None
    if (
        not (isinstance(length, int) and length > 0) and None not in ranks
    ):  # (one trip at least; see above)
        i64 = ir.DataType.INT64
        ran = edit.op("Greater", trips, np.array(0, np.int64), dtype=BOOL)
        size = edit.op("Reshape", trips, np.array([1], np.int64), dtype=i64)
        xs = _padded_when_empty(
            edit, xs, in_axes, ranks, edit.op("Reshape", ran, np.array([1], np.int64), dtype=BOOL)
        )
        trips = edit.op("Max", trips, np.array(1, np.int64), dtype=i64)

    tag = f"{scan.name}/as_loop"
    iteration = ir.Value(
        name=f"{tag}/iteration", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])
    )
    cond = ir.Value(name=f"{tag}/cond", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    reads: list[ir.Node] = []

    def add(op_type: str, inputs: list[ir.Value], like: ir.Value, **attrs: Any) -> ir.Value:
        counter[0] += 1
        inner = ir.Node(
            "",
            op_type,
            inputs,
            ir.convenience.convert_attributes(attrs),
            name=f"{tag}/{op_type}{counter[0]}",
        )
        inner.outputs[0].name = f"{inner.name}_output"
        inner.outputs[0].type, inner.outputs[0].shape = like.type, like.shape
        reads.append(inner)
        return inner.outputs[0]

    scanned = [x for x in xs if x is not None]  # (all of them: checked above)
    for x, element, axis, backwards in zip(scanned, slices, in_axes, in_reversed, strict=True):
        position = (
            add("Sub", [last, iteration], iteration)
            if backwards and last is not None
            else iteration
        )
        element.replace_all_uses_with(
            add("Gather", [x, position], element, axis=axis), replace_graph_outputs=True
        )
    for element in slices:
        body.inputs.remove(element)
    body.inputs.insert(0, iteration)
    body.inputs.insert(1, cond)
    body.outputs.insert(0, add("Identity", [cond], cond))
    if len(body):
        body.insert_before(next(iter(body)), reads)
    else:
        body.extend(reads)
    attributes = [ir.AttrGraph("body", body)]
    loop = ir.Node(
        "",
        "Loop",
        [trips, edit.const(np.array(True)), *scan.inputs[:n_state]],
        attributes,
        num_outputs=len(scan.outputs),
        name=scan.name,
        doc_string=scan.doc_string,
    )
    assert edit.graph is not None
    edit.graph.insert_before(scan, loop)
    results = list(loop.outputs[:n_state])
    if ran is not None:
        for k, (out, initial) in enumerate(
            zip(loop.outputs[:n_state], scan.inputs[:n_state], strict=True)
        ):
            out.type, out.shape = scan.outputs[k].type, scan.outputs[k].shape
            results[k] = edit.op("Where", ran, out, initial, dtype=scan.outputs[k].dtype)
    for k, (stacked, y) in enumerate(zip(loop.outputs[n_state:], ys, strict=True)):
        stacked.type = y.type
        if size is not None:
            stacked = edit.op(
                "Slice",
                stacked,
                np.array([0], np.int64),
                size,
                np.array([0], np.int64),
                dtype=y.dtype,
            )
        if out_reversed[k]:
            stacked = edit.op(
                "Slice",
                stacked,
                np.array([-1], np.int64),
                np.array([np.iinfo(np.int64).min], np.int64),
                np.array([0], np.int64),
                np.array([-1], np.int64),
                dtype=y.dtype,
            )
        if out_axes[k]:
            rank = out_ranks[k]
            assert rank is not None
            perm = [*range(1, out_axes[k] + 1), 0, *range(out_axes[k] + 1, rank)]
            stacked = edit.op("Transpose", stacked, perm=perm, dtype=y.dtype)
        results.append(stacked)
    edit.replace(*results)
    return True


@rewrite("Scan")
def scan_captures_as_states(node: ir.Node, edit: Editor) -> Replacement:
    """OpenVINO 2026.4's ONNX frontend does not let a Scan body read a value of the enclosing
    graph that is not a constant ("Number of Scan node inputs (1) is less than required (2)";
    a ``lax.map`` reading a model input, ``jax.random.gamma``'s). Each such value becomes a
    state of the Scan that the body passes on unchanged (an Identity)."""
    body = node.attributes["body"].as_graph()
    inside = {id(n) for n in graph_nodes(body)}
    own = {id(v) for n in graph_nodes(body) for v in n.outputs}
    own |= {id(v) for v in body.inputs} | {id(v) for g in subgraphs(body) for v in g.inputs}
    captured: list[ir.Value] = []
    for inner in graph_nodes(body):
        for value in inner.inputs:
            if (
                value is None
                or id(value) in own
                or constant_array(value) is not None
                or any(value is c for c in captured)
            ):
                continue
            captured.append(value)
    if not captured:
        return None
    read = [
        (value, [(user, index) for user, index in list(value.uses()) if id(user) in inside])
        for value in captured
    ]
    passed_through_as_states(node, edit, body, "scan", read, captured)
    return True
