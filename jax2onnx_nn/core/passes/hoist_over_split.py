"""Layout ops after a Split of attention heads hoisted over it."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core.graph import is_required
from jax2onnx_nn.core.ir.census import rewrite
from jax2onnx_nn.core.ir.edit import graph_of, new_constant, one_reader
from jax2onnx_nn.core.ir.values import same_dim, shape_of
from jax2onnx_nn.core.ir.walk import all_nodes


def _split_heads_reshape(
    split: ir.Node, readers: list[ir.Node]
) -> tuple[list[int], list[int]] | None:
    """For Split outputs each reshaped to ``pre + [n_i] + tail`` (``pre`` the dims before the
    split axis, ``tail`` static and the same for all): the shape ``[0] * len(pre) + [sum n] +
    tail`` of one Reshape before the Split, and the split sizes ``n_i``. The row-major order
    makes this the same: each output is a contiguous block of the flattened axis and what
    follows it."""
    split_input = _split_input(split)
    if split_input is None:
        return None
    _, x_shape, axis = split_input
    post = [d for d in x_shape[axis + 1 :] if isinstance(d, int)]
    if len(post) != len(x_shape) - axis - 1:
        return None
    tail: list[int] | None = None
    sizes: list[int] = []
    for out, reader in zip(split.outputs, readers, strict=True):
        y = reader.outputs[0]
        out_n = None if out.shape is None else out.shape[axis]
        if y.shape is None or len(y.shape) < axis + 1 or not isinstance(out_n, int):
            return None
        if not all(same_dim(a, b) for a, b in zip(x_shape[:axis], y.shape[:axis], strict=False)):
            return None
        this_tail = [d for d in y.shape[axis + 1 :] if isinstance(d, int) and d >= 1]
        n = y.shape[axis]
        if not isinstance(n, int) or n < 1 or len(this_tail) != len(y.shape) - axis - 1:
            return None
        if tail is not None and this_tail != tail:
            return None
        tail = this_tail
        if n * int(np.prod(tail, dtype=np.int64)) != out_n * int(np.prod(post, dtype=np.int64)):
            return None
        sizes.append(n)
    return [0] * axis + [sum(sizes)] + list(tail or []), sizes


def _split_input(split: ir.Node) -> tuple[ir.Value, ir.Shape, int] | None:
    """The Split's input, its shape, and the axis it splits (non-negative); None when the
    input or its shape is unknown."""
    x = split.inputs[0]
    if x is None or x.shape is None:
        return None
    axis = split.attributes["axis"].value if "axis" in split.attributes else 0
    rank = len(x.shape)
    return (x, x.shape, axis % rank) if -rank <= axis < rank else None


def _hoist_over_split(model: ir.Model, split: ir.Node, in_function: bool) -> ir.Node | None:
    """Rewrite one Split whose every output is read once, by a Reshape (all of them) or a
    Transpose (most with the same perm): the layout op runs once on the Split's input. Returns
    the new Split, None when nothing was rewritten."""
    if (
        split.domain != ""
        or split.op_type != "Split"
        or any(o.is_graph_output() for o in split.outputs)
    ):
        return None
    found = [one_reader(o) for o in split.outputs]
    readers = [r for r in found if r is not None]
    if (
        len(found) < 2
        or len(readers) != len(found)
        or any(r.domain != "" or is_required(r) for r in readers)
    ):
        return None
    kinds = {r.op_type for r in readers}
    split_input = _split_input(split)
    if split_input is None:
        return None
    x, x_shape, axis = split_input
    out_sizes = [d for o in split.outputs if o.shape is not None for d in [o.shape[axis]]]
    sizes = [d for d in out_sizes if isinstance(d, int)]
    if len(sizes) != len(split.outputs):
        return None
    graph = graph_of(split)
    if kinds == {"Reshape"}:
        plan = _split_heads_reshape(split, readers)
        if plan is None:
            return None
        shape, sizes = plan
        target = new_constant(model, split, np.asarray(shape, np.int64), in_function)
        moved = ir.Node("", "Reshape", [x, target], name=readers[0].name or None)
        moved.outputs[0].name = (
            f"{readers[0].outputs[0].name}/before_split" if readers[0].outputs[0].name else None
        )
        moved.outputs[0].type = x.type
        moved.outputs[0].shape = ir.Shape([*x_shape[:axis], int(sum(sizes)), *shape[axis + 1 :]])
        new_axis, finals = axis, [r.outputs[0] for r in readers]
        residual: list[list[int] | None] = [None] * len(readers)
    elif kinds == {"Transpose"}:
        if any("perm" not in r.attributes for r in readers):
            return None
        perms = [list(r.attributes["perm"].value) for r in readers]
        perm = max(perms, key=perms.count)
        if perms.count(perm) < 2:
            return None
        inverse = [perm.index(i) for i in range(len(perm))]
        moved = ir.Node(
            "",
            "Transpose",
            [x],
            attributes=[ir.AttrInt64s("perm", perm)],
            name=readers[0].name or None,
        )
        moved.outputs[0].name = (
            f"{readers[0].outputs[0].name}/before_split" if readers[0].outputs[0].name else None
        )
        moved.outputs[0].type = x.type
        moved.outputs[0].shape = ir.Shape([x_shape[p] for p in perm])
        new_axis, finals = inverse[axis], [r.outputs[0] for r in readers]
        residual = [None if p == perm else [inverse[q] for q in p] for p in perms]
    else:
        return None
    graph.insert_before(split, moved)
    counts = new_constant(model, split, np.asarray(sizes, np.int64), in_function)
    new_split = ir.Node(
        "",
        "Split",
        [moved.outputs[0], counts],
        attributes=[ir.AttrInt64("axis", new_axis)],
        num_outputs=len(sizes),
        name=split.name or None,
    )
    graph.insert_before(split, new_split)
    for piece, final, rest, old in zip(
        new_split.outputs, finals, residual, split.outputs, strict=True
    ):
        piece.type = final.type
        if rest is None:
            piece.shape = final.shape
            final.replace_all_uses_with(piece)
            if final.name:  # the value a reader sees keeps its name
                piece.name, final.name = final.name, f"{final.name}/replaced"
            continue
        piece.shape = ir.Shape([shape_of(old)[p] for p in perm])
        fix = ir.Node("", "Transpose", [piece], attributes=[ir.AttrInt64s("perm", rest)])
        fix.outputs[0].type, fix.outputs[0].shape = final.type, final.shape
        graph.insert_before(split, fix)
        final.replace_all_uses_with(fix.outputs[0])
    return new_split


@rewrite("Split", creates={"Split", "Reshape", "Transpose", "Constant"})
def hoist_layout_over_split(model: ir.Model) -> int:
    """A Split whose outputs are each reshaped the same way (attention's heads:
    ``split(qkv, 3)`` then each ``(B, T, C) -> (B, T, N, H)``) or transposed mostly by one perm
    becomes one Reshape or Transpose before a Split: ``k`` layout ops become one (plus a
    Transpose for each output whose perm differs, from the moved perm to its own). Exact (only
    elements move). Repeated on the new Split, so a Reshape and then a Transpose both move.
    Returns the number of Splits rewritten."""
    rewritten = 0
    for node, in_function in all_nodes(model):
        split = node if node.graph is not None and node.op_type == "Split" else None
        while split is not None:
            split = _hoist_over_split(model, split, in_function)
            rewritten += split is not None
    return rewritten


# -- BatchNorm / affine into the Conv or Gemm before it --------------------------------------
