"""Loop and Scan states and outputs that nothing reads removed."""

from __future__ import annotations

import onnx_ir as ir

from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import graph_of
from jax2onnx_nn.core.ir.walk import all_nodes, graph_nodes, node_bodies
from jax2onnx_nn.core.passes.remove_unused import remove_unused_in

_DEAD_STATE_ROUNDS = 3  # walks over nested loops (each round drops what the last one left unread)


def _reads(node: ir.Node) -> list[ir.Value]:
    """The values ``node`` reads: its inputs and, for a node with bodies, every input of the
    nodes in them (a superset of what the bodies capture from around the node)."""
    reads = [v for v in node.inputs if v is not None]
    for body in node_bodies(node):
        reads.extend(v for inner in graph_nodes(body) for v in inner.inputs if v is not None)
    return reads


_LOOP_OPS = frozenset({"Loop", "Scan"})


def _loop_layout(loop: ir.Node) -> tuple[int, int, int, int] | None:
    """(number of states, index of the first state among the node's inputs, among its body's
    inputs, among its body's outputs) of a ``Loop`` or ``Scan``; None for another node or a
    body that does not match the node."""
    body = loop.attributes.get("body")
    if (
        loop.domain != ""
        or loop.op_type not in ("Loop", "Scan")
        or not isinstance(body, ir.Attr)
        or body.is_ref()
    ):
        return None
    if loop.op_type == "Loop":
        layout = (len(loop.inputs) - 2, 2, 2, 1)
    else:
        layout = (len(loop.inputs) - loop.attributes["num_scan_inputs"].as_int(), 0, 0, 0)
    n_states, _, first_body_input, first_body_output = layout
    if len(body.value.inputs) < first_body_input + n_states or len(
        body.value.outputs
    ) != first_body_output + len(loop.outputs):
        return None
    return layout


def _live_body_outputs(loop: ir.Node, used: list[bool]) -> tuple[list[bool], set[int]]:
    """Which body outputs of ``loop`` (laid out as :func:`_loop_layout` says) stay when the
    node outputs flagged ``used`` are read, and the ids of the values the body then needs (the
    values it captures included). A state whose body input feeds a live body output is live
    too (grown to a fixed point); a Loop's condition always is."""
    n_states, _, first_body_input, first_body_output = _loop_layout(loop)  # type: ignore[misc]
    body = loop.attributes["body"].value
    live = [True] * first_body_output + list(used)
    state_of_input = {id(body.inputs[first_body_input + k]): k for k in range(n_states)}
    while True:
        needed = {id(v) for v, keep in zip(body.outputs, live, strict=True) if keep}
        for node in reversed(list(body)):
            if any(id(o) in needed for o in node.outputs):
                needed |= _needed_reads(node, needed)
        grown = False
        for value_id, k in state_of_input.items():
            if value_id in needed and not live[first_body_output + k]:
                live[first_body_output + k] = grown = True
        if not grown:
            return live, needed


def _needed_reads(node: ir.Node, needed: set[int]) -> set[int]:
    """The ids of the values ``node`` reads to compute its outputs whose ids are in
    ``needed``. A Loop or Scan needs its trip count, condition and scanned inputs, the initial
    values of its live states only, and what its body needs for them: so a state of an inner
    loop that only feeds a dead state of the loop around it is dead too (vectors rotated
    alongside a matrix in rounds inside a convergence loop, when only the matrix is read).
    Any other node needs all it reads (:func:`_reads`)."""
    layout = _loop_layout(node)
    if layout is None:
        return {id(v) for v in _reads(node)}
    n_states, first_input, _, first_body_output = layout
    live, body_needs = _live_body_outputs(node, [id(o) in needed for o in node.outputs])

    def dead_input(i: int) -> bool:
        return (
            first_input <= i < first_input + n_states
            and not live[first_body_output + i - first_input]
        )

    return body_needs | {
        id(v) for i, v in enumerate(node.inputs) if v is not None and not dead_input(i)
    }


def _prune_loop(loop: ir.Node) -> int:
    """:func:`remove_dead_loop_state` on one ``Loop`` or ``Scan`` and the loops in its body:
    returns the number of states and stacked outputs removed."""
    layout = _loop_layout(loop)
    if layout is None:
        return 0
    n_states, first_input, first_body_input, first_body_output = layout
    body = loop.attributes["body"].value
    is_loop = loop.op_type == "Loop"
    used = [bool(o.uses()) or o.is_graph_output() for o in loop.outputs]
    live, _ = _live_body_outputs(loop, used)
    dead = [i for i, keep in enumerate(live[first_body_output:]) if not keep]  # node output indices
    if not dead:
        return 0
    # the body: its outputs, then the nodes only they needed, the dead states of the loops
    # in it (which read the states' inputs), what those needed, then the states' inputs
    for i in reversed(dead):
        body.outputs.pop(first_body_output + i)
    remove_unused_in(body, None)
    removed = sum(
        _prune_loop(inner) for inner in reversed(list(body)) if _loop_layout(inner) is not None
    )
    if removed:
        remove_unused_in(body, None)
    dead_states = [i for i in dead if i < n_states]
    dead_scans = [i - n_states for i in dead if i >= n_states]
    for k in reversed(dead_states):
        body.inputs.pop(first_body_input + k)
    # the node: a new one without the dead inputs and outputs, its outputs taking the old ones'
    # place
    inputs = [
        v
        for i, v in enumerate(loop.inputs)
        if not (first_input <= i < first_input + n_states and i - first_input in dead_states)
    ]
    attributes = dict(loop.attributes)
    if not is_loop:
        for name in ("scan_output_axes", "scan_output_directions"):
            if name in attributes:
                kept = [x for j, x in enumerate(attributes[name].as_ints()) if j not in dead_scans]
                attributes[name] = ir.AttrInt64s(name, kept)
    kept_outputs = [o for i, o in enumerate(loop.outputs) if i not in dead]
    graph = graph_of(loop)
    pruned = ir.Node(
        loop.domain,
        loop.op_type,
        inputs,
        attributes.values(),
        num_outputs=len(kept_outputs),
        version=loop.version,
        doc_string=loop.doc_string,
        metadata_props=dict(loop.metadata_props),
    )
    pruned.meta.update(loop.meta)
    graph.insert_before(loop, pruned)
    output_names = []
    for old, new in zip(kept_outputs, pruned.outputs, strict=True):
        new.type, new.shape = old.type, old.shape
        new.meta.update(old.meta)
        output_names.append(old.name)
        old.replace_all_uses_with(new, replace_graph_outputs=True)
    graph.remove(loop, safe=True)
    pruned.name = loop.name
    for output_name, new in zip(output_names, pruned.outputs, strict=True):
        new.name = output_name
    return len(dead) + removed


@rewrite("Loop", "Scan")
def remove_dead_loop_state(model: ir.Model) -> int:
    """Drop the states of ``Loop`` and ``Scan`` nodes whose final value nobody reads and
    which feed nothing kept inside the body (another kept state, a Loop's condition, a kept
    stacked output), and the stacked outputs nobody reads, with the body nodes only they
    needed (a ``lax.scan`` whose caller reads some of its carries; a loop counter nothing
    reads). ``jax.make_jaxpr`` keeps such carries, and dead-node removal cannot see them (the body
    updates them each trip). Loops in the main graph, in bodies and in function bodies; a
    loop's liveness looks through the loops in its body (an inner loop reads the initial
    values of its live states only), and dropping an outer state drops the inner states that
    fed only it. A dead state of an inner loop can leave one of the outer loop's states dead: with
    nested loops, a few rounds. Returns the number of states and stacked outputs removed."""
    removed = 0
    for _round in range(_DEAD_STATE_ROUNDS):
        loops = [
            n for n, _ in all_nodes(model) if n.op_type in _LOOP_OPS and _loop_layout(n) is not None
        ]
        found = sum(_prune_loop(loop) for loop in loops if loop.graph is not None)
        removed += found
        if not found or len(loops) == 1:
            break
    return removed


# -- unused nodes, with what the bodies of removed nodes read ----------------------------
