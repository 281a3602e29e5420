"""``eqx.nn.RotaryPositionalEmbedding`` as ``x * cos + rotate_half(x) * sin`` (ONNX
RotaryEmbedding from opset 23)."""

from __future__ import annotations

import hashlib
from typing import Any

import equinox as eqx
import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    NotApplicable,
    Operands,
)
from jax2onnx_nn.equinox.coarse.common import (
    Levels,
    MakeWrapper,
    coarse_patch_with_original,
    eqx_lowering,
    flatten_batch,
    float_arrays,
    has_empty,
    operand_shape,
    out_dtype,
    plain,
    unflatten_batch,
)

# -- eqx.nn.RotaryPositionalEmbedding: x * cos + rotate_half(x) * sin ----------------------


def _rope_tables(
    original: Any, module: Any, seq: int, size: int, dtype: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The cos and sin tables eqx multiplies with, read off the layer itself.

    eqx caches its tables per (size, dtype) only, not per ``theta``, so recomputing them could
    give other numbers than the layer uses. The layer is linear: y = x * cos + rotate_half(x) *
    sin, so x = [1, 0] gives [cos_1, sin_2] and x = [0, 1] gives [-sin_1, cos_2] exactly.
    """
    half = size // 2
    ones, zeros = np.ones((seq, half), dtype), np.zeros((seq, half), dtype)
    with jax.ensure_compile_time_eval():
        first = np.asarray(original(module, np.concatenate([ones, zeros], axis=1)))
        second = np.asarray(original(module, np.concatenate([zeros, ones], axis=1)))
    cos = np.concatenate([first[:, :half], second[:, half:]], axis=1)
    sin = np.concatenate([-second[:, :half], first[:, half:]], axis=1)
    return cos, sin


def _rope_handler(original: Any, module: Any, x: Any, *, key: Any = None) -> Any:
    if not plain(module, eqx.nn.RotaryPositionalEmbedding) or not float_arrays(x) or x.ndim != 2:
        return NotApplicable
    seq, size = x.shape
    if (
        jxi.is_symbolic_dim(seq)
        or size != module.embedding_size
        or np.dtype(module.dtype) != np.dtype(x.dtype)
    ):
        return NotApplicable
    tables = _rope_tables(original, module, int(seq), int(size), np.dtype(x.dtype))
    return CoarseCall("eqx_rope", inputs={"x": x}, params={"tables": _Tables(tables)})


class _Tables:
    """Constant tables as a hashable param (compared by content)."""

    def __init__(self, arrays: tuple[np.ndarray, ...]) -> None:
        self.arrays = arrays
        self._key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tables) and other._key == self._key

    def __repr__(self) -> str:  # printed in jaxprs: equal tables print alike (function dedup)
        digest = hashlib.sha256(repr(self._key).encode()).hexdigest()[:16]
        return f"Tables({digest})"


ROTARY_OPSET = 23  # ONNX RotaryEmbedding


@eqx_lowering(
    "eqx_rope",
    onnx_ops=(
        "Split",
        "Neg",
        "Concat",
        "Mul",
        "Add",
        "RotaryEmbedding",
        "Reshape",
        "Unsqueeze",
        "Squeeze",
        "Transpose",
        "Shape",
        "Slice",
        "Expand",
    ),
    covers=("eqx.nn.RotaryPositionalEmbedding",),
)
def _rope(ctx: LoweringContext, ops: Operands, *, tables: _Tables) -> Any:
    """``x * cos + rotate_half(x) * sin``: ONNX RotaryEmbedding from opset 23 (float32, its
    non-interleaved form is this formula: x1 cos - x2 sin, x2 cos + x1 sin), else its ops."""
    levels = Levels(ctx)
    if not levels.full("x"):
        return NotApplicable
    x = ops["x"]
    half = tables.arrays[0].shape[-1] // 2
    cos_sin = [t[:, :half] for t in tables.arrays]
    tiled = all(
        np.array_equal(t[:, :half], t[:, half:]) for t in tables.arrays
    )  # eqx tiles its (seq, size / 2) tables
    if ctx.opset >= ROTARY_OPSET and tiled and out_dtype(ctx) == np.float32 and not has_empty(ctx):
        heads_in_place = _rope_on_untransposed_heads(ctx, x, operand_shape(ops, "x"), cos_sin)
        if heads_in_place is not None:
            return heads_in_place
        # every vmap dim as a head of one batch: [1, N, seq, size], the tables [1, seq, size / 2]
        example = operand_shape(ops, "x")[len(levels) :]
        heads = flatten_batch(ctx, x, example, len(levels), front=(1,))
        y = ctx.op.RotaryEmbedding(heads, *(ctx.const(t[None]) for t in cos_sin), interleaved=0)
        return unflatten_batch(ctx, y, len(levels), ctx.aval_out, front=1)
    cos, sin = (ctx.const(t) for t in tables.arrays)
    first, second = ctx.op.Split(x, ctx.ints([half, half]), axis=-1, _outputs=2)
    rotated = ctx.op.Concat(ctx.op.Neg(second), first, axis=-1)
    return ctx.op.Add(ctx.op.Mul(x, cos), ctx.op.Mul(rotated, sin))


def _rope_on_untransposed_heads(
    ctx: LoweringContext, x: ir.Value, shape: tuple[Any, ...], cos_sin: list[np.ndarray]
) -> ir.Value | None:
    """RoPE per head inside a batch (``vmap(vmap(rope, in_axes=1))`` of ``[B, seq, heads,
    size]``, as Equinox's ``process_heads`` does): vmap moved the heads before the sequence
    (``Transpose(perm=[0, 2, 1, 3])``). RotaryEmbedding takes the untransposed tensor as
    ``[B, seq, heads * size]`` with ``num_heads``, so no data moves: onnxruntime cancels such
    Transposes around elementwise ops, not around RotaryEmbedding (measured 1.2x slower with
    them at B=8, seq 512, 12 heads of 64). None where ``x`` is not such a Transpose."""
    producer = x.producer()
    if (
        producer is None
        or producer.op_type != "Transpose"
        or producer.domain not in ("", "ai.onnx")
    ):
        return None
    perm = producer.attributes.get("perm")
    if perm is None or list(perm.value) != [0, 2, 1, 3] or len(shape) != 4:
        return None
    _, heads, seq, size = shape
    if any(map(jxi.is_symbolic_dim, (heads, seq, size))):
        return None
    source = producer.inputs[0]  # [B, seq, heads, size]
    flat = ctx.op.Reshape(source, ctx.ints([0, int(seq), int(heads) * int(size)]))
    batch = ctx.op.Slice(ctx.op.Shape(source), ctx.ints([0]), ctx.ints([1]))
    positions = ctx.op.Expand(
        ctx.const(np.arange(int(seq), dtype=np.int64)[None]),
        ctx.op.Concat(batch, ctx.ints([int(seq)]), axis=0),
    )
    y = ctx.op.RotaryEmbedding(
        flat, *(ctx.const(t) for t in cos_sin), positions, interleaved=0, num_heads=int(heads)
    )
    return ctx.op.Transpose(
        ctx.op.Reshape(y, ctx.ints([0, int(seq), int(heads), int(size)])), perm=[0, 2, 1, 3]
    )


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of eqx.nn.RotaryPositionalEmbedding."""
    return [
        coarse_patch_with_original(eqx.nn.RotaryPositionalEmbedding, _rope_handler),
    ]
