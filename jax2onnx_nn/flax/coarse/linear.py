"""``nnx.Linear`` (Gemm), ``nnx.LinearGeneral`` (MatMul on flattened features) and ``nnx.Embed``
(Gather with JAX's out-of-range semantics; ``attend`` as a MatMul) as coarse ops."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax2onnx_nn.core.layers.dense import dense
from jax2onnx_nn.core.layers.embed import TAKE_ROWS_OPS, take_rows
from jax2onnx_nn.core.lower import LoweringContext
from jax2onnx_nn.core.patching import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    coarse_lowering,
    coarse_wrapper,
)
from jax2onnx_nn.flax.coarse.common import (
    MakeWrapper,
    canonical_axes,
    default_promote,
    one_input,
    out_dtype,
    plain,
    variable_value,
)

# -- nnx.Linear ----------------------------------------------------------------------------


def _linear_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs, {"out_sharding": None})
    if (
        x is NotApplicable
        or x.ndim < 1
        or not plain(module, nnx.Linear)
        or not default_promote(module)
    ):
        return NotApplicable
    if module.dot_general is not jax.lax.dot_general or module.preferred_element_type is not None:
        return NotApplicable
    return CoarseCall(
        "nnx_linear",
        inputs={"x": x},
        weights={"kernel": variable_value(module.kernel), "bias": variable_value(module.bias)},
    )


@coarse_lowering("nnx_linear", onnx_ops=("Gemm", "MatMul", "Add", "Cast"), covers=("nnx.Linear",))
def _linear(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    x, kernel = ctx.cast(ops["x"], dtype), ctx.cast(ops["kernel"], dtype)
    bias = ctx.cast(ops["bias"], dtype) if "bias" in ops else None
    return dense(ctx, x, kernel, bias, rank=len(ops.aval("x").shape))


# -- nnx.LinearGeneral: contraction over trailing axes, as MatMul on flattened features ----


def _linear_general_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs, {"out_sharding": None})
    if x is NotApplicable or not plain(module, nnx.LinearGeneral) or not default_promote(module):
        return NotApplicable
    if (
        module.batch_axis
        or module.dot_general_cls is not None
        or module.preferred_element_type is not None
    ):
        return NotApplicable
    if module.dot_general not in (None, jax.lax.dot_general):
        return NotApplicable
    axes = canonical_axes(module.axis, x.ndim)
    n = 0 if axes is None else len(axes)
    if axes is None or axes != tuple(range(x.ndim - n, x.ndim)) or n == x.ndim:
        return NotApplicable
    return CoarseCall(
        "nnx_linear_general",
        inputs={"x": x},
        weights={"kernel": variable_value(module.kernel), "bias": variable_value(module.bias)},
        params={"n_contract": n},
    )


@coarse_lowering(
    "nnx_linear_general", onnx_ops=("Reshape", "MatMul", "Add"), covers=("nnx.LinearGeneral",)
)
def _linear_general(ctx: LoweringContext, ops: Operands, *, n_contract: int) -> Any:
    dtype = out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    kernel_shape = tuple(ops.aval("kernel").shape)
    k_in, k_out = kernel_shape[:n_contract], kernel_shape[n_contract:]
    size_in, size_out = int(np.prod(k_in)), int(np.prod(k_out))
    keep = len(ops.aval("x").shape) - n_contract
    x = ctx.cast(ops["x"], dtype)
    if n_contract != 1:
        x = ctx.op.Reshape(x, ctx.ints([0] * keep + [size_in]))
    kernel = ctx.cast(ops["kernel"], dtype)
    if len(kernel_shape) != 2:
        kernel = ctx.reshaped_weight(kernel, [size_in, size_out])
    y = ctx.op.MatMul(x, kernel)
    if "bias" in ops:
        bias = ctx.cast(ops["bias"], dtype)
        if len(ops.aval("bias").shape) != 1:
            bias = ctx.reshaped_weight(bias, [size_out])
        y = ctx.op.Add(y, bias)
    if len(k_out) != 1:
        y = ctx.op.Reshape(y, ctx.ints([0] * keep + list(k_out)))
    return y


# -- nnx.Embed: Gather, with JAX's out-of-range semantics (NaN rows) -----------------------


def _embed_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    x = one_input(args, kwargs, {"out_sharding": None})
    if x is NotApplicable or not plain(module, nnx.Embed) or not default_promote(module):
        return NotApplicable
    if not jnp.issubdtype(x.dtype, jnp.integer) or module.num_embeddings == 1:
        return NotApplicable
    return CoarseCall(
        "nnx_embed", inputs={"x": x}, weights={"embedding": variable_value(module.embedding)}
    )


@coarse_lowering(
    "nnx_embed",
    onnx_ops=TAKE_ROWS_OPS,
    covers=("nnx.Embed",),
)
def _embed(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    n = int(ops.aval("embedding").shape[0])
    # JAX wraps indices in [-n, 0) once and gives NaN rows for indices out of range.
    return take_rows(ctx, ctx.cast(ops["embedding"], dtype), ops["x"], n)


def _attend_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    query = one_input(args, kwargs, {"out_sharding": None})
    if (
        query is NotApplicable
        or query.ndim < 1
        or not plain(module, nnx.Embed)
        or not default_promote(module)
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_embed_attend",
        inputs={"x": query},
        weights={"embedding": variable_value(module.embedding)},
    )


@coarse_lowering(
    "nnx_embed_attend", onnx_ops=("Gemm", "MatMul", "Transpose"), covers=("nnx.Embed.attend",)
)
def _attend(ctx: LoweringContext, ops: Operands) -> Any:
    dtype = out_dtype(ctx)
    if dtype.kind != "f":
        return NotApplicable
    x, embedding = ctx.cast(ops["x"], dtype), ctx.cast(ops["embedding"], dtype)
    return dense(ctx, x, embedding, None, rank=len(ops.aval("x").shape), out_in=True, shared=True)


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the dense layers and embeddings."""
    table: list[tuple[Any, str, Handler]] = [
        (nnx.Linear, "__call__", _linear_handler),
        (nnx.LinearGeneral, "__call__", _linear_general_handler),
        (nnx.Embed, "__call__", _embed_handler),
        (nnx.Embed, "attend", _attend_handler),
    ]
    return [(owner, attr, coarse_wrapper(handler)) for owner, attr, handler in table]
