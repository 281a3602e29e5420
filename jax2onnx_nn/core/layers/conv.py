"""Convolutions as ONNX Conv and ConvTranspose.

Conv takes ``pads`` (begins, then ends) or an ``auto_pad`` string; :func:`conv_pads` makes
either from the padding specs frameworks and lax accept ("SAME", an int, one int or pair per
axis). A transposed convolution (lax's ``conv_transpose``, a conv over the stride-dilated
input with the kernel as given) is ONNX's ConvTranspose, the gradient of Conv: the kernel
flipped with its in/out features swapped per group (:func:`conv_transpose_kernel`), and pads
``(K-1)*d - lo`` at the begin and ``(K-1)*d - hi`` at the end (:func:`conv_transpose_pads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import onnx_ir as ir

from jax2onnx_nn.core import jax_internals as jxi
from jax2onnx_nn.core import kernels
from jax2onnx_nn.core.layers.spatial import Padding, pad, permute, symbolic_padding
from jax2onnx_nn.core.lower import LoweringContext

Pads = tuple[int, ...] | str
"""ONNX ``pads`` (begins, then ends), or an ``auto_pad`` string."""

_AUTO_PAD = {"SAME": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER"}


def can_conv(dtype: np.dtype) -> bool:
    """True when onnxruntime has a Conv kernel for ``dtype`` (possibly after widening)."""
    return kernels.compute_dtype("Conv", dtype) is not None


def padding_pairs(padding: Any, n: int) -> list[tuple[int, int]] | None:
    """An explicit padding spec (an int, or one int or ``(lo, hi)`` per spatial axis) as ``n``
    integer pairs; None for anything else."""
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        return [(int(padding), int(padding))] * n
    if not isinstance(padding, (list, tuple)) or len(padding) != n:
        return None
    pairs = [(p, p) if isinstance(p, (int, np.integer)) else tuple(p) for p in padding]
    if not all(
        len(p) == 2 and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in p)
        for p in pairs
    ):
        return None
    return [(int(lo), int(hi)) for lo, hi in pairs]


def conv_pads(
    padding: Any,
    spatial: Sequence[Any],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilation: Sequence[int],
) -> Pads | None:
    """ONNX Conv padding for a padding spec ("VALID", "SAME", "SAME_LOWER", an int, one int or
    pair per axis) of a conv over ``spatial``; None if Conv cannot express it (CIRCULAR or
    another mode that pads the input first, negative padding, which crops)."""
    n = len(kernel)
    if isinstance(padding, str):
        if padding == "VALID":
            return (0,) * (2 * n)
        if padding not in _AUTO_PAD:
            return None
        if any(jxi.is_symbolic_dim(d) for d in spatial):
            return _AUTO_PAD[padding]  # the same amounts, computed by the runtime
        dilated = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True))
        pairs: Sequence[tuple[int, int]] | None = jax.lax.padtype_to_pads(
            tuple(int(d) for d in spatial), dilated, tuple(strides), padding
        )
    else:
        pairs = padding_pairs(padding, n)
    if pairs is None or not all(v >= 0 for pair in pairs for v in pair):
        return None
    return tuple(int(p[0]) for p in pairs) + tuple(int(p[1]) for p in pairs)


def padding_attrs(pads: Pads) -> dict[str, Any]:
    """Conv / pool attributes for :func:`conv_pads`'s result."""
    return {"auto_pad": pads} if isinstance(pads, str) else {"pads": list(pads)}


def conv(
    ctx: LoweringContext,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Pads,
    group: int,
) -> ir.Value:
    """One Conv over an NC<spatial> input with an OI<spatial> kernel."""
    return ctx.op.Conv(
        x,
        w,
        bias,
        strides=list(strides),
        dilations=list(dilations),
        group=group,
        **padding_attrs(pads),
    )


def conv_padding(
    ctx: LoweringContext, x: ir.Value, padding: Padding, zero: ir.Value
) -> tuple[ir.Value, list[int]]:
    """lax padding of every axis (the spatial ones from axis 2) as Conv ``pads``, or applied
    to ``x`` first where Conv cannot take it (negative, or symbolic amounts)."""
    spatial = padding[2:]
    if not symbolic_padding(padding) and all(lo >= 0 and hi >= 0 for lo, hi in spatial):
        return x, [lo for lo, _ in spatial] + [hi for _, hi in spatial]
    return pad(ctx, x, padding, zero), [0] * (2 * len(spatial))


# -- ConvTranspose ------------------------------------------------------------------------------


def conv_transpose_padding(
    padding: Any, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int]
) -> list[tuple[int, int]] | None:
    """The padding ``lax.conv_transpose`` gives its conv over the stride-dilated input, for a
    padding spec ("SAME", "VALID", or explicit: used as it is); None for anything else."""
    if not isinstance(padding, str):
        return padding_pairs(padding, len(kernel))
    if padding not in ("SAME", "VALID"):
        return None
    pairs = []
    for k, d, s in zip(kernel, dilation, strides, strict=True):
        k = (k - 1) * d + 1
        if padding == "SAME":
            total = k + s - 2
            lo = k - 1 if s > k - 1 else -(-total // 2)
        else:
            total, lo = k + s - 2 + max(k - s, 0), k - 1
        pairs.append((lo, total - lo))
    return pairs


def conv_transpose_pads(
    padding: Padding, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """ConvTranspose ``(pads, output_padding)`` equal to a conv with ``padding`` over the input
    dilated by ``strides``; None where ConvTranspose cannot express it.

    With the input dilated by s and padded by lo, the conv's output y sums x[i] * w[k] over
    i*s = y + k*d - lo; ConvTranspose (stride s, dilation d, pad p) with the flipped kernel sums
    the same terms for p = (K-1)*d - lo. At the end, padding past the kernel's reach appends
    outputs no input reaches: ``output_padding``. onnxruntime takes ``output_padding < stride``
    only (beyond, it rejects the input size, also where the dilation is larger), and no
    negative begin pad.
    """
    span = [(int(k) - 1) * d for k, d in zip(kernel, dilation, strict=True)]
    begin = [s - int(lo) for s, (lo, _) in zip(span, padding, strict=True)]
    end = [s - int(hi) for s, (_, hi) in zip(span, padding, strict=True)]
    extra = [max(-e, 0) for e in end]
    if min(begin, default=0) < 0 or any(e >= s for e, s in zip(extra, strides, strict=True)):
        return None
    return (*begin, *(max(e, 0) for e in end)), tuple(extra)


def conv_transpose_kernel(
    ctx: LoweringContext,
    w: ir.Value,
    to_oi: Sequence[int],
    dims: Sequence[int],
    group: int,
    *,
    weight: bool,
) -> ir.Value:
    """A conv kernel (``to_oi`` permutes it to ``(O, I/g, *spatial)``, of sizes ``dims``) as
    ConvTranspose's ``(I, O/g, *spatial)`` weight: flipped spatially, in/out swapped per group.

    ``weight=True`` rearranges an initializer at export time
    (:meth:`LoweringContext.derived_weight`: no node, the weight keeps its name); otherwise, and for
    a runtime input, nodes do it."""
    to_oi = [int(p) for p in to_oi]
    out_f, in_f, spatial = int(dims[0]), int(dims[1]), [int(k) for k in dims[2:]]
    n = len(spatial)

    def array(a: np.ndarray) -> np.ndarray:
        a = np.flip(np.transpose(a, to_oi), tuple(range(2, 2 + n)))
        a = a.reshape(group, out_f // group, in_f, *spatial).swapaxes(1, 2)
        return a.reshape(group * in_f, out_f // group, *spatial)

    def nodes(v: ir.Value) -> ir.Value:
        if group == 1:  # one Transpose from the given layout to I, O, spatial
            v = permute(ctx, v, [to_oi[1], to_oi[0], *to_oi[2:]])
        else:
            v = ctx.reshape(permute(ctx, v, to_oi), [group, out_f // group, in_f, *spatial])
            v = ctx.op.Transpose(v, perm=[0, 2, 1, *range(3, 3 + n)])
            v = ctx.reshape(v, [group * in_f, out_f // group, *spatial])
        flip = ctx.ints([-1] * n)
        return ctx.op.Slice(
            v, flip, ctx.ints([np.iinfo(np.int64).min] * n), ctx.ints(list(range(2, 2 + n))), flip
        )

    if not weight:
        return nodes(w)
    return ctx.derived_weight(w, ("conv_transpose", group, *to_oi), array, nodes)


def conv_transpose(
    ctx: LoweringContext,
    x: ir.Value,
    w: ir.Value,
    bias: ir.Value | None,
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    output_padding: Sequence[int],
    group: int,
    kernel_shape: Sequence[int] | None = None,
) -> ir.Value:
    """One ConvTranspose (``pads`` and ``output_padding`` from :func:`conv_transpose_pads`)."""
    return ctx.op.ConvTranspose(
        x,
        w,
        bias,
        kernel_shape=None if kernel_shape is None else [int(k) for k in kernel_shape],
        strides=list(strides),
        dilations=list(dilations),
        pads=list(pads),
        output_padding=list(output_padding) if any(output_padding) else None,
        group=group,
    )
