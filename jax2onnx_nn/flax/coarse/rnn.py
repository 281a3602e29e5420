"""Recurrent cells as one step of ONNX GRU / LSTM: ``nnx.GRUCell``, ``nnx.LSTMCell``,
``nnx.OptimizedLSTMCell`` and the Linen cells (one Dense per gate, read from the bound module's
params)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
from flax import linen, nnx

from jax2onnx_nn.core.ir.values import numpy_dtype
from jax2onnx_nn.core.layers import rnn
from jax2onnx_nn.core.lower import LoweringContext, onnx_aval
from jax2onnx_nn.core.patching import (
    CoarseCall,
    Handler,
    NotApplicable,
    Operands,
    coarse_lowering,
    coarse_wrapper,
    is_array,
)
from jax2onnx_nn.flax.coarse.common import (
    MakeWrapper,
    default_promote,
    has_empty_dim,
    plain,
    variable_value,
)

# -- nnx.GRUCell / nnx.LSTMCell: one step of ONNX GRU / LSTM --------------------------------
#
# flax's GRU computes n = tanh(x W_n + b_n + r * (h R_n)): ONNX GRU with linear_before_reset=1
# and no recurrent bias; its LSTM is ONNX LSTM without peepholes (see core/layers/rnn.py for
# the gate order). One call is one time step: sequence length 1.


def _wrapping_chain(fn: Any) -> list[Any]:
    """``fn`` and what it wraps (``__wrapped__``: a patched activation, a jitted function)."""
    chain: list[Any] = []
    while fn is not None and len(chain) < 4:
        chain.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return chain


def _ids(*fns: Any) -> frozenset[int]:
    return frozenset(id(f) for fn in fns for f in _wrapping_chain(fn))


# whole chains: this module may be imported while an export has jax.nn patched already, and
# a Linen cell's default gate_fn is the function as it was when flax was imported
_SIGMOIDS = _ids(jax.nn.sigmoid, nnx.sigmoid, linen.sigmoid)
_TANHS = _ids(jnp.tanh, nnx.tanh, linen.tanh)


def _is_one_of(fn: Any, ids: frozenset[int]) -> bool:
    """``fn`` is one of the functions, or a patched version of one (``__wrapped__`` chain:
    the export substitutes captured activations)."""
    return any(id(f) in ids for f in _wrapping_chain(fn))


def _plain_dense(layer: Any, use_bias: bool) -> bool:
    """An inner nnx.Linear that computes exactly ``x @ kernel (+ bias)`` in float32."""
    return (
        type(layer) is nnx.Linear
        and default_promote(layer)
        and layer.dot_general is jax.lax.dot_general
        and layer.preferred_element_type is None
        and (layer.bias is not None) == use_bias
        and layer.dtype in (None, jnp.float32)
        and variable_value(layer.kernel).dtype == np.float32
    )


def _cell_ok(module: Any, cls: type, h: Any, x: Any) -> bool:
    return (
        plain(module, cls)
        and default_promote(module)
        and module.dtype in (None, jnp.float32)
        and _is_one_of(module.gate_fn, _SIGMOIDS)
        and _is_one_of(module.activation_fn, _TANHS)
        and all(is_array(t) and t.ndim == 2 and t.dtype == np.float32 for t in (h, x))
    )


def _gru_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    if len(args) != 2 or kwargs:
        return NotApplicable
    h, x = args
    if (
        not _cell_ok(module, nnx.GRUCell, h, x)
        or not _plain_dense(module.dense_i, True)
        or not _plain_dense(module.dense_h, False)
    ):
        return NotApplicable
    return CoarseCall(
        "nnx_gru_cell",
        inputs={"h": h, "x": x},
        weights={
            "w": variable_value(module.dense_i.kernel),
            "b": variable_value(module.dense_i.bias),
            "r": variable_value(module.dense_h.kernel),
        },
        params={"hidden": int(module.hidden_features)},
    )


def _one_step(ctx: LoweringContext, value: ir.Value) -> ir.Value:
    return ctx.op.Unsqueeze(value, ctx.ints([0]))


def _last_state(ctx: LoweringContext, value: ir.Value) -> ir.Value:
    return ctx.op.Squeeze(value, ctx.ints([0]))


@coarse_lowering(
    "nnx_gru_cell",
    onnx_ops=("GRU", "Unsqueeze", "Squeeze", "Split", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("nnx.GRUCell",),
)
def _gru_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    (h,) = rnn.library_step(
        ctx,
        rnn.GRU,
        _one_step(ctx, ops["x"]),
        [_one_step(ctx, ops["h"])],
        ops["w"],
        ops["r"],
        ops["b"],
        hidden=hidden,
        dtype=onnx_aval(ops.aval("b"))[0],
        gate_axis=1,
    )
    h = _last_state(ctx, h)
    return [h, h]


def _lstm_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    if len(args) != 2 or kwargs or not isinstance(args[0], tuple) or len(args[0]) != 2:
        return NotApplicable
    (c, h), x = args
    if not _cell_ok(module, nnx.LSTMCell, h, x) or not (
        is_array(c) and c.ndim == 2 and c.dtype == np.float32
    ):
        return NotApplicable
    inputs, hidden = (
        (module.ii, module.io, module.if_, module.ig),
        (module.hi, module.ho, module.hf, module.hg),
    )  # ONNX order
    if not all(_plain_dense(d, False) for d in inputs) or not all(
        _plain_dense(d, True) for d in hidden
    ):
        return NotApplicable
    weights = {f"w{i}": variable_value(d.kernel) for i, d in enumerate(inputs)}
    weights |= {f"r{i}": variable_value(d.kernel) for i, d in enumerate(hidden)}
    weights |= {f"b{i}": variable_value(d.bias) for i, d in enumerate(hidden)}
    return CoarseCall(
        "nnx_lstm_cell",
        inputs={"c": c, "h": h, "x": x},
        weights=weights,
        params={"hidden": int(module.hidden_features)},
    )


def _stacked_gates(
    ctx: LoweringContext, parts: list[ir.Value | None], name: str, *, kernels: bool, hidden: int
) -> ir.Value:
    """Per-gate kernels ``(in, hidden)`` as ONNX's ``(1, gates * hidden, in)``, or per-gate
    biases ``(hidden,)`` as ONNX's ``B`` ``(1, 2 * gates * hidden)`` (input side, then recurrent
    side; a None part is zeros): one initializer when all parts are weights."""
    given = [p for p in parts if p is not None]
    dtype = numpy_dtype(given[0])

    def stack(arrays: list[np.ndarray]) -> np.ndarray:
        rest = iter(arrays)
        blocks = [
            np.zeros(hidden, dtype) if p is None else next(rest).T if kernels else next(rest)
            for p in parts
        ]
        return np.concatenate(blocks, axis=0)[None]

    tensors = [p.const_value for p in given]
    first = given[0]
    first_name = first.name
    if (
        all(t is not None for t in tensors)
        and all(p.producer() is None and p.name for p in given)
        and first_name
        and not ctx.builder.isolated
    ):
        folded = first.meta.setdefault("jax2onnx_nn.folded", {})
        key = ("stacked", kernels, *(p.name if p is not None else None for p in parts))
        if key not in folded:
            # the cell's path: nnx's "cell.ii.kernel" -> "cell.W", Linen's variable path
            # "params/LSTMCell_0/ii/kernel" -> "params/LSTMCell_0/W"
            sep = "/" if "/" in first_name else "."
            path = first_name.split(sep)
            stem = sep.join(path[:-2]) if len(path) >= 3 else first_name
            folded[key] = ctx.builder.initializer(
                np.ascontiguousarray(stack([t.numpy() for t in tensors if t is not None])),
                f"{stem}{sep}{name}",
            )
        return folded[key]
    if kernels:
        laid = [ctx.op.Transpose(p, perm=[1, 0]) for p in given]
    else:
        laid = [ctx.const(np.zeros(hidden, dtype)) if p is None else p for p in parts]
    return ctx.op.Unsqueeze(ctx.op.Concat(*laid, axis=0), ctx.ints([0]))


@coarse_lowering(
    "nnx_lstm_cell",
    onnx_ops=("LSTM", "Unsqueeze", "Squeeze", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("nnx.LSTMCell", "flax.linen.LSTMCell", "flax.linen.OptimizedLSTMCell"),
)
def _lstm_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    w = _stacked_gates(ctx, [ops[f"w{i}"] for i in range(4)], "W", kernels=True, hidden=hidden)
    r = _stacked_gates(ctx, [ops[f"r{i}"] for i in range(4)], "R", kernels=True, hidden=hidden)
    b = _stacked_gates(
        ctx, [None] * 4 + [ops[f"b{i}"] for i in range(4)], "B", kernels=False, hidden=hidden
    )
    h, c = rnn.step(
        ctx,
        rnn.LSTM,
        _one_step(ctx, ops["x"]),
        [_one_step(ctx, ops[s]) for s in ("h", "c")],
        w,
        r,
        b,
        hidden,
    )
    h = _last_state(ctx, h)
    return [_last_state(ctx, c), h, h]


def _optimized_lstm_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """OptimizedLSTMCell: the LSTMCell's numbers from one input kernel ``(in, 4 * hidden)`` and
    one recurrent kernel with the bias, gates i, f, g, o along the kernels' last axis."""
    if len(args) != 2 or kwargs or not isinstance(args[0], tuple) or len(args[0]) != 2:
        return NotApplicable
    (c, h), x = args
    if not _cell_ok(module, nnx.OptimizedLSTMCell, h, x) or not (
        is_array(c) and c.ndim == 2 and c.dtype == np.float32
    ):
        return NotApplicable
    if not _plain_dense(module.dense_i, False) or not _plain_dense(module.dense_h, True):
        return NotApplicable
    return CoarseCall(
        "nnx_optimized_lstm_cell",
        inputs={"c": c, "h": h, "x": x},
        weights={
            "w": variable_value(module.dense_i.kernel),
            "r": variable_value(module.dense_h.kernel),
            "b": variable_value(module.dense_h.bias),
        },
        params={"hidden": int(module.hidden_features)},
    )


@coarse_lowering(
    "nnx_optimized_lstm_cell",
    onnx_ops=("LSTM", "Unsqueeze", "Squeeze", "Split", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("nnx.OptimizedLSTMCell",),
)
def _optimized_lstm_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    h, c = rnn.library_step(
        ctx,
        rnn.LSTM,
        _one_step(ctx, ops["x"]),
        [_one_step(ctx, ops[s]) for s in ("h", "c")],
        ops["w"],
        ops["r"],
        ops["b"],
        hidden=hidden,
        dtype=onnx_aval(ops.aval("b"))[0],
        gate_axis=1,
    )
    h = _last_state(ctx, h)
    return [_last_state(ctx, c), h, h]


# -- Linen cells: one Dense per gate, read from the bound module's params ------------------


def _linen_dense(
    params: Any, name: str, shape: tuple[int, int], bias: bool
) -> dict[str, Any] | None:
    """The float32 kernel (and bias) of the cell's Dense ``name``, as the cell will read them."""
    dense = params.get(name) if hasattr(params, "get") else None
    if dense is None or set(dense) != ({"kernel", "bias"} if bias else {"kernel"}):
        return None
    arrays = {"kernel": dense["kernel"], **({"bias": dense["bias"]} if bias else {})}
    shapes = {"kernel": shape, "bias": shape[1:]}
    if not all(
        is_array(a) and a.dtype == np.float32 and a.shape == shapes[k] for k, a in arrays.items()
    ):
        return None
    return arrays


def _linen_cell(
    module: Any, cls: type, h: Any, x: Any, recurrent: tuple[str, ...], with_bias: tuple[str, ...]
) -> dict[str, dict[str, Any]] | None:
    """The Dense weights of a bound plain Linen ``cls`` (flax's gates, float32) by name: the
    input side's ``i*`` (``(in, hidden)``) and the recurrent side's ``h*`` (``(hidden, hidden)``),
    a bias where ``with_bias`` names the Dense; None for anything else (init, boxed params)."""
    if not _cell_ok(module, cls, h, x) or module.scope is None or h.shape[-1] != module.features:
        return None
    params = module.variables.get("params")
    hidden, features = int(h.shape[-1]), int(x.shape[-1])
    names = [*(f"i{g}" for g in recurrent), *(f"h{g}" for g in recurrent)]
    if params is None or set(params) != set(names):
        return None
    found = {
        n: _linen_dense(params, n, (features if n[0] == "i" else hidden, hidden), n in with_bias)
        for n in names
    }
    weights = {n: d for n, d in found.items() if d is not None}
    return weights if len(weights) == len(found) else None


def _linen_gru_cell_handler(module: Any, *args: Any, **kwargs: Any) -> Any:
    """linen.GRUCell: Dense ``ir``, ``iz``, ``in`` (with biases) on the input, ``hr``, ``hz``,
    ``hn`` (only ``hn`` with a bias, inside the reset product) on the carry."""
    if len(args) != 2 or kwargs:
        return NotApplicable
    h, x = args
    dense = _linen_cell(module, linen.GRUCell, h, x, ("r", "z", "n"), ("ir", "iz", "in", "hn"))
    if dense is None:
        return NotApplicable
    weights = {f"w{g}": dense[f"i{g}"]["kernel"] for g in "rzn"} | {
        f"r{g}": dense[f"h{g}"]["kernel"] for g in "rzn"
    }
    weights |= {f"b{g}": dense[f"i{g}"]["bias"] for g in "rzn"} | {"bhn": dense["hn"]["bias"]}
    return CoarseCall(
        "linen_gru_cell",
        inputs={"h": h, "x": x},
        weights=weights,
        params={"hidden": int(h.shape[-1])},
    )


@coarse_lowering(
    "linen_gru_cell",
    onnx_ops=("GRU", "Unsqueeze", "Squeeze", "Concat", "Transpose", *rnn.GUARD_OPS),
    covers=("flax.linen.GRUCell",),
)
def _linen_gru_cell(ctx: LoweringContext, ops: Operands, *, hidden: int) -> Any:
    if has_empty_dim(ops.aval("x"), ops.aval("h")):
        return NotApplicable
    gates = "zrn"  # ONNX's z, r, h
    w = _stacked_gates(ctx, [ops[f"w{g}"] for g in gates], "W", kernels=True, hidden=hidden)
    r = _stacked_gates(ctx, [ops[f"r{g}"] for g in gates], "R", kernels=True, hidden=hidden)
    b = _stacked_gates(
        ctx,
        [*(ops[f"b{g}"] for g in gates), None, None, ops["bhn"]],
        "B",
        kernels=False,
        hidden=hidden,
    )
    (h,) = rnn.step(
        ctx, rnn.GRU, _one_step(ctx, ops["x"]), [_one_step(ctx, ops["h"])], w, r, b, hidden
    )
    h = _last_state(ctx, h)
    return [h, h]


def _linen_lstm_cell_handler(cls: type) -> Handler:
    """linen.LSTMCell and linen.OptimizedLSTMCell (the same params, one dot per side): Dense
    ``ii``, ``if``, ``ig``, ``io`` on the input, ``hi``, ``hf``, ``hg``, ``ho`` (with biases)
    on h, as nnx.LSTMCell's coarse op."""

    def handler(module: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 2 or kwargs or not isinstance(args[0], tuple) or len(args[0]) != 2:
            return NotApplicable
        (c, h), x = args
        dense = _linen_cell(module, cls, h, x, ("i", "f", "g", "o"), ("hi", "hf", "hg", "ho"))
        if dense is None or not (is_array(c) and c.shape == h.shape and c.dtype == np.float32):
            return NotApplicable
        order = "iofg"  # ONNX's i, o, f, c
        weights = {f"w{k}": dense[f"i{g}"]["kernel"] for k, g in enumerate(order)}
        weights |= {f"r{k}": dense[f"h{g}"]["kernel"] for k, g in enumerate(order)}
        weights |= {f"b{k}": dense[f"h{g}"]["bias"] for k, g in enumerate(order)}
        return CoarseCall(
            "nnx_lstm_cell",
            inputs={"c": c, "h": h, "x": x},
            weights=weights,
            params={"hidden": int(h.shape[-1])},
        )

    return handler


def patches() -> list[tuple[Any, str, MakeWrapper]]:
    """(owner, attribute, make_wrapper) of the patches of the recurrent cells."""
    table: list[tuple[Any, str, Handler]] = [
        (nnx.GRUCell, "__call__", _gru_cell_handler),
        (nnx.LSTMCell, "__call__", _lstm_cell_handler),
        (nnx.OptimizedLSTMCell, "__call__", _optimized_lstm_cell_handler),
        (linen.GRUCell, "__call__", _linen_gru_cell_handler),
        (linen.LSTMCell, "__call__", _linen_lstm_cell_handler(linen.LSTMCell)),
        (linen.OptimizedLSTMCell, "__call__", _linen_lstm_cell_handler(linen.OptimizedLSTMCell)),
    ]
    return [(owner, attr, coarse_wrapper(handler)) for owner, attr, handler in table]
